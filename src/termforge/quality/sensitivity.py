"""Input sensitivity: does the oracle compute its answer from the task's inputs?

An oracle that writes a constant (a hard-coded answer key, right or wrong) passes every other
check when the final test was written from it: the oracle scores 1, the no-op scores 0, mutants of
its output score 0. What gives it away is that its output does not move when the inputs do. So:

1. A fresh session runs the oracle on the untouched environment; its deliverables are recorded
   (the files in `output_paths`, or, for a task graded on the tree, every file the oracle changed).
2. Each input the instruction names (a file, or a directory with its files) is perturbed ALONE in
   a fresh session (a number changed in every second data line, a record dropped, a shape or tone
   added: quality/perturb_inputs.py, run inside the sandbox), the oracle runs again and its
   deliverables are recorded. The variants are tried in order until one moves the output: numbers,
   records, then both aimed at the records the answer draws on (the input lines that hold the
   oracle's own output lines or their rarer words), so a selection the blanket variants happen to
   miss is still reached. Perturbing every input at once would hide an oracle that reads only one
   of two files it is told to read.
   The output lines that moved are what the data decides: the instruction must not state them
   (verbatim, as an "example", or restated in prose), unless the inputs hold them (`restated`).
3. An input whose every variant leaves the deliverables as they were: `oracle_ignores_inputs`,
   and the task is dropped naming that input (`drop`). A session where only that input changed
   grades the oracle's deliverables, to say which: the final test still passes them (the answer
   does not depend on the input: a constant, or computed from the other inputs alone), or it
   rejects them (the test reads the input, the oracle does not). An input nothing of which could
   be changed is not judged.

A task whose setup packs /app into the form the agent receives (a fixture kind's container, an
anchor: the setup steps after schemas.SETUP_PACKING_MARK) hands the agent one packed file, and
perturbing that file as a whole would only test that a corrupt archive breaks the oracle. So for
such a task the check builds the environment as the family's setup left it (setup.sh up to the
mark, an image of its own), perturbs each input there alone, runs the packing steps, and only then
the oracle (which unpacks first): an oracle that ignores one of the family's inputs is dropped
naming it, packed or not. What the packing steps write (the packed form) is not counted as the
oracle's effect.

Only inputs the instruction names are perturbed (every file under a named directory): an oracle
that reads its answer from a file the agent is not pointed at (a cached key, a notes file) keeps its
output when the named inputs change, and is caught here even when the encoding fools the leak scan.

Deliverables that are programs (a script the final test runs on inputs of its own) cannot be judged
by their bytes: the oracle writes the same program whatever the data. For them the check replaces
each program with one that ignores its input and prints nothing; a final test that still passes
does not exercise the program, and the task is dropped.

Kept apart from validate.py (which calls `input_sensitivity`), so the sandbox runs of validation
can be reorganised without touching what this check means.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from termforge.io import read_json
from termforge.quality.leaks import environment_text, output_lines_changed, stated_outputs
from termforge.quality.solved import SolvedApp, solve_in
from termforge.schemas import split_packing

PERTURB_SCRIPT = Path(__file__).with_name("perturb_inputs.py")
VARIANTS = ("numbers", "records", "numbers_at_answer", "records_at_answer")
MAX_TARGETS = 400  # output lines and words sent to the perturbation as what the answer draws on
MAX_INPUT_FILES = 200
PROGRAM_SUFFIXES = (".py", ".sh", ".bash", ".awk", ".pl", ".rb")
_APP_PATH = re.compile(r"(?<![\w.~:/\\-])(/app(?:/[A-Za-z0-9_.+@%-]+)*/?)")
_URL_BEFORE = re.compile(r"(?:https?://[^\s/]*|localhost(?::\d+)?|127\.0\.0\.1(?::\d+)?)$")


@dataclass
class SensitivityReport:
    mode: str
    """data (deliverables are files the oracle computes), program (deliverables are programs),
    none (the task has no inputs or no deliverables to compare)."""
    sensitive: bool | None
    oracle_ignores_inputs: bool = False
    drop: bool = False
    blame: str = ""
    """Who a drop points at: "oracle" (a constant answer) or "final_test" (grades nothing the
    inputs decide)."""
    reason: str = ""
    inputs: list[str] = field(default_factory=list)
    perturbations: list[dict] = field(default_factory=list)
    changed_outputs: list[str] = field(default_factory=list)
    per_input: list[dict] = field(default_factory=list)
    """Per named input, perturbed alone: whether the oracle's deliverables moved (None: nothing of it
    could be changed), the variant that moved them, and how many oracle runs it took."""
    restated: list[str] = field(default_factory=list)
    """What the instruction states of the outputs the data decides (described, never quoted):
    givens come from inputs, never from outputs."""
    before_packing: bool = False
    """The inputs were perturbed as the family's setup left them, then packed (module doc)."""

    def to_dict(self) -> dict:
        return asdict(self)


def named_inputs(instruction: str, outputs: list[str]) -> list[str]:
    """The /app paths the instruction names, outputs and URL paths left out."""
    found: list[str] = []
    for m in _APP_PATH.finditer(instruction):
        if _URL_BEFORE.search(instruction[max(0, m.start() - 40):m.start()]):
            continue
        p = m.group(1).rstrip(".,;:")
        p = p if p == "/app/" else p.rstrip("/") if not p.endswith("/") else p
        if p in ("/app", "/app/") or p.rstrip("/") in outputs:
            continue
        if p not in found:
            found.append(p)
    return found


def _is_program(path: str, data: bytes) -> bool:
    return path.endswith(PROGRAM_SUFFIXES) or data.startswith(b"#!")


def _app_root(session) -> Path:
    return session._host_path("/app")


def _walk(root: Path, under: Path) -> list[Path]:
    out = []
    if under.is_symlink():
        return out
    if under.is_file():
        return [under]
    for dirpath, dirnames, filenames in os.walk(under, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if not p.is_symlink() and p.is_file():
                out.append(p)
    return out


def input_units(session, named: list[str], outputs: list[str]) -> list[tuple[str, list[str]]]:
    """Each input the instruction names (a file, or a directory with all of its files), with the
    sandbox paths of the regular files it holds, none of them a deliverable, nor one under another
    named input inside it (a named directory and a file named in it are two inputs); one unit
    "/app" with every file under it when the instruction names none. A named path that holds no
    file (it does not exist yet, or is a deliverable) is left out."""
    root = _app_root(session)
    wanted = [p for p in named if p.startswith("/app/")] or ["/app"]
    units: list[tuple[str, list[str]]] = []
    budget = MAX_INPUT_FILES

    def inner(path: str, name: str) -> bool:
        """Is `path` under another named input more specific than `name` (its own unit)?"""
        base = name.rstrip("/")
        return any(o.rstrip("/") != base and o.rstrip("/").startswith(base + "/")
                   and (path == o.rstrip("/") or path.startswith(o.rstrip("/") + "/")) for o in wanted)

    for name in wanted:
        r = root / name[len("/app/"):].rstrip("/") if name != "/app" else root
        try:
            resolved = r.resolve()
        except OSError:
            continue
        if not str(resolved).startswith(str(root.resolve())) or not r.exists():
            continue
        files = []
        for f in _walk(root, r):
            sp = "/app/" + str(f.relative_to(root))
            if sp not in outputs and not any(sp.startswith(o.rstrip("/") + "/") for o in outputs) \
                    and not inner(sp, name):
                files.append(sp)
        files = files[:budget]
        budget -= len(files)
        if files:
            units.append((name, files))
    return units


def tree_state(session) -> dict[str, tuple[int, str]]:
    """Every regular file under /app: sandbox path -> (mode, sha256)."""
    root = _app_root(session)
    out = {}
    for f in _walk(root, root):
        if "__pycache__" in f.parts or f.suffix == ".pyc":
            continue  # the interpreter's caches, not a deliverable
        try:
            st = f.lstat()
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
        except OSError:
            continue
        out["/app/" + str(f.relative_to(root))] = (stat.S_IMODE(st.st_mode), digest)
    return out


def _read_outputs(session, paths: list[str]) -> dict[str, bytes | None]:
    got = {}
    for p in paths:
        try:
            host = session._host_path(p)
            got[p] = host.read_bytes() if host.is_file() and not host.is_symlink() else None
        except Exception:  # noqa: BLE001 - an output the oracle did not leave is simply absent
            got[p] = None
    return got


def _effect(before: dict, after: dict) -> dict[str, tuple[int, str] | None]:
    """What the oracle changed in the tree: new or changed files (and removed ones as None)."""
    out = {p: v for p, v in after.items() if before.get(p) != v}
    out.update({p: None for p in before if p not in after})
    return out


def _perturb(session, files: list[str], variant: int, timeout: float, targets: list[str] | None = None) -> dict:
    spec = json.dumps({"files": files, "variant": variant, "targets": targets or []})
    res = session.exec("python3 -I - " + _shell_quote(spec), stdin=PERTURB_SCRIPT.read_bytes(), timeout=timeout)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"changed": [], "skipped": [{"path": "*", "why": f"the perturbation failed: {res.tail(300)}"}]}


def _shell_quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def _pack(session, packing: str, timeout: float) -> set[str]:
    """Run setup's packing steps in `session` (as setup.sh runs them: bash, errors fatal); the
    files they created under /app (the packed form), which are no effect of the oracle's."""
    before = set(tree_state(session))
    res = session.exec("bash --noprofile --norc -s", stdin=("set -euo pipefail\n" + packing).encode(),
                       timeout=timeout)
    if not res.ok:
        raise RuntimeError(f"setup's packing steps failed after the family's setup: {res.tail(300)}")
    return set(tree_state(session)) - before


class _FamilyState:
    """The image of a packed task's environment as the family's setup left it (module doc): the
    task's task.json and environment/ copied, setup.sh cut at the packing mark, built by the
    runtime like any task, in a directory removed on close."""

    def __init__(self, task_dir: Path, runtime, limits, family_setup: str):
        self.tmp = Path(tempfile.mkdtemp(prefix="tf-family-state-", dir=getattr(runtime, "work_root", None)))
        try:
            task = self.tmp / "task" / task_dir.name
            task.mkdir(parents=True)
            shutil.copy2(task_dir / "task.json", task / "task.json")
            shutil.copytree(task_dir / "environment", task / "environment", symlinks=True)
            (task / "environment" / "setup.sh").write_text(family_setup)
            build = runtime.build(task, self.tmp / "images", timeout=limits.wall_sec * 2)
            if not build.ok:
                raise RuntimeError(f"the family's setup alone (setup.sh before its packing steps) did not "
                                   f"build: {build.reason}")
            self.image = build.image
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def constant_program(path: str, data: bytes) -> bytes:
    """A program at the same path that ignores its input, prints nothing and exits 0."""
    first = data.split(b"\n", 1)[0] if data.startswith(b"#!") else b""
    if path.endswith(".py") or b"python" in first:
        return (first or b"#!/usr/bin/env python3") + b"\nimport sys\nsys.exit(0)\n"
    if path.endswith(".awk") or b"awk" in first:
        return (first or b"#!/usr/bin/awk -f") + b"\nBEGIN { exit 0 }\n"
    return b"#!/bin/bash\nexit 0\n"


def _answer_targets(produced: dict[str, bytes]) -> list[str]:
    """The oracle's output lines: what tells the perturbation which records the answer draws on."""
    lines: list[str] = []
    for data in produced.values():
        for ln in data.decode("utf-8", "replace").splitlines():
            ln = ln.strip()
            if ln and ln not in lines:
                lines.append(ln[:500])
            if len(lines) >= MAX_TARGETS:
                return lines
    return lines


def input_sensitivity(task_dir: Path, runtime, image, limits, expected: list[str] | None = None,
                      zero_check: bool = True, solved: SolvedApp | None = None,
                      per_input: bool = True, before_packing: bool = True) -> SensitivityReport:
    """Run the check (module doc) on a built image; `expected`: the test ids the final test must
    collect (validation's record). Raises RuntimeError when the oracle fails on the untouched
    environment (validation has already caught that). `zero_check`: its grades, of states that pass
    only if the task is unsound, stop at their first failing test (verifier.ZERO_CHECK). `solved`:
    validation's own oracle run's /app (quality/solved.py), taken instead of running the oracle on
    the untouched environment again. `per_input=False`: every named input perturbed at once, as
    one (the check before issue 40, kept as bench_input_sensitivity's baseline). A task whose
    setup packs /app is perturbed before its packing steps (module doc; `before_packing=False`:
    the packed form perturbed as a whole, the check before that, for comparison only)."""
    task_dir = Path(task_dir)
    setup = task_dir / "environment" / "setup.sh"
    family_setup, packing = split_packing(setup.read_text()) if setup.is_file() else ("", "")
    if not packing or not before_packing:
        return _check(task_dir, runtime, image, limits, expected, zero_check, solved, per_input, image, "")
    state = _FamilyState(task_dir, runtime, limits, family_setup)
    try:
        return _check(task_dir, runtime, image, limits, expected, zero_check, solved, per_input, state.image, packing)
    finally:
        state.close()


def _check(task_dir: Path, runtime, image, limits, expected, zero_check: bool, solved: SolvedApp | None,
           per_input: bool, inputs_image, packing: str) -> SensitivityReport:
    """The check, its sessions started on `inputs_image`; `packing`: bash run after each
    perturbation and before the oracle ("" where `inputs_image` is the task's own image). `solved`
    (the oracle's /app on the task's own image) stands in for the untouched run only there, and
    for the program check, which runs on the task's own image."""
    from termforge.grading.verifier import ZERO_CHECK, run_oracle, run_verifier

    task = read_json(task_dir / "task.json")
    outputs = list(task.get("output_paths") or [])
    instruction = (task_dir / "instruction.md").read_text()
    named = named_inputs(instruction, outputs)

    def unpacked(after: dict, created: set[str]) -> dict:
        return {p: v for p, v in after.items() if p not in created}

    s0 = runtime.start(inputs_image, limits)
    try:
        units = input_units(s0, named, outputs)
        files = [f for _, fs in units for f in fs]
        if not per_input and units:
            units = [("the named inputs", list(dict.fromkeys(files)))]
        before0 = tree_state(s0)
        if packing:
            created0 = _pack(s0, packing, limits.wall_sec)
            res = run_oracle(s0, task_dir, timeout=limits.wall_sec)
        else:
            created0 = set()
            s0, res = solve_in(s0, runtime, image, limits, task_dir, solved)
        if res is not None and not res.ok:
            raise RuntimeError(f"the oracle failed on the untouched environment: {res.tail(300)}")
        after0 = unpacked(tree_state(s0), created0)
        effect0 = _effect(before0, after0)
        out0 = _read_outputs(s0, outputs if outputs else [p for p, v in effect0.items() if v is not None])
    finally:
        s0.stop()
    files = list(dict.fromkeys(files))
    produced = {p: d for p, d in out0.items() if d is not None}
    # A file whose mode alone the oracle changed (chmod) is data, whatever it holds.
    programs = [p for p, d in produced.items() if _is_program(p, d)
                and (outputs or before0.get(p) is None or before0[p][1] != after0[p][1])]
    data_outputs = [p for p in produced if p not in programs]
    if not produced:
        return SensitivityReport("none", None, reason="the oracle leaves no deliverable to compare", inputs=files)
    if not data_outputs:
        report = _program_check(task_dir, runtime, image, limits, programs, files, expected, zero_check, solved)
        report.before_packing = bool(packing)  # the deliverables were found on the family's environment
        return report
    if not files:
        return SensitivityReport("none", None, reason="the instruction names no input file under /app",
                                 inputs=files)

    targets = _answer_targets({p: produced[p] for p in data_outputs})
    report = SensitivityReport("data", None, inputs=files, before_packing=bool(packing))
    moved_lines: dict[str, list[str]] = {}
    moved_after: list[str] = []

    def oracle_on(s1, unit_files: list[str], variant: int, name: str, unit: str) -> tuple[dict, object, list[str]]:
        """Perturb `unit_files` in `s1` and run the oracle: (what changed, its run or None, moved deliverables)."""
        done = _perturb(s1, unit_files, variant, limits.wall_sec, targets)
        report.perturbations.append({"input": unit, "variant": name, **done})
        if not done.get("changed"):
            return done, None, []
        before1 = tree_state(s1)
        created = _pack(s1, packing, limits.wall_sec) if packing else set()
        ran = run_oracle(s1, task_dir, timeout=limits.wall_sec)
        if not ran.ok:
            return done, ran, []
        if outputs:
            out1 = _read_outputs(s1, outputs)
            changed = [p for p in data_outputs if out1.get(p) != out0.get(p)]
            if changed:
                for path, lines in output_lines_changed({p: out0[p] for p in changed if out0.get(p) is not None},
                                                        out1).items():
                    moved_lines.setdefault(path, [])
                    moved_lines[path] += [ln for ln in lines if ln not in moved_lines[path]]
                moved_after.extend((out1.get(p) or b"").decode("utf-8", "replace") for p in changed)
        else:
            effect1 = _effect(before1, unpacked(tree_state(s1), created))
            changed = [p for p in data_outputs if effect1.get(p) != effect0.get(p)]
        return done, ran, changed

    # Each named input alone: an oracle that reads only some of them keeps its answer when another
    # changes, however much all of them together move it.
    for unit, unit_files in units:
        row = {"input": unit, "files": len(unit_files), "moved": None, "variant": None, "oracle_runs": 0}
        report.per_input.append(row)
        first_change = None
        for variant, name in enumerate(VARIANTS):
            with runtime.start(inputs_image, limits) as s1:
                done, ran, changed = oracle_on(s1, unit_files, variant, name, unit)
            if ran is None and not done.get("changed"):
                continue
            row["oracle_runs"] += 1
            first_change = variant if first_change is None else first_change
            if not ran.ok or changed:
                row["moved"], row["variant"] = True, name
                report.changed_outputs += [p for p in changed if p not in report.changed_outputs]
                if not ran.ok:
                    row["oracle_fails"] = True  # it reads them, and they broke it
                break
        if first_change is None:
            continue  # nothing of it could be changed: not judged
        if not row["moved"]:
            row["moved"] = False
            # The oracle's deliverables are the unperturbed ones: grade them where only this input changed.
            with runtime.start(inputs_image, limits) as s1:
                _perturb(s1, unit_files, first_change, limits.wall_sec, targets)
                if packing:
                    _pack(s1, packing, limits.wall_sec)
                run_oracle(s1, task_dir, timeout=limits.wall_sec)
                verdict = run_verifier(s1, task_dir, timeout=limits.wall_sec, expected=expected,
                                       options=ZERO_CHECK if zero_check else ())
            report.sensitive = False
            report.oracle_ignores_inputs = True
            report.drop, report.blame = True, "oracle"
            shown = f"{unit} ({', '.join(unit_files[:3])}{' ...' if len(unit_files) > 3 else ''})" \
                if unit_files != [unit] else unit
            tried = ", ".join(VARIANTS[v] for v in range(len(VARIANTS))
                              if any(p.get("input") == unit and p["variant"] == VARIANTS[v] and p.get("changed")
                                     for p in report.perturbations))
            if verdict.reward == 1.0:
                report.reason = (f"oracle_ignores_inputs: {unit}: the oracle writes the same deliverables whatever "
                                 f"{shown} holds (perturbed alone: {tried}), and the final test still passes them "
                                 f"there: the answer does not depend on {unit}, which the instruction names "
                                 "(a constant, or computed from the other inputs alone)")
            else:
                report.reason = (f"oracle_ignores_inputs: {unit}: the oracle writes the same deliverables whatever "
                                 f"{shown} holds (perturbed alone: {tried}), though the final test rejects them "
                                 f"there: the oracle does not compute its answer from {unit}")
            return report
    judged = [r for r in report.per_input if r["moved"] is not None]
    if judged:
        report.sensitive = True
        report.reason = ("the oracle's deliverables change when each named input changes alone ("
                         + "; ".join(f"{r['input']}: {r['variant']}" for r in judged) + ")")
        if outputs and moved_lines:
            truth = task_dir / "private" / "truth.json"
            given = (read_json(truth).get("given") or {}) if truth.is_file() else {}
            declared = "\n".join([json.dumps(given, sort_keys=True), *outputs])
            leaks = stated_outputs(instruction, moved_lines, environment_text(task_dir), "\n".join(moved_after),
                                   declared)
            report.restated = sorted({leak.describe() for leak in leaks})
        return report
    report.reason = "no input could be perturbed: " + "; ".join(
        f"{s['path']}: {s['why']}" for p in report.perturbations for s in p.get("skipped", [])[:3])[:400]
    return report


def _program_check(task_dir: Path, runtime, image, limits, programs: list[str], files: list[str],
                   expected: list[str] | None, zero_check: bool = True,
                   solved: SolvedApp | None = None) -> SensitivityReport:
    from termforge.grading.verifier import ZERO_CHECK, run_verifier

    s, _ = solve_in(runtime.start(image, limits), runtime, image, limits, task_dir, solved)
    with s:
        for p in programs:
            host = s._host_path(p)
            data = host.read_bytes() if host.is_file() else b""
            # Written in place: the file keeps its owner and mode (still executable).
            host.write_bytes(constant_program(p, data))
        verdict = run_verifier(s, task_dir, timeout=limits.wall_sec, expected=expected,
                               options=ZERO_CHECK if zero_check else ())
    report = SensitivityReport("program", verdict.reward == 0.0, inputs=files,
                               perturbations=[{"variant": "constant_program", "programs": programs,
                                               "reward": verdict.reward}])
    if verdict.reward != 0.0:
        report.drop, report.blame = True, "final_test"
        report.reason = (f"the final test gives {verdict.reward} to deliverables replaced by programs that ignore "
                         f"their input ({', '.join(programs)}): it does not exercise them")
    else:
        report.reason = "the final test rejects programs that ignore their input"
    return report


__all__ = ["SensitivityReport", "input_sensitivity", "named_inputs", "constant_program", "PERTURB_SCRIPT"]
