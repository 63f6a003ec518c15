"""One digest per (family, seed index, task complexity): the sha256 of every file the procedural
generator writes for that case, plus the family's declared axes.

    PYTHONPATH=src python scripts/family_fingerprint.py [--seeds N] > digests.txt

Two checkouts that print the same lines build the same task bytes: a refactor of the families
(moving code between modules) is checked by diffing this output before and after it.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

from termforge.generate.base import TASK_COMPLEXITIES, TaskFamily
from termforge.generate.families import all_families
from termforge.generate.gallery import example_signature
from termforge.generate.procedural import build_task, task_json
from termforge.generate.writer import task_files
from termforge.io import make_task_id

DECLARED = ("name", "domains", "verifier_kinds", "fixture_kinds", "summary", "skill_types", "skills", "languages",
            "anchors", "task_complexities", "command_complexities", "episode_protocol", "opt_in", "output_files")


def case_signature(fam: TaskFamily, index: int, level: str) -> dict:
    """The gallery's signature for the family, moved to another index (so another task seed) and
    level, cycling through the verifier and fixture kinds the family declares."""
    sig = {**example_signature(fam), "index": index, "task_complexity": level,
           "verifier_kind": fam.verifier_kinds[index % len(fam.verifier_kinds)],
           "fixture_kind": fam.fixture_kinds[index % len(fam.fixture_kinds)]}
    sig["id"] = make_task_id(0, index, sig)
    return sig


def case_digest(fam: TaskFamily, sig: dict, alone: bool) -> str:
    """Alone: the family builds the task; otherwise every family the signature may draw competes
    for it (procedural.rank_families), so the registry's order counts too."""
    built = build_task(sig, [fam] if alone else None)
    files = task_files(task_json(sig, built, {"backend": "procedural"}), built.spec, "termforge/base:bookworm")
    h = hashlib.sha256(built.family.name.encode())
    h.update(repr([(k, getattr(fam, k)) for k in DECLARED]).encode())
    h.update(repr(fam.method_texts()).encode())
    for rel in sorted(files):
        data, mode = files[rel]
        h.update(f"{rel}\0{mode}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="signature indices per family and level")
    args = ap.parse_args(argv)
    cases = 0
    for fam in all_families():
        for index in range(args.seeds):
            for level in TASK_COMPLEXITIES:
                sig = case_signature(fam, index, level)
                for alone in (True, False):
                    digest = case_digest(fam, sig, alone)
                    print(f"{fam.name} {index} {level} {'alone' if alone else 'drawn'} {digest}", flush=True)
                    cases += 1
    print(f"cases {cases}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
