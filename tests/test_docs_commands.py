"""Every snakemake, termforge and dvc command shown in README.md and docs/*.md runs as written, or as
its dry run where it would start real work (Snakemake `-n`, `dvc repro --dry`, `dvc exp run --dry`):
in a copy of the repository, block by block in the order a reader meets them."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOOLS = ("snakemake", "termforge", "dvc")


def commands(path: Path) -> list[str]:
    """The snakemake/termforge/dvc commands of a file's fenced blocks, in order (comments cut,
    `a && b` and `a; b` split)."""
    out = []
    in_block = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_block = not in_block
            continue
        if not in_block:
            continue
        code = line.split(" #", 1)[0].strip()
        for part in re.split(r"\s*(?:&&|;)\s*", code):
            if re.match(rf"^({'|'.join(TOOLS)}) [a-z-]", part) or part in TOOLS:
                out.append(part)
    return out


def dry(command: str) -> str | None:
    """The command to run for a shown command: itself, its dry run, or None (cannot run here)."""
    words = shlex.split(command)
    tool = words[0]
    if tool == "snakemake":
        return command if {"-n", "--dry-run", "--dryrun"} & set(words) else command.replace("snakemake", "snakemake -n", 1)
    if tool == "dvc" and words[1:2] == ["repro"] and "--dry" not in words:
        return command + " --dry"
    if tool == "dvc" and words[1:3] == ["exp", "run"] and "--dry" not in words:
        return command.replace("dvc exp run", "dvc exp run --dry", 1)
    if tool == "dvc" and words[1:2] == ["pull"] and "--allow-missing" not in words:
        # Nothing was run here, so there is nothing to pull (tests/test_dvc.py pulls a real run's).
        return command + " --allow-missing"
    if tool == "termforge" and words[1] == "import-harbor" and "@" in words[2]:
        return None  # a Harbor registry id: needs the harbor CLI and the network
    return command


def test_the_docs_show_commands_of_each_tool():
    found = [c for doc in DOCS for c in commands(doc)]
    for tool in TOOLS:
        assert any(c.split()[0] == tool for c in found), tool
    # The README's DVC experiment uses a key the config has (train.lr was one it did not).
    assert "dvc exp run -S config.yaml:train.learning_rate=1e-5" in commands(ROOT / "README.md")


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """The repository's files as a fresh clone has them (what git tracks, and new files not
    ignored), in a git repository of its own, set up as scripts/setup.sh leaves it."""
    work = tmp_path_factory.mktemp("docs") / "repo"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, work / rel)
    (work / "slurm").symlink_to("profiles/slurm")
    env = _env(work)
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "docs"]):
        subprocess.run(cmd, cwd=work, env=env, check=True, capture_output=True)
    return work


def _env(work: Path) -> dict:
    return {"PATH": f"{BIN}:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(work.parent), "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(work / "src"), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
            # What the docs add to the image store goes to a store of the checkout's own; the built
            # bases stay the shared cache's.
            "TERMFORGE_IMAGE_STORE": str(work.parent / "image-store"),
            **({"TERMFORGE_MODEL_CACHE": os.environ["TERMFORGE_MODEL_CACHE"]}
               if "TERMFORGE_MODEL_CACHE" in os.environ else {})}


@pytest.mark.slow
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_command_in_the_docs_runs(doc, checkout):
    ran = []
    for command in commands(doc):
        runnable = dry(command)
        if runnable is None:
            continue
        res = subprocess.run(["bash", "-c", runnable], cwd=checkout, env=_env(checkout), capture_output=True,
                             text=True, timeout=900)
        assert res.returncode == 0, f"{doc.name}: `{command}` (ran `{runnable}`) failed:\n" \
                                    f"{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
        ran.append(runnable)
    # Each file's commands ran (none silently skipped but the registry fetch).
    assert len(ran) == len([c for c in commands(doc) if dry(c) is not None])
