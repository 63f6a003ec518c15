"""Corpus quality gates that run between generation and validation (decontamination), and the shared
leak detector (leaks.py) that keeps answer keys out of what an agent sees."""
