"""Prompt rows for OPSD: math problems with reference solutions, terminal tasks with hints.

Both kinds become one `PromptRow`: what the student sees (`prompt_messages`) and what only the
teacher sees (`privileged_context`). Data order is a pure function of (seed, step), so a resumed
run draws exactly the prompts the uninterrupted run would have drawn.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from termforge.containment import contained
from termforge.errors import ConfigError, TermforgeError
from termforge.io import seed_from
from termforge.opsd.config import OPSDConfig

__all__ = [
    "PromptRow",
    "apply_student_template",
    "load_math_rows",
    "load_prompt_rows",
    "load_terminal_rows",
    "math_prompt_rows",
    "split_probe_rows",
    "step_row_indices",
    "teacher_messages",
]


@dataclass(frozen=True)
class PromptRow:
    """One training prompt. prompt_messages: the student's chat (system/user turns, no reply);
    privileged_context: the reference solution (math) or hint (terminal) only the teacher sees."""

    id: str
    prompt_messages: tuple[dict[str, str], ...]
    privileged_context: str
    kind: str  # "math" or "terminal"
    problem: str = ""  # the problem (math) or instruction (terminal) that prompt templates render

    def messages(self) -> list[dict[str, str]]:
        return [dict(m) for m in self.prompt_messages]


def _with_user_content(messages: Sequence[dict[str, str]], content: str, row_id: str) -> list[dict[str, str]]:
    """The messages with the last user turn's content replaced (system turns stay as they are)."""
    out = [dict(m) for m in messages]
    for message in reversed(out):
        if message["role"] == "user":
            message["content"] = content
            return out
    raise TermforgeError(f"row {row_id}: the prompt has no user message for the prompt template")


def apply_student_template(rows: Sequence[PromptRow], cfg: OPSDConfig | None) -> list[PromptRow]:
    """Rows whose student user message is cfg's student template (explicit or the preset's), if any."""
    template = cfg.effective_student_template if cfg is not None else None
    if template is None:
        return list(rows)
    return [dataclasses.replace(r, prompt_messages=tuple(_with_user_content(
        r.prompt_messages, template.format(problem=r.problem), r.id))) for r in rows]


def math_prompt_rows(rows: Sequence[dict[str, Any]], cfg: OPSDConfig | None = None) -> list[PromptRow]:
    """{id, problem, solution, answer} rows (mathdata's shape) -> PromptRows. Problem and solution
    are used as stored, whitespace included, so a template renders them as the reference's f-strings
    do. Without a student template the student prompt is the AIME eval prompt, so training and
    evaluation ask the same way."""
    from termforge.evals.aime import build_prompt

    return apply_student_template(
        [PromptRow(id=str(r["id"]), prompt_messages=tuple(build_prompt(str(r["problem"]))),
                   privileged_context=str(r["solution"]), kind="math", problem=str(r["problem"]))
         for r in rows], cfg)


def _read_math_rows(source: str, cfg: OPSDConfig, where: str) -> list[dict[str, Any]]:
    from termforge.evals.aime import extract_boxed
    from termforge.mathdata import column_error, generated_tokens_of, read_rows

    # The configured set is what the run trains on: when it cannot be read (offline and not
    # cached, a typo in the id) the run stops here, naming the key, rather than fall back to
    # other data. datasets' messages span several lines; the first says what went wrong.
    key = f"{where}.dataset" if source == cfg.dataset and not where.endswith(".probe_dataset") else where
    try:
        raw, columns = read_rows(source, cfg.dataset_split)
    except TermforgeError as exc:
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise ConfigError(f"{key}: {first}") from None
    # Only the columns something reads are required: the reference reads problem and solution and
    # never the answer, so a set without the answer column trains unless an answer filter is on.
    reads_answer = cfg.answer_filter or cfg.drop_empty_answers
    lengths = cfg.generated_tokens_column if cfg.min_generated_tokens else None
    answers = cfg.answer_column if reads_answer else None
    wanted = [("problem_column", cfg.problem_column), ("solution_column", cfg.solution_column),
              ("answer_column", answers), ("id_column", cfg.id_column),
              ("generated_tokens_column", lengths)]
    for key, column in wanted:
        if column is not None and column not in columns:
            raise column_error(source, column, columns, f"{where}.{key}")
    rows = []
    for index, row in enumerate(raw):
        solution = "" if row.get(cfg.solution_column) is None else str(row[cfg.solution_column])
        if not reads_answer:
            answer = None
        elif cfg.answer_column is not None:
            # As stored: the trace's filter matches the raw string (mathdata.answer_matches).
            answer = None if row.get(cfg.answer_column) is None else str(row[cfg.answer_column])
        else:
            answer = extract_boxed(solution)
        rows.append({
            "id": str(row[cfg.id_column]) if cfg.id_column is not None else f"row-{index}",
            "problem": "" if row.get(cfg.problem_column) is None else str(row[cfg.problem_column]),
            "solution": solution,
            "answer": answer,
            "generated_tokens": generated_tokens_of(row.get(lengths)) if lengths else None,
        })
    return rows


def load_math_rows(cfg: OPSDConfig, source: str | None = None, where: str = "train") -> list[PromptRow]:
    """Read, filter (printing what is kept) and convert the math set named by `source` (default
    cfg.dataset). Errors name the config key: a missing column, a filter that keeps nothing."""
    from termforge.mathdata import filter_rows

    source = source or cfg.dataset
    if not source:
        raise ConfigError(f"{where}.dataset: data_kind math needs a dataset (a Hub id or a local file)")
    rows = _read_math_rows(source, cfg, where)
    try:
        kept = filter_rows(rows, where=where, answer_pattern=cfg.answer_pattern if cfg.answer_filter else None,
                           drop_empty_answers=cfg.drop_empty_answers, min_solution_chars=cfg.min_solution_chars,
                           min_generated_tokens=cfg.min_generated_tokens)
    except TermforgeError as exc:
        raise ConfigError(str(exc)) from None
    # A wrong solution column shows as every solution empty; single empty solutions train as the
    # reference trains them (the teacher then sees only the problem), and are counted.
    empty_solutions = sum(1 for r in kept if not r["solution"].strip())
    if empty_solutions == len(kept):
        raise ConfigError(f"{where}.solution_column: every kept row of {source} has an empty "
                          f"{cfg.solution_column!r}; the teacher would see no privileged context")
    if empty_solutions:
        print(f"{where}: {empty_solutions} kept rows have an empty solution (kept, as the reference keeps them; "
              f"set {where}.min_solution_chars to drop them)")
    if cfg.max_rows is not None:
        kept = kept[: cfg.max_rows]
    return math_prompt_rows(kept, cfg)


def load_terminal_rows(cfg: OPSDConfig, demos: str | None = None, tasks_dir: str | None = None,
                       where: str = "train") -> list[PromptRow]:
    """Tasks that have a hint: demos.parquet (task_id, demo) joined with each task's instruction.md.
    The student sees the harness's opening turns; the teacher additionally sees the hint."""
    from termforge.harness import initial_messages
    from termforge.schemas import read

    demos = demos or cfg.demos
    tasks_dir = tasks_dir or cfg.tasks_dir
    if not demos:
        raise ConfigError(f"{where}.demos: data_kind terminal needs the hints stage's demos.parquet")
    if not tasks_dir:
        raise ConfigError(f"{where}.tasks_dir: data_kind terminal needs the folder of task directories")
    if not Path(demos).is_file():
        raise ConfigError(f"{where}.demos: {demos} does not exist")
    table = read("demos", demos)
    rows, without_hint = [], 0
    for record in table.to_pylist():
        hint = (record.get("demo") or "").strip()
        if not hint:
            without_hint += 1  # reward-only task: nothing privileged to distil from
            continue
        instruction_path = contained(tasks_dir, record["task_id"], "instruction.md")  # ids checked by read()
        if not instruction_path.is_file():
            raise TermforgeError(f"task {record['task_id']}: listed in {demos} but {instruction_path} is missing")
        instruction = instruction_path.read_text()
        rows.append(PromptRow(id=str(record["task_id"]), prompt_messages=tuple(initial_messages(instruction)),
                              privileged_context=hint, kind="terminal", problem=instruction))
    print(f"{where}: kept {len(rows)} of {table.num_rows} tasks with a hint "
          f"(dropped {without_hint} without one)")
    if not rows:
        raise ConfigError(f"{where}.demos: no task in {demos} has a hint; nothing to distil")
    if cfg.max_rows is not None:
        rows = rows[: cfg.max_rows]
    return apply_student_template(rows, cfg)


def load_prompt_rows(cfg: OPSDConfig, where: str = "train") -> list[PromptRow]:
    if cfg.data_kind == "math":
        return load_math_rows(cfg, where=where)
    return load_terminal_rows(cfg, where=where)


def context_text(row: PromptRow, cfg: OPSDConfig) -> str:
    """The privileged context as the teacher reads it: the row's kind's context template filled in."""
    template = cfg.math_context_template if row.kind == "math" else cfg.terminal_context_template
    return template.format(context=row.privileged_context)


def teacher_messages(row: PromptRow, cfg: OPSDConfig) -> list[dict[str, str]]:
    """The teacher's chat. With a teacher template (explicit or the preset's), the student's chat
    whose user message is that template rendered; otherwise the student's prompt with the
    privileged context added where cfg.teacher_context_role says: prepended to the first user
    message, or appended to (or inserted as) the system message."""
    full = cfg.effective_teacher_template
    if full is not None:
        slot = "solution" if row.kind == "math" else "hint"
        content = full.format(**{"problem": row.problem, slot: row.privileged_context})
        return _with_user_content(row.prompt_messages, content, row.id)
    context = context_text(row, cfg)
    messages = row.messages()
    if cfg.teacher_context_role == "leading_system":
        return [{"role": "system", "content": context.strip()}] + messages
    if cfg.teacher_context_role == "system":
        if messages and messages[0]["role"] == "system":
            messages[0]["content"] = f"{messages[0]['content']}\n\n{context.strip()}"
        else:
            messages.insert(0, {"role": "system", "content": context.strip()})
        return messages
    for message in messages:
        if message["role"] == "user":
            message["content"] = context + message["content"]
            return messages
    raise TermforgeError(f"row {row.id}: the prompt has no user message to add the privileged context to")


def split_probe_rows(rows: Sequence[PromptRow], probe_size: int, seed: int
                     ) -> tuple[list[PromptRow], list[PromptRow]]:
    """(train, probe): probe_size rows drawn from the seed, kept out of training."""
    if probe_size <= 0:
        return list(rows), []
    if probe_size >= len(rows):
        raise ConfigError(f"train.probe_size: {probe_size} held-out rows would leave none of the "
                          f"{len(rows)} rows for training; lower it or set train.probe_dataset")
    order = list(range(len(rows)))
    random.Random(seed_from("opsd-probe", seed, len(rows))).shuffle(order)
    held = set(order[:probe_size])
    return ([r for i, r in enumerate(rows) if i not in held],
            [r for i, r in enumerate(rows) if i in held])


def step_row_indices(n_rows: int, step: int, prompts_per_step: int, seed: int) -> list[int]:
    """Which rows step `step` (0-based) trains on: consecutive slices of per-epoch permutations,
    so every row is seen once per epoch and any step's batch is known without replaying the run."""
    if n_rows < 1:
        raise TermforgeError("no training rows")
    out = []
    cache: dict[int, list[int]] = {}
    for position in range(step * prompts_per_step, (step + 1) * prompts_per_step):
        epoch, offset = divmod(position, n_rows)
        if epoch not in cache:
            order = list(range(n_rows))
            random.Random(seed_from("opsd-data-order", seed, n_rows, epoch)).shuffle(order)
            cache[epoch] = order
        out.append(cache[epoch][offset])
    return out
