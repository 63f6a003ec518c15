"""Evaluations: Terminal-Bench (Harbor tasks, native or through the harbor CLI) and AIME.

Kept import-light: the submodules load heavy dependencies only when used."""
