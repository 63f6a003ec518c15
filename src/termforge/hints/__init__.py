"""Hints for OPSD: one paragraph of method-level guidance per task, behind a leak gate.

`run_hints` is the stage; `check_hint` is the gate; `procedural_hint` and `llm_hint` are the two
backends for one task.
"""

from termforge.hints.gate import DEFAULT_MAX_WORDS, DEFAULT_NGRAM, GateReport, check_hint
from termforge.hints.generate import (
    BACKENDS,
    STATUSES,
    HintResult,
    llm_hint,
    procedural_hint,
    run_hints,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_MAX_WORDS",
    "DEFAULT_NGRAM",
    "STATUSES",
    "GateReport",
    "HintResult",
    "check_hint",
    "llm_hint",
    "procedural_hint",
    "run_hints",
]
