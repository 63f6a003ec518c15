"""The procedural backend: signature + seeded RNG -> task directory, through a family.

One draw a family cannot realise never stops a shard: the family is retried with seeds derived
from the task's own, then the next-best family is tried the same way, and task.json records every
failed attempt (family, seed, error) beside the family that built the task.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from pathlib import Path

from termforge.errors import TermforgeError
from termforge.generate.anchors import Anchor, anchor_plan, apply_anchor
from termforge.generate.base import TaskFamily, TaskSpec
from termforge.generate.compose import compose, offered, plan
from termforge.generate.families import families_for
from termforge.generate.honour import (SHAPE_AXES, actual_axes, exercised_skills, honest_view, honoured_axes,
                                       mismatch_record)
from termforge.generate.public_view import make_view, render_method
from termforge.generate.writer import task_files, write_task_dir
from termforge.io import seed_from

MATCHED_AXES = SHAPE_AXES
ATTEMPTS_PER_FAMILY = 3
"""Seeds tried per family (the task's own, then derived ones) before the next family is tried."""


def shape_mismatches(sig: dict, fam: TaskFamily) -> list[str]:
    """The axes of (domain, verifier kind, fixture kind) the family's task, composed with the
    fixture and verifier strategies it can take (termforge.generate.compose), does not honour."""
    honours = offered(sig, fam)
    return [a for a in SHAPE_AXES if not honours[a]]


def rank_families(sig: dict, families: list[TaskFamily]) -> list[TaskFamily]:
    """Families from best to worst for the signature. Domain weighs most (a task stays in its
    domain whenever a family there exists); then, for a requested verifier kind other than
    exact_text, whether the family's own final test is that kind (a family that cannot grade it
    would have a program beside the task supply it: generate.compose), so a domain with a family
    that grades the kind always builds the task with one; then the number of shape axes missed,
    then whether the family exercises any requested skill; ties are broken by the task's own seed.
    (exact_text, which every domain's families grade, is left to the axis count: the legacy corpus
    keeps its families.)"""
    kind_counts = sig.get("verifier_kind") != "exact_text"

    def cost(fam: TaskFamily) -> tuple[int, int, int, int]:
        miss = shape_mismatches(sig, fam)
        return (1 if "domain" in miss else 0, 1 if kind_counts and "verifier_kind" in miss else 0, len(miss),
                0 if exercised_skills(sig, fam) else 1)

    rng = random.Random(seed_from("family", sig["id"]))
    by_cost: dict[tuple, list[TaskFamily]] = {}
    for fam in families:
        by_cost.setdefault(cost(fam), []).append(fam)
    ranked: list[TaskFamily] = []
    for c in sorted(by_cost):
        tier = by_cost[c]
        first = tier[rng.randrange(len(tier))] if not ranked else None
        rest = [f for f in tier if f is not first]
        rng.shuffle(rest)
        ranked += ([first] if first else []) + rest
    return ranked


def choose_family(sig: dict, families: list[TaskFamily]) -> tuple[TaskFamily, list[str]]:
    """The best family for the signature and the shape axes it does not match."""
    fam = rank_families(sig, families)[0]
    return fam, shape_mismatches(sig, fam)


@dataclass
class BuiltTask:
    family: TaskFamily
    spec: TaskSpec
    seed: int
    failed_attempts: list[dict] = field(default_factory=list)
    graded_as: list[str] = field(default_factory=list)
    """Every verifier kind the final test applies: the family's own and a strategy's."""
    anchor: Anchor | None = None
    """The anchor the task's inputs are packed with (generate.anchors), if any."""


def attempt_seeds(task_id: str) -> list[int]:
    """The task's own seed, then seeds derived from it for retries."""
    return [seed_from("task", task_id)] + [seed_from("task", task_id, "retry", k)
                                           for k in range(1, ATTEMPTS_PER_FAMILY)]


def build_task(sig: dict, families: list[TaskFamily] | None = None) -> BuiltTask:
    """Build the task spec with the best family that can realise the signature (see module doc).
    Without `families`, the signature's corpus kind decides (families.families_for)."""
    families = families or families_for(sig)
    failed: list[dict] = []
    for fam in rank_families(sig, families):
        anchor = anchor_plan(sig, fam)
        view = honest_view(sig, fam, anchor is not None)
        for seed in attempt_seeds(sig["id"]):
            try:
                rng = random.Random(seed)
                own = fam.build(view, rng)
                spec = compose(own, plan(sig, fam), sig, rng)
                # The anchor's parameters come from their own stream, so the family's task and its
                # composition are the same bytes with or without the anchor (bench/bench_honour.py).
                spec = apply_anchor(spec, anchor, random.Random(seed_from("anchor", seed)))
                # The method note is rendered from what the agent is given, never from what the
                # family knew while building (generate/public_view.py).
                public = make_view(fam.name, spec.instruction, spec.fixtures)
                spec = replace(spec, method_note=render_method(fam, public))
            except Exception as exc:  # noqa: BLE001 - any failure of one draw is recorded, then retried
                failed.append({"family": fam.name, "seed": seed, "error": f"{type(exc).__name__}: {exc}"})
                continue
            return BuiltTask(fam, spec, seed, failed, sorted({own.verifier_kind, spec.verifier_kind}), anchor)
    last = failed[-1]["error"] if failed else "no families"
    raise TermforgeError(f"task {sig['id']}: no family could realise the signature after {len(failed)} attempts "
                         f"(last: {last})")


def build_spec(sig: dict, families: list[TaskFamily] | None = None) -> tuple[TaskFamily, list[str], TaskSpec]:
    built = build_task(sig, families)
    return built.family, shape_mismatches(sig, built.family), built.spec


def task_json(sig: dict, built: BuiltTask, provenance: dict) -> dict:
    fam, spec = built.family, built.spec
    actual = actual_axes(sig, fam, spec.verifier_kind, spec.fixture_kind, built.anchor.name if built.anchor else None)
    honoured = honoured_axes(sig, actual, fam)
    return {
        "id": sig["id"],
        "signature": sig,
        "instruction": spec.instruction,
        "family": fam.name,
        "actual": actual,
        "honoured": honoured,
        "mismatch": mismatch_record(sig, actual, honoured),
        "graded_as": built.graded_as or [spec.verifier_kind],
        "generation": {"family": fam.name, "seed": built.seed, "fallback": bool(built.failed_attempts),
                       "failed_attempts": built.failed_attempts},
        "output_paths": spec.output_paths,
        "environment": {"apt_packages": sorted(spec.apt_packages), "allow_network": spec.allow_network,
                        "timeout_sec": spec.timeout_sec},
        "provenance": provenance,
    }


def generate_task(sig: dict, out_root: Path, base_image: str = "termforge/base:bookworm",
                  families: list[TaskFamily] | None = None) -> Path:
    """Write one task directory (atomically) and return its path; an existing one is kept."""
    return write_task(sig, out_root, base_image, families)[0]


def write_task(sig: dict, out_root: Path, base_image: str = "termforge/base:bookworm",
               families: list[TaskFamily] | None = None) -> tuple[Path, dict | None]:
    """generate_task, also returning the files it wrote (None when the directory was kept)."""
    final = Path(out_root) / sig["id"]
    if (final / "task.json").exists():
        return final, None
    built = build_task(sig, families)
    provenance = {"backend": "procedural", "family": built.family.name, "model": None,
                  "seeds": {"task": built.seed, "family": seed_from("family", sig["id"])}}
    files = task_files(task_json(sig, built, provenance), built.spec, base_image)
    write_task_dir(final, files)
    return final, files
