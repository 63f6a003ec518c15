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
    return _graph_text(res.stdout, fmt)


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
