"""Axis sampling: the taxonomy and the signature sampler."""
