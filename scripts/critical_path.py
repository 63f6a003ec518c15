"""Where a workflow run's time went: each rule's wall time from Snakemake's benchmark files, and
the critical path through the job DAG (the chain of dependent jobs whose times add up most: no
number of cores finishes the run sooner).

    python scripts/critical_path.py                      # in the run's folder, after `make run`
    python scripts/critical_path.py --dot jobs.dot --benchmarks results/benchmarks --snakefile Snakefile

The job DAG is `snakemake --dag` (run here, in the run's folder, with the given --configfile, or
read from --dot); each job's benchmark file is its rule's `benchmark:` pattern filled with the
job's wildcards. Snakemake's dot labels show only the wildcards a job does not share with a job it
depends on, so the others are taken from those jobs (a validate job's shard is its build's).
Jobs without a benchmark file (`all`, a service without `benchmark:`, a job that did not run) count
0 s and are listed. Prints per rule: jobs, total and longest seconds, max RSS; then the critical
path, job by job, and the run's serial time (all jobs one after another) beside it.
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

_RULE = re.compile(r"^\s*(?:rule|checkpoint) (\w+):", re.M)
_BENCHMARK = re.compile(r"^\s+benchmark:\s*(?:\w+\s*=\s*)?(?:repeat\()?\"([^\"]+)\"", re.M)
_NODE = re.compile(r'^\s*(\d+)\[label = "((?:[^"\\]|\\.)*)"', re.M)
_EDGE = re.compile(r"^\s*(\d+) -> (\d+)", re.M)


@dataclass
class Job:
    id: str
    rule: str
    own: dict[str, str]  # the wildcards its label shows
    deps: list[str] = field(default_factory=list)
    wildcards: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    max_rss_mb: float | None = None
    benchmark: str | None = None  # its file, when it has one


def fail(message: str) -> None:
    print(f"critical_path.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def benchmark_patterns(snakefile: Path) -> dict[str, str]:
    """rule -> its benchmark path pattern, from the Snakefile and the rule files beside it."""
    files = [snakefile, *sorted((snakefile.parent / "rules").glob("*.smk"))]
    out: dict[str, str] = {}
    for path in files:
        text = path.read_text()
        starts = [(m.start(), m.group(1)) for m in _RULE.finditer(text)] + [(len(text), "")]
        for (begin, rule), (end, _) in zip(starts, starts[1:]):
            m = _BENCHMARK.search(text[begin:end])
            if m:
                out[rule] = m.group(1)
    return out


def parse_dot(text: str) -> dict[str, Job]:
    jobs = {}
    for m in _NODE.finditer(text):
        rule, *rest = m.group(2).split("\\n")
        own = dict(part.split(": ", 1) for part in rest if ": " in part)
        jobs[m.group(1)] = Job(m.group(1), rule, own)
    for m in _EDGE.finditer(text):
        # Snakemake draws an edge from a dependency to the job that needs it.
        if m.group(1) in jobs and m.group(2) in jobs:
            jobs[m.group(2)].deps.append(m.group(1))
    return jobs


def order(jobs: dict[str, Job]) -> list[str]:
    """Dependencies first."""
    seen: set[str] = set()
    out: list[str] = []
    for start in sorted(jobs, key=int):
        stack = [(start, False)]
        while stack:
            jid, done = stack.pop()
            if done:
                out.append(jid)
                continue
            if jid in seen:
                continue
            seen.add(jid)
            stack.append((jid, True))
            stack += [(d, False) for d in jobs[jid].deps if d not in seen]
    return out


def fill_wildcards(jobs: dict[str, Job], topo: list[str]) -> None:
    """A job's wildcards: its label's, plus each name its dependencies agree on a value for."""
    for jid in topo:
        job = jobs[jid]
        inherited: dict[str, set[str]] = {}
        for d in job.deps:
            for name, value in jobs[d].wildcards.items():
                inherited.setdefault(name, set()).add(value)
        job.wildcards = {name: next(iter(v)) for name, v in inherited.items() if len(v) == 1} | job.own


def read_benchmark(path: Path) -> tuple[float, float | None]:
    """(seconds, max RSS in MB) of a Snakemake benchmark file (the mean over its repeats)."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    if not rows or "s" not in rows[0]:
        fail(f"{path}: not a Snakemake benchmark file (no `s` column)")
    secs = sum(float(r["s"]) for r in rows) / len(rows)
    rss = [float(r["max_rss"]) for r in rows if r.get("max_rss") not in (None, "", "-", "NA")]
    return secs, (max(rss) if rss else None)


def attach_times(jobs: dict[str, Job], patterns: dict[str, str], root: Path) -> None:
    for job in jobs.values():
        pattern = patterns.get(job.rule)
        if pattern is None:
            continue
        names = re.findall(r"\{(\w+)", pattern)
        if not all(n in job.wildcards for n in names):
            continue
        path = root / pattern.format(**{n: job.wildcards[n] for n in names})
        job.benchmark = str(path)
        if path.is_file():
            job.seconds, job.max_rss_mb = read_benchmark(path)


def critical_path(jobs: dict[str, Job], topo: list[str]) -> list[Job]:
    best: dict[str, tuple[float, str | None]] = {}
    for jid in topo:
        prev = max(((best[d][0], d) for d in jobs[jid].deps), default=(0.0, None))
        best[jid] = (prev[0] + jobs[jid].seconds, prev[1])
    if not best:
        return []
    end = max(best, key=lambda j: (best[j][0], -int(j)))
    path = []
    while end is not None:
        path.append(jobs[end])
        end = best[end][1]
    return path[::-1]


def label(job: Job) -> str:
    wc = ", ".join(f"{k}={v}" for k, v in sorted(job.wildcards.items()))
    return f"{job.rule}[{wc}]" if wc else job.rule


def report(jobs: dict[str, Job], path: list[Job]) -> str:
    lines = [f"{'rule':<22}{'jobs':>5}{'total s':>10}{'longest s':>11}{'max RSS MB':>12}"]
    by_rule: dict[str, list[Job]] = {}
    for job in jobs.values():
        by_rule.setdefault(job.rule, []).append(job)
    for rule, js in sorted(by_rule.items(), key=lambda kv: -sum(j.seconds for j in kv[1])):
        rss = [j.max_rss_mb for j in js if j.max_rss_mb is not None]
        lines.append(f"{rule:<22}{len(js):>5}{sum(j.seconds for j in js):>10.1f}{max(j.seconds for j in js):>11.1f}"
                     f"{(f'{max(rss):.0f}' if rss else '-'):>12}")
    serial = sum(j.seconds for j in jobs.values())
    length = sum(j.seconds for j in path)
    lines += ["", "critical path:"]
    done = 0.0
    for job in path:
        done += job.seconds
        lines.append(f"  {label(job):<48}{job.seconds:>9.1f} s{done:>10.1f} s")
    lines.append(f"critical path {length:.1f} s ({length / 60:.1f} min) of {serial:.1f} s serial job time "
                 f"({serial / 60:.1f} min); on N cores the run takes at least max(critical path, serial / N)")
    missing = sorted(label(j) for j in jobs.values() if j.benchmark is None or not Path(j.benchmark).is_file())
    if missing:
        lines.append(f"no benchmark file (counted 0 s): {', '.join(missing)}")
    return "\n".join(lines)


def snakemake_dot(snakefile: Path, configfiles: list[str]) -> str:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(snakefile), "--dag", "dot"]
    if configfiles:
        cmd += ["--configfile", *configfiles]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        fail(f"snakemake --dag failed: {(res.stderr or res.stdout).strip()[-500:]}")
    return res.stdout[res.stdout.find("digraph"):]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--snakefile", default="Snakefile", help="the workflow (its rules/*.smk are read too)")
    ap.add_argument("--benchmarks-root", default=".", help="the folder the benchmark paths are relative to (the run's)")
    ap.add_argument("--dot", help="the job DAG as `snakemake --dag dot` printed it (default: ask Snakemake here)")
    ap.add_argument("--configfile", nargs="*", default=[], help="config files for `snakemake --dag`")
    args = ap.parse_args(argv)
    snakefile = Path(args.snakefile)
    if not snakefile.is_file():
        fail(f"--snakefile: {snakefile} does not exist")
    if args.dot and not Path(args.dot).is_file():
        fail(f"--dot: {args.dot} does not exist")
    text = Path(args.dot).read_text() if args.dot else snakemake_dot(snakefile, args.configfile)
    jobs = parse_dot(text)
    if not jobs:
        fail("the job DAG has no jobs")
    topo = order(jobs)
    fill_wildcards(jobs, topo)
    attach_times(jobs, benchmark_patterns(snakefile), Path(args.benchmarks_root))
    print(report(jobs, critical_path(jobs, topo)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
