"""Math problems with worked solutions: an offline generator and loaders for real data sets.

OPSD on math (docs/opsd.md) needs problems whose teacher context is a reference solution and
whose answers grade like AIME's (an integer in the last `\\boxed{}`). The generator makes such
problems offline from a seed, so the embedded run and the tests need no download; the loaders
read a real set (a Hub id or a local file) into the same row shape {id, problem, solution, answer}.
"""

from __future__ import annotations

import math
import random
import re
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Sequence

from termforge.errors import TermforgeError
from termforge.io import atomic_write_bytes, atomic_write_jsonl, seed_from, stable_hash

ROW_FIELDS = ("id", "problem", "solution", "answer")

Template = Callable[[random.Random], tuple[str, list[str], int]]


def _fmt(x: int) -> str:
    return f"({x})" if x < 0 else str(x)


def _ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


# Each template draws its parameters from rng and returns (problem, solution steps, answer); the
# steps are computed from the same numbers as the answer, so the worked text cannot drift from it.


def _arithmetic_series(rng: random.Random) -> tuple[str, list[str], int]:
    a, d, n = rng.randint(1, 40), rng.randint(2, 15), rng.randint(10, 60)
    last = a + (n - 1) * d
    total = n * (a + last) // 2
    problem = (f"An arithmetic sequence starts with {a}, and each term is {d} more than the term before it. "
               f"What is the sum of the first {n} terms?")
    steps = [
        f"The k-th term is {a} + (k - 1) * {d}, so the {_ordinal(n)} term is {a} + {n - 1} * {d} = {last}.",
        "The sum of an arithmetic sequence is the number of terms times the average of the first and last terms.",
        f"Sum = {n} * ({a} + {last}) / 2 = {n} * {a + last} / 2 = {n * (a + last)} / 2 = {total}.",
    ]
    return problem, steps, total


def _power_mod(rng: random.Random) -> tuple[str, list[str], int]:
    m = rng.choice([7, 9, 10, 11, 13, 17, 19, 23])
    base = rng.randint(2, 30)
    while math.gcd(base, m) != 1 or base % m in (0, 1):
        base = rng.randint(2, 30)
    exponent = rng.randint(100, 2025)
    r0 = base % m
    powers = [r0]
    while powers[-1] != 1:
        powers.append(powers[-1] * r0 % m)
    order = len(powers)
    reduced = exponent % order
    answer = 1 if reduced == 0 else powers[reduced - 1]
    problem = f"What is the remainder when {base}^{{{exponent}}} is divided by {m}?"
    steps = [f"Work modulo {m}."]
    if base >= m:
        steps.append(f"Since {base} = {base // m} * {m} + {r0}, we have {base} ≡ {r0} (mod {m}).")
    listing = ", ".join(f"{r0}^{k + 1} ≡ {p}" for k, p in enumerate(powers))
    steps.append(f"Successive powers: {listing} (mod {m}).")
    steps.append(f"The powers repeat with period {order}, because {r0}^{order} ≡ 1 (mod {m}).")
    steps.append(f"{exponent} = {exponent // order} * {order} + {reduced}, so {base}^{{{exponent}}} ≡ "
                 + (f"({r0}^{order})^{exponent // order} ≡ 1" if reduced == 0
                    else f"{r0}^{reduced} ≡ {answer}") + f" (mod {m}).")
    steps.append(f"The remainder is {answer}.")
    return problem, steps, answer


def _committee(rng: random.Random) -> tuple[str, list[str], int]:
    n, k = rng.randint(8, 18), rng.randint(3, 6)
    everyone = math.comb(n, k)
    both = math.comb(n - 2, k - 2)
    answer = everyone - both
    problem = (f"A club has {n} members, two of whom refuse to serve on a committee together. "
               f"In how many ways can a committee of {k} members be chosen?")
    steps = [
        f"Without the restriction there are C({n}, {k}) = {everyone} committees.",
        f"Committees containing both of the two members: choose the other {k - 2} from the remaining {n - 2}, "
        f"C({n - 2}, {k - 2}) = {both}.",
        f"Allowed committees: {everyone} - {both} = {answer}.",
    ]
    return problem, steps, answer


def _arrangements(rng: random.Random) -> tuple[str, list[str], int]:
    letters = rng.sample("ABCDEFGHKMNPRST", 3)
    counts = [rng.randint(1, 4) for _ in letters]
    length = sum(counts)
    answer = math.factorial(length)
    for c in counts:
        answer //= math.factorial(c)
    parts = ", ".join(f"{c} {'copy' if c == 1 else 'copies'} of {x}" for x, c in zip(letters, counts))
    problem = f"How many distinct strings of length {length} can be formed using exactly {parts}?"
    denominator = " * ".join(f"{c}!" for c in counts)
    denominator_value = math.prod(math.factorial(c) for c in counts)
    steps = [
        f"If all {length} letters were different there would be {length}! = {math.factorial(length)} orders.",
        f"Swapping identical letters gives the same string, so divide by {denominator} = {denominator_value}.",
        f"{math.factorial(length)} / {denominator_value} = {answer}.",
    ]
    return problem, steps, answer


def _linear_system(rng: random.Random) -> tuple[str, list[str], int]:
    while True:
        a, b, c, d = (rng.choice([v for v in range(-9, 10) if v]) for _ in range(4))
        det = a * d - b * c
        if det:
            break
    x, y = rng.randint(-15, 15), rng.randint(-15, 15)
    e, f = a * x + b * y, c * x + d * y
    ask, answer = rng.choice([("x + y", x + y), ("x * y", x * y), ("x^2 + y^2", x * x + y * y)])

    def side(p: int, q: int) -> str:
        return f"{p}x {'+' if q > 0 else '-'} {abs(q)}y"

    problem = f"Real numbers x and y satisfy {side(a, b)} = {e} and {side(c, d)} = {f}. Find {ask}."
    det_x, det_y = e * d - b * f, a * f - e * c
    steps = [
        f"Use Cramer's rule. The determinant is D = {_fmt(a)} * {_fmt(d)} - {_fmt(b)} * {_fmt(c)} = {det}.",
        f"D_x = {_fmt(e)} * {_fmt(d)} - {_fmt(b)} * {_fmt(f)} = {det_x}, so x = {det_x} / {_fmt(det)} = {x}.",
        f"D_y = {_fmt(a)} * {_fmt(f)} - {_fmt(e)} * {_fmt(c)} = {det_y}, so y = {det_y} / {_fmt(det)} = {y}.",
        f"Check: {side(a, b)} = {a * x} + {_fmt(b * y)} = {e} and {side(c, d)} = {c * x} + {_fmt(d * y)} = {f}.",
        f"Therefore {ask} = {answer}.",
    ]
    return problem, steps, answer


def _digit_sum(rng: random.Random) -> tuple[str, list[str], int]:
    a, b = rng.randint(100, 9999), rng.randint(12, 999)
    product = a * b
    digits = [int(ch) for ch in str(product)]
    answer = sum(digits)
    partials = []
    for place, ch in enumerate(reversed(str(b))):
        if ch != "0":
            partials.append((int(ch) * 10**place, a * int(ch) * 10**place))
    problem = f"What is the sum of the digits of {a} * {b}?"
    split = " + ".join(str(p) for p, _ in reversed(partials))
    steps = [
        f"Write {b} = {split} and multiply {a} by each part: "
        + ", ".join(f"{a} * {p} = {v}" for p, v in reversed(partials)) + ".",
        f"Adding the parts gives {a} * {b} = {product}.",
        f"Its digits sum to {' + '.join(map(str, digits))} = {answer}.",
    ]
    return problem, steps, answer


def _gcd_lcm(rng: random.Random) -> tuple[str, list[str], int]:
    g = rng.randint(2, 40)
    while True:
        p, q = rng.randint(2, 40), rng.randint(2, 40)
        if p != q and math.gcd(p, q) == 1:
            break
    x, y = max(g * p, g * q), min(g * p, g * q)
    gcd, lcm = math.gcd(x, y), x * y // math.gcd(x, y)
    answer = gcd + lcm
    problem = f"Let G be the greatest common divisor and L the least common multiple of {x} and {y}. What is G + L?"
    steps = ["Use the Euclidean algorithm:"]
    u, v = x, y
    while v:
        steps.append(f"{u} = {u // v} * {v} + {u % v}")
        u, v = v, u % v
    steps.append(f"The last non-zero remainder is G = {gcd}.")
    steps.append(f"L = {x} * {y} / G = {x * y} / {gcd} = {lcm}.")
    steps.append(f"G + L = {gcd} + {lcm} = {answer}.")
    return problem, steps, answer


def _same_colour_probability(rng: random.Random) -> tuple[str, list[str], int]:
    red, blue = rng.randint(2, 12), rng.randint(2, 12)
    total = red + blue
    pairs = math.comb(total, 2)
    same = math.comb(red, 2) + math.comb(blue, 2)
    prob = Fraction(same, pairs)
    answer = prob.numerator + prob.denominator
    problem = (f"A bag holds {red} red and {blue} blue marbles. Two marbles are drawn at random without "
               f"replacement. The probability that they have the same colour is m/n, where m and n are "
               f"relatively prime positive integers. Find m + n.")
    steps = [
        f"There are C({total}, 2) = {pairs} equally likely pairs.",
        f"Same-colour pairs: C({red}, 2) + C({blue}, 2) = {math.comb(red, 2)} + {math.comb(blue, 2)} = {same}.",
        (f"The probability is {same}/{pairs} = {prob.numerator}/{prob.denominator} in lowest terms "
         f"(dividing by their gcd, {math.gcd(same, pairs)})." if math.gcd(same, pairs) > 1
         else f"The probability is {same}/{pairs}, already in lowest terms."),
        f"m + n = {prob.numerator} + {prob.denominator} = {answer}.",
    ]
    return problem, steps, answer


def _divisor_count(rng: random.Random) -> tuple[str, list[str], int]:
    primes = [2, 3, 5, 7, 11]
    while True:
        exponents = {p: rng.randint(0, 4 if p < 5 else 2) for p in primes}
        value = math.prod(p**e for p, e in exponents.items())
        if sum(1 for e in exponents.values() if e) >= 2 and 100 <= value <= 10**7:
            break
    used = [(p, e) for p, e in exponents.items() if e]
    answer = math.prod(e + 1 for _, e in used)
    problem = f"How many positive divisors does {value} have?"
    factorisation = " * ".join(f"{p}^{e}" for p, e in used)
    steps = [f"Factor by repeated division: {value} = {factorisation}."]
    steps.append("A divisor picks each prime's exponent independently, from 0 up to its exponent in the factorisation.")
    steps.append("Number of divisors = " + " * ".join(f"({e} + 1)" for _, e in used) + f" = {answer}.")
    return problem, steps, answer


TEMPLATES: dict[str, Template] = {
    "arithmetic_series": _arithmetic_series,
    "power_mod": _power_mod,
    "committee": _committee,
    "arrangements": _arrangements,
    "linear_system": _linear_system,
    "digit_sum": _digit_sum,
    "gcd_lcm": _gcd_lcm,
    "probability": _same_colour_probability,
    "divisor_count": _divisor_count,
}


def make_problem(seed: int, index: int, attempt: int = 0) -> dict[str, str]:
    """Row `index` of the set for `seed`; templates take turns so every prefix is balanced, and a
    row depends only on (seed, index, attempt), not on how many rows are made."""
    names = sorted(TEMPLATES)
    template = names[index % len(names)]
    rng = random.Random(seed_from("mathdata", seed, index, attempt))
    problem, steps, answer = TEMPLATES[template](rng)
    solution = "\n".join(steps) + f"\n\nThe answer is $\\boxed{{{answer}}}$."
    return {
        "id": f"math-{template}-{stable_hash([seed, index, attempt, problem], 10)}",
        "problem": problem,
        "solution": solution,
        "answer": str(answer),
    }


def make_math_set(n: int, seed: int, heldout_fraction: float = 0.1) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """n distinct problems split into (train, heldout); no problem text appears in both.

    The held-out share is round(n * heldout_fraction), at least one row each side when the
    fraction is positive and n >= 2; which rows are held out is drawn from the seed.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TermforgeError(f"math set: n must be an integer >= 1, got {n!r}")
    if not 0 <= heldout_fraction < 1:
        raise TermforgeError(f"math set: heldout_fraction must be in [0, 1), got {heldout_fraction!r}")
    rows: list[dict[str, str]] = []
    seen: set[str] = set()
    for index in range(n):
        for attempt in range(100):
            row = make_problem(seed, index, attempt)
            if row["problem"] not in seen:
                break
        else:  # pragma: no cover - the parameter spaces are far larger than any requested n
            raise TermforgeError(f"math set: could not make a new problem for index {index} after 100 tries")
        seen.add(row["problem"])
        rows.append(row)
    n_heldout = round(n * heldout_fraction)
    if heldout_fraction > 0 and n >= 2:
        n_heldout = min(max(n_heldout, 1), n - 1)
    order = list(range(n))
    random.Random(seed_from("mathdata-heldout", seed, n)).shuffle(order)
    heldout_idx = set(order[:n_heldout])
    train = [r for i, r in enumerate(rows) if i not in heldout_idx]
    heldout = [r for i, r in enumerate(rows) if i in heldout_idx]
    return train, heldout


def rows_to_parquet_bytes(rows: Sequence[dict[str, Any]], fields: Sequence[str] = ROW_FIELDS) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(f, pa.string()) for f in fields])
    table = pa.Table.from_pylist([{f: row.get(f) for f in fields} for row in rows], schema=schema)
    sink = pa.BufferOutputStream()
    # Fixed writer options: the same rows give the same bytes on every run.
    pq.write_table(table, sink, compression="zstd", write_statistics=False)
    return sink.getvalue().to_pybytes()


def write_rows(out_dir: str | Path, stem: str, rows: Sequence[dict[str, Any]]) -> None:
    """<stem>.parquet and <stem>.jsonl in out_dir, each written atomically."""
    out = Path(out_dir)
    atomic_write_bytes(out / f"{stem}.parquet", rows_to_parquet_bytes(rows))
    atomic_write_jsonl(out / f"{stem}.jsonl", [{f: r.get(f) for f in ROW_FIELDS} for r in rows])


def write_math_set(out_dir: str | Path, n: int, seed: int, heldout_fraction: float = 0.1) -> dict[str, Any]:
    """Generate the set and write train/heldout .parquet and .jsonl; returns counts per split and
    per template."""
    train, heldout = make_math_set(n, seed, heldout_fraction)
    write_rows(out_dir, "train", train)
    write_rows(out_dir, "heldout", heldout)
    templates: dict[str, int] = {}
    for row in train + heldout:
        name = row["id"].split("-")[1]
        templates[name] = templates.get(name, 0) + 1
    return {"train": len(train), "heldout": len(heldout), "seed": seed, "templates": dict(sorted(templates.items()))}


# ---------------------------------------------------------------------------------------------
# Loading real data
# ---------------------------------------------------------------------------------------------

_LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")


_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def _braced_content(text: str, open_at: int) -> str | None:
    """The text between text[open_at] == '{' and its matching '}', or None when never closed."""
    depth = 0
    i = open_at
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            # `\{` and `\}` are literal braces in LaTeX, not grouping; skip the escaped character.
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
        i += 1
    return None


def extract_boxed(text: str | None) -> str | None:
    """The content of the last `\\boxed{...}` / `\\fbox{...}` / `\\boxed X` in text, or None.

    The last occurrence decides even when it is malformed (never closed, as in a truncated
    output): falling back to an earlier box would credit a guess made mid-thought. An empty box
    gives "" (the model boxed nothing), which grades as unformatted.
    """
    if not text:
        return None
    matches = list(_BOX_COMMAND.finditer(text))
    if not matches:
        return None
    end = matches[-1].end()
    rest = text[end:]
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        return _braced_content(text, end + (len(rest) - len(stripped)))
    if rest[:1].isspace() and stripped:
        # `\boxed 42` (TeX's undelimited argument): the answer runs to the next space or `$`.
        token = re.match(r"[^\s$]+", stripped)
        return token.group(0) if token else None
    return None


def column_error(source: str, column: str, columns: Sequence[str], where: str | None = None) -> TermforgeError:
    prefix = f"{where}: " if where else ""
    return TermforgeError(f"{prefix}dataset {source} has no column {column!r} (columns: {', '.join(columns)})")


def _columns_of(rows: Sequence[dict[str, Any]]) -> list[str]:
    columns: dict[str, None] = {}
    for row in rows:
        for key in row:
            columns.setdefault(key, None)
    return list(columns)


def read_rows(source: str, split: str = "train", cache_dir: str | Path | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows, column names) from a local .jsonl/.json/.parquet file (split ignored), a local
    dataset folder or a Hub id (both through `datasets.load_dataset`, which uses its cache when
    offline)."""
    path = Path(source).expanduser()
    if path.is_file():
        if path.suffix in _LOCAL_SUFFIXES:
            from termforge.schemas import read_dataset  # parse errors: one InputError naming the file

            rows = read_dataset(path)
            return rows, _columns_of(rows)
        raise TermforgeError(f"dataset {source}: unsupported file type {path.suffix!r} (expected one of {', '.join(_LOCAL_SUFFIXES)})")
    if not path.exists() and (source.endswith(_LOCAL_SUFFIXES) or source.startswith(("/", "./", "../", "~"))):
        raise TermforgeError(f"dataset {source}: no such file or folder")
    import datasets

    try:
        ds = datasets.load_dataset(str(path) if path.is_dir() else source, split=split,
                                   cache_dir=str(cache_dir) if cache_dir else None)
    except Exception as exc:  # datasets raises many types (network, missing split, bad files)
        raise TermforgeError(f"dataset {source} (split {split!r}) could not be loaded: {type(exc).__name__}: {exc}") from None
    return ds.to_list(), list(ds.column_names)


def load_math_dataset(
    source: str,
    problem_col: str = "problem",
    solution_col: str = "solution",
    answer_col: str | None = "answer",
    split: str = "train",
    *,
    id_col: str | None = None,
    cache_dir: str | Path | None = None,
    where: str | None = None,
) -> list[dict[str, str]]:
    """Rows {id, problem, solution, answer} from a Hub id or a local file/folder.

    answer_col=None takes the answer from the last box of the solution (sets such as OpenThoughts
    math carry only problem and solution); such rows without a box get answer "". Ids come from
    id_col when given, else the row's position. `where` (a config path) prefixes errors.
    """
    rows, columns = read_rows(source, split, cache_dir)
    wanted = [("problem_col", problem_col), ("solution_col", solution_col)]
    if answer_col is not None:
        wanted.append(("answer_col", answer_col))
    if id_col is not None:
        wanted.append(("id_col", id_col))
    for key, col in wanted:
        if col not in columns:
            raise column_error(source, col, columns, where and f"{where}.{key}")
    out = []
    for index, row in enumerate(rows):
        solution = "" if row.get(solution_col) is None else str(row[solution_col])
        if answer_col is not None:
            answer = "" if row.get(answer_col) is None else str(row[answer_col]).strip()
        else:
            answer = (extract_boxed(solution) or "").strip()
        out.append({
            "id": str(row[id_col]) if id_col is not None else f"row-{index}",
            "problem": "" if row.get(problem_col) is None else str(row[problem_col]),
            "solution": solution,
            "answer": answer,
        })
    return out


def generated_tokens_of(value: Any) -> int | None:
    """A row's reference generation length as an integer, or None when absent or not a count."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        count = int(value)
    except (TypeError, ValueError):
        return None
    return count if count == value or isinstance(value, str) else None


def answer_matches(answer: Any, pattern: str | re.Pattern) -> bool:
    """Whether the answer string, stripped of surrounding whitespace and nothing else, matches the
    pattern in full: the tuning trace's answer filter (`(ex["Answer"] or "").strip()`, then a full
    match), so " 42" and "42\\n" match -?\\d{1,6} while "+15", "1,000" or "12.0" do not."""
    return answer is not None and re.fullmatch(pattern, str(answer).strip()) is not None


def filter_rows(
    rows: Sequence[dict[str, Any]],
    where: str = "math data",
    *,
    answer_pattern: str | None = None,
    drop_empty_answers: bool = False,
    min_solution_chars: int = 0,
    min_generated_tokens: int = 0,
) -> list[dict[str, Any]]:
    """Keep the rows that pass every filter that is on, in order:

    * drop_empty_answers: the row's "answer" is not empty or whitespace;
    * answer_pattern (when not None): the row's "answer" string matches it in full (answer_matches);
    * min_solution_chars: the row's "solution" has at least that many characters;
    * min_generated_tokens (when > 0): the row's "generated_tokens" is at least that (a row without
      a count is dropped).

    With every filter off every row is kept, as the reference trains on every row of its set.
    Prints what it kept and why it dropped; raises when nothing is left, naming the settings to
    relax."""
    compiled = re.compile(answer_pattern) if answer_pattern is not None else None
    empty = unmatched = short = short_generation = 0
    kept = []
    for row in rows:
        answer = row.get("answer")
        if drop_empty_answers and not str(answer or "").strip():
            empty += 1
        elif compiled is not None and not answer_matches(answer, compiled):
            unmatched += 1
        elif len(str(row.get("solution") or "")) < min_solution_chars:
            short += 1
        elif min_generated_tokens and (row.get("generated_tokens") is None
                                       or row["generated_tokens"] < min_generated_tokens):
            short_generation += 1
        else:
            kept.append(row)
    reasons = []
    if drop_empty_answers:
        reasons.append(f"{empty} with an empty answer")
    if compiled is not None:
        reasons.append(f"{unmatched} with an answer not matching {answer_pattern}")
    if min_solution_chars:
        reasons.append(f"{short} with a solution under {min_solution_chars} characters")
    if min_generated_tokens:
        reasons.append(f"{short_generation} with a reference generation under {min_generated_tokens} tokens")
    print(f"{where}: kept {len(kept)} of {len(rows)} rows"
          + (f" (dropped {', '.join(reasons)})" if reasons else " (no filter on)"))
    if not kept:
        raise TermforgeError(
            f"{where}: no rows left after filtering {len(rows)} rows "
            f"(drop_empty_answers={drop_empty_answers} dropped {empty}, "
            f"answer_filter with answer_pattern={answer_pattern!r} dropped {unmatched}, "
            f"min_solution_chars={min_solution_chars} dropped {short}, "
            f"min_generated_tokens={min_generated_tokens} dropped {short_generation}); "
            f"relax {where}.answer_filter / {where}.answer_pattern, {where}.drop_empty_answers, "
            f"{where}.min_solution_chars or {where}.min_generated_tokens, or check the column names"
        )
    return kept
