"""AIME evaluation: prompt, sample n answers per problem, grade the last box, report avg@n and friends.

Grading follows the reference protocol (docs/terminal-bench.md for Terminal-Bench): the answer is the content of the
LAST `\\boxed{}` anywhere in the output (thinking included), compared with math-verify. Only when
math-verify cannot parse one side does a normalised string comparison decide, and every verdict
records which of the two decided it, so a report can show how much rests on the weaker path.
"""

from __future__ import annotations

import csv
import io
import math
import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from termforge.errors import TermforgeError
from termforge.io import (
    append_jsonl,
    atomic_write_json,
    atomic_write_jsonl,
    atomic_write_text,
    read_jsonl_tolerant,
    stable_hash,
)
from termforge.mathdata import column_error, extract_boxed, read_rows
from termforge.metrics import pass_at_k

GRADING_PATHS = ("math_verify", "string", "unformatted")

# Where the two public AIME sets live on the Hub and how their columns are named. Checked against
# the dataset cards / common loaders: HuggingFaceH4/aime_2024 has one split "train" with columns
# id (int64), problem, solution, answer (string), url, year; yentinglin/aime_2025 has one split
# "train" with columns problem and answer (plus an id).
AIME_SOURCES: dict[str, dict[str, str]] = {
    "HuggingFaceH4/aime_2024": {"split": "train", "problem_col": "problem", "answer_col": "answer", "id_col": "id"},
    "yentinglin/aime_2025": {"split": "train", "problem_col": "problem", "answer_col": "answer", "id_col": "id"},
}

# ---------------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------------

# The last `\boxed{}` of an output is its answer: termforge.mathdata.extract_boxed, the math rows'
# own answer format (their reference solutions box their answers the same way).


# ---------------------------------------------------------------------------------------------
# Normalisation and grading
# ---------------------------------------------------------------------------------------------

_WRAPPERS = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_SPACING = re.compile(r"\\[,;:! ]|\\q?quad|\\left|\\right|~")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?")
_INTEGER = re.compile(r"[+-]?\d+")
_GROUPED_INTEGER = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+")
_INTEGRAL_DECIMAL = re.compile(r"([+-]?\d+)\.0*")


def normalize_answer(answer: str | None) -> str:
    """A canonical string for comparison and voting: AIME-style integers lose leading zeros,
    spacing, thousands commas and `$`; LaTeX spacing, `\\text{}` wrappers, degrees and percent signs
    go. It is a string normaliser, not algebra: `\\frac{1}{2}` and `0.5` stay different."""
    if answer is None:
        return ""
    s = str(answer).strip()
    s = s.strip("$").strip()
    s = _SPACING.sub(" ", s)
    while True:
        unwrapped = _WRAPPERS.sub(r"\1", s)
        if unwrapped == s:
            break
        s = unwrapped
    s = _DEGREES.sub("", s)
    s = s.replace("\\%", "").replace("%", "").replace("\\$", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\s+", "", s).rstrip(".")
    if _GROUPED_INTEGER.fullmatch(s):
        s = s.replace(",", "")
    integral = _INTEGRAL_DECIMAL.fullmatch(s)
    if integral:
        s = integral.group(1)
    if _INTEGER.fullmatch(s):
        return str(int(s))
    return s


def is_integer_answer(answer: str | None) -> bool:
    return bool(_INTEGER.fullmatch(normalize_answer(answer)))


def _timeout_seconds(timeout: float | None) -> int | None:
    # math-verify times out with SIGALRM: whole seconds, and only in the main thread. Elsewhere
    # (e.g. a grading thread pool) it would raise, so grading there runs without a timeout.
    if timeout is None or timeout <= 0 or threading.current_thread() is not threading.main_thread():
        return None
    return max(1, math.ceil(timeout))


def _parsed(latex: str, timeout_s: int | None) -> list[Any] | None:
    """math-verify's parse of `$\\boxed{latex}$`, or None when it yields no mathematical object
    (only its raw-string fallback, an error or a timeout)."""
    from math_verify import parse

    try:
        result = parse(f"$\\boxed{{{latex}}}$", parsing_timeout=timeout_s)
    except Exception:
        return None
    return result if any(not isinstance(r, str) for r in result) else None


def grade(pred: str | None, gold: str, timeout: float | None = 5.0) -> tuple[bool, str]:
    """Grade an extracted answer against the gold one.

    Returns (correct, path) where path is "math_verify" (both sides parsed and were compared
    symbolically/numerically), "string" (a side did not parse; normalised strings were compared)
    or "unformatted" (no answer was boxed, or the box was empty).
    """
    if pred is None or not pred.strip():
        return False, "unformatted"
    gold_text = str(gold).strip().strip("$").strip()
    timeout_s = _timeout_seconds(timeout)
    gold_parsed = _parsed(gold_text, timeout_s)
    pred_parsed = _parsed(pred.strip(), timeout_s) if gold_parsed is not None else None
    if gold_parsed is not None and pred_parsed is not None:
        from math_verify import verify

        try:
            return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout_s, raise_on_error=True)), "math_verify"
        except Exception:
            pass  # a comparison error or timeout: the string comparison below decides instead
    return normalize_answer(pred) == normalize_answer(gold_text), "string"


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


def default_ks(n: int) -> list[int]:
    """pass@k reported for k = 1, 2, 4, ... below n (pass@n itself is reported separately)."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks


def majority_answer(extracted: Sequence[str | None]) -> tuple[str | None, int | None]:
    """(winning normalised answer, index of its first sample) over the boxed answers; ties go to
    the answer that appeared first, so the vote never depends on dict or hash order."""
    keys = [normalize_answer(e) if e is not None and e.strip() else None for e in extracted]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return None, None
    first_seen: dict[str, int] = {}
    for i, k in enumerate(keys):
        if k is not None:
            first_seen.setdefault(k, i)
    winner = min(counts, key=lambda k: (-counts[k], first_seen[k]))
    return winner, first_seen[winner]


def _as_sample(item: Any) -> dict[str, Any]:
    if isinstance(item, str):
        return {"text": item, "completion_tokens": None}
    if isinstance(item, Mapping):
        return {"text": item.get("text") or "", "completion_tokens": item.get("completion_tokens")}
    if hasattr(item, "text"):
        return {"text": item.text or "", "completion_tokens": getattr(item, "completion_tokens", None)}
    raise TermforgeError(f"generation: expected a string, a mapping with 'text' or a completion, got {item!r:.200}")


def evaluate_generations(
    problems: Sequence[Mapping[str, Any]],
    generations: Sequence[Sequence[Any]],
    *,
    ks: Sequence[int] | None = None,
    timeout: float | None = 5.0,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Grade n samples per problem.

    problems: rows with id and answer. generations: per problem (same order), its n samples, each
    a string, a mapping with "text" (and optional "completion_tokens") or a completion object.
    Returns (summary, per_problem). Summary metrics are averaged over problems: avg@n (mean
    accuracy over all samples), pass@n (any sample correct), pass@k for each k in ks (unbiased
    estimator), maj@n (the majority answer is correct), formatted_rate (samples with a non-empty
    box). Each per-problem row carries its graded "samples".
    """
    if not problems:
        raise TermforgeError("AIME evaluation: no problems to evaluate")
    if len(generations) != len(problems):
        raise TermforgeError(
            f"AIME evaluation: {len(problems)} problems but {len(generations)} lists of generations"
        )
    n = len(generations[0])
    for problem, samples in zip(problems, generations):
        if len(samples) != n or n == 0:
            raise TermforgeError(
                f"AIME evaluation: problem {problem.get('id')!r} has {len(samples)} samples, "
                f"expected {n or 'at least 1'} like the first problem (avg@n needs the same n everywhere)"
            )
    ks = default_ks(n) if ks is None else sorted({int(k) for k in ks})
    bad = [k for k in ks if not 1 <= k <= n]
    if bad:
        raise TermforgeError(f"AIME evaluation: pass@k needs 1 <= k <= n={n}, got k={bad[0]}")

    verdict_cache: dict[tuple[str, str], tuple[bool, str]] = {}
    per_problem: list[dict[str, Any]] = []
    paths: Counter[str] = Counter()
    token_counts: list[int] = []
    for problem, raw_samples in zip(problems, generations):
        gold = str(problem["answer"]).strip()
        samples = []
        for index, item in enumerate(raw_samples):
            sample = _as_sample(item)
            extracted = extract_boxed(sample["text"])
            if extracted is None or not extracted.strip():
                correct, path = grade(extracted, gold, timeout)
            else:
                key = (extracted.strip(), gold)
                if key not in verdict_cache:
                    verdict_cache[key] = grade(extracted, gold, timeout)
                correct, path = verdict_cache[key]
            paths[path] += 1
            if isinstance(sample["completion_tokens"], int):
                token_counts.append(sample["completion_tokens"])
            samples.append({"sample": index, "extracted": extracted, "correct": correct, "grading_path": path,
                            "completion_tokens": sample["completion_tokens"], "text": sample["text"]})
        c = sum(s["correct"] for s in samples)
        maj, maj_index = majority_answer([s["extracted"] for s in samples])
        tokens = [s["completion_tokens"] for s in samples if isinstance(s["completion_tokens"], int)]
        row = {
            "id": str(problem["id"]),
            "answer": gold,
            "n": n,
            "correct": c,
            "accuracy": c / n,
            "pass": c > 0,
            "maj_answer": maj,
            "maj_correct": bool(maj_index is not None and samples[maj_index]["correct"]),
            "formatted": sum(s["grading_path"] != "unformatted" for s in samples),
            "graded_math_verify": sum(s["grading_path"] == "math_verify" for s in samples),
            "graded_string": sum(s["grading_path"] == "string" for s in samples),
            "mean_completion_tokens": (sum(tokens) / len(tokens)) if tokens else None,
            "samples": samples,
        }
        for k in ks:
            row[f"pass@{k}"] = pass_at_k(n, c, k)
        per_problem.append(row)

    count = len(per_problem)
    summary: dict[str, Any] = {
        "num_problems": count,
        "n": n,
        f"avg@{n}": sum(r["accuracy"] for r in per_problem) / count,
        f"pass@{n}": sum(r["pass"] for r in per_problem) / count,
        f"maj@{n}": sum(r["maj_correct"] for r in per_problem) / count,
    }
    for k in ks:
        summary[f"pass@{k}"] = sum(r[f"pass@{k}"] for r in per_problem) / count
    summary["formatted_rate"] = sum(r["formatted"] for r in per_problem) / (count * n)
    summary["grading_paths"] = {p: paths.get(p, 0) for p in GRADING_PATHS}
    summary["mean_completion_tokens"] = (sum(token_counts) / len(token_counts)) if token_counts else None
    return summary, per_problem


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------

_CSV_FIXED = ["id", "answer", "n", "correct", "accuracy", "pass", "maj_answer", "maj_correct", "formatted",
              "graded_math_verify", "graded_string", "mean_completion_tokens"]


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(round(value, 6))
    return str(value)


def write_results(
    out_dir: str | Path,
    summary: Mapping[str, Any],
    per_problem: Sequence[Mapping[str, Any]],
    generations: Sequence[Sequence[Any]] | None = None,
) -> dict[str, Path]:
    """Write per_problem.csv, generations.jsonl (one graded sample a line) and summary.json, each
    atomically. The sample texts come from per_problem's graded samples; `generations` (as given
    to evaluate_generations) is only needed for rows that carry no samples."""
    out = Path(out_dir)
    pass_columns = sorted((k for k in (per_problem[0] if per_problem else {}) if k.startswith("pass@")),
                          key=lambda k: int(k.split("@")[1]))
    columns = _CSV_FIXED + pass_columns
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in per_problem:
        writer.writerow([_csv_cell(row.get(c)) for c in columns])

    lines = []
    for i, row in enumerate(per_problem):
        samples = row.get("samples")
        if samples is None:
            if generations is None:
                raise TermforgeError(f"write_results: problem {row.get('id')!r} has no samples and no generations were given")
            samples = [dict(_as_sample(g), sample=j) for j, g in enumerate(generations[i])]
        for s in samples:
            lines.append({"problem_id": row["id"], "sample": s["sample"], "text": s["text"],
                          "completion_tokens": s.get("completion_tokens"), "extracted": s.get("extracted"),
                          "correct": s.get("correct"), "grading_path": s.get("grading_path")})

    paths = {"per_problem": out / "per_problem.csv", "generations": out / "generations.jsonl",
             "summary": out / "summary.json"}
    atomic_write_text(paths["per_problem"], buf.getvalue())
    atomic_write_jsonl(paths["generations"], lines)
    # The summary goes last: its presence means the other two are complete.
    atomic_write_json(paths["summary"], dict(summary))
    return paths


# ---------------------------------------------------------------------------------------------
# Data and prompting
# ---------------------------------------------------------------------------------------------


def load_aime(
    source: str,
    split: str | None = None,
    *,
    problem_col: str | None = None,
    answer_col: str | None = None,
    id_col: str | None = None,
    cache_dir: str | Path | None = None,
    where: str | None = None,
) -> list[dict[str, str]]:
    """Problems as [{id, problem, answer}] from a Hub id (known ids get their split and columns by
    default) or a local .jsonl/.json/.parquet file or dataset folder. Column names default to
    problem / answer / id; a missing id column numbers the problems from 0."""
    preset = AIME_SOURCES.get(source, {})
    split = split or preset.get("split", "train")
    problem_col = problem_col or preset.get("problem_col", "problem")
    answer_col = answer_col or preset.get("answer_col", "answer")
    id_col = id_col or preset.get("id_col", "id")
    rows, columns = read_rows(source, split, cache_dir=cache_dir)
    for key, col in (("problem_col", problem_col), ("answer_col", answer_col)):
        if col not in columns:
            raise column_error(source, col, columns, where and f"{where}.{key}")
    problems = []
    for index, row in enumerate(rows):
        raw_id = row.get(id_col) if id_col in columns else None
        problem = {
            "id": str(index if raw_id is None else raw_id),
            "problem": str(row[problem_col] or "").strip(),
            "answer": str(row[answer_col] if row[answer_col] is not None else "").strip(),
        }
        if not problem["problem"] or not problem["answer"]:
            raise TermforgeError(f"dataset {source}: row {index} (id {problem['id']}) has an empty problem or answer")
        problems.append(problem)
    if not problems:
        raise TermforgeError(f"dataset {source} (split {split!r}) has no rows")
    seen: Counter[str] = Counter(p["id"] for p in problems)
    dup = [i for i, c in seen.items() if c > 1]
    if dup:
        raise TermforgeError(f"dataset {source}: id {dup[0]!r} appears {seen[dup[0]]} times in column {id_col!r}")
    return problems


INSTRUCTION = (
    "Solve the following problem. Reason step by step, and put your final answer "
    "within \\boxed{}."
)


def build_prompt(problem: str, thinking: bool | None = None) -> list[dict[str, str]]:
    """The chat messages for one problem.

    thinking=True/False appends Qwen3's soft switch (`/think`, `/no_think`) that turns its
    reasoning mode on or off from inside the conversation, since the chat interface has no
    template flag; None adds no switch, for models that know nothing of it.
    """
    content = f"{INSTRUCTION}\n\n{problem.strip()}"
    if thinking is not None:
        content += "\n\n/think" if thinking else "\n\n/no_think"
    return [{"role": "user", "content": content}]


def _sampling_dict(sampling: Any) -> Any:
    if sampling is None:
        return None
    if hasattr(sampling, "to_dict"):
        return sampling.to_dict()
    return dict(sampling)


def run_aime_eval(
    model: Any,
    problems: Sequence[Mapping[str, Any]],
    n: int,
    sampling: Any,
    out_dir: str | Path,
    *,
    thinking: bool | None = None,
    batch_size: int = 8,
    ks: Sequence[int] | None = None,
    timeout: float | None = 5.0,
) -> dict[str, Any]:
    """Sample n completions per problem, grade them, write the results, return the summary.

    `model` needs `chat(messages, n=, sampling=)` returning objects with .text and
    .completion_tokens; when it also has `chat_many` (every termforge ChatModel does), problems go
    in batches of batch_size so in-process engines can batch them. Each finished batch is
    checkpointed in out_dir, so a killed run resumes without resampling what it already has.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TermforgeError(f"AIME evaluation: n must be an integer >= 1, got {n!r}")
    if batch_size < 1:
        raise TermforgeError(f"AIME evaluation: batch_size must be >= 1, got {batch_size!r}")
    out = Path(out_dir)
    checkpoint = out / ".generations.ckpt.jsonl"
    identity = model.identity() if hasattr(model, "identity") else {"model": repr(model)}
    # With sampling=None the model's own defaults apply; record those, not "null".
    sampling_spec = _sampling_dict(sampling if sampling is not None else getattr(model, "default_sampling", None))

    conversations = [build_prompt(str(p["problem"]), thinking) for p in problems]
    # A checkpoint line is reused only for the same model, prompt, n and sampling settings.
    keys = [stable_hash([identity, conv, n, sampling_spec]) for conv in conversations]
    done: dict[str, list[dict[str, Any]]] = {}
    for line in read_jsonl_tolerant(checkpoint):
        if isinstance(line, dict) and line.get("key") in keys and len(line.get("samples", [])) == n:
            done[line["key"]] = line["samples"]

    todo = [i for i, key in enumerate(keys) if key not in done]
    for start in range(0, len(todo), batch_size):
        chunk = todo[start : start + batch_size]
        if hasattr(model, "chat_many"):
            results = model.chat_many([conversations[i] for i in chunk], n=n, sampling=sampling)
        else:
            results = [model.chat(conversations[i], n=n, sampling=sampling) for i in chunk]
        for i, completions in zip(chunk, results):
            if len(completions) != n:
                raise TermforgeError(
                    f"AIME evaluation: the model returned {len(completions)} completions for problem "
                    f"{problems[i].get('id')!r}, expected n={n}"
                )
            samples = [_as_sample(c) for c in completions]
            append_jsonl(checkpoint, {"key": keys[i], "id": str(problems[i]["id"]), "samples": samples})
            done[keys[i]] = samples

    generations = [done[key] for key in keys]
    summary, per_problem = evaluate_generations(problems, generations, ks=ks, timeout=timeout)
    summary = {**summary, "model": identity, "sampling": sampling_spec, "thinking": thinking,
               "prompt_sha": stable_hash(INSTRUCTION)}
    write_results(out, summary, per_problem, generations)
    checkpoint.unlink(missing_ok=True)
    return summary


def problems_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Math-set rows ({id, problem, answer, ...}) reduced to what the evaluation reads."""
    return [{"id": str(r["id"]), "problem": str(r["problem"]), "answer": str(r["answer"])} for r in rows]
