"""The layers of src/termforge (pyproject.toml's import-linter contracts) and the absence of import
cycles between its modules hold, and each check fails on a tree that breaks it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src)}


def _lint(root: Path, *contracts: str) -> subprocess.CompletedProcess:
    only = [arg for c in contracts for arg in ("--contract", c)]
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", *only, str(root / "pyproject.toml")],
                          cwd=root, env=_env(root / "src"), capture_output=True, text=True, timeout=600)


def _cycles(src: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "import_cycles.py")], cwd=src,
                          env=_env(src), capture_output=True, text=True, timeout=600)


@pytest.fixture()
def tree_copy(tmp_path):
    """pyproject.toml and src/termforge's Python files, to break on purpose."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(ROOT / "src" / "termforge", tmp_path / "src" / "termforge",
                    ignore=lambda d, names: [n for n in names if n == "__pycache__"
                                             or (Path(d, n).is_file() and not n.endswith(".py"))])
    return tmp_path


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n\ndef _broken():\n    {line}\n")


def test_the_layers_contract_holds():
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


def test_no_import_cycle_between_modules():
    res = _cycles(ROOT / "src")
    assert res.returncode == 0, res.stdout
    assert res.stdout.startswith("termforge: 0 import cycle(s)")


@pytest.mark.parametrize("module, line, contract", [
    # A sandbox that asks how its image is built (an import placed inside a function counts too).
    ("runtime/bwrap.py", "from termforge.images import ensure_task_base", "layers"),
    # Library code driving the workflow engine.
    ("grading/verifier.py", "import snakemake", "no-workflow-engines"),
    # Foundation reaching up to a plan-time check.
    ("config.py", "import termforge.plancheck", "layers"),
    # A stage package calling the CLI.
    ("quality/validate.py", "from termforge.cli import main", "layers"),
    # models.base importing a backend again.
    ("models/base.py", "from termforge.models.openai_backend import OpenAIChatModel", "models-registry"),
])
def test_an_upward_import_breaks_the_contract(tree_copy, module, line, contract):
    assert _lint(tree_copy).returncode == 0  # the copy itself is sound
    _append(tree_copy / "src" / "termforge" / module, line)
    res = _lint(tree_copy, contract)
    assert res.returncode != 0 and "0 kept, 1 broken" in res.stdout, res.stdout[-3000:]
    # The report names the import that was added.
    assert module.removesuffix(".py").replace("/", ".") in res.stdout, res.stdout[-3000:]


def test_a_module_in_no_layer_breaks_the_contract(tree_copy):
    """A new top-level module must be given a layer (the contract is exhaustive)."""
    (tree_copy / "src" / "termforge" / "newstage.py").write_text('"""A stage placed nowhere."""\n')
    res = _lint(tree_copy)
    assert res.returncode != 0 and "newstage" in res.stdout, res.stdout[-3000:]


def test_a_cycle_hidden_in_a_function_is_counted(tree_copy):
    src = tree_copy / "src"
    _append(src / "termforge" / "io.py", "from termforge.schemas import read")
    res = _cycles(src)
    assert res.returncode == 1
    assert "termforge: 1 import cycle(s)" in res.stdout and "termforge.io" in res.stdout, res.stdout


def test_every_backend_registers_itself_and_checking_a_spec_loads_none():
    """models.registry knows a constructor for every backend a spec may name, and checking specs
    (every config check does, through termforge.plancheck) imports no backend and no vendor SDK."""
    code = ("import sys, termforge.plancheck, termforge.models.base as base\n"
            "base.check_model_spec({'backend': 'anthropic', 'model': 'm'})\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('openai', 'anthropic', 'torch', 'vllm')"
            " or m.endswith('_backend')), sorted(base.BACKENDS))\n"
            "import termforge.models.registry\n"
            "print(sorted(base.BACKENDS) == sorted(base._BACKEND_OPTIONS))\n")
    res = subprocess.run([sys.executable, "-c", code], env=_env(ROOT / "src"), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["[] []", "True"]


def test_a_sandbox_runtime_builds_no_image(tmp_path):
    """runtime.bwrap's runtime is handed root filesystems: asked to build a task on a base image,
    or to load one, it says that termforge.images.runtimes does that, and builds nothing."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    from termforge.errors import TermforgeError
    from termforge.images.runtimes import BwrapRuntime as ImageRuntime
    from termforge.runtime.bwrap import BwrapRuntime

    task = tmp_path / "task"
    (task / "environment").mkdir(parents=True)
    (task / "task.json").write_text('{"id": "t1", "environment": {"base": "termforge-bookworm"}}')
    (task / "environment" / "setup.sh").write_text("true\n")
    built = BwrapRuntime().build(task, tmp_path / "images")
    assert not built.ok and "builds no base images" in built.reason
    assert not (tmp_path / "images" / "t1").exists()
    with pytest.raises(TermforgeError, match="termforge.images.runtimes"):
        BwrapRuntime().resolve_rootfs({"rootfs": "image"}, "task t1")
    assert ImageRuntime().base_request({"environment": {}})["base"] == "termforge-bookworm"
