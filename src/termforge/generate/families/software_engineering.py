"""software_engineering families: fix planted bugs in a vendored package, port a legacy awk tool to
Python with byte-identical output on fuzzed inputs, and plan a monorepo release from its commit log."""

from __future__ import annotations

import hashlib
import json
import random
import sys
import types
from datetime import datetime, timedelta

from termforge.errors import TermforgeError
from termforge.generate.base import (TaskFamily, TaskSpec, bash_script, complexity_level, instruction_frame,
                                    pytest_module)
from termforge.generate.families.scientific_computing import lines_final_test, py_source, python_oracle

BUG_COUNT = {"short": 1, "moderate": 1, "complex": 2, "intricate": 3}

# --------------------------------------------------------------------------------------------------
# vendored_package: a small SemVer library with planted defects


PACKAGE_NAMES = ("verkit", "semverlite", "relver", "pinlib", "vertools", "semkit")
PROJECT_NAMES = ("acme-http", "tinyjson", "fastgrid", "logweave", "pkgstat", "yamlette", "cachebox",
                 "retryer", "qlint", "blobsync", "termpaint", "mdtable", "cronish", "ziplane",
                 "hashring", "sockpool", "dotcfg", "geomath", "imgpipe", "authlet")

INIT_PY = '''\
"""{pkg}: semantic version parsing, precedence and ranges (a small SemVer 2.0.0 subset)."""

from .ranges import InvalidRange, max_satisfying, satisfies
from .version import InvalidVersion, Version, compare, parse, sort_versions

__all__ = ["InvalidRange", "InvalidVersion", "Version", "compare", "max_satisfying", "parse",
           "satisfies", "sort_versions"]
__version__ = "{lib_version}"
'''

VERSION_PY = '''\
"""Parsing and precedence of semantic versions."""

import functools
import re

_PATTERN = re.compile(
    r"v?(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)"
    r"(?:-([0-9A-Za-z-]+(?:\\.[0-9A-Za-z-]+)*))?"
    r"(?:\\+([0-9A-Za-z-]+(?:\\.[0-9A-Za-z-]+)*))?"
)


class InvalidVersion(ValueError):
    """The text is not a semantic version."""


class Version:
    __slots__ = ("major", "minor", "patch", "prerelease", "build")

    def __init__(self, major, minor, patch, prerelease=(), build=()):
        self.major, self.minor, self.patch = major, minor, patch
        self.prerelease = tuple(prerelease)
        self.build = tuple(build)

    def __str__(self):
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self):
        return f"Version({str(self)!r})"


def parse(text):
    if isinstance(text, Version):
        return text
    match = _PATTERN.fullmatch(text.strip())
    if match is None:
        raise InvalidVersion(f"not a semantic version: {text!r}")
    major, minor, patch, pre, build = match.groups()
    return Version(int(major), int(minor), int(patch),
                   pre.split(".") if pre else (), build.split(".") if build else ())


def _sign(a, b):
    return (a > b) - (a < b)


def _compare_identifiers(a, b):
    a_numeric, b_numeric = a.isdigit(), b.isdigit()
    if a_numeric and b_numeric:
        return _sign(int(a), int(b))
    if a_numeric != b_numeric:
        return -1 if a_numeric else 1
    return _sign(a, b)


def _compare_prerelease(a, b):
    if not a or not b:
        return _sign(not a, not b)
    for x, y in zip(a, b):
        order = _compare_identifiers(x, y)
        if order:
            return order
    return _sign(len(a), len(b))


def compare(a, b):
    """-1, 0 or 1 as a has lower, equal or higher precedence than b."""
    va, vb = parse(a), parse(b)
    order = _sign((va.major, va.minor, va.patch), (vb.major, vb.minor, vb.patch))
    if order:
        return order
    return _compare_prerelease(va.prerelease, vb.prerelease)


def sort_versions(items):
    """A new list in ascending precedence; items of equal precedence keep their order."""
    return sorted(items, key=functools.cmp_to_key(compare))
'''

RANGES_PY = '''\
"""Version ranges: alternatives separated by `||`, each a space-separated list of comparators."""

import re

from .version import InvalidVersion, Version, compare, parse

_COMPARATOR = re.compile(r"(>=|<=|>|<|=|\\^|~)?(.+)")


class InvalidRange(ValueError):
    """The text is not a range this module understands."""


def _caret_ceiling(v):
    if v.major:
        return Version(v.major + 1, 0, 0)
    if v.minor:
        return Version(0, v.minor + 1, 0)
    return Version(0, 0, v.patch + 1)


def _tilde_ceiling(v):
    return Version(v.major, v.minor + 1, 0)


_TESTS = {
    "=": lambda order: order == 0,
    ">": lambda order: order > 0,
    ">=": lambda order: order >= 0,
    "<": lambda order: order < 0,
    "<=": lambda order: order <= 0,
}


def _holds(version, op, bound):
    if op == "^":
        return compare(version, bound) >= 0 and compare(version, _caret_ceiling(bound)) < 0
    if op == "~":
        return compare(version, bound) >= 0 and compare(version, _tilde_ceiling(bound)) < 0
    return _TESTS[op](compare(version, bound))


def _alternative(text):
    comparators = []
    for token in text.split():
        match = _COMPARATOR.fullmatch(token)
        try:
            bound = parse(match.group(2))
        except InvalidVersion as exc:
            raise InvalidRange(f"bad comparator {token!r}") from exc
        comparators.append((match.group(1) or "=", bound))
    if not comparators:
        raise InvalidRange(f"empty alternative in range {text!r}")
    return comparators


def satisfies(version, spec):
    """True when the version meets at least one alternative of the range."""
    v = parse(version)
    return any(all(_holds(v, op, bound) for op, bound in _alternative(alt)) for alt in spec.split("||"))


def max_satisfying(versions, spec):
    """The highest-precedence item of versions (returned as given) that satisfies spec, or None."""
    best = None
    for candidate in versions:
        if satisfies(candidate, spec) and (best is None or compare(candidate, best) > 0):
            best = candidate
    return best
'''

README_MD = '''\
# {pkg} {lib_version}

Semantic versions (SemVer 2.0.0) and version ranges, pure Python, no dependencies.

## Precedence

- MAJOR, MINOR and PATCH are compared numerically, in that order.
- When they are equal, a version with a pre-release has lower precedence than the same version
  without one: `1.0.0-rc.1 < 1.0.0`.
- Two pre-releases are compared identifier by identifier (split on `.`), left to right:
  identifiers made only of digits compare numerically; other identifiers compare as ASCII text;
  a numeric identifier has lower precedence than a non-numeric one. When every compared
  identifier is equal, the longer list has higher precedence: `1.0.0-alpha < 1.0.0-alpha.1`.
- Build metadata (after `+`) is ignored: `1.0.0+a` and `1.0.0+b` have equal precedence.

## Ranges

A range is one or more alternatives separated by `||`; an alternative is one or more
comparators separated by spaces, all of which must hold. A comparator is an operator directly
followed by a full version:

- `=V` or a bare `V`: equal precedence; `>V`, `>=V`, `<V`, `<=V`: as written.
- `^V`: at least V and below the next version that changes the leftmost non-zero part of
  MAJOR.MINOR.PATCH: `^1.2.3` means `>=1.2.3 <2.0.0`, `^0.2.3` means `>=0.2.3 <0.3.0` and
  `^0.0.3` means `>=0.0.3 <0.0.4`.
- `~V`: at least V and below the next minor version: `~1.2.3` means `>=1.2.3 <1.3.0`.

Ranges compare by precedence only; pre-releases get no special treatment (so `^1.2.3` admits
`2.0.0-rc.1`, which precedes `2.0.0`).

## API

- `parse(text) -> Version` (an optional leading `v` is accepted; raises `InvalidVersion`)
- `compare(a, b) -> -1 | 0 | 1` (strings or `Version` objects)
- `sort_versions(items) -> list`: ascending precedence, stable for equal precedence
- `satisfies(version, range) -> bool`
- `max_satisfying(versions, range)`: the highest-precedence item that satisfies the range,
  returned as given (the first one among equals), or `None`
'''

# Each planted bug: the file, the correct text and a plausible wrong one. Bugs live on different
# lines, so any subset can be planted at once and undone independently.
BUGS = {
    "numeric_identifiers_as_text": ("version.py", "        return _sign(int(a), int(b))\n",
                                    "        return _sign(a, b)\n"),
    "numeric_identifier_rank": ("version.py", "        return -1 if a_numeric else 1\n",
                                "        return 1 if a_numeric else -1\n"),
    "release_below_prerelease": ("version.py", "        return _sign(not a, not b)\n",
                                 "        return _sign(bool(a), bool(b))\n"),
    "prefix_prerelease_equal": ("version.py", "            return order\n    return _sign(len(a), len(b))\n",
                                "            return order\n    return 0\n"),
    "core_compared_as_text": (
        "version.py",
        "    order = _sign((va.major, va.minor, va.patch), (vb.major, vb.minor, vb.patch))\n",
        '    order = _sign(f"{va.major}.{va.minor}.{va.patch}", f"{vb.major}.{vb.minor}.{vb.patch}")\n'),
    "build_metadata_counts": (
        "version.py", "    return _compare_prerelease(va.prerelease, vb.prerelease)\n",
        "    return _compare_prerelease(va.prerelease, vb.prerelease) or _sign(va.build, vb.build)\n"),
    "caret_zero_major": ("ranges.py", "        return Version(0, v.minor + 1, 0)\n",
                         "        return Version(1, 0, 0)\n"),
    "caret_zero_minor": ("ranges.py", "    return Version(0, 0, v.patch + 1)\n",
                         "    return Version(0, 1, 0)\n"),
    "tilde_next_major": ("ranges.py", "def _tilde_ceiling(v):\n    return Version(v.major, v.minor + 1, 0)\n",
                         "def _tilde_ceiling(v):\n    return Version(v.major + 1, 0, 0)\n"),
    "lte_exclusive": ("ranges.py", '    "<=": lambda order: order <= 0,\n',
                      '    "<=": lambda order: order < 0,\n'),
}


def package_files(pkg: str, lib_version: str, planted: list[str]) -> dict[str, str]:
    files = {"__init__.py": INIT_PY.format(pkg=pkg, lib_version=lib_version), "version.py": VERSION_PY,
             "ranges.py": RANGES_PY, "README.md": README_MD.format(pkg=pkg, lib_version=lib_version)}
    for bug in planted:
        name, good, bad = BUGS[bug]
        if files[name].count(good) != 1:
            raise TermforgeError(f"vendored_semver_fix: bug {bug} does not match exactly one line of {name}")
        files[name] = files[name].replace(good, bad)
    # The oracle undoes each bug by replacing its wrong text, which must therefore be unambiguous.
    for bug in planted:
        name, _, bad = BUGS[bug]
        if files[name].count(bad) != 1:
            raise TermforgeError(f"vendored_semver_fix: planted bug {bug} is ambiguous in {name}")
    return files


def load_package(files: dict[str, str]) -> types.ModuleType:
    """Import the generated package from memory: the answer key comes from running the very code
    that is shipped (fixed) to the agent, not from a second implementation that could drift."""
    root = "_termforge_vendored_probe"
    try:
        pkg = types.ModuleType(root)
        pkg.__path__ = []
        pkg.__package__ = root
        sys.modules[root] = pkg
        for sub in ("version", "ranges"):
            mod = types.ModuleType(f"{root}.{sub}")
            mod.__package__ = root
            sys.modules[mod.__name__] = mod
            exec(compile(files[f"{sub}.py"], f"<{sub}.py>", "exec"), mod.__dict__)
            setattr(pkg, sub, mod)
        exec(compile(files["__init__.py"], "<__init__.py>", "exec"), pkg.__dict__)
        return pkg
    finally:
        for name in [n for n in sys.modules if n == root or n.startswith(root + ".")]:
            del sys.modules[name]


class _VersionMaker:
    """Random versions and ranges dense in the places precedence rules are easy to get wrong."""

    TAGS = ("alpha", "beta", "rc", "dev", "pre", "x-1")

    def __init__(self, rng: random.Random):
        self.rng = rng

    def number(self) -> int:
        return self.rng.choice((0, 0, 1, 1, 2, 3, 4, 9, 10, 11, 12, 20))

    def prerelease(self) -> str:
        ids = []
        for _ in range(self.rng.randint(1, 3)):
            ids.append(str(self.number()) if self.rng.random() < 0.45 else self.rng.choice(self.TAGS))
        return ".".join(ids)

    def version(self, core: tuple[int, int, int] | None = None) -> str:
        if core is None and self.rng.random() < 0.12:
            core = (0, 0, self.number())
        major, minor, patch = core or (self.number(), self.number(), self.number())
        text = f"{major}.{minor}.{patch}"
        if self.rng.random() < 0.35:
            text += "-" + self.prerelease()
        if self.rng.random() < 0.15:
            text += "+" + self.rng.choice(("build.7", "sha.5114f85", "001", "exp.sha.5114f85", "20130313144700"))
        return text

    def near(self, text: str) -> str:
        """A version sharing the core of text, so only pre-release and build decide."""
        core_text, _, rest = text.split("+")[0].partition("-")
        if rest and self.rng.random() < 0.35:
            # A pre-release list that is a prefix of the other (alpha vs alpha.1) decides by length.
            ids = rest.split(".")
            ids = ids[:-1] if len(ids) > 1 and self.rng.random() < 0.5 else ids + [str(self.number())]
            return f"{core_text}-{'.'.join(ids)}"
        return self.version(tuple(int(x) for x in core_text.split(".")))

    def comparator(self, pool: list[str]) -> str:
        op = self.rng.choice(("^", "^", "~", "~", ">=", ">", "<", "<=", "<=", "=", ""))
        bound = self.rng.choice(pool) if pool and self.rng.random() < 0.7 else self.version()
        if op in ("^", "~") and self.rng.random() < 0.5:
            bound = f"0.{self.number()}.{self.number()}" if self.rng.random() < 0.6 else f"0.0.{self.number()}"
        return op + bound

    def spec(self, pool: list[str]) -> str:
        shape = self.rng.random()
        if shape < 0.5:
            return self.comparator(pool)
        if shape < 0.8:
            return f"{self.comparator(pool)} {self.comparator(pool)}"
        return f"{self.comparator(pool)} || {self.comparator(pool)}"

    def pool(self, size: int) -> list[str]:
        out: list[str] = []
        while len(out) < size:
            v = self.version() if not out or self.rng.random() < 0.6 else self.near(self.rng.choice(out))
            if v not in out:
                out.append(v)
        return out


def _probe(lib, cases: dict) -> dict:
    return {
        "compare": [lib.compare(a, b) for a, b in cases["compare"]],
        "satisfies": [lib.satisfies(v, r) for v, r in cases["satisfies"]],
        "max_satisfying": [lib.max_satisfying(vs, r) for vs, r in cases["max_satisfying"]],
        "sort_versions": [lib.sort_versions(vs) for vs in cases["sort_versions"]],
    }


class VendoredSemverFix(TaskFamily):
    """A resolver picks wrong versions; the planted defects are in its vendored SemVer library."""

    name = "vendored_semver_fix"
    method = (
        ('Reproduce first: run the resolver and diff it against known_good.txt, then shrink each disagreeing '
         'requirement to the smallest compare() or satisfies() call that contradicts the README. Turn every '
         'README rule into a one-line check in a scratch script (numeric vs text pre-release identifiers, '
         'release vs pre-release, prefix pre-release lists, build metadata, multi-digit core numbers, caret on '
         '0.x and 0.0.x, tilde, inclusive bounds) and run them all, because more than one rule can be broken '
         'and the known-good list need not show every one. Fix the faulty expressions without changing '
         'signatures, then rerun the checks and the resolver.', None),
    )
    domains = ("software_engineering",)
    verifier_kinds = ("exact_text",)
    fixture_kinds = ("vendored_package",)
    output_files = False
    summary = "find and fix planted precedence/range bugs in a vendored pure-Python SemVer package"
    skill_types = ("testing",)
    skills = ("check invariants with generated inputs",)
    languages = ("python",)
    command_complexities = ("bash_code",)

    def _witness(self, maker: _VersionMaker, good, bad) -> tuple[list[str], str] | None:
        """A (versions, range) pair on which the buggy library picks differently."""
        for _ in range(3000):
            pool = maker.pool(maker.rng.randint(4, 9))
            spec = maker.spec(pool)
            if good.max_satisfying(pool, spec) != bad.max_satisfying(pool, spec):
                return pool, spec
        return None

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        complexity = sig.get("task_complexity", "moderate")
        pkg = rng.choice(PACKAGE_NAMES)
        lib_version = f"{rng.randint(0, 2)}.{rng.randint(1, 9)}.{rng.randint(0, 9)}"
        planted = sorted(rng.sample(sorted(BUGS), BUG_COUNT.get(complexity, 1)))
        good_files = package_files(pkg, lib_version, [])
        bad_files = package_files(pkg, lib_version, planted)
        good, bad = load_package(good_files), load_package(bad_files)
        maker = _VersionMaker(rng)

        projects = rng.sample(PROJECT_NAMES, len(PROJECT_NAMES))
        available: dict[str, list[str]] = {}
        requirements: list[tuple[str, str]] = []
        witnessed: list[str] = []
        # One requirement per planted bug that exposes that bug on its own, so each defect has a
        # visible symptom; the rest are ordinary traffic.
        witnesses = {}
        for bug in planted:
            alone = load_package(package_files(pkg, lib_version, [bug]))
            found = self._witness(maker, good, alone)
            if found is None:
                raise TermforgeError(f"{self.name}: found no resolver input exposing bug {bug}")
            witnesses[bug] = (alone, found)
            name = projects.pop()
            available[name], spec = found
            requirements.append((name, spec))
            witnessed.append(name)
        for _ in range({"short": 3, "moderate": 5, "complex": 7, "intricate": 9}.get(complexity, 5)):
            name = projects.pop()
            available[name] = maker.pool(rng.randint(4, 10))
            requirements.append((name, maker.spec(available[name])))
        rng.shuffle(requirements)

        def resolve(lib) -> list[str]:
            lines = []
            for name, spec in requirements:
                best = lib.max_satisfying(available[name], spec)
                lines.append(f"{name} {best if best is not None else 'NONE'}")
            return lines

        expected_resolution = resolve(good)
        if expected_resolution == resolve(bad):
            raise TermforgeError(f"{self.name}: the planted bugs {planted} cancel out on the resolver data")
        known_good = [line for line in expected_resolution if line.split()[0] in witnessed]
        for line in expected_resolution:
            if line not in known_good and len(known_good) < len(witnessed) + 2:
                known_good.append(line)
        known_good.sort()

        cases = self._probe_cases(maker, good, witnesses)
        expected_probe = _probe(good, cases)
        if expected_probe == _probe(bad, cases):
            raise TermforgeError(f"{self.name}: the probe cases do not expose the planted bugs {planted}")

        resolver = RESOLVER_PY.format(pkg=pkg)
        requirements_txt = "# project range\n" + "".join(f"{n} {s}\n" for n, s in requirements)
        fixtures = {f"vendor/{pkg}/{name}": text.encode() for name, text in bad_files.items()}
        fixtures.update({
            "resolve.py": resolver.encode(),
            "data/available.json": (json.dumps(available, indent=2, sort_keys=True) + "\n").encode(),
            "data/requirements.txt": requirements_txt.encode(),
            "data/known_good.txt": ("".join(line + "\n" for line in known_good)).encode(),
        })
        resolver_sha = hashlib.sha256(resolver.encode()).hexdigest()
        lib_dir = f"/app/vendor/{pkg}"

        instruction = instruction_frame(
            sig, "Fix the vendored version library",
            f"""
            `/app/resolve.py` prints, for every requirement in `/app/data/requirements.txt`, the
            highest version listed in `/app/data/available.json` that satisfies the requirement's
            range (or `NONE`). It relies on the vendored pure-Python package `{lib_dir}/`, whose
            `README.md` documents its precedence and range rules. Some picks are wrong:
            `/app/data/known_good.txt` has the correct picks for a few projects, and the current
            output disagrees with it. The resolver script is fine; the defects (there may be more
            than one) are in the vendored package.

            Fix the package in place so that every public function behaves as its README says.
            Keep its API and module layout, and do not modify `/app/resolve.py` or the data files.
            """,
            [f"Corrected source files under `{lib_dir}/`; `python3 /app/resolve.py` then prints the "
             "right pick for every requirement."],
        )
        test_initial = pytest_module(f'''
            import os
            import subprocess


            def test_resolver_runs_on_vendored_package():
                res = subprocess.run(["/usr/bin/python3", "-I", "-B", "/app/resolve.py"],
                                     capture_output=True, text=True, timeout=60)
                assert res.returncode == 0, res.stderr
                assert len(res.stdout.splitlines()) == {len(requirements)}


            def test_package_files_present():
                for name in ("__init__.py", "version.py", "ranges.py", "README.md"):
                    assert os.path.isfile(os.path.join("{lib_dir}", name))
        ''')
        test_final = pytest_module(f'''
            import hashlib
            import json
            import subprocess

            import pytest

            CASES = {cases!r}
            EXPECTED = {expected_probe!r}
            RESOLUTION = {expected_resolution!r}
            PROBE = """
            import json, sys
            sys.path.insert(0, "/app/vendor")
            import {pkg} as lib
            cases = json.load(sys.stdin)
            print(json.dumps({{
                "compare": [lib.compare(a, b) for a, b in cases["compare"]],
                "satisfies": [lib.satisfies(v, r) for v, r in cases["satisfies"]],
                "max_satisfying": [lib.max_satisfying(vs, r) for vs, r in cases["max_satisfying"]],
                "sort_versions": [lib.sort_versions(vs) for vs in cases["sort_versions"]],
            }}))
            """


            @pytest.fixture(scope="module")
            def observed():
                res = subprocess.run(["/usr/bin/python3", "-I", "-B", "-c", PROBE], input=json.dumps(CASES),
                                     capture_output=True, text=True, timeout=60)
                assert res.returncode == 0, res.stderr[-3000:]
                return json.loads(res.stdout)


            @pytest.mark.parametrize("function", sorted(EXPECTED))
            def test_library_behaviour(observed, function):
                wrong = [(case, want, got) for case, want, got
                         in zip(CASES[function], EXPECTED[function], observed[function]) if want != got]
                assert not wrong, f"{{function}}: {{len(wrong)}} wrong, e.g. {{wrong[:3]}}"


            def test_resolver_output():
                res = subprocess.run(["/usr/bin/python3", "-I", "-B", "/app/resolve.py"],
                                     capture_output=True, text=True, timeout=60)
                assert res.returncode == 0, res.stderr[-3000:]
                assert res.stdout.splitlines() == RESOLUTION


            def test_resolver_untouched():
                with open("/app/resolve.py", "rb") as fh:
                    assert hashlib.sha256(fh.read()).hexdigest() == {resolver_sha!r}
        ''')
        patches = [[f"{lib_dir}/{BUGS[b][0]}", BUGS[b][2], BUGS[b][1]] for b in planted]
        solve = bash_script(f"""
            python3 - <<'PY'
            import json

            for path, wrong, right in json.loads({json.dumps(json.dumps(patches))}):
                with open(path) as fh:
                    text = fh.read()
                if text.count(wrong) != 1:
                    raise SystemExit(f"{{path}}: expected the faulty line once")
                with open(path, "w") as fh:
                    fh.write(text.replace(wrong, right))
            PY
            python3 /app/resolve.py
        """)
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("cd /tmp/env/fixtures && cp -r vendor data resolve.py /app/"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={
                "given": {"package": lib_dir, "resolver": "/app/resolve.py"},
                "planted_bugs": planted,
                "faulty_lines": [{"file": f"{lib_dir}/{BUGS[b][0]}", "wrong": BUGS[b][2].strip(),
                                  "right": BUGS[b][1].strip()} for b in planted],
                "expected_resolution": expected_resolution,
            },
            verifier_kind="exact_text",
            fixture_kind="vendored_package",
            fixtures=fixtures,
            output_paths=[],
        )

    @staticmethod
    def _add_exposing_case(maker: _VersionMaker, good, bad, pool: list[str], witness, cases: dict) -> bool:
        """Append one compare() or satisfies() case on which bad disagrees with good: a fresh one
        if a short random search finds it, else one taken from the resolver witness."""
        for _ in range(400):
            a = maker.rng.choice(pool)
            b = maker.near(a) if maker.rng.random() < 0.6 else maker.version()
            if good.compare(a, b) != bad.compare(a, b):
                cases["compare"].append([a, b])
                return True
            spec = maker.spec([a, b])
            if good.satisfies(a, spec) != bad.satisfies(a, spec):
                cases["satisfies"].append([a, spec])
                return True
        versions, spec = witness
        for v in versions:
            if good.satisfies(v, spec) != bad.satisfies(v, spec):
                cases["satisfies"].append([v, spec])
                return True
        for a in versions:
            for b in versions:
                if good.compare(a, b) != bad.compare(a, b):
                    cases["compare"].append([a, b])
                    return True
        return False

    @staticmethod
    def _probe_cases(maker: _VersionMaker, good, witnesses: dict) -> dict:
        """Hidden behaviour checks; each planted bug is guaranteed at least one case it gets wrong."""
        pool = maker.pool(24)
        cases: dict[str, list] = {"compare": [], "satisfies": [], "max_satisfying": [], "sort_versions": []}
        for _ in range(40):
            a = maker.rng.choice(pool)
            b = maker.near(a) if maker.rng.random() < 0.5 else maker.rng.choice(pool)
            cases["compare"].append([a, b])
        for _ in range(40):
            cases["satisfies"].append([maker.rng.choice(pool), maker.spec(pool)])
        for _ in range(10):
            sub = maker.pool(maker.rng.randint(3, 8))
            cases["max_satisfying"].append([sub, maker.spec(sub)])
        for _ in range(4):
            cases["sort_versions"].append(maker.pool(maker.rng.randint(5, 9)))
        for bug, (alone, witness) in witnesses.items():
            if not VendoredSemverFix._add_exposing_case(maker, good, alone, pool, witness, cases):
                raise TermforgeError(f"vendored_semver_fix: no probe case exposes bug {bug}")
        return cases


RESOLVER_PY = '''\
#!/usr/bin/env python3
"""Pick, for every requirement, the highest available version that satisfies its range."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "vendor"))

import {pkg}  # noqa: E402


def main():
    with open("/app/data/available.json") as fh:
        available = json.load(fh)
    with open("/app/data/requirements.txt") as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            project, spec = line.split(None, 1)
            best = {pkg}.max_satisfying(available.get(project, []), spec)
            print(project, best if best is not None else "NONE")


if __name__ == "__main__":
    main()
'''


# --------------------------------------------------------------------------------------------------
# fuzz_equivalence: port a legacy awk formatter to Python


FEATURE_P = {"short": 0.2, "moderate": 0.4, "complex": 0.6, "intricate": 0.8}
FUZZ_LINES = {"short": 300, "moderate": 500, "complex": 800, "intricate": 1000}
INVALID_TOKENS = ("invalid", "ERR", "?", "n/a", "bad-input")


def _awk_validate(q: dict, regex: str) -> list[str]:
    """The numeric test on the whole record ($0) or, more leniently, on its first field ($1)."""
    field = "$1" if q["first_field"] else "$0"
    return [f"    if ({field} !~ /{regex}/) {{ print {_awk_str(q['invalid'])}; next }}", f"    v = {field} + 0"]


def _python_validate(q: dict) -> str:
    # awk's default field splitting drops leading and trailing blanks and splits on runs of them;
    # on printable ASCII that is exactly str.split().
    token = ("    fields = line.split()\n    token = fields[0] if fields else \"\"\n" if q["first_field"]
             else "    token = line\n")
    return (token + "    if not VALID.fullmatch(token):\n"
            f"        return {q['invalid']!r}\n"
            "    v = float(token)\n")


def _awk_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def humansize_params(rng: random.Random, p: float) -> dict:
    base = rng.choice((1000, 1024))
    if base == 1000:
        units = ["B", "kB", "MB", "GB", "TB", "PB", "EB"]
    else:
        units = rng.choice((["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"], ["B", "K", "M", "G", "T", "P", "E"]))
    decimals = rng.choice((0, 1, 1, 2))
    return {
        "base": base, "units": units, "decimals": decimals,
        "promote": rng.choice(("0.9", "0.95")) if rng.random() < p else "1",
        "trim": decimals > 0 and rng.random() < p,
        "sep": rng.choice((" ", "")),
        "negatives": rng.random() < p,
        "invalid": rng.choice(INVALID_TOKENS),
        "first_field": rng.random() < p,
        "max_digits": 18,
    }


def humansize_awk(tool: str, q: dict) -> str:
    regex = "^-?[0-9]+$" if q["negatives"] else "^[0-9]+$"
    lines = [
        "#!/usr/bin/awk -f",
        f"# {tool}: byte counts -> human-readable sizes, one output line per input line.",
        "BEGIN {",
        f"    base = {q['base']}",
        f"    limit = {q['base']} * {q['promote']}",
        f"    nunits = split({_awk_str(' '.join(q['units']))}, unit, \" \")",
        "}",
        "{",
        *_awk_validate(q, regex),
        '    sign = ""',
    ]
    if q["negatives"]:
        lines.append('    if (v < 0) { sign = "-"; v = -v }')
    lines += [
        "    i = 1",
        "    while (v >= limit && i < nunits) { v = v / base; i++ }",
        "    if (i == 1) {",
        '        out = sprintf("%d", v)',
        "    } else {",
        f'        out = sprintf("%.{q["decimals"]}f", v)',
    ]
    if q["trim"]:
        lines += ['        sub(/0+$/, "", out)', '        sub(/\\.$/, "", out)']
    lines += ["    }", f"    print sign out {_awk_str(q['sep'])} unit[i]", "}"]
    return "\n".join(lines) + "\n"


def humansize_python(q: dict) -> str:
    """The reference: the same double-precision steps as the awk script, line for line."""
    trim = ('        out = re.sub(r"0+$", "", out)\n        out = re.sub(r"\\.$", "", out)\n'
            if q["trim"] else "")
    negative = ('    if v < 0:\n        sign = "-"\n        v = -v\n' if q["negatives"] else "")
    return (
        f"VALID = re.compile(r\"{'-?' if q['negatives'] else ''}[0-9]+\")\n"
        f"UNITS = {q['units']!r}\n"
        f"BASE = {q['base']}\n"
        f"LIMIT = {q['base']} * {q['promote']}\n\n\n"
        "def convert(line):\n"
        f"{_python_validate(q)}"
        '    sign = ""\n'
        f"{negative}"
        "    i = 0\n"
        "    while v >= LIMIT and i < len(UNITS) - 1:\n"
        "        v = v / BASE\n"
        "        i += 1\n"
        "    if i == 0:\n"
        '        out = "%d" % v\n'
        "    else:\n"
        f'        out = "%.{q["decimals"]}f" % v\n'
        f"{trim}"
        f"    return sign + out + {q['sep']!r} + UNITS[i]\n"
    )


def duration_params(rng: random.Random, p: float) -> dict:
    days = rng.random() < 0.7
    units = ([86400] if days else []) + [3600, 60, 1]
    style = rng.choice(("compact", "spaced", "words")) if rng.random() < p else rng.choice(("compact", "spaced"))
    short = (["d"] if days else []) + ["h", "m", "s"]
    if style == "words":
        one = (["day"] if days else []) + ["hour", "minute", "second"]
        many = [w + "s" for w in one]
        glue, sep, zero = " ", rng.choice((", ", " ")), rng.choice(("0 seconds", "now"))
    else:
        one = many = short
        glue, sep, zero = "", ("" if style == "compact" else " "), rng.choice(("0s", "now"))
    negative = rng.choice(("minus", "ago")) if rng.random() < p else "invalid"
    return {"sizes": units, "one": one, "many": many, "glue": glue, "sep": sep, "zero": zero,
            "max_parts": rng.randint(1 if p > 0.5 else 2, len(units)), "negative": negative,
            "invalid": rng.choice(INVALID_TOKENS), "first_field": rng.random() < p, "max_digits": 12}


def duration_awk(tool: str, q: dict) -> str:
    regex = "^[0-9]+$" if q["negative"] == "invalid" else "^-?[0-9]+$"
    lines = [
        "#!/usr/bin/awk -f",
        f"# {tool}: seconds -> a readable duration, one output line per input line.",
        "BEGIN {",
        f"    nunits = split({_awk_str(' '.join(map(str, q['sizes'])))}, size, \" \")",
        f"    split({_awk_str(' '.join(q['one']))}, one, \" \")",
        f"    split({_awk_str(' '.join(q['many']))}, many, \" \")",
        f"    glue = {_awk_str(q['glue'])}",
        f"    sep = {_awk_str(q['sep'])}",
        f"    maxparts = {q['max_parts']}",
        "}",
        "{",
        *_awk_validate(q, regex),
        "    neg = 0",
        "    if (v < 0) { neg = 1; v = -v }",
        f"    if (v == 0) {{ print {_awk_str(q['zero'])}; next }}",
        '    out = ""',
        "    shown = 0",
        "    for (k = 1; k <= nunits && shown < maxparts; k++) {",
        "        q = int(v / size[k])",
        "        v = v - q * size[k]",
        "        if (q > 0) {",
        '            part = sprintf("%d", q) glue (q == 1 ? one[k] : many[k])',
        '            out = (shown ? out sep : "") part',
        "            shown++",
        "        }",
        "    }",
    ]
    if q["negative"] == "minus":
        lines.append('    if (neg) out = "-" out')
    elif q["negative"] == "ago":
        lines.append('    if (neg) out = out " ago"')
    lines += ["    print out", "}"]
    return "\n".join(lines) + "\n"


def duration_python(q: dict) -> str:
    negative = {"minus": '    if neg:\n        out = "-" + out\n',
                "ago": '    if neg:\n        out = out + " ago"\n'}.get(q["negative"], "")
    return (
        f"VALID = re.compile(r\"{'' if q['negative'] == 'invalid' else '-?'}[0-9]+\")\n"
        f"SIZES = {q['sizes']!r}\n"
        f"ONE = {q['one']!r}\n"
        f"MANY = {q['many']!r}\n\n\n"
        "def convert(line):\n"
        f"{_python_validate(q)}"
        "    neg = v < 0\n"
        "    if neg:\n"
        "        v = -v\n"
        "    if v == 0:\n"
        f"        return {q['zero']!r}\n"
        "    parts = []\n"
        "    for size, one, many in zip(SIZES, ONE, MANY):\n"
        f"        if len(parts) >= {q['max_parts']}:\n"
        "            break\n"
        "        count = int(v / size)\n"
        "        v = v - count * size\n"
        "        if count > 0:\n"
        f"            parts.append(\"%d\" % count + {q['glue']!r} + (one if count == 1 else many))\n"
        f"    out = {q['sep']!r}.join(parts)\n"
        f"{negative}"
        "    return out\n"
    )


TOOLS = {
    "humansize": (humansize_params, humansize_awk, humansize_python,
                  "byte counts into human-readable sizes", "whole numbers of bytes"),
    "fmtduration": (duration_params, duration_awk, duration_python,
                    "second counts into readable durations", "whole numbers of seconds"),
}

# Input generation lives in the tests (fixed seed), shared by the initial-state self-check (the
# legacy script agrees with the reference) and the final grading of the port.
FUZZ_INPUTS = '''
def special_values():
    values = ["", " ", "-", "+5", " 7", "7 ", "  42  ", "12 34", "5 x", "x 5", "1.5", "12a", "0x1f", "--3",
              "1e3", "00", "007", "-0", "0", "1,024", "NaN", "inf"]
    for anchor in ANCHORS:
        for delta in (-2, -1, 0, 1, 2):
            if anchor + delta >= 0:
                values.append(str(anchor + delta))
                values.append("-" + str(anchor + delta))
    return values


def random_value(rng):
    roll = rng.random()
    if roll < 0.08:
        return rng.choice(["", "-", "+" + str(rng.randint(0, 999)), str(rng.randint(0, 99)) + rng.choice("ab .,x"),
                           " " + str(rng.randint(0, 9999)), "-" * 2 + str(rng.randint(0, 9))])
    digits = rng.randint(1, MAX_DIGITS)
    value = rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10 ** digits - 1)
    if roll < 0.25:
        value = max(0, rng.choice(ANCHORS) + rng.randint(-3, 3))
    text = str(value)
    if rng.random() < 0.05:
        text = "0" * rng.randint(1, 3) + text
    if rng.random() < 0.15:
        text = "-" + text
    if rng.random() < 0.06:
        text = rng.choice([" ", "  "]) + text if rng.random() < 0.5 else text + rng.choice([" ", " x", " 12", "  ok"])
    return text


def fuzz_batches():
    rng = random.Random(SEED)
    return [special_values()] + [[random_value(rng) for _ in range(BATCH)] for _ in range(BATCHES)]


def run_lines(argv, lines):
    feed = "".join(line + "\\n" for line in lines)
    res = subprocess.run(argv, input=feed.encode(), capture_output=True, timeout=120)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    out = res.stdout.decode(errors="replace")
    assert out.endswith("\\n"), "output must end with a newline"
    return out[:-1].split("\\n")


def compare_batch(argv, lines):
    got = run_lines(argv, lines)
    assert len(got) == len(lines), f"{len(got)} output lines for {len(lines)} input lines"
    wrong = [(line, convert(line), out) for line, out in zip(lines, got) if convert(line) != out]
    assert not wrong, f"{len(wrong)} of {len(lines)} lines differ (input, expected, got): {wrong[:5]}"
'''


def _anchors(tool: str, q: dict) -> list[int]:
    if tool == "humansize":
        out = []
        limit_fraction = float(q["promote"])
        for k in range(1, len(q["units"])):
            power = q["base"] ** k
            out += [power, int(power * limit_fraction), int(power * (1 - 0.5 * 10 ** -q["decimals"] / q["base"]))]
        return sorted(set(v for v in out if len(str(v)) <= q["max_digits"]))
    sizes = q["sizes"]
    out = [s for s in sizes] + [sizes[0] * 2, sizes[0] + sizes[-1], sum(sizes), 90061, 3599 * 24]
    return sorted(set(out))


class LegacyAwkPort(TaskFamily):
    """Port a legacy awk formatter to Python; graded against a reference on fuzzed inputs."""

    name = "legacy_awk_port"
    method = (
        ('Read the awk script line by line and mirror its semantics, not its intent: awk numbers are doubles, '
         'so parse with float() and divide in floating point in the same order; printf-style formatting (%d, '
         "%.Nf) in Python rounds exactly like awk's; the regex decides what counts as malformed before any "
         'conversion; sub() trims only what its pattern matches; read lines by splitting on newline only. Then '
         'build a differential test: generate many inputs around unit boundaries, rounding carries (values '
         'just below a power of the base), signs, zero, leading zeros and junk, run both programs and diff '
         'until there is no difference.', None),
    )
    domains = ("software_engineering",)
    verifier_kinds = ("fuzz_equivalence",)
    fixture_kinds = ("text_only",)
    summary = "port a legacy awk formatter to Python with byte-identical output on fuzzed inputs"
    skill_types = ("refactoring",)
    skills = ("keep behaviour identical while restructuring code",)
    languages = ("python", "awk")
    command_complexities = ("bash_code",)

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        complexity = sig.get("task_complexity", "moderate")
        p = FEATURE_P.get(complexity, 0.4)
        tool = rng.choice(sorted(TOOLS))
        make_params, make_awk, make_python, what, inputs = TOOLS[tool]
        q = make_params(rng, p)
        awk_src = make_awk(tool, q)
        reference = make_python(q)
        anchors = _anchors(tool, q)
        seed = rng.randrange(1, 2**31)
        batches = 3
        batch = FUZZ_LINES.get(complexity, 500) // batches
        legacy = f"/app/legacy/{tool}.awk"
        port = f"/app/{tool}.py"
        header = (
            "import random\nimport re\nimport subprocess\n\n"
            f"SEED = {seed}\nBATCH = {batch}\nBATCHES = {batches}\nMAX_DIGITS = {q['max_digits']}\n"
            f"ANCHORS = {anchors!r}\n"
        )
        shared = header + "\n" + reference + "\n" + FUZZ_INPUTS
        edge_ns: dict = {}
        exec(compile(shared, "<fuzz>", "exec"), edge_ns)
        numeric = [v for v in edge_ns["special_values"]() if v.lstrip("-").isdigit()]
        edges = [[v, edge_ns["convert"](v)] for v in dict.fromkeys(numeric[:12])]

        instruction = instruction_frame(
            sig, f"Port the legacy `{tool}` awk script to Python",
            f"""
            `{legacy}` turns {what}; it is run as `awk -f {legacy} < input.txt` and prints one
            line per input line. We are retiring awk from this pipeline. Write `{port}`, a
            standalone Python 3 program run as `python3 {port} < input.txt`, whose stdout is
            byte-identical to the awk script's for every input: every line of the output must
            match, including malformed lines, spaces, signs, leading zeros, unit boundaries and rounding.
            Inputs are lines of printable ASCII; numeric lines have at most {q['max_digits']}
            digits ({inputs}).

            Use only the Python standard library and do not start other programs (no `subprocess`,
            `os.system`, `os.popen`, `os.exec*`, `os.spawn*` or `ctypes`). The port is graded
            against the legacy behaviour on many generated inputs.
            """,
            [f"`{port}`: reads stdin, writes stdout, behaves exactly like `{legacy}`."],
        )
        test_initial = pytest_module(
            shared + f'''

import os


def test_legacy_script_matches_reference():
    for lines in fuzz_batches()[:2]:
        compare_batch(["awk", "-f", "{legacy}"], lines)


def test_port_not_written_yet():
    assert not os.path.exists("{port}")
''')
        test_final = pytest_module(
            shared + f'''

import pytest

FORBIDDEN = re.compile(r"subprocess|os\\.system|os\\.popen|os\\.exec|os\\.spawn|posix_spawn|ctypes|\\bpty\\b")


def test_port_is_pure_python():
    with open("{port}") as fh:
        source = fh.read()
    assert not FORBIDDEN.search(source), "the port must not start other programs"


@pytest.mark.parametrize("index", range(BATCHES + 1))
def test_port_matches_reference(index):
    compare_batch(["/usr/bin/python3", "{port}"], fuzz_batches()[index])
''')
        program = ("#!/usr/bin/env python3\nimport re\nimport sys\n\n" + reference
                   + "\n\ndef main():\n    data = sys.stdin.read()\n    lines = data.split(\"\\n\")\n"
                   + "    if data.endswith(\"\\n\"):\n        lines.pop()\n"
                   + "    sys.stdout.write(\"\".join(convert(line) + \"\\n\" for line in lines))\n\n\n"
                   + "if __name__ == \"__main__\":\n    main()\n")
        # After writing the port the oracle diffs it against the legacy script, as an agent would.
        solve = bash_script(f"""
            cat > {port} <<'PY'
            {{program}}PY
            {{ seq 0 3000; seq -50 7 60; seq 1 997 999999; echo; echo 12x; echo -; }} > /tmp/port-check.txt
            awk -f {legacy} < /tmp/port-check.txt > /tmp/port-legacy.out
            python3 {port} < /tmp/port-check.txt > /tmp/port-new.out
            cmp /tmp/port-legacy.out /tmp/port-new.out
        """).replace("{program}", program)
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script(f"mkdir -p /app/legacy && cp /tmp/env/fixtures/{tool}.awk {legacy}"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={
                # The legacy script shows every parameter to the agent, so they count as given.
                "given": {"legacy_script": legacy, "port": port, "legacy_parameters": q},
                "fuzz_seed": seed,
                "edge_expectations": [e for e in edges if not any(len(x) >= 6 and x in instruction for x in e)],
            },
            verifier_kind="fuzz_equivalence",
            fixture_kind="text_only",
            fixtures={f"{tool}.awk": awk_src.encode()},
            output_paths=[port],
            apt_packages=("mawk",),
        )


# --------------------------------------------------------------------------------------------------
# release_plan: the next version of every package of a monorepo, from its conventional commits

RELEASE_PACKAGES = ("core", "util", "http", "cli", "config", "auth", "storage", "metrics", "schema", "cache",
                    "queue", "events", "render", "codec", "parser", "sdk", "plugins", "telemetry")
THIRD_PARTY = ("serde", "tokio", "regex", "requests", "click", "pyyaml", "anyio", "rich", "attrs", "lxml")
OTHER_SCOPES = ("ci", "deps", "repo", "release", "lint")
QUIET_TYPES = ("chore", "docs", "test", "refactor", "ci", "style", "build")
CHANGE_VERBS = ("add", "support", "handle", "drop", "rework", "speed up", "validate", "expose", "cache", "log")
CHANGE_OBJECTS = ("empty input", "timeouts", "unicode names", "the retry budget", "config reload", "batch sizes",
                  "trailing slashes", "large payloads", "nested keys", "stale entries", "concurrent writers",
                  "error messages", "legacy flags", "the lock file", "default ports", "schema versions")
COMMIT_AUTHORS = (("Ana Souza", "ana"), ("Wei Chen", "wei"), ("Priya Nair", "priya"), ("Tom Becker", "tom"),
                  ("Lena Fischer", "lena"), ("Omar Haddad", "omar"))
BUMPING = {"feat": 2, "fix": 1, "perf": 1}  # change levels: 1 patch, 2 minor, 3 major (breaking)


def next_version(version: str, change: int) -> str:
    """The version after a change of the given level, by the rules the instruction states."""
    core, _, pre = version.partition("-")
    parts = [int(x) for x in core.split(".")]
    part = change - 1 if parts[0] == 0 and change > 1 else change  # 0.x: one part further right
    i = 3 - part
    bumped = ".".join(map(str, parts[:i] + [parts[i] + 1] + [0] * (2 - i)))
    if not pre:
        return bumped
    ident, n = pre.rsplit(".", 1)
    covered = 3 if parts[1] == parts[2] == 0 else 2 if parts[2] == 0 else 1
    return f"{core}-{ident}.{int(n) + 1}" if part <= covered else f"{bumped}-{ident}.0"


def release_plan(packages: dict[str, dict], commits: list[dict]) -> tuple[list[str], dict, dict]:
    """(plan lines, own change level, final change level) for packages {name: {version, deps}} and
    commits oldest first."""
    cancelled: set[str] = set()
    for c in reversed(commits):  # newest first: a revert is settled before the commit it names
        if c["sha"] not in cancelled and c.get("reverts"):
            cancelled.add(c["reverts"])
    own = dict.fromkeys(packages, 0)
    for c in commits:
        if c["sha"] in cancelled or not c.get("type"):
            continue
        level = 3 if c["breaking"] else BUMPING.get(c["type"], 0)
        for scope in c["scopes"]:
            if scope in own:
                own[scope] = max(own[scope], level)
    depth: dict[str, int] = {}

    def build_level(name: str) -> int:
        if name not in depth:
            depth[name] = 1 + max(map(build_level, packages[name]["deps"]), default=-1)
        return depth[name]
    order = sorted(packages, key=lambda n: (build_level(n), n))
    change: dict[str, int] = {}
    for name in order:  # dependencies are settled before their dependents
        change[name] = max(own[name], 1 if any(change[d] for d in packages[name]["deps"]) else 0)
    lines = [f"{n} {packages[n]['version']} -> {next_version(packages[n]['version'], change[n])}"
             for n in order if change[n]]
    return lines, own, change


def _prerelease(rng: random.Random, x: int) -> str:
    """A pre-release version of a major, minor or patch line (x: the major part)."""
    y, z = rng.randint(1, 9), rng.randint(1, 9)
    core = rng.choice(([f"{x}.0.0"] if x else []) + [f"{x}.{y}.0", f"{x}.{y}.{z}"])
    return f"{core}-{rng.choice(('alpha', 'beta', 'rc'))}.{rng.randint(0, 4)}"


def _git_log(commits: list[dict]) -> str:
    """`git log` default output, newest first; message lines indented by four spaces."""
    out = []
    for c in reversed(commits):
        name, user = c["author"]
        out.append(f"commit {c['sha']}")
        if c.get("merge"):
            out.append("Merge: " + " ".join(p[:7] for p in c["merge"]))
        out += [f"Author: {name} <{user}@example.org>",
                f"Date:   {c['date']:%a %b} {c['date'].day} {c['date']:%H:%M:%S %Y} +0000", ""]
        out += [f"    {ln}" if ln else "" for ln in [c["subject"], *c["body"]]]
        out.append("")
    return "\n".join(out)


class MonorepoReleasePlan(TaskFamily):
    """Derive each package's next semantic version from conventional commits and internal dependencies."""

    name = "monorepo_release_plan"
    method = (
        ("Read every package.toml with a TOML parser and keep the name, the version and the [dependencies] keys "
         "that name workspace packages.", None),
        ("Split the log into commits at the `commit <sha>` header lines and strip the four-space indent from "
         "the message.", None),
        ("Walk the commits newest first so that a revert is settled before the commit it names, and skip "
         "cancelled ones.", r"This reverts commit"),
        ("Take each package's own change from the scopes of conventional subjects and from breaking-change "
         "footers.", r"BREAKING CHANGE:"),
        ("Take each package's own change from the scopes of conventional subjects.",
         lambda v: not v.states(r"BREAKING CHANGE:")),
        ("Then visit packages in build-level order so a dependency is final before its dependents inherit a "
         "patch change.", r"build level"),
        ("Do the version arithmetic last and try it by hand on a 0.x and a pre-release version before trusting "
         "it.", r"A pre-release version `X"),
        ("Do the version arithmetic last and try it by hand on a 0.x version before trusting it.",
         lambda v: v.states(r"For `0\.Y\.Z` versions") and not v.states(r"A pre-release version `X")),
        ("Do the version arithmetic last and try it by hand on a major change before trusting it.",
         lambda v: not v.states(r"For `0\.Y\.Z` versions")),
    )
    domains = ("software_engineering",)
    verifier_kinds = ("exact_text",)
    fixture_kinds = ("text_only",)
    summary = "plan a monorepo release: semver bumps from conventional commits, reverts and dependency propagation"
    skill_types = ("interfaces_and_packaging",)
    skills = ("choose a semantic version bump from a changelog",)
    languages = ("python", "bash")
    command_complexities = ("bash_code",)

    def _draft(self, rng: random.Random, lvl: int):
        names = rng.sample(RELEASE_PACKAGES, (4, 6, 8, 11)[lvl])
        packages = {}
        for i, name in enumerate(names):  # only on packages drawn earlier: the graph stays acyclic
            k = 0 if lvl == 0 else min(i, rng.choice((0, 1, 1, 2, 2, 3)))
            x = 0 if lvl >= 2 and rng.random() < 0.3 else rng.randint(1, 4)
            version = (_prerelease(rng, x) if lvl == 3 and rng.random() < 0.3
                       else f"{x}.{rng.randint(1 if x == 0 else 0, 12)}.{rng.randint(0, 9)}")
            packages[name] = {"version": version, "deps": sorted(rng.sample(names[:i], k))}
        active = rng.sample(names, max(2, len(names) * 3 // 5))  # the rest change only through dependencies
        types = ["feat", "fix"] + (["perf"] if lvl else []) + list(QUIET_TYPES[: (2, 4, 7, 7)[lvl]])
        weights = [3, 4] + ([1] if lvl else []) + [2] * (len(types) - 2 - (1 if lvl else 0))
        start = datetime(rng.randint(2022, 2025), rng.randint(1, 12), rng.randint(1, 28), 9)
        commits, subjects = [], set()
        for _ in range((8, 14, 24, 36)[lvl]):
            kind = rng.choices(types, weights)[0]
            roll = rng.random()
            if lvl >= 1 and roll < 0.12:
                scopes = rng.choice(([],) + tuple([s] for s in OTHER_SCOPES))
            elif lvl >= 2 and roll < 0.27:
                scopes = sorted(rng.sample(active, 2))
            else:  # quiet commits may touch any package, bumping ones only the active ones
                scopes = [rng.choice(active if kind in BUMPING else names)]
            breaking = "" if rng.random() > 0.12 else rng.choice(("!",) + (("footer", "footer") if lvl else ()))
            while True:
                desc = f"{rng.choice(CHANGE_VERBS)} {rng.choice(CHANGE_OBJECTS)}"
                subject = f"{kind}{'(' + ','.join(scopes) + ')' if scopes else ''}{'!' * (breaking == '!')}: {desc}"
                if subject not in subjects:
                    break
            subjects.add(subject)
            body = []
            if lvl >= 1 and rng.random() < 0.5:
                body += ["", rng.choice((f"Callers that relied on the old {desc.split()[-1]} behaviour should "
                                         "check their settings.", "No breaking change for existing callers.",
                                         "Found while reviewing the nightly build."))]
            if breaking == "footer":
                body += ["", f"{'BREAKING-CHANGE' if lvl >= 2 and rng.random() < 0.5 else 'BREAKING CHANGE'}: "
                             f"{rng.choice(CHANGE_OBJECTS)} are no longer accepted"]
            if lvl >= 1 and rng.random() < 0.2:
                body += ["", f"Refs: #{rng.randint(100, 999)}"]
            commits.append({"type": kind, "scopes": scopes, "breaking": bool(breaking), "subject": subject,
                            "body": body})
        for _ in range((0, 0, 2, 3)[lvl]):  # merge commits: no conventional subject
            commits.insert(rng.randint(1, len(commits)), {"subject": f"Merge pull request #{rng.randint(100, 999)} "
                           f"from {rng.choice(COMMIT_AUTHORS)[1]}/topic", "body": [], "merge": True})
        for c in commits:
            c["sha"] = f"{rng.getrandbits(160):040x}"
        reverted: list[dict] = []
        for k in range((0, 0, 1, 2)[lvl] + (lvl == 3)):
            if k == 2:  # a revert of a revert: the first reverted commit counts again
                targets = [c for c in commits if c.get("reverts") == reverted[0]["sha"]]
            else:
                targets = [c for c in commits if (c.get("type") in BUMPING or c.get("breaking"))
                           and c not in reverted]
            target = rng.choice(targets)
            reverted.append(target)
            revert = {"subject": f'Revert "{target["subject"]}"', "body": ["", f"This reverts commit {target['sha']}."],
                      "reverts": target["sha"], "sha": f"{rng.getrandbits(160):040x}"}
            commits.insert(rng.randint(commits.index(target) + 1, len(commits)), revert)
        when = start
        for c in commits:
            when += timedelta(seconds=rng.randint(400, 36000))
            c["date"], c["author"] = when, rng.choice(COMMIT_AUTHORS)
            if c.get("merge"):
                c["merge"] = [f"{rng.getrandbits(28):07x}", f"{rng.getrandbits(28):07x}"]
        lines, own, change = release_plan(packages, commits)
        wanted = [2 <= len(lines) < len(names)]
        if lvl >= 1:  # some package changes only because a dependency does
            wanted.append(any(change[n] and not own[n] for n in names))
        if lvl >= 2:  # the reverts and the 0.x rule change the answer
            wanted.append(lines != release_plan(packages, [{**c, "reverts": None} for c in commits])[0])
            wanted.append(any(packages[n]["version"].startswith("0.") and change[n] for n in names))
        if lvl == 3:
            wanted.append(any("-" in packages[n]["version"] and change[n] for n in names))
        return (packages, commits, lines) if all(wanted) else None

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        for _ in range(200):
            draft = self._draft(rng, lvl)
            if draft:
                break
        else:
            raise TermforgeError(f"{self.name}: no draw met the level-{lvl} conditions")
        packages, commits, expected = draft
        renamed = rng.sample(sorted(packages), 2) if lvl == 3 else []  # directory name differs from package name
        dirs = {n: (f"{rng.choice(('lib', 'pkg'))}-{n}" if n in renamed else n) for n in packages}
        fixtures = {"repo/commits.log": _git_log(commits).encode()}
        for name, pkg in packages.items():
            deps = {d: f'{{ path = "../{dirs[d]}" }}' for d in pkg["deps"]}
            for ext in rng.sample(THIRD_PARTY, rng.randint(0, 2)):
                deps[ext] = f'"{rng.randint(0, 3)}.{rng.randint(0, 20)}"'
            text = (f'[package]\nname = "{name}"\nversion = "{pkg["version"]}"\n'
                    f'description = "The {name} package."\n\n[dependencies]\n'
                    + "".join(f"{k} = {v}\n" for k, v in sorted(deps.items())))
            others = [n for n in packages if n != name and n not in pkg["deps"]]
            if lvl >= 2 and others and rng.random() < 0.4:  # test-only dependencies never propagate
                dev = rng.choice(others)
                text += f'\n[dev-dependencies]\n{dev} = {{ path = "../{dirs[dev]}" }}\n'
            fixtures[f"repo/packages/{dirs[name]}/package.toml"] = text.encode()
        out = "/app/release_plan.txt"
        rules = [
            "The first line of a commit message (its subject) has the form `<type>(<scopes>)<!>: <description>`, "
            "where `(<scopes>)` and `!` are optional and `<scopes>` is a comma-separated list of package names "
            "(the `name` in `package.toml`"
            + (", which need not match the directory" if lvl == 3 else "") + "). A commit touches the packages "
            "its scopes name; a commit without scopes, or whose scopes name no package (such as `ci`), touches none.",
            "A commit is breaking when its subject has the `!` before the colon"
            + (", or when a line of its message starts with `BREAKING CHANGE:` or `BREAKING-CHANGE:`" if lvl else "")
            + ". A breaking commit is a major change, whatever its type; otherwise `feat` is a minor change, `fix`"
            + (" and `perf` are" if lvl else " is") + " a patch change, and every other type is no change. "
            "A package's own change is the highest change among the commits that touch it.",
        ]
        if lvl >= 2:
            rules.append("Merge commits and subjects not of that form touch nothing. A commit whose subject starts "
                         "with `Revert \"` and whose message has the line `This reverts commit <sha>.` cancels the "
                         "commit with that sha and changes nothing itself. A cancelled commit counts for nothing; "
                         "when it is itself a revert, it cancels nothing.")
        if lvl >= 1:
            rules.append("The internal dependencies of a package are the entries under its `[dependencies]` whose "
                         "key is the name of a package in the repository (the others are third-party)"
                         + ("; `[dev-dependencies]` never count" if lvl >= 2 else "") + ". A package whose "
                         "internal dependency gets a new version gets at least a patch change itself, so changes "
                         "propagate to dependents of dependents.")
        rules.append("A major, minor or patch change increments the major, minor or patch part of `X.Y.Z` and "
                     "resets the parts to its right to 0."
                     + (" For `0.Y.Z` versions everything moves one part to the right: a major change increments "
                        "the minor part, and minor and patch changes increment the patch part." if lvl >= 2 else ""))
        if lvl == 3:
            rules.append("A pre-release version `X.Y.Z-<id>.<n>` prepares release `X.Y.Z`, which already increments "
                         "the major part if `Y` and `Z` are 0, the minor part if only `Z` is 0, and the patch part "
                         "otherwise. If the part the change increments is that part or one to its right, only `n` "
                         "goes up by one (`1.4.0-beta.2` with a patch change gives `1.4.0-beta.3`); otherwise the "
                         "part of `X.Y.Z` is incremented as above and the version restarts at `-<id>.0` "
                         "(`1.4.0-beta.2` with a major change gives `2.0.0-beta.0`).")
        order = ("Sort the lines by build level, then by package name (byte order). A package without internal "
                 "dependencies has build level 0; any other package has one more than the highest build level "
                 "among its internal dependencies." if lvl else "Sort the lines by package name (byte order).")
        body = (
            "We are cutting the next release of the monorepo in `/app/repo`. Every package lives in "
            "`/app/repo/packages/<dir>/package.toml`, whose `[package]` table gives its `name` and its current "
            "`version` (the last release). `/app/repo/commits.log` is the `git log` output (newest first) of every "
            "commit since that release. Work out which packages get a new version, and what it is, under "
            "these rules:\n\n"
            + "\n".join(f"- {r}" for r in rules)
            + f"\n\nWrite `{out}` with one line `<name> <current> -> <new>` (single spaces) for each package that "
            f"gets a new version and none for the others. {order}"
        )
        deliverable = f"`{out}`: one line per package that gets a new version, sorted as described."
        instruction = instruction_frame(sig, "Plan the next monorepo release", body, [deliverable])
        test_initial = py_source("""
            import os

            __CONSTANTS__

            def test_repository_present():
                assert sorted(os.listdir("/app/repo/packages")) == DIRS
                assert os.path.getsize("/app/repo/commits.log") > 0

            def test_no_plan_yet():
                assert not os.path.exists(OUT)
            """, DIRS=sorted(dirs.values()), OUT=out)
        test_final = lines_final_test("test_release_plan_matches", out, expected)
        solve = python_oracle(py_source(ORACLE_SOURCE, OUT=out))
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/repo && cp -r /tmp/env/fixtures/repo/. /app/repo/"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"packages": len(packages), "commits": len(commits)}, "expected_lines": expected},
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures=fixtures,
            output_paths=[out],
        )


ORACLE_SOURCE = """
    import glob
    import re
    import tomllib

    __CONSTANTS__
    SUBJECT = re.compile(r"(\\w+)(?:\\(([^)]*)\\))?(!)?: ")
    REVERTS = re.compile(r"This reverts commit ([0-9a-f]{40})\\.$")

    packages = {}
    for path in glob.glob("/app/repo/packages/*/package.toml"):
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
        packages[data["package"]["name"]] = (data["package"]["version"], list(data.get("dependencies", {})))
    deps = {n: [d for d in ds if d in packages] for n, (_, ds) in packages.items()}

    with open("/app/repo/commits.log") as fh:
        blocks = re.split(r"^commit ", fh.read(), flags=re.M)[1:]
    own, cancelled = dict.fromkeys(packages, 0), set()
    for block in blocks:  # newest first: reverts come before what they revert
        head, _, message = block.partition("\\n\\n")
        sha, lines = head.split()[0], [ln[4:] for ln in message.splitlines()]
        if sha in cancelled:
            continue
        if lines[0].startswith('Revert "'):
            cancelled.update(m[1] for m in map(REVERTS.match, lines) if m)
            continue
        m = SUBJECT.match(lines[0])
        if not m or not m[2]:
            continue
        breaking = m[3] or any(ln.startswith(("BREAKING CHANGE:", "BREAKING-CHANGE:")) for ln in lines[1:])
        level = 3 if breaking else {"feat": 2, "fix": 1, "perf": 1}.get(m[1], 0)
        for scope in m[2].split(","):
            if scope.strip() in own:
                own[scope.strip()] = max(own[scope.strip()], level)

    depth = {}
    def build_level(name):
        if name not in depth:
            depth[name] = max((build_level(d) + 1 for d in deps[name]), default=0)
        return depth[name]

    def bump(version, change):
        core, _, pre = version.partition("-")
        x, y, z = map(int, core.split("."))
        part = {3: "major", 2: "minor", 1: "patch"}[change]
        if x == 0:
            part = {"major": "minor", "minor": "patch", "patch": "patch"}[part]
        new = {"major": (x + 1, 0, 0), "minor": (x, y + 1, 0), "patch": (x, y, z + 1)}[part]
        new = ".".join(map(str, new))
        if not pre:
            return new
        ident, n = pre.rsplit(".", 1)
        covered = "major" if y == z == 0 else "minor" if z == 0 else "patch"
        rank = {"patch": 1, "minor": 2, "major": 3}
        return f"{core}-{ident}.{int(n) + 1}" if rank[part] <= rank[covered] else f"{new}-{ident}.0"

    change, plan = {}, []
    for name in sorted(packages, key=lambda n: (build_level(n), n)):
        change[name] = max(own[name], 1 if any(change[d] for d in deps[name]) else 0)
        if change[name]:
            version = packages[name][0]
            plan.append(f"{name} {version} -> {bump(version, change[name])}\\n")
    with open(OUT, "w") as fh:
        fh.writelines(plan)
    """


FAMILIES = [VendoredSemverFix, LegacyAwkPort, MonorepoReleasePlan]
