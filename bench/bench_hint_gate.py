"""Hint-gate quality: recall on disguised leaks and false-positive rate on honest hints.

Runs the offline gate (termforge.hints.gate) over the corpus in bench/data/hint_corpus (leaks
written against real generated tasks, every family; honest method-level hints for the same tasks)
and, for comparison in the same run, the literal baseline: a hint counts as leaking only when an
answer-key value appears in it verbatim (what the gate did before the shared detector).

Then the meaning-level corpus (bench/data/hint_corpus/disguises/, bench/make_disguise_corpus.py):
disguise kinds split by kind into `tune` (what the detector was developed against) and `heldout`
(kinds it never saw while it was written), with recall per kind and per split, and the
false-positive rate on honest method-level hints with the same surface features.

    .venv/bin/python bench/bench_hint_gate.py            # about two minutes on two cores
    .venv/bin/python bench/bench_hint_gate.py --show-misses
    .venv/bin/python bench/bench_hint_gate.py --split tune   # only the tuning kinds
    .venv/bin/python bench/bench_hint_gate.py --only-holdout # only the hold-out of unseen kinds

Last, the hold-out (bench/data/hint_corpus/holdout/, bench/make_hint_holdout.py): 30 leaks in disguise
kinds no detector was written against and 20 honest hints that quote the instruction and name the
task's files and columns; the targets are >= 27/30 caught and <= 1/20 honest rejected.
    .venv/bin/python bench/bench_hint_gate.py --judge '{"backend": "openai", "model": "m", "base_url": "..."}'
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench_args import existing
from termforge.hints.corpus import DEFAULT_CORPUS, corpus_tasks, load_corpus, score_gate
from termforge.hints.gate import LEAK_FINDINGS, check_hint


def literal_baseline(hint: str, task_dir: Path) -> bool:
    truth = json.loads((task_dir / "private" / "truth.json").read_text())
    hidden = {k: v for k, v in truth.items() if k != "given"}
    instruction = (task_dir / "instruction.md").read_text()

    def leaves(o):
        if isinstance(o, dict):
            for v in o.values():
                yield from leaves(v)
        elif isinstance(o, list):
            for v in o:
                yield from leaves(v)
        elif isinstance(o, (str, int, float)) and not isinstance(o, bool):
            yield str(o)

    return any(len(v) >= 2 and v in hint and v not in instruction for v in leaves(hidden))


def gate_flags(hint: str, task_dir: Path) -> bool:
    """A leak counts as caught only by a leak finding (an off-task or shape finding is not a catch);
    an honest hint is a false positive on any finding at all."""
    return bool(set(check_hint(hint, task_dir, max_words=400).kinds()) & set(LEAK_FINDINGS))


def disguise_report(folder: Path, split: str, show_misses: bool) -> None:
    leaks, honest = load_corpus(folder)
    with tempfile.TemporaryDirectory() as tmp:
        tasks = corpus_tasks(tmp, seeds=sorted({r["seed"] for r in leaks + honest}))
        fp = score_gate(lambda h, d: not check_hint(h, d, max_words=400).passed, [], honest, tasks)
        splits = ("tune", "heldout") if split == "both" else (split,)
        print(f"meaning-level corpus: {len(leaks)} leaks in {len({r['kind'] for r in leaks})} kinds, "
              f"{len(honest)} honest hints with the same surface features")
        for name in splits:
            rows = [r for r in leaks if r["split"] == name]
            s = score_gate(gate_flags, rows, [], tasks)
            print(f"  {name:>7} kinds: recall {s['recall']:.3f} ({s['caught']}/{s['leaks']})")
            print("    kind                     recall   caught")
            for kind in sorted({r["kind"] for r in rows}):
                n = sum(1 for r in rows if r["kind"] == kind)
                rec = s["recall_by_kind"][kind]
                print(f"    {kind:<24} {rec:6.3f}   {round(rec * n)}/{n}")
            if show_misses:
                print("    missed:", *s["missed"], sep="\n      ")
    print(f"  honest (same features): false positives {fp['false_positive_rate']:.3f} "
          f"({fp['false_positives']}/{fp['honest']})")
    if show_misses:
        print("    false positives:", *fp["false_positive_rows"], sep="\n      ")


def holdout_report(folder: Path, show_misses: bool) -> None:
    leaks, honest = load_corpus(folder)
    with tempfile.TemporaryDirectory() as tmp:
        tasks = corpus_tasks(tmp, seeds=sorted({r["seed"] for r in leaks + honest}),
                             families=sorted({r["family"] for r in leaks + honest}))
        s = score_gate(gate_flags, leaks, [], tasks)
        fp = score_gate(lambda h, d: not check_hint(h, d, max_words=400).passed, [], honest, tasks)
    print(f"hold-out (unseen kinds): caught {s['caught']}/{s['leaks']} leaks in {len({r['kind'] for r in leaks})} "
          f"kinds (recall {s['recall']:.3f}), honest rejected {fp['false_positives']}/{fp['honest']}")
    print("  " + ", ".join(f"{k} {round(v * sum(1 for r in leaks if r['kind'] == k))}/"
                           f"{sum(1 for r in leaks if r['kind'] == k)}" for k, v in sorted(s["recall_by_kind"].items())))
    if show_misses:
        print("  missed:", *s["missed"], sep="\n    ")
        print("  honest rejected:", *fp["false_positive_rows"], sep="\n    ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    ap.add_argument("--show-misses", action="store_true")
    ap.add_argument("--judge", help="model spec (JSON, as under `models`) of an LLM judge to score too")
    ap.add_argument("--probe", help="model spec (JSON) of an extraction probe to score too")
    ap.add_argument("--model-rows", type=int, default=40, help="leak rows the judge/probe see (half as many honest)")
    ap.add_argument("--disguises", default=str(DEFAULT_CORPUS / "disguises"),
                    help="meaning-level corpus folder ('' to skip it)")
    ap.add_argument("--split", choices=("tune", "heldout", "both"), default="both",
                    help="which kinds of the meaning-level corpus to score")
    ap.add_argument("--holdout", default=str(DEFAULT_CORPUS / "holdout"), help="hold-out folder ('' to skip it)")
    ap.add_argument("--only-holdout", action="store_true", help="score the hold-out alone")
    args = ap.parse_args()
    existing("--corpus", args.corpus)
    existing("--disguises", args.disguises or None)
    existing("--holdout", args.holdout or None)
    if args.only_holdout:
        if not args.holdout:
            ap.error("--only-holdout needs a --holdout folder")
        holdout_report(Path(args.holdout), args.show_misses)
        return
    leaks, honest = load_corpus(args.corpus)
    with tempfile.TemporaryDirectory() as tmp:
        seeds = sorted({r["seed"] for r in leaks + honest})
        tasks = corpus_tasks(tmp, seeds=seeds)
        gate = score_gate(gate_flags, leaks, [], tasks)
        gate_fp = score_gate(lambda h, d: not check_hint(h, d, max_words=400).passed, [], honest, tasks)
        gate.update({k: gate_fp[k] for k in ("false_positives", "false_positive_rate", "false_positive_rows", "honest")})
        base = score_gate(literal_baseline, leaks, honest, tasks)
    fams = len({r["family"] for r in leaks})
    print(f"corpus: {len(leaks)} disguised leaks over {fams} families, {len(honest)} honest hints")
    for name, s in (("literal baseline", base), ("offline gate", gate)):
        print(f"{name:>17}: recall {s['recall']:.3f} ({s['caught']}/{s['leaks']}), "
              f"false positives {s['false_positive_rate']:.3f} ({s['false_positives']}/{s['honest']})")
    print(f"recall ratio gate/baseline: {gate['recall'] / max(base['recall'], 1e-9):.2f}x")
    print("gate recall by kind: " + ", ".join(f"{k} {v:.2f}" for k, v in gate["recall_by_kind"].items()))
    if args.disguises:
        disguise_report(Path(args.disguises), args.split, args.show_misses)
    if args.holdout:
        holdout_report(Path(args.holdout), args.show_misses)
    if args.judge or args.probe:
        from termforge.hints.judge import HintChecker, corpus_recall
        from termforge.models.registry import make_model

        models = {k: make_model(json.loads(v), where=f"--{k}") for k, v in (("judge", args.judge), ("probe", args.probe)) if v}
        try:
            score = corpus_recall(HintChecker(models.get("judge"), models.get("probe")), args.corpus,
                                  limit=args.model_rows)
        finally:
            for m in models.values():
                m.close()
        for k in ("judge", "probe", "any"):
            if k == "any" or k in models:
                print(f"{k:>17}: recall {score[k]['recall']:.3f}, false positives {score[k]['false_positive_rate']:.3f} "
                      f"({score['leaks']} leaks, {score['honest']} honest)")
    if args.show_misses:
        print("missed:", *gate["missed"], sep="\n  ")
        print("false positives:", *gate["false_positive_rows"], sep="\n  ")


if __name__ == "__main__":
    main()
