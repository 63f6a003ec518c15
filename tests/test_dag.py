"""DAG pictures of the real workflow: real Snakemake planning, real graphviz layout."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from termforge.dag import (PNG_SIGNATURE, canonical_graph, dot_edges, dot_nodes, dot_to_mermaid, mermaid_rulegraph,
                           render_graphs, write_dag_pictures)
from termforge.errors import TermforgeError

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz `dot` is not installed")


def defined_rules() -> set[str]:
    text = (REPO / "Snakefile").read_text() + "".join(p.read_text() for p in sorted((REPO / "rules").glob("*.smk")))
    return set(re.findall(r"^rule (\w+):", text, re.M))


@pytest.fixture(scope="module")
def pictures(tmp_path_factory):
    root = tmp_path_factory.mktemp("dag")
    overlay = root / "two-shards.yaml"
    overlay.write_text("corpus:\n  n_tasks: 6\n  shard_size: 3\n")
    out = root / "pictures"
    info = write_dag_pictures(REPO, out, configfiles=[REPO / "config.yaml", overlay])
    return out, info, overlay


def test_pictures_are_written_and_valid(pictures):
    out, info, _ = pictures
    for stem in ("rulegraph", "jobs"):
        assert (out / f"{stem}.dot").read_text().startswith("digraph")
        assert (out / f"{stem}.png").read_bytes().startswith(PNG_SIGNATURE)
        assert "<svg" in (out / f"{stem}.svg").read_text()
    assert sorted(Path(f).name for f in info["files"]) == sorted(
        f"{s}.{e}" for s in ("rulegraph", "jobs") for e in ("dot", "svg", "png"))
    assert info["jobs_rendered"] is True


def test_rulegraph_holds_the_workflow_rules(pictures):
    out, info, _ = pictures
    rules = defined_rules()
    drawn = set(dot_nodes((out / "rulegraph.dot").read_text()).values())
    assert drawn == set(info["rules"])
    assert drawn <= rules, f"rulegraph names rules the Snakefile does not define: {drawn - rules}"
    assert {"all", "sample_axes", "generate", "build_images", "decontaminate", "validate", "corpus_manifest"} <= drawn
    svg = (out / "rulegraph.svg").read_text()
    assert all(f">{r}<" in svg for r in drawn)
    # The data path: sample_axes feeds generate, which feeds validation.
    names = dot_nodes((out / "rulegraph.dot").read_text())
    edges = {(names[a], names[b]) for a, b in dot_edges((out / "rulegraph.dot").read_text())}
    assert ("sample_axes", "generate") in edges and ("generate", "validate") in edges


def test_job_dag_follows_the_overlay_shards(pictures):
    out, info, _ = pictures
    labels = list(dot_nodes((out / "jobs.dot").read_text()).values())
    # n_tasks 6 in shards of 3: two generate, build and validate jobs, one sampler.
    assert labels.count("generate") == 2 and labels.count("validate") == 2 and labels.count("build_images") == 2
    assert labels.count("sample_axes") == 1
    assert info["jobs"] == len(labels)


def test_mermaid_rulegraph_matches_the_dot_rulegraph(pictures):
    out, _, overlay = pictures
    mermaid = mermaid_rulegraph(REPO, configfiles=[REPO / "config.yaml", overlay])
    assert "flowchart" in mermaid
    ours = dot_to_mermaid((out / "rulegraph.dot").read_text())

    def graph(text: str) -> tuple[set, set]:
        nodes = dict(re.findall(r"^\s*(id\d+)\[([^\]]+)\]", text, re.M))
        edges = {(nodes[a], nodes[b]) for a, b in re.findall(r"^\s*(id\d+) --> (id\d+)", text, re.M)}
        return set(nodes.values()), edges

    assert graph(mermaid) == graph(ours)
    assert graph(ours)[0] == set(dot_nodes((out / "rulegraph.dot").read_text()).values())


def test_large_job_dag_keeps_only_its_dot(pictures, tmp_path):
    out, _, _ = pictures
    job_dot = (out / "jobs.dot").read_text()
    stale = tmp_path / "jobs.png"
    stale.write_bytes(PNG_SIGNATURE)
    res = render_graphs({"jobs": job_dot}, tmp_path, max_nodes={"jobs": 3})
    assert res["rendered"] == [] and (tmp_path / "jobs.dot").read_text() == job_dot
    assert not stale.exists() and not (tmp_path / "jobs.svg").exists()


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(TermforgeError, match="nope.yaml does not exist"):
        write_dag_pictures(REPO, tmp_path, configfiles=[tmp_path / "nope.yaml"])


def test_readme_shows_the_current_dvc_stage_graph():
    from termforge.dag import README_DVC_BEGIN, README_DVC_END, dvc_dag_markdown

    root = Path(__file__).resolve().parents[1]
    text = (root / "README.md").read_text()
    block = text[text.index(README_DVC_BEGIN) + len(README_DVC_BEGIN):text.index(README_DVC_END)]
    assert block.strip() == dvc_dag_markdown(root).strip(), "run `termforge dag --readme README.md`"


def _graph(dot_text: str) -> tuple[set, set]:
    names = dot_nodes(dot_text)
    return set(names.values()), {(names[a], names[b]) for a, b in dot_edges(dot_text)}


@pytest.mark.slow
def test_the_committed_pictures_are_what_make_dag_draws(tmp_path):
    # `make dag` runs exactly this command; its outputs are committed and must show today's workflow.
    recipe = subprocess.run(["make", "-n", "dag"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "termforge dag --out docs/dag --mermaid docs/rulegraph.mmd --readme README.md" in recipe
    write_dag_pictures(REPO, tmp_path)
    for stem in ("rulegraph", "jobs"):
        fresh = (tmp_path / f"{stem}.dot").read_text()
        # Byte for byte: a rerun of `make dag` on an unchanged workflow leaves no diff.
        assert (REPO / "docs" / "dag" / f"{stem}.dot").read_text() == fresh, \
            f"docs/dag/{stem}.dot is stale: run `make dag`"
        assert (REPO / "docs" / "dag" / f"{stem}.png").read_bytes().startswith(PNG_SIGNATURE)
    mermaid = (REPO / "docs" / "rulegraph.mmd").read_text()
    assert mermaid == mermaid_rulegraph(REPO), "docs/rulegraph.mmd is stale: run `make dag`"
    nodes = dict(re.findall(r"^\s*(id\d+)\[([^\]]+)\]", mermaid, re.M))
    edges = {(nodes[a], nodes[b]) for a, b in re.findall(r"^\s*(id\d+) --> (id\d+)", mermaid, re.M)}
    assert (set(nodes.values()), edges) == _graph((tmp_path / "rulegraph.dot").read_text()), \
        "docs/rulegraph.mmd is stale: run `make dag`"


def _renumbered(text: str, seed: int) -> str:
    """The same graph as Snakemake may print it on another call: other node numbers, edges and
    node lines in another order."""
    import random

    rng = random.Random(seed)
    mermaid = "flowchart" in text
    ids = sorted(set(re.findall(r"\bid(\d+)\b" if mermaid else r"^\s*(\d+)\[", text, re.M)), key=int)
    perm = dict(zip(ids, rng.sample(ids, len(ids))))
    if mermaid:
        text = re.sub(r"\bid(\d+)\b", lambda m: f"id{perm[m.group(1)]}", text)
    else:
        text = re.sub(r"^(\s*)(\d+)(\[| -> )", lambda m: f"{m.group(1)}{perm[m.group(2)]}{m.group(3)}", text, flags=re.M)
        text = re.sub(r" -> (\d+)", lambda m: f" -> {perm[m.group(1)]}", text)
    lines = text.splitlines()
    body = [i for i, line in enumerate(lines) if re.match(r"^\s*(id)?\d+", line)]
    shuffled = [lines[i] for i in body]
    rng.shuffle(shuffled)
    for i, line in zip(body, shuffled):
        lines[i] = line
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", ["dag/rulegraph.dot", "dag/jobs.dot", "rulegraph.mmd"])
def test_a_graph_prints_the_same_however_snakemake_numbered_it(name):
    committed = (REPO / "docs" / name).read_text()
    canonical = canonical_graph(committed)
    for seed in range(5):
        other = _renumbered(committed, seed)
        assert other != committed or seed  # the variant really differs
        assert canonical_graph(other) == canonical
    if name.endswith(".dot"):
        assert _graph(canonical) == _graph(committed)  # the same nodes and edges
    assert canonical_graph(canonical) == canonical


def test_two_snakemake_calls_give_the_same_graph_text(tmp_path):
    from termforge.dag import _snakemake_graph

    for kind, fmt in (("rulegraph", "dot"), ("rulegraph", "mermaid-js")):
        first = _snakemake_graph(REPO, kind, fmt, None, (), None)
        assert _snakemake_graph(REPO, kind, fmt, None, (), None) == first, (kind, fmt)
