"""A small vendored SemVer library with planted defects to find and fix."""

from __future__ import annotations

import hashlib
import json
import random
import sys
import types

from termforge.errors import TermforgeError
from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                      instruction_frame, pytest_module)
from termforge.generate.families.package_files import family_template




PACKAGE_NAMES = ("verkit", "semverlite", "relver", "pinlib", "vertools", "semkit")
PROJECT_NAMES = ("acme-http", "tinyjson", "fastgrid", "logweave", "pkgstat", "yamlette", "cachebox",
                 "retryer", "qlint", "blobsync", "termpaint", "mdtable", "cronish", "ziplane",
                 "hashring", "sockpool", "dotcfg", "geomath", "imgpipe", "authlet")

INIT_PY = family_template(__name__, "__init__.py.txt")

VERSION_PY = family_template(__name__, "version.py.txt")

RANGES_PY = family_template(__name__, "ranges.py.txt")

README_MD = family_template(__name__, "README.md.txt")

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

    knobs = DifficultyKnobs(planted_bugs=(1, 1, 2, 3), ordinary_projects=(3, 5, 7, 9))
    axes = FamilyAxes(name="vendored_semver_fix", domains=("software_engineering",), verifier_kinds=("exact_text",),
                      fixture_kinds=("vendored_package",), skill_types=("testing",),
                      skills=("check invariants with generated inputs",), languages=("python",),
                      command_complexities=("bash_code",), output_files=False,
                      summary="find and fix planted precedence/range bugs in a vendored pure-Python SemVer package")
    method = (
        ('Reproduce first: run the resolver and diff it against known_good.txt, then shrink each disagreeing '
         'requirement to the smallest compare() or satisfies() call that contradicts the README. Turn every '
         'README rule into a one-line check in a scratch script (numeric vs text pre-release identifiers, '
         'release vs pre-release, prefix pre-release lists, build metadata, multi-digit core numbers, caret on '
         '0.x and 0.0.x, tilde, inclusive bounds) and run them all, because more than one rule can be broken '
         'and the known-good list need not show every one. Fix the faulty expressions without changing '
         'signatures, then rerun the checks and the resolver.', None),
    )


    def _witness(self, maker: _VersionMaker, good, bad) -> tuple[list[str], str] | None:
        """A (versions, range) pair on which the buggy library picks differently."""
        for _ in range(3000):
            pool = maker.pool(maker.rng.randint(4, 9))
            spec = maker.spec(pool)
            if good.max_satisfying(pool, spec) != bad.max_satisfying(pool, spec):
                return pool, spec
        return None

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        knobs = self.knobs.at(complexity_level(sig))
        pkg = rng.choice(PACKAGE_NAMES)
        lib_version = f"{rng.randint(0, 2)}.{rng.randint(1, 9)}.{rng.randint(0, 9)}"
        planted = sorted(rng.sample(sorted(BUGS), knobs.planted_bugs))
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
        for _ in range(knobs.ordinary_projects):
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


RESOLVER_PY = family_template(__name__, "resolve.py.txt")


FAMILY = VendoredSemverFix
