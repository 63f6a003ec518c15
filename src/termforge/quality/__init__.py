"""Corpus quality gates that run between generation and validation (decontamination)."""
