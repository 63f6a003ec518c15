"""The procedural backend: signature + seeded RNG -> task directory, through a family."""

from __future__ import annotations

import random
from pathlib import Path

from termforge.generate.base import TaskFamily, TaskSpec
from termforge.generate.families import all_families
from termforge.generate.writer import task_files, write_task_dir
from termforge.io import seed_from

MATCHED_AXES = ("domain", "verifier_kind", "fixture_kind")


def choose_family(sig: dict, families: list[TaskFamily]) -> tuple[TaskFamily, list[str]]:
    """The family that supports the most of (domain, verifier kind, fixture kind); ties broken by
    the task's own seed. Returns the family and the axes it does not match (recorded, never hidden)."""

    def mismatches(fam: TaskFamily) -> list[str]:
        miss = []
        if sig["domain"] not in fam.domains:
            miss.append("domain")
        if sig["verifier_kind"] not in fam.verifier_kinds:
            miss.append("verifier_kind")
        if sig["fixture_kind"] not in fam.fixture_kinds:
            miss.append("fixture_kind")
        return miss

    # Domain weighs most: a task must stay in its domain whenever a family there exists.
    def cost(fam: TaskFamily) -> tuple[int, int]:
        miss = mismatches(fam)
        return (1 if "domain" in miss else 0, len(miss))

    best_cost = min(cost(f) for f in families)
    best = [f for f in families if cost(f) == best_cost]
    rng = random.Random(seed_from("family", sig["id"]))
    fam = best[rng.randrange(len(best))]
    return fam, mismatches(fam)


def build_spec(sig: dict, families: list[TaskFamily] | None = None) -> tuple[TaskFamily, list[str], TaskSpec]:
    families = families or all_families()
    fam, miss = choose_family(sig, families)
    rng = random.Random(seed_from("task", sig["id"]))
    return fam, miss, fam.build(sig, rng)


def task_json(sig: dict, fam: TaskFamily, miss: list[str], spec: TaskSpec, provenance: dict) -> dict:
    actual = {"domain": sig["domain"] if sig["domain"] in fam.domains else fam.domains[0],
              "verifier_kind": spec.verifier_kind, "fixture_kind": spec.fixture_kind}
    return {
        "id": sig["id"],
        "signature": sig,
        "instruction": spec.instruction,
        "family": fam.name,
        "actual": actual,
        "mismatch": [{"axis": a, "requested": sig[a], "actual": actual[a]} for a in miss],
        "output_paths": spec.output_paths,
        "environment": {"apt_packages": sorted(spec.apt_packages), "allow_network": spec.allow_network,
                        "timeout_sec": spec.timeout_sec},
        "provenance": provenance,
    }


def generate_task(sig: dict, out_root: Path, base_image: str = "debian:bookworm-slim",
                  families: list[TaskFamily] | None = None) -> Path:
    """Write one task directory (atomically) and return its path; an existing one is kept."""
    final = Path(out_root) / sig["id"]
    if (final / "task.json").exists():
        return final
    fam, miss, spec = build_spec(sig, families)
    provenance = {"backend": "procedural", "family": fam.name, "model": None,
                  "seeds": {"task": seed_from("task", sig["id"]), "family": seed_from("family", sig["id"])}}
    files = task_files(task_json(sig, fam, miss, spec, provenance), spec, base_image)
    write_task_dir(final, files)
    return final
