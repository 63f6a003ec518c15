"""Loading, merging and validating config.yaml and its overlays.

The schema (workflow/schemas/config.schema.yaml) is the single description of every key. Both
the Snakefile and the CLI call `check_config`, which fills defaults and raises one ConfigError
whose message names the key path and what was expected. What each job checks when it starts
(model specs, the trainer's combinations, sampling) is the plan-time check of the layer above,
termforge.plancheck.planned_config: this module knows no stage.
"""

from __future__ import annotations

import copy
import functools
import math
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from termforge.errors import ConfigError, os_error_problem, show_key, show_path, show_value
from termforge.yamlload import load_yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = Path(os.environ.get("TERMFORGE_SCHEMA", REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"))


def load_schema() -> dict:
    """The schema (a fresh copy each call). Parsed once per process: every ablation's config is
    validated against it at plan time, and parsing the YAML costs about 0.4 s each time."""
    if not SCHEMA_PATH.exists():
        raise ConfigError(f"config schema not found at {SCHEMA_PATH} (set TERMFORGE_SCHEMA)")
    return copy.deepcopy(_parsed_schema(SCHEMA_PATH, SCHEMA_PATH.stat().st_mtime_ns))


@functools.lru_cache(maxsize=4)
def _parsed_schema(path: Path, mtime_ns: int) -> dict:
    with open(path, encoding="utf-8") as fh:
        return load_yaml(fh.read(), path)


def deep_merge(base: dict, overlay: dict) -> dict:
    """Overlay wins; nested mappings merge key by key; lists and scalars are replaced whole."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# A config file is a few kilobytes; PyYAML takes minutes on tens of megabytes, so a file this
# large is refused by its size before it is parsed.
MAX_CONFIG_BYTES = 1 << 20


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    shown = show_path(path)
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise ConfigError(f"config file {shown} {os_error_problem(exc)}") from None
    if path.is_dir():
        raise ConfigError(f"config file {shown} is a directory, not a file")
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {shown} is {size:,} bytes, more than a config file may be "
                          f"({MAX_CONFIG_BYTES:,}); not parsed")
    try:
        with open(path, encoding="utf-8") as fh:
            data = load_yaml(fh.read(), f"config file {shown}")
    except yaml.YAMLError as exc:
        # One line: the YAML error's own text spans several (the offending line and a caret).
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1} column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"config file {shown} is not valid YAML{where}: {show_value(problem)[1:-1]}") from None
    except OSError as exc:
        raise ConfigError(f"config file {shown} {os_error_problem(exc)}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {shown} is not UTF-8 text") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {shown}: the top level must be a mapping, got {type(data).__name__}")
    return data


def check_config_files(paths: list[str | Path]) -> None:
    """Each config file reads as termforge reads it (one ConfigError naming a key written twice,
    and both its lines): for the files Snakemake loaded itself."""
    for path in paths:
        read_yaml(path)


def load_config(paths: list[str | Path]) -> dict:
    """Merge config files left to right (base first, overlays after) and validate."""
    merged: dict = {}
    for p in paths:
        merged = deep_merge(merged, read_yaml(p))
    return check_config(merged)


BASE_CONFIG = "config.yaml"

# What every termforge command's --configfile says in its --help (one meaning everywhere).
CONFIGFILE_HELP = ("overlays merged over ./config.yaml in the order given: config.yaml first, then each file, "
                   "mappings key by key and lists replaced whole, the same merge as `snakemake --configfile` "
                   "(naming config.yaml first, as snakemake commands do, changes nothing)")


def config_paths(overlays: list[str | Path] | None, base: str | Path = BASE_CONFIG) -> list[Path]:
    """The files a command's `--configfile` names, in merge order: ./config.yaml (the workflow's own
    configfile, as Snakemake reads it in this folder) when it exists, then the overlays. An overlay
    that is config.yaml itself right after it is dropped (merging a file twice changes nothing)."""
    base = Path(base)
    paths = [Path(o) for o in overlays or []]
    if not base.is_file():
        return paths
    if paths and _same_file(paths[0], base):
        paths = paths[1:]
    return [base, *paths]


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def load_overlays(overlays: list[str | Path] | None, base: str | Path = BASE_CONFIG) -> dict:
    """The validated config a command's `--configfile` overlays give (config_paths, load_config)."""
    paths = config_paths(overlays, base)
    if not paths:
        raise ConfigError(f"no {base} in {Path.cwd()} and no --configfile given: nothing to configure the run")
    return load_config(paths)


def _key_path(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{show_key(part)}" if out else show_key(part))
    return out or "<top level>"


def _describe(error: jsonschema.ValidationError) -> str:
    where = _key_path(error.absolute_path)
    v = error.validator
    if v == "additionalProperties":
        allowed = sorted((error.schema.get("properties") or {}).keys())
        extra = sorted(map(str, set(error.instance) - set(allowed))) if isinstance(error.instance, dict) else []
        name = show_key(extra[0]) if extra else ""
        key = f"{where}.{name}" if extra and where != "<top level>" else (name if extra else where)
        return f"{key}: unknown key (allowed here: {', '.join(allowed)})"
    if v == "enum":
        return f"{where}: {show_value(error.instance)} is not one of {', '.join(map(str, error.validator_value))}"
    if v == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        return f"{where}: expected {expected}, got {type(error.instance).__name__} {show_value(error.instance)}"
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return f"{where}: {show_value(error.instance)} is out of range ({v} {error.validator_value})"
    if v == "pattern" and error.validator_value == SAFE_NAME_PATTERN:
        return (f"{where}: {show_value(error.instance)} is not a safe name (it names a folder: letters, digits, "
                f"'.', '_' and '-', starting with a letter or digit)")
    if v == "pattern":
        return f"{where}: {show_value(error.instance)} does not match {show_value(error.validator_value)}"
    # jsonschema's own wording embeds the whole instance: shorten it.
    return f"{where}: {show_value(error.message, 200)[1:-1]}"


# The schema's pattern for names that become folders (run_name, ablation names).
SAFE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*(?![\s\S])"


def _with_defaults(validator_cls):
    """A validator that fills schema defaults into the instance as it validates."""
    validate_properties = validator_cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_cls, {"properties": set_defaults})


# A number in exponent form without a dot (1e-05): YAML 1.2 reads it as a number, PyYAML (YAML 1.1,
# which Snakemake and termforge read config files with) as a string. DVC writes YAML 1.2, and
# `dvc exp run -S config.yaml:train.learning_rate=1e-5` writes exactly this.
_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _exponent_floats(node, schema: dict) -> None:
    """Read such strings as the numbers they are, where the schema expects a number."""
    if not isinstance(node, dict) or not isinstance(schema, dict):
        return
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for key, value in node.items():
        sub = props.get(key, extra if isinstance(extra, dict) else None)
        if not isinstance(sub, dict):
            continue
        types = sub.get("type")
        types = types if isinstance(types, list) else [types]
        if isinstance(value, str) and "number" in types and _EXPONENT_FLOAT.fullmatch(value):
            node[key] = float(value)
        else:
            _exponent_floats(value, sub)


def check_config(config: dict) -> dict:
    """Validate (filling defaults) and return a new config dict; raise one ConfigError on the first problem."""
    schema = load_schema()
    cfg = copy.deepcopy(config)
    _exponent_floats(cfg, schema)
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (len(list(e.absolute_path)), _key_path(e.absolute_path)))
    if errors:
        raise ConfigError(_describe(errors[0]))
    _check_semantics(cfg)
    return cfg


def _check_semantics(cfg: dict) -> None:
    """Rules JSON Schema cannot say."""
    mix = cfg["corpus"]["mix"]
    total = sum(mix.values())
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise ConfigError(f"corpus.mix: shares must sum to 1, got {total:g} ({mix})")
    if cfg["corpus"]["shard_size"] > cfg["corpus"]["n_tasks"]:
        cfg["corpus"]["shard_size"] = cfg["corpus"]["n_tasks"]
    tax = cfg["corpus"].get("taxonomy")
    if tax and not Path(tax).exists():
        raise ConfigError(f"corpus.taxonomy: file {tax} does not exist")
    judge = (cfg.get("review") or {}).get("judge")
    if judge and judge not in (cfg.get("models") or {}):
        raise ConfigError(f"review.judge: model {judge!r} is not defined under models")
    for name in run_ablations(cfg):  # each ablation that runs merges into a config the schema accepts
        ablation_config(cfg, name)


def run_ablations(cfg: dict) -> list[str]:
    """The ablations this config trains and evaluates, sorted: the names `ablations_only` lists
    when it is set, else every ablation defined.

    Config files merge mapping by mapping (Snakemake's `--configfile a b` as termforge's), so an
    overlay can add ablations but not remove config.yaml's. `ablations_only` is a list, and a list
    is replaced whole by the merge, so the last file that sets it decides the set exactly."""
    ablations = cfg.get("ablations") or {}
    only = cfg.get("ablations_only")
    if only is None:
        return sorted(ablations)
    for i, name in enumerate(only):
        if name not in ablations:
            raise ConfigError(f"ablations_only[{i}]: no ablation {name!r} is defined "
                              f"(defined: {', '.join(sorted(ablations)) or 'none'})")
    return sorted(set(only))


def ablation_config(cfg: dict, name: str) -> dict:
    """The config an ablation runs with: its train/eval overrides merged over the base config.
    `base` is the untrained policy under the base config. A schema error in the merged config is
    `ablations.<name>: <key>: <problem>`."""
    if name == "base":
        return cfg
    ablations = cfg.get("ablations") or {}
    if name not in ablations:
        raise ConfigError(f"ablations.{name}: no such ablation (defined: {', '.join(sorted(ablations)) or 'none'})")
    if name not in run_ablations(cfg):
        raise ConfigError(f"ablations.{name}: not run (ablations_only: {', '.join(cfg['ablations_only']) or 'none'})")
    merged = deep_merge({k: v for k, v in cfg.items() if k not in ("ablations", "ablations_only")}, ablations[name])
    try:
        checked = check_config(merged)
    except ConfigError as exc:
        raise ConfigError(f"ablations.{name}: {exc}") from None
    checked["ablations"] = ablations
    checked["ablations_only"] = cfg.get("ablations_only")
    return checked


def model_names(cfg: dict) -> list[str]:
    """Everything the eval stage evaluates: the base policy, then each ablation's trained policy."""
    return ["base", *run_ablations(cfg)]


def shard_ids(cfg: dict) -> list[str]:
    n, size = cfg["corpus"]["n_tasks"], cfg["corpus"]["shard_size"]
    return [f"{i:05d}" for i in range(math.ceil(n / size))]


def section(cfg: dict, *keys: str) -> Any:
    node: Any = cfg
    for k in keys:
        node = node[k]
    return node


# -- nested `snakemake --config` values ------------------------------------------------------------
# Snakemake parses `--config key=value` with int, float and bool for a top-level value but hands a
# nested one (`corpus={n_tasks: 6}`) to YAML's BaseLoader, which keeps every scalar a string.
# coerce_cli_overrides converts such a string by the type the schema gives its key, so nested
# overrides work; a string that is not of that type ('abc' for an integer) is left alone, and
# check_config then names the key and the value.

def _schema_at(schema: dict, path: list[str], root: dict) -> dict | None:
    node: dict | None = schema
    for i, key in enumerate(path):
        if node is None:
            return None
        if i == 2 and path[0] == "ablations" and key in ("train", "eval"):
            # An ablation overrides train/eval keys: below it, their schema is the top level's.
            node = (root.get("properties") or {}).get(key)
            continue
        props = node.get("properties") or {}
        if isinstance(key, int):
            node = node.get("items") if isinstance(node.get("items"), dict) else None
        elif key in props:
            node = props[key]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
    return node


def _coerce_scalar(text: str, schema: dict | None):
    types = (schema or {}).get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    if not types or "string" in types:
        return text
    import re

    if "null" in types and text in ("", "~", "null", "Null", "NULL"):
        return None
    if "boolean" in types and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if "integer" in types and re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text)
    if "number" in types and re.fullmatch(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", text):
        value = float(text)
        return int(value) if value.is_integer() and re.fullmatch(r"[-+]?[0-9]+", text) else value
    return text


def coerce_cli_overrides(config: dict, overrides) -> dict:
    """config with each string a nested `--config` override put there converted by its key's type
    in the schema (see above). overrides: the values given with --config (Snakemake's
    workflow.config_settings.config); config: the merged config they are part of."""
    schema = load_schema()
    cfg = copy.deepcopy(config)

    def convert(value, path: list):
        if isinstance(value, str):
            return _coerce_scalar(value, _schema_at(schema, path, schema))
        if isinstance(value, list):
            return [convert(v, [*path, i]) for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {k: convert(v, [*path, k]) for k, v in value.items()}
        return value

    def walk(over, node: dict, path: list) -> None:
        for key, value in over.items():
            if key not in node:
                continue
            if hasattr(value, "items") and isinstance(node[key], dict):
                walk(value, node[key], [*path, key])
            else:
                node[key] = convert(node[key], [*path, key])

    walk(overrides, cfg, [])
    return cfg
