"""Mutation testing of a task's verifier: perturb the oracle's outputs and check the final test
tells right from wrong.

Generic over tasks (procedural or LLM-written): given a task directory and the oracle's output
files, `mutants()` produces named mutants, each with what the verifier must say:
  expect 0 (answer-changing): a format-only fake (every value the instruction does not state
    replaced by one of the same shape: digits and letters rotated, separators, line count and
    the instruction's own words kept), a number +1 / -1 (for metric-threshold verifiers, every number
    moved far off instead: one step may stay within the tolerance), NaN, inf; a line dropped or duplicated; lines
    reordered where the instruction says order matters; the file truncated; the wrong case where
    the instruction specifies one; values moved between keys and rows with every aggregate
    kept (two rows' values swapped, values rotated among rows, two fields of a row swapped: the
    set of keys, the total, the line count and order stay, so a test of aggregates alone passes
    them); for a program the agent had to fix, the planted bug restored
    (the untouched version of the file);
  expect 1 (allowed): perturbations the instruction permits (a trailing blank line; a reorder
    where it says "in any order");
  expect None: reported only (e.g. a reorder where the instruction says nothing about order).
`run_mutants()` runs the oracle, applies each mutant in a fresh sandbox and grades it with the
clean verifier. `kill_rate()` summarises. tests/test_mutation.py keeps a slice per family;
bench/bench_mutation.py prints the kill rate per family over several seeds.
"""

from __future__ import annotations

import codecs
import random
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from termforge.io import read_json
from termforge.quality.solved import SolvedApp, solve_in

NUMBER_RE = re.compile(rb"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
PROGRAM_SUFFIXES = (".py", ".sh", ".bash", ".awk", ".pl", ".rb")
ORDER_WORDS = re.compile(r"\b(order|sorted|sort|ascending|descending|highest first|lowest first)\b", re.I)
ANY_ORDER = re.compile(r"\b(in any order|any order|order does not matter|order doesn't matter)\b", re.I)
CASE_WORDS = re.compile(r"\blower[- ]?case\b|\bupper[- ]?case\b", re.I)


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # absolute sandbox path of the output it replaces
    content: bytes
    expect: float | None  # the reward the verifier must give; None: reported only

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("content")
        return d


def _is_program(path: str, data: bytes) -> bool:
    return path.endswith(PROGRAM_SUFFIXES) or data.startswith(b"#!")


def _scaled(data: bytes) -> bytes:
    """Every number moved well off its value (x * 1.5 + 1)."""
    def move(m: re.Match) -> bytes:
        token = m.group().decode()
        if "." in token:
            return f"{float(token) * 1.5 + 1:.{len(token.split('.')[1])}f}".encode()
        return str(int(token) * 3 // 2 + 1).encode()

    return NUMBER_RE.sub(move, data)


def _number_mutants(path: str, data: bytes, rng: random.Random, tolerant: bool = False) -> list[Mutant]:
    """One number of the file changed. Where the verifier grades a metric within a tolerance
    (`tolerant`), a single step may legitimately stay inside it: those are reported only, and
    every number moved far off is the answer-changing mutant instead."""
    lines = data.split(b"\n")
    candidates = [i for i, ln in enumerate(lines) if NUMBER_RE.search(ln)]
    if not candidates:
        return []
    i = rng.choice(candidates)
    m = list(NUMBER_RE.finditer(lines[i]))[-1]  # the last number of a line is usually the value
    token = m.group().decode()

    def with_token(new: str) -> bytes:
        line = lines[i][: m.start()] + new.encode() + lines[i][m.end():]
        return b"\n".join(lines[:i] + [line] + lines[i + 1:])

    out = []
    if "." in token:
        decimals = len(token.split(".")[1])
        value = float(token)
        step = max(1.0, abs(value) * 0.1)
        plus, minus = f"{value + step:.{decimals}f}", f"{value - step:.{decimals}f}"
    else:
        plus, minus = str(int(token) + 1), str(int(token) - 1)
    for name, new in (("number_plus_1", plus), ("number_minus_1", minus), ("nan", "nan"), ("inf", "inf")):
        expect = None if tolerant and name.startswith("number") else 0.0
        out.append(Mutant(f"{name}@{path}:{i + 1}", path, with_token(new), expect))
    if tolerant:
        out.append(Mutant(f"numbers_scaled@{path}", path, _scaled(data), 0.0))
    return out


_FIELD_SPLIT = re.compile(rb"([,\t;|]|\s+)")
_WORD_FIELD = re.compile(rb"[A-Za-z_][\w.@/+-]*")


def _reorder_expect(instruction: str) -> float | None:
    """What a permutation of whole lines must score: allowed where the instruction says any order,
    answer-changing where it asks for one, reported only where it says nothing."""
    return 1.0 if ANY_ORDER.search(instruction) else (0.0 if ORDER_WORDS.search(instruction) else None)


def _far(old: bytes, new: bytes) -> bool:
    """A move a tolerance cannot absorb (for metric-threshold verifiers): at least half the value."""
    a, b = float(old), float(new)
    return abs(a - b) > 0.5 * max(abs(a), abs(b), 1.0)


def _exchange_mutants(path: str, data: bytes, rng: random.Random, instruction: str,
                      tolerant: bool = False) -> list[Mutant]:
    """Values moved between keys and rows, keeping what an aggregate check sees: the total, the set
    of keys (every label stays where it is), the number of lines and their order. Two rows' values
    swapped, every row's value rotated one row on, two fields of one row swapped. A result that is
    a permutation of whole lines is a reorder (answer-changing only where order matters); under a
    tolerance a move is answer-changing only when it is large."""
    trailing = data.endswith(b"\n")
    lines = (data[:-1] if trailing else data).split(b"\n")
    end = b"\n" if trailing else b""
    # The value of a row is its last number; a one-line output (a JSON object) holds its values side by side.
    slots = ([(i, m) for i, ln in enumerate(lines) for m in NUMBER_RE.finditer(ln)] if len(lines) == 1 else
             [(i, list(NUMBER_RE.finditer(ln))[-1]) for i, ln in enumerate(lines) if NUMBER_RE.search(ln)])

    def place(values: list[bytes]) -> bytes:
        out = list(lines)
        for (i, m), v in sorted(zip(slots, values), key=lambda t: (t[0][0], -t[0][1].start())):
            out[i] = out[i][:m.start()] + v + out[i][m.end():]
        return b"\n".join(out) + end

    def expect_of(new: bytes, moved: list[tuple[bytes, bytes]]) -> float | None:
        if sorted(new.split(b"\n")) == sorted(data.split(b"\n")):
            return _reorder_expect(instruction)
        if tolerant and not any(_far(a, b) for a, b in moved):
            return None
        return 0.0

    out: list[Mutant] = []
    values = [m.group() for _, m in slots]
    pairs = [(a, b) for a in range(len(values)) for b in range(a + 1, len(values)) if values[a] != values[b]]
    if pairs:
        a, b = rng.choice(pairs)
        swapped = list(values)
        swapped[a], swapped[b] = values[b], values[a]
        new = place(swapped)
        out.append(Mutant(f"values_swapped@{path}:{slots[a][0] + 1},{slots[b][0] + 1}", path, new,
                          expect_of(new, [(values[a], values[b])])))
    if len(set(values)) >= 2 and len(values) >= 3:
        rotated = values[-1:] + values[:-1]
        new = place(rotated)
        out.append(Mutant(f"values_rotated@{path}", path, new, expect_of(new, list(zip(values, rotated)))))
    rows = []
    for i, ln in enumerate(lines):
        parts = _FIELD_SPLIT.split(ln)
        fields = [j for j in range(0, len(parts), 2) if parts[j]]
        numeric = [j for j in fields if NUMBER_RE.fullmatch(parts[j])]
        words = [j for j in fields if _WORD_FIELD.fullmatch(parts[j])]  # a label, not JSON's punctuation
        for group in (numeric, words):
            pairs = [(x, y) for k, x in enumerate(group) for y in group[k + 1:] if parts[x] != parts[y]]
            if pairs:
                rows.append((i, parts, pairs))
    if rows:
        i, parts, pairs = rng.choice(rows)
        x, y = rng.choice(pairs)
        parts = list(parts)
        moved = [(parts[x], parts[y])] if NUMBER_RE.fullmatch(parts[x]) else []
        parts[x], parts[y] = parts[y], parts[x]
        new = b"\n".join(lines[:i] + [b"".join(parts)] + lines[i + 1:]) + end
        expect = expect_of(new, moved) if moved else (0.0 if sorted(new.split(b"\n")) != sorted(data.split(b"\n"))
                                                      else _reorder_expect(instruction))
        out.append(Mutant(f"fields_swapped@{path}:{i + 1}", path, new, expect))
    return [m for m in out if m.content != data]


_VALUE = re.compile(rb"[A-Za-z0-9]+")
_DIGITS = bytes.maketrans(b"0123456789", b"5678901234")


def format_only(data: bytes, instruction: str) -> bytes:
    """The same layout with other values: what an agent that only matched the format would write.
    Tokens the instruction states (a header, a key such as q1, a unit) are kept."""
    stated = set(re.findall(r"[a-z0-9]+", instruction.lower()))

    def swap(m: re.Match) -> bytes:
        tok = m.group()
        if tok.decode().lower() in stated:
            return tok
        return codecs.encode(tok.decode(), "rot13").encode().translate(_DIGITS)

    return _VALUE.sub(swap, data)


def _line_mutants(path: str, data: bytes, rng: random.Random, instruction: str) -> list[Mutant]:
    trailing = data.endswith(b"\n")
    lines = (data[:-1] if trailing else data).split(b"\n")
    nonempty = [i for i, ln in enumerate(lines) if ln.strip()]
    if not nonempty:
        return []
    end = b"\n" if trailing else b""
    out = []
    i = rng.choice(nonempty)
    out.append(Mutant(f"line_dropped@{path}:{i + 1}", path, b"\n".join(lines[:i] + lines[i + 1:]) + end, 0.0))
    out.append(Mutant(f"line_duplicated@{path}:{i + 1}", path,
                      b"\n".join(lines[: i + 1] + [lines[i]] + lines[i + 1:]) + end, 0.0))
    pairs = [j for j in nonempty if j + 1 < len(lines) and lines[j + 1].strip() and lines[j + 1] != lines[j]]
    if pairs:
        j = rng.choice(pairs)
        swapped = lines[:j] + [lines[j + 1], lines[j]] + lines[j + 2:]
        # Allowed where the instruction says so, answer-changing where it asks for an order.
        expect = _reorder_expect(instruction)
        out.append(Mutant(f"lines_reordered@{path}:{j + 1}", path, b"\n".join(swapped) + end, expect))
    return out


def mutants(task_dir: Path, outputs: dict[str, bytes], originals: dict[str, bytes | None] | None = None,
            seed: int = 0) -> list[Mutant]:
    """Named mutants of the oracle's `outputs` (sandbox path -> bytes). `originals` holds each
    path's content in the untouched environment (None if absent): for a program the agent fixes,
    restoring it restores the planted bug."""
    task_dir = Path(task_dir)
    instruction = (task_dir / "instruction.md").read_text()
    originals = originals or {}
    task = read_json(task_dir / "task.json") if (task_dir / "task.json").is_file() else {}
    kind = {**task.get("signature", {}), **task.get("actual", {})}.get("verifier_kind")
    # A composed task keeps its family's own check beside a strategy's: graded_as lists both.
    tolerant = "metric_threshold" in (task.get("graded_as") or [kind])
    rng = random.Random(f"mutation:{task_dir.name}:{seed}")
    out: list[Mutant] = []
    for path, data in sorted(outputs.items()):
        if len(data) > 1:
            out.append(Mutant(f"truncated@{path}", path, data[: len(data) // 2], 0.0))
        if _is_program(path, data):
            original = originals.get(path)
            if original is not None and original != data:
                out.append(Mutant(f"bug_restored@{path}", path, original, 0.0))
            continue
        fake = format_only(data, instruction)
        if fake != data:
            out.append(Mutant(f"format_only@{path}", path, fake, 0.0))
        out += _number_mutants(path, data, rng, tolerant)
        out += _line_mutants(path, data, rng, instruction)
        out += _exchange_mutants(path, data, rng, instruction, tolerant)
        if CASE_WORDS.search(instruction) and data.upper() != data and data.lower() != data.upper():
            out.append(Mutant(f"wrong_case@{path}", path, data.upper(), 0.0))
        if data.endswith(b"\n"):
            out.append(Mutant(f"trailing_blank_line@{path}", path, data + b"\n", 1.0))
    return out


def output_paths(task_dir: Path) -> list[str]:
    return list(read_json(Path(task_dir) / "task.json").get("output_paths") or [])


def _read_outputs(session, paths: list[str]) -> dict[str, bytes | None]:
    got = {}
    for p in paths:
        try:
            host = session._host_path(p)
            got[p] = host.read_bytes() if host.is_file() and not host.is_symlink() else None
        except Exception:  # noqa: BLE001 - an output the oracle did not leave is simply absent
            got[p] = None
    return got


# The kinds a bounded probe samples first: one of each, in this order (the ones that catch the
# verifier defects seen in practice: a test that checks only the format, a value off by one, a non-finite number, a line missing or
# repeated, a bug put back, the case changed), then the allowed perturbations.
PROBE_ORDER = ("bug_restored", "format_only", "number_plus_1", "numbers_scaled", "nan", "line_dropped", "line_duplicated",
               "wrong_case", "truncated", "inf", "number_minus_1", "lines_reordered", "trailing_blank_line")


# Values moved between keys and rows with every aggregate kept: a final test that checks only the
# set of keys, the total or the order passes them. Every one of these a task has is graded, beyond
# the `limit` sample.
EXCHANGE_KINDS = ("values_swapped", "values_rotated", "fields_swapped")


def select_mutants(candidates: list[Mutant], limit: int | None) -> list[Mutant]:
    """Every exchange mutant (EXCHANGE_KINDS) with a definite expectation, and at most `limit`
    others, one per kind in PROBE_ORDER first."""
    definite = [m for m in candidates if m.expect is not None]
    if limit is None or len(definite) <= limit:
        return definite
    always = [m for m in definite if m.name.split("@")[0] in EXCHANGE_KINDS]
    definite = [m for m in definite if m not in always]
    rank = {kind: i for i, kind in enumerate(PROBE_ORDER)}
    firsts, rest, seen = [], [], set()
    for m in sorted(definite, key=lambda m: (rank.get(m.name.split("@")[0], len(rank)), m.name)):
        kind = m.name.split("@")[0]
        (rest if kind in seen else firsts).append(m)
        seen.add(kind)
    return (firsts + rest)[:limit] + always


def mutation_probe(task_dir: Path, runtime, image, limits, limit: int | None = None, seed: int = 0,
                   names: tuple[str, ...] | None = None, seed_from_oracle: bool = False,
                   zero_check: bool = True, solved: SolvedApp | None = None) -> list[dict]:
    """Grade mutants of the oracle's outputs on a built image: each in a fresh session where the
    oracle ran and one output was replaced. `limit` bounds how many (select_mutants); `names`
    keeps those whose name starts with one of them. A task without output paths yields none.

    `seed_from_oracle` (validate.grade_pool's path): the oracle runs once, and each mutant's fresh
    session takes a copy of what it left in /app (quality/solved.py) instead of running the oracle
    again; `solved`: validation's own oracle run's copy, so the probe runs no oracle at all. Where
    nothing can be kept (quality/solved.py), the oracle runs per mutant as before.
    `zero_check`: an answer-changing mutant's grade stops at its first failing test
    (verifier.ZERO_CHECK: the same reward; its reason counts fewer tests)."""
    from termforge.grading.verifier import ZERO_CHECK, run_verifier

    task_dir = Path(task_dir)
    paths = output_paths(task_dir)
    if not paths:
        return []
    with runtime.start(image, limits) as untouched:
        originals = _read_outputs(untouched, paths)
    results = []
    solved_session, res = solve_in(runtime.start(image, limits), runtime, image, limits, task_dir, solved)
    own = None
    try:
        if res is not None and not res.ok:
            raise RuntimeError(f"task {task_dir.name}: the oracle failed: {res.tail(300)}")
        if res is not None and seed_from_oracle:  # the oracle ran here: its /app seeds the mutants
            own = SolvedApp()
            own.keep(solved_session, limits)
        seeds = solved if res is None else own
        outputs = {p: d for p, d in _read_outputs(solved_session, paths).items() if d is not None}
        candidates = [m for m in mutants(task_dir, outputs, originals, seed) if not names or m.name.startswith(names)]
        for mutant in select_mutants(candidates, limit) if limit is not None else candidates:
            session, _ = solve_in(runtime.start(image, limits), runtime, image, limits, task_dir, seeds)
            try:
                # Written in place: the file keeps its owner and mode (a program stays executable).
                session._host_path(mutant.path).write_bytes(mutant.content)
                verdict = run_verifier(session, task_dir, timeout=limits.wall_sec,
                                       options=ZERO_CHECK if zero_check and mutant.expect == 0.0 else ())
            finally:
                session.stop()
            ok = mutant.expect is None or verdict.reward == mutant.expect
            results.append({**mutant.to_dict(), "reward": verdict.reward, "ok": ok, "reason": verdict.reason})
    finally:
        solved_session.stop()
        if own is not None:
            own.close()
    return results


def run_mutants(task_dir: Path, runtime, images_dir: Path, limits, seed: int = 0,
                names: tuple[str, ...] | None = None) -> list[dict]:
    """Build the task and grade every mutant (or those whose name starts with one of `names`)."""
    build = runtime.build(Path(task_dir), images_dir)
    if not build.ok:
        raise RuntimeError(f"task {Path(task_dir).name}: build failed: {build.reason}")
    return mutation_probe(task_dir, runtime, build.image, limits, None, seed, names)


def kill_rate(results: list[dict]) -> dict:
    """Answer-changing mutants scored 0 (killed) and allowed ones scored 1, as counts and a rate."""
    wrong = [r for r in results if r["expect"] == 0.0]
    allowed = [r for r in results if r["expect"] == 1.0]
    killed = sum(1 for r in wrong if r["reward"] == 0.0)
    passed = sum(1 for r in allowed if r["reward"] == 1.0)
    return {"answer_changing": len(wrong), "killed": killed,
            "kill_rate": round(killed / len(wrong), 4) if wrong else None,
            "allowed": len(allowed), "allowed_passed": passed,
            "survivors": [r["name"] for r in wrong if r["reward"] != 0.0],
            "rejected_allowed": [r["name"] for r in allowed if r["reward"] != 1.0]}


__all__ = ["Mutant", "mutants", "select_mutants", "mutation_probe", "run_mutants", "kill_rate", "output_paths"]
