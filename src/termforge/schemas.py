"""The shapes of the files the stages hand each other, checked in one place.

`read(kind, path)` parses an input of a named kind (io.load_json / load_jsonl / load_parquet),
checks its shape against the JSON Schema below and, where a file names other files (a manifest
naming task directories, a training summary naming its weights), that those exist. Every
failure is one InputError naming the file and the problem. Stage code reads its inputs through
here; the CLI checks each declared input argument through here before a command starts (see
termforge.cli), so a bad input stops a command before it writes anything.

Schemas require only what some reader uses: writers may add keys freely.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import fastjsonschema
import jsonschema

from termforge.config import _describe as describe_config_error, _key_path, read_yaml
from termforge.containment import TASK_ID_PATTERN, is_task_id, task_dir_entry_problem, task_id_problem
from termforge.errors import InputError, show_path, show_value
from termforge.io import load_json, load_jsonl, load_parquet, read_input_text, require_dir, stat_problem

_STR = {"type": "string"}
_STR_N = {"type": ["string", "null"]}
_INT = {"type": "integer"}
_INT_N = {"type": ["integer", "null"]}
_COUNT = {"type": "integer", "minimum": 0}
_NUM = {"type": "number"}
_NUM_N = {"type": ["number", "null"]}
_BOOL = {"type": "boolean"}
_STR_LIST = {"type": "array", "items": _STR}
# A task id: one safe path component (termforge.containment), wherever a file names a task.
_ID = {"type": "string", "pattern": TASK_ID_PATTERN}
_ID_LIST = {"type": "array", "items": _ID}


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict:
    return {"type": "object", "required": list(required), "properties": {**required, **(optional or {})}}


def _rows(item: dict) -> dict:
    return {"type": "array", "items": item}


def _map(value: dict, keys: dict | None = None) -> dict:
    """An object of free keys whose values all have one shape (keys optionally constrained)."""
    out = {"type": "object", "additionalProperties": value}
    if keys:
        out["propertyNames"] = keys
    return out


_COUNTS = _map(_COUNT)

# The axes of a task (signature, or what a family really produced): export writes each into a
# column and into task.toml, passk groups by them, so each is a string (skills: a list of them).
AXIS_NAMES = ("corpus_kind", "domain", "skill_type", "persona", "language", "anchor", "task_complexity",
              "command_complexity", "verifier_kind", "fixture_kind")
_AXES = {"type": "object", "properties": {**{k: _STR_N for k in AXIS_NAMES}, "domain": _STR, "skills": _STR_LIST}}

# Validation checks the whole task contract (quality.validate.TASK_JSON_KEYS) and drops a task
# that fails it; a reader needs the task's identity and signature, and whatever else it uses is
# checked to its leaves when present.
_TASK_OPTIONAL = {
    "instruction": _STR, "family": _STR,
    "mismatch": _rows(_obj({"axis": _STR})),
    "actual": _AXES,
    "output_paths": _STR_LIST,
    "environment": {"type": "object", "properties": {"apt_packages": _STR_LIST, "allow_network": _BOOL,
                                                     "timeout_sec": {"type": ["number", "null"], "minimum": 0},
                                                     "base_image": _STR_N, "base": _STR_N}},
    "generation": {"type": "object", "properties": {"fallback": _BOOL}},
    "provenance": {"type": "object"},
}
TASK_JSON = _obj({"id": _ID, "signature": {**_AXES, "required": ["domain"]}}, _TASK_OPTIONAL)
# What export writes into the dataset and task.toml, and generate into a shard manifest.
TASK_JSON_FULL = _obj({"id": _ID, "signature": {**_AXES, "required": ["domain"]}, "instruction": _STR,
                         "family": _STR, "mismatch": _TASK_OPTIONAL["mismatch"]}, _TASK_OPTIONAL)
SIGNATURE = _obj({"id": _ID, "index": {"type": "integer", "minimum": 0}, "skills": _STR_LIST}
                 | {k: _STR for k in ("domain", "corpus_kind", "skill_type", "persona", "language",
                                      "task_complexity", "command_complexity", "verifier_kind", "fixture_kind")},
                 {"anchor": _STR_N})
_COST_PHASE = {"type": ["object", "null"], "properties": {"input_tokens": _COUNT, "output_tokens": _COUNT,
                                                           "cost_usd": _NUM_N}}
_GENERATION_SUMMARY = {"type": "object", "properties": {
    "rejected_by_check": _COUNTS, "candidates": _COUNT, "repaired": _COUNT, "truncated_replies": _COUNT,
    # Request counters, and per failure kind (connection, timeout, http_429, ...) a count.
    "requests": _map({"anyOf": [{"type": ["integer", "number", "null"]}, _COUNTS]}),
    "cost": {"type": ["object", "null"], "required": ["actual"],
             "properties": {"planned": {**_COST_PHASE, "required": ["input_tokens", "output_tokens"]},
                            "actual": _COST_PHASE}}}}
SHARD_MANIFEST = _obj({"shard": _STR, "tasks_dir": _STR,
                       "tasks": _rows(_obj({"id": _ID}, {"family": _STR, "domain": _STR, "mismatch": _STR_LIST,
                                                        "fallback": _BOOL}))},
                      {"backend": _STR, "model": _STR_N,
                       "failed": _rows(_obj({"id": _ID}, {"domain": _STR, "step": _STR_N, "stage": _STR_N,
                                                         "reason": _STR_N, "record": _STR})),
                       "summary": _GENERATION_SUMMARY})
DECONTAM_REPORT = _obj({"flagged": _rows(_obj({"task_id": _ID, "reasons": _STR_LIST})), "dropped": _ID_LIST,
                        "summary": {"type": "object", "properties": {
                            **{k: _COUNT for k in ("tasks", "references", "contamination_hits", "contaminated_tasks",
                                                   "near_duplicate_tasks", "near_duplicate_clusters", "flagged",
                                                   "dropped", "kept")},
                            "contaminated_tasks_by_source": _COUNTS}}},
                       {"kept": _ID_LIST,
                        "params": {"type": "object", "properties": {"n": _COUNT, "policy": _STR,
                                                                    "near_dup_threshold": _NUM, "near_dups": _BOOL}},
                        "contamination": _rows(_obj({"task_id": _ID}, {"source": _STR, "ref_id": _STR,
                                                                      "shared_ngrams": _COUNT,
                                                                      "example_ngram": _STR_N})),
                        "near_duplicate_clusters": _rows(_obj({"kept": _ID, "size": _COUNT},
                                                              {"duplicates": _ID_LIST}))})
_EVIDENCE = {"type": "object", "properties": {"collected": _STR_LIST}}
VERDICTS = _obj({"shard": _STR, "tasks_dir": _STR,
                 "verdicts": _rows(_obj({"task_id": _ID, "kept": _BOOL, "stage": _STR, "reason": _STR},
                                        {"evidence": _EVIDENCE, "checks": _STR_LIST}))})
# The validate stage's per-step profile (runtime.accounting.StepProfile; a log of what each
# validation step cost, read by the report's cost section).
VALIDATE_PROFILE = _obj({"steps": _map(_obj({"count": _COUNT, "wall_s": _NUM, "cpu_s": _NUM},
                                            {"host_cpu_s": _NUM, "sandboxes": _COUNT,
                                             "cpu_unmeasured_sandboxes": _COUNT}))},
                        {"shard": _STR, "tasks": _COUNT, "workers": _COUNT})
CORPUS_MANIFEST = _obj({"kept": _ID_LIST, "tasks_dir": _STR_N},
                       {"dropped": _rows(_obj({"task_id": _ID}, {"stage": _STR, "reason": _STR})),
                        "task_dirs": _map(_STR, _ID),
                        "collected": _map(_STR_LIST, _ID),
                        "counts": {"type": "object", "properties": {"total": _COUNT, "kept": _COUNT,
                                                                    "dropped": _COUNT,
                                                                    "dropped_by_stage": _COUNTS}}})
SOLVE_RECORDS = _obj({"shard": _STR, "tasks_dir": _STR,
                      "rollouts": _rows(_obj({"task_id": _ID, "rollout": _COUNT, "status": _STR, "reward": _NUM_N},
                                             {"trajectory": _STR,
                                              "hacked": {"type": ["array", "boolean"], "items": _STR}}))},
                     {"k": _COUNT, "model": _STR})
TRAJECTORY = _obj({"messages": _rows(_obj({"role": _STR, "content": _STR}))})
# Terminal-Bench summaries (evals.tbench), the policy's and each control run's.
_TBENCH_SUMMARY = _obj({"mean_reward": _NUM_N},
                       {"n_tasks": _COUNT, "n_scored": _COUNT, "n_trials": _COUNT,
                        "pass_at_k": _map(_NUM_N, {"pattern": "^[0-9]+$"}),
                        "n_tasks_pass_at_k": _map(_COUNT, {"pattern": "^[0-9]+$"}),
                        "n_errors": _COUNT, "n_environment_errors": _COUNT,
                        "mean_by_key": _map(_NUM_N),
                        "unloadable_tasks": _rows({"type": "object"})})
# AIME summaries (evals.aime): every `metric@n` and the formatted rate are rates.
_AIME_SUMMARY = {"type": "object", "properties": {"num_problems": _COUNT, "formatted_rate": _NUM_N},
                 "patternProperties": {"@": _NUM_N}}
EVAL_RECORD = {**_obj({"model": _STR, "benchmark": _STR, "kind": {"type": "string", "enum": ["aime", "tbench"]},
                       "summary": {"type": "object"}}, {"controls": _map(_TBENCH_SUMMARY)}),
               "if": {"properties": {"kind": {"const": "tbench"}}},
               "then": {"properties": {"summary": _TBENCH_SUMMARY}},
               "else": {"properties": {"summary": _AIME_SUMMARY}}}
_KL = {"type": ["number", "null", "object"], "properties": {"kl_mean": _NUM_N}}
TRAIN_SUMMARY = _obj({"weights": _STR},
                     {"steps": _INT_N, "final_loss": _NUM_N,
                      "kl_probe": {"type": ["object", "null"], "properties": {"before": _KL, "after": _KL}},
                      "rl_pool": {"type": ["object", "null"], "properties": {
                          "rule": _STR, "pool": _COUNT, "pool_by_band": _COUNTS, "candidates_by_band": _COUNTS,
                          "fallback": _STR_N}}})
KL_PROBE = {"type": "object", "properties": {"before": _KL, "after": _KL}}
# The held-out reward probe (opsd.reward_probe.reward_probe_report): the report's training table.
REWARD_PROBE = _obj({}, {"before": _NUM_N, "after": _NUM_N, "delta": _NUM_N, "episodes_per_task": _INT_N,
                         "rows": _rows(_obj({"id": _ID}, {"before": _NUM_N, "after": _NUM_N, "delta": _NUM_N}))})
TRAIN_METRICS = _obj({}, {"step": _COUNT} | {k: _NUM_N for k in (
    "loss", "divergence_mean", "kl_mean", "clipped_fraction", "completion_len_mean", "completion_len",
    "tokens_per_s", "peak_memory_mb", "peak_mem_mb", "reward_mean", "opsd_loss", "grpo_loss", "groups_kept")}
                      | {"objective": _STR_N})
_AXIS_BALANCE = {"type": "object", "properties": {
    "possible": _COUNT, "observed": _COUNT, "normalised_effective_number": _NUM_N, "balance": _NUM_N,
    "counts": _COUNTS, "by_domain": _map({"type": "object", "properties": {"counts": _COUNTS}})}}
AXIS_STATS = _obj({"axes": _map(_AXIS_BALANCE)},
                  {"totals": {"type": "object", "properties": {
                      "n": _COUNT, "axes": _COUNT, "mean_normalised_effective_number": _NUM_N,
                      "min_normalised_effective_number": _NUM_N, "least_balanced_axis": _STR_N,
                      "anchor_rate": _NUM_N}}})
_RATES = _map(_NUM_N)
PASSK = _obj({"tasks": _COUNT, "overall": _RATES,
              "per_task": _rows(_obj({"task_id": _ID, "n": _COUNT, "c": _COUNT},
                                     {"family": _STR_N, "band": _STR, "infra_failed": _COUNT,
                                      "hacked_rollouts": _COUNT, "zero_pass": _BOOL,
                                      "pass_at_k": _map(_NUM_N, {"pattern": "^[0-9]+$"})}))},
             {"k_max": _COUNT, "by": _map(_map({"type": "object", "properties": {"tasks": _COUNT},
                                                 "patternProperties": {"@": _NUM_N}})),
              "bands": _COUNTS, "zero_pass": _ID_LIST, "infra_failed_rollouts": _COUNT, "sft_rows": _COUNT})
HINT_COVERAGE = {"type": "object", "properties": {
    "counts": _COUNTS, "overall": _COUNTS, "by_domain": _map(_COUNTS), "backend": _STR_N, "model": _STR_N,
    "repaired": _INT_N, "cleaned": _INT_N, "dropped_by_reason": _COUNTS,
    "checks": _map({"type": ["object", "null"], "required": ["calls", "cached", "flagged"],
                    "properties": {"calls": _COUNT, "cached": _COUNT, "flagged": _COUNT}}),
    "checks_corpus": _map({"type": ["object", "number", "string", "null"], "required": ["recall",
                                                                                       "false_positive_rate"],
                           "properties": {"recall": _NUM, "false_positive_rate": _NUM}})}}
MATH_ROW = _obj({"problem": _STR}, {"id": _STR, "answer": {"type": ["string", "integer"]}, "solution": _STR})
POLICY_SERVER = _obj({"base_url": _STR, "health_url": _STR, "model": _STR}, {"pid": _INT_N, "engine": _STR})
REVIEWS = _obj({"shard": _STR, "kind": {"type": "string", "enum": ["tasks", "traces"]},
                "reviews": _rows(_obj({"task_id": _ID,
                                       "status": {"type": "string",
                                                  "enum": ["reviewed", "dropped", "unparsed", "not_reviewed"]},
                                       "reason": _STR},
                                      {"rollout": _COUNT, "scores": _map(_INT), "reasons": _map(_STR),
                                       "summary": _STR}))},
               {"tasks_dir": _STR, "min_score": _INT, "rubric": _map(_STR), "counts": _COUNTS,
                "distribution": _map(_COUNTS),
                "stats": {"type": "object", "properties": {"judge": _STR_N, "calls": _COUNT,
                                                           "format_retries": _COUNT, "model": {"type": "object"}}}})


@dataclass(frozen=True)
class Kind:
    title: str                      # what the file is, for messages ("a shard manifest")
    fmt: str                        # json | jsonl | parquet | text | dir | config | dataset
    schema: dict | None = None      # JSON Schema of the document (json) or of each row (jsonl)
    columns: tuple[str, ...] = ()   # parquet columns readers use
    refs: Callable[[Path, Any], None] | None = None  # checks of the files the document names
    rows_required: bool = True      # jsonl/parquet: an empty file is an error
    hub_ids: bool = False           # dir: a value that does not look like a local path is a Hub id
    id_column: str | None = None    # parquet: the column of task ids (each a safe path component)
    text_columns: tuple[str, ...] = ()  # parquet: columns of text (or nulls)


def _describe(error: jsonschema.ValidationError) -> str:
    where = _key_path(error.absolute_path)
    if error.validator == "required":
        missing = next((k for k in error.validator_value if k not in error.instance), "?")
        return f"missing key {show_value(missing)}" + ("" if where == "<top level>" else f" in {where}")
    if error.validator in ("type", "enum") and not list(error.absolute_path):
        return f"expected {'a JSON ' + error.validator_value if error.validator == 'type' else error.message}, " \
               f"got {type(error.instance).__name__}"
    if error.validator == "pattern" and error.validator_value == TASK_ID_PATTERN:
        # (a key checked by propertyNames is reported here too, at the object holding it)
        return f"{where}: {task_id_problem(error.instance)}"
    if error.validator == "pattern":
        return f"{where}: {show_value(error.instance)} does not match {show_value(error.validator_value)}"
    return describe_config_error(error)


_FAST: dict[str, Callable[[Any], Any]] = {}


def check_shape(path: str | os.PathLike, kind: Kind, data: Any, row: int | None = None) -> None:
    # fastjsonschema compiles the schema to Python (about 20x faster than jsonschema on a
    # corpus-scale solve record); jsonschema then explains a failure with a key path.
    fast = _FAST.get(kind.title)
    if fast is None:
        fast = _FAST[kind.title] = fastjsonschema.compile(kind.schema)
    try:
        fast(data)
        return
    except fastjsonschema.JsonSchemaException:
        pass
    validator = jsonschema.Draft7Validator(kind.schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(list(e.absolute_path)), list(map(str, e.absolute_path))))
    if errors:
        where = f"row {row}: " if row is not None else ""
        raise InputError(path, f"{where}not {kind.title}: {_describe(errors[0])}")


# -- checks of the files a document names --------------------------------------------------------

def task_dir_problem(task_dir: str | os.PathLike, required: tuple[str, ...] = ("task.json",)) -> str | None:
    """Why task_dir is not a usable task directory (None when it is)."""
    # One stat per required file when all is well (a 15k-task manifest is checked task by task);
    # the pathlib checks below only run to word a problem.
    base = os.fspath(task_dir)
    try:
        if all(stat.S_ISREG(os.stat(f"{base}/{f}").st_mode) for f in required):
            return None
    except (OSError, ValueError):
        pass
    task_dir = Path(task_dir)
    problem = stat_problem(task_dir)
    if problem:
        return f"{show_path(task_dir)} {problem}"
    if not task_dir.is_dir():
        return f"{show_path(task_dir)} is not a directory"
    missing = [f for f in required if not (task_dir / f).is_file()]
    if missing:
        return f"{show_path(task_dir)} lacks {', '.join(missing)}"
    return None


def _refuse_tree(path: Path, tid: str, found: tuple[str, str] | None) -> None:
    """A task directory that holds what no task directory may hold (termforge.containment):
    the error names the offending entry, and the file that named the task."""
    if found:
        raise InputError(found[0], f"{found[1]} (task {tid}, named by {show_path(path)})")


def _check_task_dirs(path: Path, tasks_dir: Path, ids: list[str], required: tuple[str, ...]) -> None:
    if ids and not tasks_dir.is_dir():
        problem = stat_problem(tasks_dir) or "is not a directory"
        raise InputError(path, f"names tasks_dir {show_path(tasks_dir)}, which {problem}")
    base = os.fspath(tasks_dir)
    real_base = os.path.realpath(base) if ids else base
    suffixes = [f"/{rel}" for rel in required]
    only = suffixes[0] if len(suffixes) == 1 else None
    is_file, stat_of = stat.S_ISREG, os.stat
    for tid in ids:
        # The usual case inline, one stat per required file (a manifest names thousands of tasks:
        # a function call and a generator per task cost about what the stat costs);
        # task_dir_problem words a problem. The ids are safe path components (the schema).
        task_dir = f"{base}/{tid}"  # a str: a Path per task costs more than the check
        try:
            if (is_file(stat_of(task_dir + only).st_mode) if only is not None
                    else all(is_file(stat_of(task_dir + rel).st_mode) for rel in suffixes)):
                _refuse_tree(path, tid, task_dir_entry_problem(base, tid, real_base))
                continue
        except OSError:
            pass
        problem = task_dir_problem(task_dir, required)
        if problem and os.path.isdir(task_dir):  # a dangling symlink for task.json is named as one
            _refuse_tree(path, tid, task_dir_entry_problem(base, tid, real_base))
        if problem:
            raise InputError(path, f"task {tid}: {problem}")
        _refuse_tree(path, tid, task_dir_entry_problem(base, tid, real_base))


def _shard_refs(path: Path, data: dict) -> None:
    _check_task_dirs(path, Path(data["tasks_dir"]), [t["id"] for t in data["tasks"]], ("task.json",))


def kept_task_dirs(path: Path, data: dict) -> list[tuple[str, Path]]:
    """(task id, task dir) of a corpus manifest's kept tasks (a combined manifest maps each id)."""
    per_task = data.get("task_dirs") or {}
    base = data.get("tasks_dir")
    out = []
    for tid in data["kept"]:
        if tid in per_task:
            task_dir = Path(per_task[tid])
            if task_dir.name != tid:  # export and hints take a task's id from its directory's name
                raise InputError(path, f"task_dirs: task {tid} is mapped to {show_path(task_dir)}, a directory "
                                       f"of another name")
            out.append((tid, task_dir))
        elif base is None:
            raise InputError(path, f"task {tid}: no tasks_dir and no task_dirs entry says where it lives")
        else:
            out.append((tid, Path(base) / tid))
    return out


# The task contract: the files every task directory holds (validation keeps only tasks that do).
REQUIRED_FILES = ("task.json", "instruction.md", "environment/setup.sh", "tests/test_initial_state.py",
                  "tests/test_final_state.py", "tests/test.sh", "solution/solve.sh", "private/truth.json")


def _corpus_refs(path: Path, data: dict) -> None:
    for tid, task_dir in kept_task_dirs(path, data):
        problem = task_dir_problem(task_dir, REQUIRED_FILES)
        if not problem or task_dir.is_dir():
            _refuse_tree(path, tid, task_dir_entry_problem(task_dir.parent, tid))
        if problem:
            raise InputError(path, f"kept task {tid}: {problem}")


def _solve_refs(path: Path, data: dict) -> None:
    ids = sorted({r["task_id"] for r in data["rollouts"]})
    _check_task_dirs(path, Path(data["tasks_dir"]), ids, ("task.json",))


def _task_refs(path: Path, data: dict) -> None:
    # Export names the Harbor directory by the id and the private row by the directory: one name.
    if path.name == "task.json" and data["id"] != path.parent.name:
        raise InputError(path, f"id {show_value(data['id'])} does not match its directory's name "
                               f"{show_value(path.parent.name)}")


def _summary_refs(path: Path, data: dict) -> None:
    weights = Path(data["weights"])
    if not weights.is_dir():
        problem = stat_problem(weights) or "is not a directory"
        raise InputError(path, f"names weights {show_path(weights)}, which {problem}")


KINDS: dict[str, Kind] = {
    "signatures": Kind("a signature", "jsonl", SIGNATURE),
    "task": Kind("a task.json", "json", TASK_JSON),
    "full_task": Kind("a complete task.json", "json", TASK_JSON_FULL, refs=_task_refs),
    "shard_manifest": Kind("a shard manifest", "json", SHARD_MANIFEST, refs=_shard_refs),
    "decontam_report": Kind("a decontamination report", "json", DECONTAM_REPORT),
    "verdicts": Kind("a verdicts file", "json", VERDICTS),
    "corpus_manifest": Kind("a corpus manifest", "json", CORPUS_MANIFEST, refs=_corpus_refs),
    # A corpus manifest of another run (combine): its tasks_dir is relative to that run's folder,
    # so where its tasks live is the reader's to resolve.
    "any_corpus_manifest": Kind("a corpus manifest", "json", CORPUS_MANIFEST),
    "solve_records": Kind("a solve record", "json", SOLVE_RECORDS, refs=_solve_refs),
    "trajectory": Kind("a trajectory", "json", TRAJECTORY),
    "eval_record": Kind("an eval record", "json", EVAL_RECORD),
    "train_summary": Kind("a training summary", "json", TRAIN_SUMMARY, refs=_summary_refs),
    "kl_probe": Kind("a KL probe file", "json", KL_PROBE),
    "reward_probe": Kind("a held-out reward probe file", "json", REWARD_PROBE),
    "train_metrics": Kind("a training metrics row", "jsonl", TRAIN_METRICS, rows_required=False),
    "policy_server": Kind("a policy server file", "json", POLICY_SERVER),
    "axis_stats": Kind("an axis-balance stats file", "json", AXIS_STATS),
    "validate_profile": Kind("a validation profile", "json", VALIDATE_PROFILE),
    "passk": Kind("a pass@k table", "json", PASSK),
    "hint_coverage": Kind("a hint coverage file", "json", HINT_COVERAGE),
    "reviews": Kind("a rubric-review file", "json", REVIEWS),
    "demos": Kind("a demos table", "parquet", columns=("task_id", "demo"), rows_required=False,
                  id_column="task_id", text_columns=("demo",)),
    "math_rows": Kind("a math problem", "jsonl", MATH_ROW),
    "config": Kind("a config file", "config"),
    "dataset": Kind("a dataset", "dataset"),
    "text": Kind("a text file", "text"),
    "tasks_dir": Kind("a folder of task directories", "dir"),
    "results_dir": Kind("a results folder", "dir"),
    "harbor_source": Kind("a folder of Harbor tasks", "dir", hub_ids=True),
}


def read(kind: str, path: str | os.PathLike, check_refs: bool = True) -> Any:
    """Parse and check one input file of the named kind; InputError on any problem.

    check_refs=False skips the checks of the files a document names (the report summarises a
    results tree whose task directories may be gone)."""
    k = KINDS[kind]
    if k.fmt == "dataset":
        return read_dataset(path)
    path = Path(path)
    if k.fmt == "dir":
        if k.hub_ids and not looks_local(os.fspath(path)):
            return None  # a Hub dataset id: its fetcher reports its own errors
        return require_dir(path)
    if k.fmt == "config":
        return read_yaml(path)  # config files keep their ConfigError wording
    if path.is_dir():
        raise InputError(path, f"is a directory, expected {k.title} file")
    key = _identity(path, kind, check_refs)
    checked = key is not None and key in _CHECKED
    if k.fmt == "json":
        data = load_json(path)
        if not checked:
            check_shape(path, k, data)
    elif k.fmt == "jsonl":
        data = load_jsonl(path, require_rows=k.rows_required)
        for i, row in enumerate(data if not checked else [], 1):
            check_shape(path, k, row, row=i)
    elif k.fmt == "parquet":
        data = load_parquet(path, k.columns, require_rows=k.rows_required)
        if not checked:
            _check_columns(path, k, data)
    elif k.fmt == "text":
        data = read_input_text(path)
    else:  # pragma: no cover - a Kind is declared with one of the formats above
        raise ValueError(k.fmt)
    if check_refs and k.refs is not None and not checked:
        k.refs(path, data)
    if key is not None:
        _CHECKED.add(key)
    return data


def _check_columns(path: Path, kind: Kind, table) -> None:
    import pyarrow as pa

    for col in kind.text_columns + ((kind.id_column,) if kind.id_column else ()):
        typ = table.schema.field(col).type
        if not (pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_null(typ)):
            raise InputError(path, f"not {kind.title}: column {col!r} holds {typ}, expected text")
    if kind.id_column:
        for i, value in enumerate(table.column(kind.id_column).to_pylist(), 1):
            if not is_task_id(value):
                raise InputError(path, f"not {kind.title}: row {i}: column {kind.id_column!r}: "
                                       f"{task_id_problem(value)}")


# Files already checked in this process, by identity: the CLI checks each input before a command
# runs and the stage's reader reads it again; the schema check (jsonschema, ~0.1 ms a row) is
# what costs on a corpus-scale solve record, so it runs once per unchanged file.
_CHECKED: set[tuple] = set()


def _identity(path: Path, kind: str, check_refs: bool) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, kind, check_refs)


DATASET_SUFFIXES = (".jsonl", ".json", ".parquet")


def looks_local(source: str) -> bool:
    """A dataset source that names a local file or folder (not a Hugging Face Hub id)."""
    return (Path(source).expanduser().exists() or source.endswith(DATASET_SUFFIXES)
            or source.startswith(("/", "./", "../", "~")))


def read_dataset(source: str | os.PathLike) -> list[dict] | None:
    """Rows of a local dataset file (.jsonl, .json list or rows, .parquet); None for a Hub id or a
    dataset folder (datasets.load_dataset reads those and reports its own errors). Column names
    are the caller's to check: they come from the config."""
    source = os.fspath(source)
    if not looks_local(source):
        return None
    path = Path(source).expanduser()
    if path.is_dir():
        return None
    problem = stat_problem(path)
    if problem == "does not exist":
        raise InputError(source, "does not exist (expected a dataset file or folder)")
    if problem:
        raise InputError(source, problem)
    if path.suffix == ".parquet":
        rows = load_parquet(path, require_rows=True).to_pylist()
    elif path.suffix == ".json" and read_input_text(path).lstrip().startswith("["):
        rows = load_json(path)
        if not rows:
            raise InputError(source, "has no rows (an empty list)")
    elif path.suffix in (".jsonl", ".json"):
        rows = load_jsonl(path, require_rows=True)
    else:
        raise InputError(source, f"unsupported dataset file type {path.suffix!r} "
                                 f"(expected one of {', '.join(DATASET_SUFFIXES)})")
    bad = next((i for i, r in enumerate(rows, 1) if not isinstance(r, dict)), None)
    if bad is not None:
        raise InputError(source, f"row {bad} is not a JSON object")
    return rows


def read_optional(kind: str, path: str | os.PathLike, check_refs: bool = False) -> Any | None:
    """read() for an input that may be absent (None then)."""
    return read(kind, path, check_refs=check_refs) if Path(path).exists() else None


# setup.sh of a composed or anchored task is the family's own setup followed by steps that pack
# /app into the form the agent receives (generate.compose's container, generate.anchors' anchor).
# This line opens those steps. quality.sensitivity builds the environment as the family's setup
# left it (setup.sh up to here), perturbs one input alone, then runs the rest: per-input
# sensitivity (issue 40) holds on a packed task as on a plain one. One line, written once, before
# the first packing step (a container packed again by an anchor is still one tail).
SETUP_PACKING_MARK = "# termforge: from here on, setup packs /app into the form the task hands over"


def with_packing_step(setup_sh: str, step: str) -> str:
    """`setup_sh` followed by the packing `step`, the mark placed before the first such step."""
    head = setup_sh.rstrip("\n") + "\n"
    if SETUP_PACKING_MARK not in head.splitlines():
        head += SETUP_PACKING_MARK + "\n"
    return head + step


def split_packing(setup_sh: str) -> tuple[str, str]:
    """(the family's setup, the packing steps after it); the second is "" when nothing packs /app."""
    lines = setup_sh.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.rstrip("\n") == SETUP_PACKING_MARK:
            return "".join(lines[:i]), "".join(lines[i + 1:])
    return setup_sh, ""
