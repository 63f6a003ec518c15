"""Pictures of the workflow: the rule graph and the job DAG (dot, SVG, PNG) and a Mermaid rule graph.

Snakemake prints the graphs (`--rulegraph`, `--dag`) without running anything; graphviz's `dot`
lays them out. By default Snakemake plans in a fresh, empty working directory, so the pictures
show every job a fresh run of the given config would run (not what is left of a half-done run) and
nothing is written into the repository. A job DAG of a large corpus has thousands of nodes; above
`max_job_nodes` only jobs.dot is written, since a picture of it would be unreadable and slow to lay out.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from termforge.errors import TermforgeError
from termforge.io import atomic_write_bytes, atomic_write_text

SNAKEFILE_NAMES = ("Snakefile", "workflow/Snakefile", "snakefile", "workflow/snakefile")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _snakefile(snakefile_dir: Path) -> Path:
    for name in SNAKEFILE_NAMES:
        if (snakefile_dir / name).is_file():
            return snakefile_dir / name
    raise TermforgeError(f"no Snakefile in {snakefile_dir} (looked for {', '.join(SNAKEFILE_NAMES)})")


def _configfiles(snakefile_dir: Path, configfiles: Sequence[str | Path] | None) -> list[Path]:
    """The config files to pass: the given ones, or the workflow's config.yaml when none are given.

    Snakemake reads a Snakefile's `configfile:` relative to the working directory, which is a
    fresh one here, so the base config is always passed explicitly."""
    files = [Path(c) for c in configfiles] if configfiles else [snakefile_dir / "config.yaml"]
    for f in files:
        if not f.is_file():
            raise TermforgeError(f"config file {f} does not exist")
    return [f.resolve() for f in files]


def _snakemake_command() -> list[str]:
    """Snakemake of this interpreter when it has one (the venv's), else the one on PATH."""
    if importlib.util.find_spec("snakemake") is not None:
        return [sys.executable, "-m", "snakemake"]
    exe = shutil.which("snakemake")
    if exe is None:
        raise TermforgeError("snakemake is not installed (pip install 'termforge[workflow]')")
    return [exe]


def _snakemake_graph(snakefile_dir: Path, kind: str, fmt: str, configfiles: Sequence[str | Path] | None,
                     targets: Sequence[str], workdir: str | Path | None) -> str:
    snakefile_dir = Path(snakefile_dir).resolve()
    snakefile = _snakefile(snakefile_dir)
    files = _configfiles(snakefile_dir, configfiles)
    with tempfile.TemporaryDirectory(prefix="termforge-dag-") as tmp:
        wd = Path(workdir).resolve() if workdir else Path(tmp)
        # Targets come before --configfile: its nargs="+" would swallow them otherwise.
        cmd = [*_snakemake_command(), "-s", str(snakefile), "--directory", str(wd),
               *targets, f"--{kind}", fmt, "--configfile", *map(str, files)]
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=wd)
    if res.returncode != 0:
        raise TermforgeError(f"snakemake --{kind} {fmt} failed (exit {res.returncode}) for {snakefile}: "
                             f"{(res.stderr or res.stdout).strip()[-2000:]}")
    return canonical_graph(_graph_text(res.stdout, fmt))


# Snakemake numbers a graph's nodes in the order it meets them and prints edges in set order, so
# the same workflow gives another text on every call. The committed pictures (`make dag`) must not
# change when the workflow did not: nodes are renumbered by their label, edges sorted.
_GRAPH_LINES = {
    "node": (re.compile(r'^(\s*)(\w+)(\[label = "((?:[^"\\]|\\.)*)".*)$'),
             re.compile(r"^(\s*)id(\d+)(\[(.*)\])$")),
    "edge": (re.compile(r"^(\s*)(\w+) -> (\w+)(.*)$"), re.compile(r"^(\s*)id(\d+) --> id(\d+)(.*)$")),
    "style": (None, re.compile(r"^(\s*)style id(\d+)( .*)$")),
}


def _canonical_order(keys: dict[str, tuple], edges: list[tuple[str, str]]) -> list[str]:
    """The nodes in an order that depends on the graph alone, not on how its nodes were numbered.

    A job DAG has many nodes with the same label (one `validate` per shard), told apart by their
    neighbours: colour refinement (each node's colour is its label, then its colour with its
    parents' and children's colours, until no class splits), and where nodes still tie, one is
    set apart and the refinement runs again. Nodes that still tie are interchangeable."""
    preds: dict[str, list[str]] = {n: [] for n in keys}
    succs: dict[str, list[str]] = {n: [] for n in keys}
    for a, b in edges:
        succs[a].append(b)
        preds[b].append(a)

    def ranked(sig: dict) -> dict[str, int]:
        rank = {k: i for i, k in enumerate(sorted(set(sig.values())))}
        return {n: rank[sig[n]] for n in sig}

    def refine(colour: dict[str, int]) -> dict[str, int]:
        while True:
            new = ranked({n: (colour[n], tuple(sorted(colour[p] for p in preds[n])),
                              tuple(sorted(colour[s] for s in succs[n]))) for n in colour})
            if len(set(new.values())) == len(set(colour.values())):
                return new
            colour = new

    colour = refine(ranked(keys))
    # Twins (same colour, same parents, same children: one solve job per shard under one corpus
    # manifest) are interchangeable, so they are numbered in any order without a refinement each.
    twins: dict[tuple, list[str]] = {}
    for n in colour:
        twins.setdefault((colour[n], tuple(sorted(preds[n])), tuple(sorted(succs[n]))), []).append(n)
    if any(len(ns) > 1 for ns in twins.values()):
        colour = refine(ranked({n: (colour[n], i) for ns in twins.values() for i, n in enumerate(ns)}))
    while len(set(colour.values())) < len(colour):
        members: dict[int, list[str]] = {}
        for n, c in colour.items():
            members.setdefault(c, []).append(n)
        tied = min(c for c, ns in members.items() if len(ns) > 1)
        chosen = min(members[tied], key=lambda n: (len(n), n))
        colour = refine({n: 2 * c + (n != chosen) for n, c in colour.items()})
    return sorted(colour, key=colour.get)


def canonical_graph(text: str) -> str:
    """A Snakemake dot or mermaid graph with its nodes numbered in _canonical_order and every
    node, style and edge line in that order; other lines stay where they were."""
    mermaid = "flowchart" in text and "digraph" not in text
    pick = 1 if mermaid else 0
    node_re, edge_re, style_re = (_GRAPH_LINES[k][pick] for k in ("node", "edge", "style"))
    nodes: dict[str, tuple[str, str]] = {}
    edges, styles = [], {}
    head: list[str] = []
    tail: list[str] = []
    for line in text.splitlines():
        if (m := node_re.match(line)) and (mermaid or "->" not in line):
            nodes[m.group(2)] = (m.group(3), line)  # its attributes (label, colour), not its number
        elif m := edge_re.match(line):
            edges.append((m.group(1), m.group(2), m.group(3), m.group(4)))
        elif style_re is not None and (m := style_re.match(line)):
            styles[m.group(2)] = (m.group(1), m.group(3))
        elif nodes or edges:
            tail.append(line)
        else:
            head.append(line)
    order = _canonical_order({n: attributes for n, (attributes, _) in nodes.items()},
                             [(a, b) for _, a, b, _ in edges if a in nodes and b in nodes])
    new = {old: str(i) for i, old in enumerate(order)}
    prefix = "id" if mermaid else ""
    out = list(head)
    for old in order:
        m = node_re.match(nodes[old][1])
        out.append(f"{m.group(1)}{prefix}{new[old]}{m.group(3)}")
    for old in order:
        if old in styles:
            out.append(f"{styles[old][0]}style id{new[old]}{styles[old][1]}")
    arrow = " --> " if mermaid else " -> "
    for indent, a, b, rest in sorted(edges, key=lambda e: (int(new.get(e[1], -1)), int(new.get(e[2], -1)), e[3])):
        out.append(f"{indent}{prefix}{new.get(a, a)}{arrow}{prefix}{new.get(b, b)}{rest}")
    return "\n".join(out + tail) + "\n"


def _graph_text(stdout: str, fmt: str) -> str:
    """The graph alone: anything a Snakefile printed to stdout before it is cut off."""
    if fmt == "dot":
        start = stdout.find("digraph")
    else:
        start = stdout.find("---\ntitle")
        start = start if start >= 0 else stdout.find("flowchart")
    if start < 0:
        raise TermforgeError(f"snakemake printed no {fmt} graph (output starts: {stdout[:200]!r})")
    return stdout[start:].rstrip() + "\n"


def _dot(dot_text: str, fmt: str) -> bytes:
    exe = shutil.which("dot")
    if exe is None:
        raise TermforgeError("graphviz `dot` is not installed (apt-get install graphviz)")
    res = subprocess.run([exe, f"-T{fmt}"], input=dot_text.encode(), capture_output=True)
    if res.returncode != 0:
        raise TermforgeError(f"dot -T{fmt} failed (exit {res.returncode}): {res.stderr.decode(errors='replace')[-1000:]}")
    return res.stdout


def dot_nodes(dot_text: str) -> dict[str, str]:
    """Node id -> label (first line of the label) of a Snakemake dot graph."""
    return {m.group(1): m.group(2).split("\\n")[0]
            for m in re.finditer(r'^\s*(\w+)\s*\[label\s*=\s*"((?:[^"\\]|\\.)*)"', dot_text, re.M)}


def dot_edges(dot_text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^\s*(\w+)\s*->\s*(\w+)", dot_text, re.M)]


def dot_to_mermaid(dot_text: str, title: str = "DAG") -> str:
    """A Mermaid flowchart of a Snakemake dot graph (for Snakemake versions without mermaid-js)."""
    nodes = dot_nodes(dot_text)
    lines = ["---", f"title: {title}", "---", "flowchart TB"]
    for nid, label in nodes.items():
        lines.append(f"\tid{nid}[{label}]")
    for a, b in dot_edges(dot_text):
        lines.append(f"\tid{a} --> id{b}")
    return "\n".join(lines) + "\n"


def mermaid_rulegraph(snakefile_dir: str | Path, configfiles: Sequence[str | Path] | None = None,
                      targets: Sequence[str] = (), workdir: str | Path | None = None) -> str:
    """The rule graph as a Mermaid flowchart (renders in a GitHub README inside ```mermaid fences)."""
    try:
        return _snakemake_graph(Path(snakefile_dir), "rulegraph", "mermaid-js", configfiles, targets, workdir)
    except TermforgeError as exc:
        if "invalid choice" not in str(exc):  # an older Snakemake without mermaid-js output
            raise
    dot_text = _snakemake_graph(Path(snakefile_dir), "rulegraph", "dot", configfiles, targets, workdir)
    return dot_to_mermaid(dot_text)


def write_dag_pictures(snakefile_dir: str | Path, out_dir: str | Path,
                       configfiles: Sequence[str | Path] | None = None, targets: Sequence[str] = (),
                       workdir: str | Path | None = None, max_job_nodes: int = 400) -> dict:
    """Write rulegraph.{dot,svg,png} and jobs.{dot,svg,png} (the job DAG) under out_dir.

    configfiles: config.yaml and overlays (default: the workflow's config.yaml); targets: what to
    plan (default: the workflow's default target); workdir: where Snakemake plans (default: a fresh
    empty directory). Returns {"files": [paths], "rules": [rule names], "jobs": n, "jobs_rendered": bool}.
    """
    rule_dot = _snakemake_graph(Path(snakefile_dir), "rulegraph", "dot", configfiles, targets, workdir)
    job_dot = _snakemake_graph(Path(snakefile_dir), "dag", "dot", configfiles, targets, workdir)
    result = render_graphs({"rulegraph": rule_dot, "jobs": job_dot}, out_dir, max_nodes={"jobs": max_job_nodes})
    return {"files": result["files"], "rules": sorted(set(dot_nodes(rule_dot).values())),
            "jobs": len(dot_nodes(job_dot)), "jobs_rendered": "jobs" in result["rendered"]}


def render_graphs(graphs: dict[str, str], out_dir: str | Path, max_nodes: dict[str, int] | None = None) -> dict:
    """Write <name>.dot, and <name>.svg and <name>.png laid out by graphviz, for each dot graph.

    A graph with more nodes than max_nodes[name] gets only its .dot. Returns {"files", "rendered"}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    rendered: list[str] = []
    for stem, text in graphs.items():
        atomic_write_text(out / f"{stem}.dot", text)
        written.append(str(out / f"{stem}.dot"))
        render = len(dot_nodes(text)) <= (max_nodes or {}).get(stem, len(dot_nodes(text)))
        if render:
            rendered.append(stem)
        for fmt in ("svg", "png"):
            path = out / f"{stem}.{fmt}"
            if render:
                atomic_write_bytes(path, _dot(text, fmt))
                written.append(str(path))
            elif path.exists():
                path.unlink()  # a picture of an earlier, smaller graph must not pass for this one
    for p in written:
        Path(p).chmod(0o644)  # pictures are meant to be shared (atomic writes create private files)
    return {"files": written, "rendered": rendered}


README_DVC_BEGIN = "<!-- dvc-dag -->"
README_DVC_END = "<!-- /dvc-dag -->"


def dvc_dag_markdown(repo: str | Path) -> str:
    """`dvc dag --md` for the repository (the DVC stages as a mermaid flowchart)."""
    dvc = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))
    res = subprocess.run([dvc, "dag", "--md"], cwd=repo, capture_output=True, text=True)
    if res.returncode != 0:
        raise TermforgeError(f"dvc dag --md failed in {repo}: {res.stderr.strip()[-500:]}")
    return res.stdout.strip() + "\n"


def update_readme_dvc_dag(readme: str | Path, markdown: str) -> bool:
    """Replace the block between the dvc-dag markers in the README; True when it changed."""
    path = Path(readme)
    text = path.read_text()
    start, end = text.find(README_DVC_BEGIN), text.find(README_DVC_END)
    if start < 0 or end < start:
        raise TermforgeError(f"{path}: no {README_DVC_BEGIN} ... {README_DVC_END} block to update")
    new = text[: start + len(README_DVC_BEGIN)] + "\n" + markdown + text[end:]
    if new != text:
        path.write_text(new)
    return new != text
