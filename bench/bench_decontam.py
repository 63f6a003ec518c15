"""Decontamination, the whole stage: what `termforge decontaminate` does end to end (read and check
the shard manifests, take each shard's documents file where fresh and read the other task
directories, n-grams against the references, near-duplicate clusters, the report written as JSON)
against a faithful re-implementation of TMax's rl_data/decontamination algorithm on the same tasks.

The baseline does what TMax's CLI does (rl_data/decontamination/{ngram,cli}.py): load every
document, per benchmark a set of word 13-gram tuples, tokens = lowercase text split on runs of
[^a-z0-9], every window of every document looked up in the set and counted, then its aggregate
report.json, table and CSV; the document text is the same task document termforge scans
(instruction, answer key, tests), read with ordinary file reads (TMax reads one task.json per task
because its document is the description alone).

termforge's time includes the shard documents files' cost at generate time: generate holds each
task's text in memory when it writes the directory, and writes it once more per shard next to the
manifest; the bench times that (the text from the in-memory files, then one atomic write per shard)
and adds it to every termforge run, although generate writes it once per corpus. (With
generate.workers > 1 the texts also travel back from the worker processes, as the task ids
already do.) It also times the stage without documents files (imported tasks, a copied results
tree: every task directory is read) and checks that the report is the same.

Input: --tasks task directories written like generated tasks, made from real procedural task
specs (so siblings of one family share templates, as in a real corpus) with their numbers and
some words re-drawn; --non-ascii of them carry non-ASCII characters (accents, dashes, quotes,
arrows). --refs reference instructions of realistic prose. Planted copies, --plants of each kind:
exact (a reference pasted whole into the instruction), edited (a reference with changed case,
punctuation, whitespace and one word in 40 replaced), span (a 13-to-30-word span of a reference
inside otherwise clean text), each in ASCII and with non-ASCII characters around it. Recall is
the share of planted tasks each implementation flags. Times are CPU seconds (best of --repeat
interleaved runs, both sides single-threaded, in one process: interpreter start-up and imports are
not counted on either side), so the ratio is per core; --workers N also times the stage as the
workflow runs it (N worker processes, the rule's threads) against the baseline in wall-clock
seconds, which only means something on an otherwise idle machine.

    .venv/bin/python bench/bench_decontam.py                 # 15,000 tasks, a few minutes
    .venv/bin/python bench/bench_decontam.py --tasks 2000 --repeat 1
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from termforge import schemas
from termforge.io import atomic_write_json
from termforge.quality.decontam import (RefDoc, decontaminate_tasks, documents_path, manifest_tasks,
                                        task_document_from_files, write_task_documents)

NON_ASCII = ("naïve", "café", "—", "→", "“quoted”", "Größe", "São Paulo", "…", "½", "Ωmega", "résumé", "≥")
PLANT_KINDS = ("exact", "edited", "span")


# ----------------------------------------------------------------------------- input


def _vocabulary(rng: random.Random, size: int) -> tuple[list[str], list[float]]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(size)})
    rng.shuffle(words)
    return words, [1.0 / (rank + 1) for rank in range(len(words))]


def _prose(rng: random.Random, words: list[str], weights: list[float], lo: int, hi: int) -> str:
    out = []
    for i, w in enumerate(rng.choices(words, weights, k=rng.randint(lo, hi))):
        out.append((w.capitalize() if i % 15 == 0 else w) + ("." if rng.random() < 0.08 else ""))
    return " ".join(out) + "."


def _template_specs(count: int) -> list[dict]:
    """Real procedural task texts (instruction, truth, tests) from `count` sampled signatures."""
    from termforge.axes.sampler import sample_signatures
    from termforge.axes.taxonomy import load_taxonomy
    from termforge.generate.families import default_families
    from termforge.generate.procedural import build_task

    fams = default_families()
    out = []
    for sig in sample_signatures(count, 7, {"legacy": 0.5, "rl_v2": 0.5}, load_taxonomy()):
        spec = build_task(sig, fams).spec
        out.append({"instruction": spec.instruction, "truth": json.dumps(spec.truth, indent=2, sort_keys=True),
                    "initial": spec.test_initial, "final": spec.test_final})
    return out


_NUMBER = re.compile(r"\d+")


def _redraw(rng: random.Random, text: str, words: list[str]) -> str:
    """The same template with other numbers and a few other words: a sibling task."""
    text = _NUMBER.sub(lambda m: str(rng.randint(0, 10 ** len(m.group()))), text)
    parts = text.split(" ")
    for _ in range(max(1, len(parts) // 60)):
        parts[rng.randrange(len(parts))] = rng.choice(words)
    return " ".join(parts)


def _decorate(rng: random.Random, text: str, k: int) -> str:
    parts = text.split(" ")
    for _ in range(k):
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(NON_ASCII))
    return " ".join(parts)


def _edit(rng: random.Random, ref: str, words: list[str]) -> str:
    """A lightly edited copy: case, punctuation and spacing changed, one word in 40 replaced."""
    out = []
    for w in ref.split():
        if rng.random() < 1 / 40:
            w = rng.choice(words)
        w = w.upper() if rng.random() < 0.05 else w
        out.append(w + ("," if rng.random() < 0.05 else ""))
    return "  ".join(out)


def write_corpus(root: Path, n_tasks: int, n_refs: int, plants: int, non_ascii: float, seed: int):
    rng = random.Random(seed)
    words, weights = _vocabulary(rng, 20_000)
    refs = [RefDoc(f"tb/{i:03d}", "tb", _prose(rng, words, weights, 150, 400)) for i in range(n_refs)]
    templates = _template_specs(300)
    planted: dict[str, str] = {}
    kinds = [(k, na) for k in PLANT_KINDS for na in (False, True)]
    plant_at = dict(zip(rng.sample(range(n_tasks), plants * len(kinds)), [kv for kv in kinds for _ in range(plants)]))
    pairs, in_memory = [], {}
    for i in range(n_tasks):
        tid = f"tf-{i:06d}"
        t = templates[i % len(templates)]
        instruction, truth = _redraw(rng, t["instruction"], words), _redraw(rng, t["truth"], words)
        if rng.random() < non_ascii:
            instruction = _decorate(rng, instruction, rng.randint(1, 4))
        if i in plant_at:
            kind, with_non_ascii = plant_at[i]
            ref = rng.choice(refs).text
            if kind == "exact":
                copy = ref
            elif kind == "edited":
                copy = _edit(rng, ref, words)
            else:
                toks = ref.split()
                start = rng.randrange(len(toks) - 30)
                copy = " ".join(toks[start:start + rng.randint(13, 30)])
            if with_non_ascii:
                copy = f"{rng.choice(NON_ASCII)} {copy} {rng.choice(NON_ASCII)}"
            instruction = instruction + "\n\n" + copy + "\n"
            planted[tid] = f"{kind}{'+non-ascii' if with_non_ascii else ''}"
        d = root / tid
        files = {"task.json": json.dumps({"id": tid, "instruction": instruction}).encode(),
                 "instruction.md": instruction.encode(), "private/truth.json": truth.encode(),
                 "tests/test_initial_state.py": t["initial"].encode(),
                 "tests/test_final_state.py": _redraw(rng, t["final"], words).encode(),
                 "tests/test.sh": b"#!/bin/bash\npytest /tests/test_final_state.py\n"}
        (d / "tests").mkdir(parents=True)
        (d / "private").mkdir()
        for rel, data in files.items():
            (d / rel).write_bytes(data)
        in_memory[tid] = files
        pairs.append((tid, d))
    return pairs, refs, planted, in_memory


# ----------------------------------------------------------------------------- the TMax baseline


_TMAX_SPLIT = re.compile(r"[^a-z0-9]+")


def tmax_tokenize(text: str) -> list[str]:
    return [t for t in _TMAX_SPLIT.split(text.lower()) if t]


def tmax_ngrams(tokens: list[str], n: int):
    if len(tokens) < n:
        return
    for i in range(len(tokens) - n + 1):
        yield tuple(tokens[i:i + n])


def tmax_document(task_dir: Path) -> str:
    """The same text termforge scans (instruction, answer key, tests), read plainly."""
    paths = [task_dir / "instruction.md", task_dir / "private" / "truth.json",
             *sorted((task_dir / "tests").glob("*.py"))]
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in paths if p.is_file())


def tmax_run(pairs, refs: list[RefDoc], n: int, out: Path) -> set[str]:
    """TMax's CLI for one (benchmark, dataset, n) cell: load every document, build the benchmark's
    n-gram set, scan and count, write its report.json, table and CSV (aggregate counts, as TMax
    does). The contaminated ids are kept only to measure recall."""
    docs = [(tid, tmax_document(d)) for tid, d in pairs]
    index: set[tuple[str, ...]] = set()
    for ref in refs:
        index.update(tmax_ngrams(tmax_tokenize(ref.text), n))
    contaminated: set[str] = set()
    total_hits = total_ngrams = 0
    for tid, text in docs:
        hits = total = 0
        for gram in tmax_ngrams(tmax_tokenize(text), n):
            total += 1
            if gram in index:
                hits += 1
        total_hits += hits
        total_ngrams += total
        if hits:
            contaminated.add(tid)
    cell = {"benchmark": "tb", "n": n, "dataset": "termforge", "n_docs": len(docs),
            "n_contaminated": len(contaminated), "total_hits": total_hits, "total_ngrams": total_ngrams}
    rate = cell["n_contaminated"] / max(cell["n_docs"], 1)
    out.write_text(json.dumps({"params": {"n_values": [n], "stride": 1},
                               "benchmarks": [{"name": "tb", "n_docs": len(refs), "n_unique_ngrams": {str(n): len(index)}}],
                               "results": [{**cell, "contamination_rate": rate}]}, indent=2))
    out.with_suffix(".md").write_text(f"| Benchmark | n-gram | termforge |\n|---|---:|---:|\n| tb | {n} | {rate * 100:.1f}% |\n")
    with out.with_suffix(".csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(cell))
        w.writeheader()
        w.writerow(cell)
    return contaminated


# ----------------------------------------------------------------------------- the termforge stage


def write_shards(root: Path, pairs, in_memory: dict[str, dict[str, bytes]], shard_size: int,
                 with_documents: bool) -> tuple[list[Path], float]:
    """Shard manifests as generate writes them and, with_documents, their documents files; returns
    the manifests and the CPU seconds generate spends on the documents files (the text of each task
    from the files it holds in memory, then one atomic write per shard)."""
    tasks_dir = pairs[0][1].parent if pairs else root
    manifests = []
    for k in range(0, len(pairs), shard_size):
        m = root / f"{k // shard_size:05d}.json"
        atomic_write_json(m, {"shard": m.stem, "tasks_dir": str(tasks_dir),
                              "tasks": [{"id": tid} for tid, _ in pairs[k:k + shard_size]]})
        manifests.append(m)
    seconds = 0.0
    if with_documents:
        for k, m in enumerate(manifests):
            chunk = pairs[k * shard_size:(k + 1) * shard_size]
            _, s = timed(lambda: write_task_documents(
                documents_path(m), tasks_dir, [(tid, task_document_from_files(in_memory[tid])) for tid, _ in chunk]))
            seconds += s
    return manifests, seconds


def termforge_run(manifests: list[Path], refs: list[RefDoc], n: int, near: bool, out: Path) -> dict:
    """What `termforge decontaminate` does after parsing its arguments: read and check the shard
    manifests (every task directory is checked, as the CLI does), take the fresh documents files,
    read the rest from the task directories, scan, write the report atomically."""
    schemas._CHECKED.clear()  # the CLI checks its inputs once per process: each run pays for it
    tasks, documents = manifest_tasks(manifests)
    report = decontaminate_tasks(tasks, refs, n=n, near_dups=near, documents=documents)
    atomic_write_json(out, report)
    return report


# ----------------------------------------------------------------------------- main


def _cpu() -> float:
    """CPU seconds of this process and of its finished worker processes."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn):
    t0 = _cpu()
    result = fn()
    return result, _cpu() - t0


def timed_wall(fn):
    t0 = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0


def recall(found: set[str], planted: dict[str, str]) -> dict[str, str]:
    by_kind: dict[str, list[int]] = {}
    for tid, kind in planted.items():
        cell = by_kind.setdefault(kind, [0, 0])
        cell[0] += tid in found
        cell[1] += 1
    return {k: f"{a}/{b}" for k, (a, b) in sorted(by_kind.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=15_000)
    ap.add_argument("--refs", type=int, default=200)
    ap.add_argument("--plants", type=int, default=40, help="planted tasks per kind (3 kinds x ASCII/non-ASCII)")
    ap.add_argument("--non-ascii", type=float, default=0.3, help="share of tasks with non-ASCII characters")
    ap.add_argument("--n", type=int, default=13)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--shard-size", type=int, default=200)
    ap.add_argument("--keep", help="write the corpus here and keep it (default: a temporary directory)")
    ap.add_argument("--workers", type=int, default=0,
                    help="also time the stage with this many worker processes (wall clock; the rule's threads)")
    args = ap.parse_args()

    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-decontam-"))
    try:
        t0 = time.perf_counter()
        pairs, refs, planted, in_memory = write_corpus(tmp / "tasks", args.tasks, args.refs, args.plants,
                                                       args.non_ascii, args.seed)
        print(f"corpus: {len(pairs)} task dirs ({args.non_ascii:.0%} with non-ASCII text), {len(refs)} references, "
              f"{len(planted)} planted copies, written in {time.perf_counter() - t0:.0f} s; n={args.n}, "
              f"shards of {args.shard_size}; CPU seconds, 1 core, best of {args.repeat}")
        ratios = {}
        for label, subset in (("all tasks", None), ("ASCII-only documents", False), ("non-ASCII documents", True)):
            run_pairs = pairs if subset is None else [
                (t, d) for t, d in pairs
                if (not (d / "instruction.md").read_bytes().isascii()) == subset]
            run_planted = {t: k for t, k in planted.items() if t in dict(run_pairs)}
            ratios[label] = compare(label, run_pairs, refs, run_planted, in_memory, args, tmp)
        print("\nsummary (end to end, near-duplicates on / off, vs the TMax-faithful baseline; goal >= 10x): "
              + "; ".join(f"{k}: {on:.1f}x / {off:.1f}x" for k, (on, off) in ratios.items()))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def compare(label: str, pairs, refs, planted, in_memory, args, tmp: Path) -> tuple[float, float]:
    slug = label.split()[0].lower()
    manifests, docs_write = write_shards(tmp / f"manifests-{slug}", pairs, in_memory, args.shard_size, True)
    bare, _ = write_shards(tmp / f"manifests-{slug}-bare", pairs, in_memory, args.shard_size, False)
    times: dict[str, list[float]] = {"base": [], "near": [], "off": [], "bare": [], "write": [docs_write]}
    for r in range(args.repeat):
        base_found, s = timed(lambda: tmax_run(pairs, refs, args.n, tmp / "tmax.json"))
        times["base"].append(s)
        report, s = timed(lambda: termforge_run(manifests, refs, args.n, True, tmp / "report.json"))
        times["near"].append(s)
        report_off, s = timed(lambda: termforge_run(manifests, refs, args.n, False, tmp / "report-off.json"))
        times["off"].append(s)
        report_bare, s = timed(lambda: termforge_run(bare, refs, args.n, True, tmp / "report-bare.json"))
        times["bare"].append(s)
        if r + 1 < args.repeat:  # generate's documents write, measured again for a fair best-of
            times["write"].append(write_shards(tmp / f"manifests-{slug}", pairs, in_memory, args.shard_size,
                                               True)[1])
    assert report == report_bare, "the documents files changed the report"
    ours_found = {h["task_id"] for h in report["contamination"]}
    b, w = min(times["base"]), min(times["write"])
    o, f, bare_s = min(times["near"]) + w, min(times["off"]) + w, min(times["bare"])
    print(f"\n[{label}] {len(pairs)} tasks, {len(planted)} planted")
    print(f"  TMax-faithful baseline:                 {b:7.2f} s  {len(pairs) / b:8.0f} tasks/s/core  "
          f"recall {recall(base_found, planted)}")
    print(f"  termforge decontaminate (+near):        {o:7.2f} s  {len(pairs) / o:8.0f} tasks/s/core  "
          f"recall {recall(ours_found, planted)}")
    print(f"  termforge decontaminate (no near):      {f:7.2f} s  {len(pairs) / f:8.0f} tasks/s/core")
    print(f"    both include generate's documents-file write, {w:.2f} s, once per corpus")
    print(f"  (+near) without documents files (reads every task directory, e.g. imported tasks): {bare_s:.2f} s "
          f"-> {b / bare_s:.1f}x; same report")
    clusters = report.get("near_duplicate_clusters", [])
    print(f"  near-duplicate clusters: {len(clusters)} covering {report['summary']['near_duplicate_tasks']} "
          f"non-kept tasks; report {(tmp / 'report.json').stat().st_size / 1e6:.1f} MB")
    if args.workers > 1:
        base_wall = min(timed_wall(lambda: tmax_run(pairs, refs, args.n, tmp / "tmax.json"))[1]
                        for _ in range(args.repeat))

        def parallel():
            schemas._CHECKED.clear()
            tasks, documents = manifest_tasks(manifests)
            rep = decontaminate_tasks(tasks, refs, n=args.n, workers=args.workers, documents=documents)
            atomic_write_json(tmp / "report.json", rep)
            return rep

        par_report, par_wall = min((timed_wall(parallel) for _ in range(args.repeat)), key=lambda rt: rt[1])
        assert par_report == report, "worker processes changed the report"
        print(f"  wall clock, {args.workers} workers (+near): baseline {base_wall:.2f} s, termforge {par_wall:.2f} s "
              f"-> {base_wall / par_wall:.1f}x (same report as one process)")
    missed = [t for t in planted if t not in ours_found]
    extra = sorted(ours_found - set(planted) - base_found)
    print(f"  end-to-end speedup: {b / o:.1f}x with near-duplicates, {b / f:.1f}x without (goal >= 10x); "
          f"planted missed by termforge: {len(missed)}, flagged by termforge only: {len(extra)}")
    if missed:
        sys.exit(f"RECALL: termforge missed planted tasks {missed[:5]}")
    return b / o, b / f


if __name__ == "__main__":
    main()
