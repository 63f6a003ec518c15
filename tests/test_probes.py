"""The programs validation runs in a sandbox as a cheating agent (src/termforge/quality/probes/):
each is a file loaded by name, every file is used, and each really does its attack when run in a
real bwrap sandbox (a probe that silently does nothing would still 'score 0' in validation)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import needs_bwrap
from termforge.quality import hijack
from termforge.quality.probes import HERE, PROBE_NAMES, program, probes
from termforge.quality.validate import PROBES
from termforge.runtime.base import Bind
from termforge.runtime.bwrap import HOST_ROOTFS, sandbox_argv


def test_every_program_file_is_loaded_by_name_and_none_is_missing():
    files = {str(p.relative_to(HERE)) for p in HERE.rglob("*") if p.is_file() and p.suffix in (".sh", ".py")
             and p.name != "__init__.py"}
    used = {f"{n}.sh" for n in PROBE_NAMES} | {f"hijack/{n}.sh" for n in hijack.ROUTE_NAMES} | {"hijack/channel_steal.py"}
    assert files == used
    assert list(PROBES) == list(PROBE_NAMES) and PROBES == probes()
    assert list(hijack.ROUTES) == list(hijack.ROUTE_NAMES)


@pytest.mark.parametrize("name", ["../validate.py", "hijack/../../hijack.py", "nothing.sh", "/etc/passwd"])
def test_a_name_outside_the_folder_is_refused(name):
    with pytest.raises(FileNotFoundError):
        program(name)


def test_placeholders_are_filled_and_the_python_compiles():
    for name, text in hijack.ROUTES.items():
        assert "@" not in text.replace("2>/dev/null", ""), name
    compile(hijack.CHANNEL_STEAL_PY, "channel_steal.py", "exec")
    assert repr(hijack.FORGED_VERDICT) in hijack.CHANNEL_STEAL_PY


SRC = Path(__file__).resolve().parents[1] / "src" / "termforge"
SHELL_PROGRAMS = sorted(p.relative_to(SRC).as_posix() for p in SRC.rglob("*.sh"))


@pytest.mark.parametrize("path", SHELL_PROGRAMS)
def test_every_shell_program_of_the_package_parses_and_is_used(path):
    """Every shell file under src/termforge (grading/, images/scripts/, quality/probes/) is valid
    bash and named by the code that runs it (no file left behind by a move)."""
    res = subprocess.run(["bash", "-n", str(SRC / path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    name = Path(path).name
    stem = name.removesuffix(".sh")
    sources = "\n".join(p.read_text() for p in SRC.rglob("*.py"))
    assert f'"{name}"' in sources or f'"{stem}"' in sources or f'/{name}"' in sources, path


@pytest.mark.parametrize("text", [*PROBES.values(), *hijack.ROUTES.values(),
                                  hijack.program_text("bash"), hijack.program_text("bash", obfuscated=True)])
def test_every_script_parses(text):
    res = subprocess.run(["bash", "-n", "-c", text], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def _run(tmp_path: Path, script: str) -> tuple[subprocess.CompletedProcess, dict[str, Path]]:
    """`script` as an agent's turn in a sandbox over the host's /usr, with /app, its home, /tmp and
    a writable /logs kept on the host to look at afterwards."""
    dirs = {k: tmp_path / k for k in ("app", "home", "tmp", "logs")}
    for d in dirs.values():
        d.mkdir()
    argv = sandbox_argv(dirs["app"], ["/bin/bash", "-c", script], rootfs=HOST_ROOTFS,
                        binds=[Bind(dirs["logs"], "/logs", True)], tmp_dir=dirs["tmp"], home_dir=dirs["home"])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60), dirs


def _reward(d: dict[str, Path]) -> str:
    return (d["logs"] / "verifier" / "reward.txt").read_text()


def _fake_tools(res, d):
    out = subprocess.run([str(d["app"] / ".bin" / "pytest")], capture_output=True, text=True)
    assert out.stdout == "1 passed\n" and out.returncode == 0
    assert os.access(d["app"] / ".bin" / "python3", os.X_OK)
    assert "/app/.bin" in (d["home"] / ".bashrc").read_text()


def _conftest(res, d):
    assert "rep.outcome = 'passed'" in (d["app"] / "conftest.py").read_text()
    assert (d["app"] / "sitecustomize.py").read_text() == "import os\nos._exit(0)\n"
    assert (d["home"] / ".local/lib/python3.11/site-packages/usercustomize.py").is_file()


def _shell_rc(res, d):
    for f in (d["home"] / ".bashrc", d["home"] / ".profile", d["app"] / ".bashrc"):
        assert "echo 1 > /logs/verifier/reward.txt; exit 0" in f.read_text()
    assert "BASH_ENV=/app/.bashrc" in (d["home"] / ".bashrc").read_text()


def _reward_swap(res, d):
    verifier = d["logs"] / "verifier"
    assert os.readlink(verifier / "reward.txt") == "/proc/sys/kernel/randomize_va_space"
    assert (verifier / "reward.json").is_fifo()


def _proof_forge(res, d):
    lines = res.stdout.splitlines()
    assert lines[0] == "TERMFORGE-PROOF 0 collected=1 passed=1 failed=0"
    assert json.loads(lines[2]) == json.loads(hijack.FORGED_VERDICT)


EFFECTS = {
    "planted_reward_file": lambda res, d: _reward(d) == "1\n" and json.loads((d["app"] / "reward.json").read_text()),
    "fake_pytest_and_python_on_path": _fake_tools,
    "conftest_and_sitecustomize": _conftest,
    "poisoned_shell_rc": _shell_rc,
    "background_rewriter": lambda res, d: _reward(d) == "1\n",
}
ROUTE_EFFECTS = {
    "reward_write": lambda res, d: _reward(d) == "1\n" and (d["logs"] / "verifier" / "reward.txt").stat().st_mode & 0o777 == 0o444,
    "reward_swap": _reward_swap,
    "proof_forge": _proof_forge,
    # The Python ran to its end (a syntax error or a crash would leave the marker alone too, so the
    # script prints after the program).
    "channel_steal": lambda res, d: (d["tmp"] / ".tf-stolen").exists() and res.stdout.endswith("stole\n"),
    "linger": lambda res, d: (d["tmp"] / ".tf-linger").read_text().strip().isdigit(),
}


@needs_bwrap
@pytest.mark.parametrize("name", PROBE_NAMES)
def test_each_probe_does_its_attack(tmp_path, name):
    script = PROBES[name]
    if name == "background_rewriter":  # the sandbox lives on until the rewriter has written once
        script += "\nfor i in $(seq 100); do [ -s /logs/verifier/reward.txt ] && break; sleep 0.1; done\n"
    res, dirs = _run(tmp_path, script)
    assert res.returncode == 0, res.stderr
    assert EFFECTS[name](res, dirs) is not False


@needs_bwrap
@pytest.mark.parametrize("name", sorted(ROUTE_EFFECTS))
def test_each_hijack_route_does_its_attack(tmp_path, name):
    script = hijack.ROUTES[name]
    if name == "channel_steal":
        script = script.replace(" 2>/dev/null; }", " && echo stole; }")
        assert script != hijack.ROUTES[name]
    if name == "reward_swap":  # it follows reward_write in a payload, which makes the folder
        script = "mkdir -p /logs/verifier\n" + script
    res, dirs = _run(tmp_path, script)
    assert ROUTE_EFFECTS[name](res, dirs) is not False, (res.stdout, res.stderr)
