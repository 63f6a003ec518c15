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

from termforge.errors import InputError
from termforge.io import load_json, load_jsonl, load_parquet, read_input_text, require_dir

_STR = {"type": "string"}
_STR_LIST = {"type": "array", "items": _STR}


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict:
    return {"type": "object", "required": list(required), "properties": {**required, **(optional or {})}}


def _rows(item: dict) -> dict:
    return {"type": "array", "items": item}


# Validation checks the whole task contract (quality.validate.TASK_JSON_KEYS) and drops a task
# that fails it; a reader only needs the task's identity and signature.
TASK_JSON = _obj({"id": _STR, "signature": {"type": "object"}},
                 {"instruction": _STR, "family": _STR, "mismatch": {"type": "array"}, "actual": {"type": "object"},
                  "environment": {"type": "object"}})
SIGNATURE = _obj({k: _STR for k in ("id", "domain", "corpus_kind", "skill_type", "persona", "language",
                                     "task_complexity", "command_complexity", "verifier_kind", "fixture_kind")}
                 | {"index": {"type": "integer"}, "skills": _STR_LIST})
SHARD_MANIFEST = _obj({"shard": _STR, "tasks_dir": _STR, "tasks": _rows(_obj({"id": _STR}))})
DECONTAM_REPORT = _obj({"flagged": _rows(_obj({"task_id": _STR, "reasons": _STR_LIST})), "dropped": _STR_LIST,
                        "summary": {"type": "object"}})
VERDICTS = _obj({"shard": _STR, "tasks_dir": _STR,
                 "verdicts": _rows(_obj({"task_id": _STR, "kept": {"type": "boolean"}, "stage": _STR,
                                         "reason": _STR}))})
CORPUS_MANIFEST = _obj({"kept": _STR_LIST, "tasks_dir": {"type": ["string", "null"]}},
                       {"dropped": _rows(_obj({"task_id": _STR})),
                        "task_dirs": {"type": "object", "additionalProperties": _STR}})
SOLVE_RECORDS = _obj({"shard": _STR, "tasks_dir": _STR,
                      "rollouts": _rows(_obj({"task_id": _STR, "rollout": {"type": "integer"}, "status": _STR,
                                              "reward": {"type": ["number", "null"]}},
                                             {"trajectory": _STR}))})
TRAJECTORY = _obj({"messages": _rows(_obj({"role": _STR}))})
EVAL_RECORD = {**_obj({"model": _STR, "benchmark": _STR, "kind": {"enum": ["aime", "tbench"]},
                       "summary": {"type": "object"}}),
               "if": {"properties": {"kind": {"const": "tbench"}}},
               "then": {"properties": {"summary": _obj({"mean_reward": {"type": ["number", "null"]}})}}}
TRAIN_SUMMARY = _obj({"weights": _STR})
AXIS_STATS = _obj({"axes": {"type": "object"}})
PASSK = _obj({"tasks": {"type": "integer"}, "overall": {"type": "object"}, "per_task": {"type": "array"}})
HINT_COVERAGE = {"type": "object"}
REVIEWS = _obj({"shard": _STR, "kind": {"enum": ["tasks", "traces"]},
                "reviews": _rows(_obj({"task_id": _STR, "status": {"enum": ["reviewed", "dropped", "unparsed",
                                                                              "not_reviewed"]},
                                       "reason": _STR}))})
MATH_ROW = _obj({"problem": _STR})


@dataclass(frozen=True)
class Kind:
    title: str                      # what the file is, for messages ("a shard manifest")
    fmt: str                        # json | jsonl | parquet | text | dir | config | dataset
    schema: dict | None = None      # JSON Schema of the document (json) or of each row (jsonl)
    columns: tuple[str, ...] = ()   # parquet columns readers use
    refs: Callable[[Path, Any], None] | None = None  # checks of the files the document names
    rows_required: bool = True      # jsonl/parquet: an empty file is an error
    hub_ids: bool = False           # dir: a value that does not look like a local path is a Hub id


def _describe(error: jsonschema.ValidationError) -> str:
    from termforge.config import _describe as describe_config_error, _key_path

    if error.validator == "required":
        missing = next((k for k in error.validator_value if k not in error.instance), "?")
        where = _key_path(error.absolute_path)
        return f"missing key {missing!r}" + ("" if where == "<top level>" else f" in {where}")
    if error.validator in ("type", "enum") and not list(error.absolute_path):
        return f"expected {'a JSON ' + error.validator_value if error.validator == 'type' else error.message}, " \
               f"got {type(error.instance).__name__}"
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
    except OSError:
        pass
    task_dir = Path(task_dir)
    if not task_dir.is_dir():
        return f"{task_dir} does not exist" if not task_dir.exists() else f"{task_dir} is not a directory"
    missing = [f for f in required if not (task_dir / f).is_file()]
    if missing:
        return f"{task_dir} lacks {', '.join(missing)}"
    return None


def _check_task_dirs(path: Path, tasks_dir: Path, ids: list[str], required: tuple[str, ...]) -> None:
    if ids and not tasks_dir.is_dir():
        raise InputError(path, f"names tasks_dir {tasks_dir}, which does not exist")
    base = os.fspath(tasks_dir)
    suffixes = [f"/{rel}" for rel in required]
    only = suffixes[0] if len(suffixes) == 1 else None
    is_file, stat_of = stat.S_ISREG, os.stat
    for tid in ids:
        # The usual case inline, one stat per required file (a manifest names thousands of tasks:
        # a function call and a generator per task cost about what the stat costs);
        # task_dir_problem words a problem.
        task_dir = f"{base}/{tid}"  # a str: a Path per task costs more than the check
        try:
            if (is_file(stat_of(task_dir + only).st_mode) if only is not None
                    else all(is_file(stat_of(task_dir + rel).st_mode) for rel in suffixes)):
                continue
        except OSError:
            pass
        problem = task_dir_problem(task_dir, required)
        if problem:
            raise InputError(path, f"task {tid}: {problem}")


def _shard_refs(path: Path, data: dict) -> None:
    _check_task_dirs(path, Path(data["tasks_dir"]), [t["id"] for t in data["tasks"]], ("task.json",))


def kept_task_dirs(path: Path, data: dict) -> list[tuple[str, Path]]:
    """(task id, task dir) of a corpus manifest's kept tasks (a combined manifest maps each id)."""
    per_task = data.get("task_dirs") or {}
    base = data.get("tasks_dir")
    out = []
    for tid in data["kept"]:
        if tid in per_task:
            out.append((tid, Path(per_task[tid])))
        elif base is None:
            raise InputError(path, f"task {tid}: no tasks_dir and no task_dirs entry says where it lives")
        else:
            out.append((tid, Path(base) / tid))
    return out


def _corpus_refs(path: Path, data: dict) -> None:
    from termforge.quality.validate import REQUIRED_FILES  # the task contract validation kept them by

    for tid, task_dir in kept_task_dirs(path, data):
        problem = task_dir_problem(task_dir, REQUIRED_FILES)
        if problem:
            raise InputError(path, f"kept task {tid}: {problem}")


def _solve_refs(path: Path, data: dict) -> None:
    ids = sorted({r["task_id"] for r in data["rollouts"]})
    _check_task_dirs(path, Path(data["tasks_dir"]), ids, ("task.json",))


def _summary_refs(path: Path, data: dict) -> None:
    weights = Path(data["weights"])
    if not weights.is_dir():
        raise InputError(path, f"names weights {weights}, which {'is not a directory' if weights.exists() else 'does not exist'}")


KINDS: dict[str, Kind] = {
    "signatures": Kind("a signature", "jsonl", SIGNATURE),
    "task": Kind("a task.json", "json", TASK_JSON),
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
    "axis_stats": Kind("an axis-balance stats file", "json", AXIS_STATS),
    "passk": Kind("a pass@k table", "json", PASSK),
    "hint_coverage": Kind("a hint coverage file", "json", HINT_COVERAGE),
    "reviews": Kind("a rubric-review file", "json", REVIEWS),
    "demos": Kind("a demos table", "parquet", columns=("task_id", "demo"), rows_required=False),
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
        from termforge.config import read_yaml  # config files keep their ConfigError wording

        return read_yaml(path)
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
    elif k.fmt == "text":
        data = read_input_text(path)
    else:  # pragma: no cover - a Kind is declared with one of the formats above
        raise ValueError(k.fmt)
    if check_refs and k.refs is not None and not checked:
        k.refs(path, data)
    if key is not None:
        _CHECKED.add(key)
    return data


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
    if not path.exists():
        raise InputError(source, "does not exist (expected a dataset file or folder)")
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
