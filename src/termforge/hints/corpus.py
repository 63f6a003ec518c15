"""The hint-gate corpus: disguised leaks and honest hints written against real generated tasks.

The corpus files (bench/data/hint_corpus/{leaks,honest}.jsonl) name each hint's task by family and
seed; `corpus_tasks` regenerates exactly those tasks with the procedural backend (generation is
deterministic), so the corpus stays small and always matches the tasks it was written for.
`score_gate` runs any checker (the offline gate, the LLM judge, the extraction probe) over it and
returns recall on the leaks and the false-positive rate on the honest hints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable

from termforge.errors import TermforgeError

SEEDS = (0, 1, 2)
DEFAULT_CORPUS = Path(__file__).resolve().parents[3] / "bench" / "data" / "hint_corpus"


def corpus_signature(family: Any, seed: int) -> dict:
    """The signature the corpus tasks are generated from (one per family and seed)."""
    from termforge.io import make_task_id

    sig = {
        "index": seed, "corpus_kind": f"hint-test-{family.name}", "domain": family.domains[0],
        "skill_type": "test", "skills": ["reading files", "shell pipelines", "careful output formatting"],
        "persona": "a careful on-call engineer", "language": "bash", "anchor": None,
        "task_complexity": "moderate", "command_complexity": "bash_code",
        "verifier_kind": family.verifier_kinds[0], "fixture_kind": family.fixture_kinds[0],
    }
    sig["id"] = make_task_id(1234, seed, sig)
    return sig


def corpus_tasks(root: str | Path, seeds: Iterable[int] = SEEDS, families: Iterable[str] | None = None
                 ) -> dict[tuple[str, int], Path]:
    """Generate the corpus tasks under root: (family name, seed) -> task directory."""
    from termforge.generate.families import all_families
    from termforge.generate.procedural import generate_task

    root = Path(root)
    wanted = set(families) if families is not None else None
    out = {}
    for fam in all_families():
        if wanted is not None and fam.name not in wanted:
            continue
        for seed in seeds:
            out[(fam.name, seed)] = generate_task(corpus_signature(fam, seed), root, families=[fam])
    return out


def load_corpus(path: str | Path = DEFAULT_CORPUS) -> tuple[list[dict], list[dict]]:
    """(leaks, honest): rows {family, seed, kind, hint} from the corpus folder: leaks*.jsonl (the
    generated leaks.jsonl and the hand-written leaks_hand.jsonl) and honest*.jsonl."""
    path = Path(path)
    out = []
    for stem in ("leaks", "honest"):
        files = sorted(path.glob(f"{stem}*.jsonl"))
        if not files:
            raise TermforgeError(f"{path}: no {stem}*.jsonl (the hint corpus has leaks and honest hints)")
        rows = []
        for f in files:
            try:
                rows += [json.loads(ln) for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]
            except json.JSONDecodeError as exc:
                raise TermforgeError(f"{f}: not valid JSON lines ({exc})") from None
        out.append(rows)
    return out[0], out[1]


def score_gate(
    flags: Callable[[str, Path], bool],
    leaks: list[dict],
    honest: list[dict],
    tasks: dict[tuple[str, int], Path],
) -> dict[str, Any]:
    """Recall on leaks and false-positive rate on honest hints of `flags(hint, task_dir)` (True
    means "this hint leaks"), overall and per leak kind; misses listed by family and kind."""
    by_kind: dict[str, list[int]] = {}
    missed, false_pos = [], []
    for row in leaks:
        hit = flags(row["hint"], tasks[(row["family"], row["seed"])])
        by_kind.setdefault(row["kind"], [0, 0])
        by_kind[row["kind"]][0] += int(hit)
        by_kind[row["kind"]][1] += 1
        if not hit:
            missed.append(f"{row['family']}/{row['seed']}/{row['kind']}")
    for row in honest:
        if flags(row["hint"], tasks[(row["family"], row["seed"])]):
            false_pos.append(f"{row['family']}/{row['seed']}/{row['kind']}")
    caught = sum(v[0] for v in by_kind.values())
    return {
        "leaks": len(leaks),
        "caught": caught,
        "recall": caught / len(leaks) if leaks else 0.0,
        "honest": len(honest),
        "false_positives": len(false_pos),
        "false_positive_rate": len(false_pos) / len(honest) if honest else 0.0,
        "recall_by_kind": {k: v[0] / v[1] for k, v in sorted(by_kind.items())},
        "missed": missed,
        "false_positive_rows": false_pos,
    }
