"""Final state: `make` in /app/calc builds a working calc from the untouched sources."""

import hashlib
import subprocess
from pathlib import Path

import pytest

CALC_DIR = Path("/app/calc")
SOURCES = {
    "main.c": "93ac9ac26d52fa0d340896e7183e74cf4fb14b499c5128d1747345e85ba04af1",
    "ops.c": "f3ab34f69fb7623194a4f5d76979d13124af8edac59105e1047885bbd4aa7f09",
    "ops.h": "85a0d144c72b17dd347a739ff323715433d93e852ed7d670c73b80efcc79a669",
}


def make(*targets):
    return subprocess.run(["make", "-C", str(CALC_DIR), *targets], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def rebuilt():
    clean = make("clean")
    assert clean.returncode == 0, clean.stderr
    assert not (CALC_DIR / "calc").exists(), "make clean left the program behind"
    build = make()
    assert build.returncode == 0, build.stdout + build.stderr
    return CALC_DIR / "calc"


def test_sources_untouched():
    for name, digest in SOURCES.items():
        assert hashlib.sha256((CALC_DIR / name).read_bytes()).hexdigest() == digest, name


@pytest.mark.parametrize("args, expected", [
    (["add", "2", "3"], "5.0000"),
    (["add", "-7.25", "0.5"], "-6.7500"),
    (["mul", "-1.5", "4"], "-6.0000"),
    (["hyp", "3", "4"], "5.0000"),
    (["hyp", "5", "12"], "13.0000"),
])
def test_calc_results(rebuilt, args, expected):
    res = subprocess.run([str(rebuilt), *args], capture_output=True, text=True, timeout=10)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == expected


def test_unknown_operation_fails(rebuilt):
    res = subprocess.run([str(rebuilt), "pow", "2", "3"], capture_output=True, text=True, timeout=10)
    assert res.returncode == 2
