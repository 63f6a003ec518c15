"""On-policy self-distillation (OPSD): losses and training helpers."""
