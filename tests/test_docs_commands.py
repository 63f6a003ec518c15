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
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOOLS = ("snakemake", "termforge", "dvc")


# A fenced block the test cannot run says so on the line above it, with its reason:
#     <!-- docs-test: skip: the values are elided ("...") -->
SKIP_MARK = re.compile(r"^<!-- docs-test: skip: (.+?) -->$")
# Blocks of these languages are run: shell blocks' snakemake/termforge/dvc commands (below),
# Python as a script, YAML as a config overlay (validated over config.yaml), JSON parsed.
RUN_LANGS = ("", "bash", "sh", "shell", "console", "python", "yaml", "json")
# Not code: diagrams and examples of text the reader writes.
NOT_CODE = {"mermaid": "a diagram", "markdown": "an example of a document the reader writes",
            "text": "a plain-text map or table (the README's architecture map)"}


@dataclass
class Block:
    doc: Path
    line: int
    lang: str
    text: str
    skip: str | None  # the reason given, for a block marked as not run here


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a file, in order."""
    out: list[Block] = []
    lines = path.read_text().splitlines()
    start, fence = None, ""
    for i, line in enumerate(lines):
        if start is None:
            m = re.match(r"^(`{3,})(.*)$", line)
            if m:
                start, fence = i, m.group(1)
            continue
        # A fence closes on a line of at least as many backticks and nothing else (a ```` block
        # may show ``` blocks inside it).
        if re.fullmatch(r"`{3,}", line.strip()) and len(line.strip()) >= len(fence):
            mark = SKIP_MARK.match(lines[start - 1].strip()) if start else None
            out.append(Block(path, start + 1, lines[start][len(fence):].strip(),
                             "\n".join(lines[start + 1:i]) + "\n", mark.group(1) if mark else None))
            start = None
    return out


def commands(path: Path) -> list[str]:
    """The snakemake/termforge/dvc commands of a file's shell (and unlabelled) blocks, in order
    (comments cut, `a && b` and `a; b` split)."""
    out = []
    for block in blocks(path):
        if block.lang not in ("", "bash", "sh", "shell", "console") or block.skip:
            continue
        for line in block.text.splitlines():
            code = line.split(" #", 1)[0].strip()
            for part in re.split(r"\s*(?:&&|;)\s*", code):
                if re.match(rf"^({'|'.join(TOOLS)}) [a-z-]", part) or part in TOOLS:
                    out.append(part)
    return out


def test_every_block_is_run_or_says_why_not():
    """A block of a language the test cannot run, and a block marked as not run, are few and
    each gives its reason."""
    every = [b for doc in DOCS for b in blocks(doc)]
    unknown = [f"{b.doc.name}:{b.line} ```{b.lang}" for b in every if b.lang not in RUN_LANGS and b.lang not in NOT_CODE]
    assert not unknown, f"run these in test_every_python_and_config_block_runs, or list them in NOT_CODE: {unknown}"
    skipped = [b for b in every if b.skip]
    assert len(skipped) <= 3, [f"{b.doc.name}:{b.line}: {b.skip}" for b in skipped]
    assert all(len(b.skip.split()) >= 4 for b in skipped), [b.skip for b in skipped]
    assert any(b.lang == "python" and not b.skip for b in every)  # the Python blocks are run, not skipped


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


@pytest.mark.slow
@pytest.mark.parametrize("doc", [d for d in DOCS if any(b.lang in ("python", "yaml", "json") for b in blocks(d))],
                         ids=lambda p: p.name)
def test_every_python_and_config_block_runs(doc, checkout):
    """Python blocks run as scripts in the checkout (as a reader pastes them, from the repository
    root); YAML blocks are config overlays that validate over config.yaml; JSON blocks parse."""
    import json

    for block in blocks(doc):
        if block.skip or block.lang not in ("python", "yaml", "json"):
            continue
        where = f"{doc.name}:{block.line}"
        if block.lang == "json":
            json.loads(block.text)
            continue
        snippet = checkout / f".docs-block-{doc.stem}-{block.line}.{'py' if block.lang == 'python' else 'yaml'}"
        snippet.write_text(block.text)
        argv = ([sys.executable, str(snippet)] if block.lang == "python"
                else [str(BIN / "termforge"), "check-config", "config.yaml", str(snippet)])
        res = subprocess.run(argv, cwd=checkout, env=_env(checkout), capture_output=True, text=True, timeout=1800)
        assert res.returncode == 0, f"{where}: the {block.lang} block failed:\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
