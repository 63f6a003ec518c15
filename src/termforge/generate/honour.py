"""Which axes of a signature a family's task really honours, and what the task is instead.

A family declares what its tasks exercise (generate.base.TaskFamily). Against a signature that
gives, per axis, the value the task really has (``actual``) and whether it is the requested one.
The instruction is written from the honest view of the signature (only exercised skills, the
anchor only when the task bears it), task.json records every axis not honoured, and the
exports' axis columns carry ``actual``. A task bears an anchor only when generate.anchors packed
its inputs with it: a family's own declared anchors are context, and grade nothing.
"""

from __future__ import annotations

from termforge.generate.base import TaskFamily

# Every signature axis a family can fail to honour, in report order. persona only sets the voice of
# the instruction, which every family writes in, so it is always honoured and not listed.
AXES = ("domain", "skill_type", "skills", "anchor", "language", "command_complexity", "task_complexity",
        "verifier_kind", "fixture_kind")
# The axes family choice weighs first (domain most): the shape of the task.
SHAPE_AXES = ("domain", "verifier_kind", "fixture_kind")
# Kinds whose tasks (termforge.generate.compose) make the agent run or write an HTTP service.
SERVICE_KINDS = {"multi_service_compose", "multi_protocol"}
# What grades a verifier kind the family's own final test does not: the agent's extra program.
ADDED_PROGRAM = "a program added beside the task"


def exercised_skills(sig: dict, fam: TaskFamily) -> list[str]:
    """The requested skills the family's task really exercises, in the signature's order."""
    declared = set(fam.skills)
    return [s for s in sig.get("skills") or [] if s in declared]


def honest_view(sig: dict, fam: TaskFamily, anchored: bool = False) -> dict:
    """The signature as the family may state it to the agent: unexercised skills are removed, and
    the anchor unless the task bears it (`anchored`: generate.anchors packs the inputs with it).
    The family writes its instruction from this."""
    return {**sig, "skills": exercised_skills(sig, fam), "anchor": sig.get("anchor") if anchored else None}


def _pick(requested, offered: tuple, default=None):
    if requested in offered:
        return requested
    return offered[0] if offered else default


def actual_axes(sig: dict, fam: TaskFamily, verifier_kind: str, fixture_kind: str, anchor: str | None = None) -> dict:
    """What the task is on every axis (verifier and fixture kinds as the built spec reports them;
    `anchor`, the one its inputs are packed with, generate.anchors)."""
    commands = fam.command_complexities
    if SERVICE_KINDS & {verifier_kind, fixture_kind}:  # the composed task runs HTTP services
        commands = (*commands, "bash_code_services")
    return {
        "domain": _pick(sig.get("domain"), fam.domains),
        "skill_type": _pick(sig.get("skill_type"), fam.skill_types),
        "skills": list(fam.skills),
        "anchor": anchor,
        "language": _pick(sig.get("language"), fam.languages),
        "command_complexity": _pick(sig.get("command_complexity"), commands),
        "task_complexity": _pick(sig.get("task_complexity"), fam.task_complexities),
        "verifier_kind": verifier_kind,
        "fixture_kind": fixture_kind,
    }


def intrinsic_kind(sig: dict, fam: TaskFamily) -> bool:
    """Whether the requested verifier kind grades the family's own deliverable (its own final test)."""
    return sig.get("verifier_kind") in fam.verifier_kinds


def honoured_axes(sig: dict, actual: dict, fam: TaskFamily | None = None) -> dict[str, bool]:
    """Axis -> whether the task has the requested value. skills: every requested skill is
    exercised; anchor: none was requested, or the task bears the requested one; verifier_kind
    (given the family): the family's own final test is that kind, since a kind met only by a
    strategy's program (generate.compose) grades that program, not what the family asked for."""
    out = {}
    for axis in AXES:
        want = sig.get(axis)
        if axis == "skills":
            out[axis] = set(want or []) <= set(actual["skills"])
        elif axis == "anchor":
            out[axis] = want is None or actual["anchor"] == want
        elif axis == "verifier_kind" and fam is not None:
            out[axis] = actual[axis] == want and intrinsic_kind(sig, fam)
        else:
            out[axis] = actual[axis] == want
    return out


def mismatch_record(sig: dict, actual: dict, honoured: dict[str, bool]) -> list[dict]:
    """One entry per axis not honoured: what was requested, what the task is. A verifier kind the
    task has only through a program added beside it (generate.compose) is not honoured: the
    entry says so, since requested and actual then read the same."""
    out = []
    for a in AXES:
        if honoured[a]:
            continue
        entry = {"axis": a, "requested": sig.get(a), "actual": actual[a]}
        if actual[a] == sig.get(a):
            entry["graded_by"] = ADDED_PROGRAM
        out.append(entry)
    return out
