"""Hints for OPSD: one paragraph of method-level guidance per task, behind a leak gate.

`run_hints` is the stage; `check_hint` is the gate (on the shared detector in
termforge.quality.leaks); `procedural_hint` and `llm_hint` are the two backends for one task.
shape.py decides what a hint is (imperative guidance about its own task), specifics.py is the
gate's allow-list (every specific a hint states must come from what the agent is given), fit.py
keeps procedural hints true to their variant (procedural hints are written from the task's public
view only: termforge.generate.public_view), judge.py holds the LLM judge and the extraction probe, corpus.py the
leak corpus they are all measured on (docs/hints.md).
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
