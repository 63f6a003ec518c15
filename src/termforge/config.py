"""Loading, merging and validating config.yaml and its overlays.

The schema (workflow/schemas/config.schema.yaml) is the single description of every key. Both
the Snakefile and the CLI call `check_config`, which fills defaults and raises one ConfigError
whose message names the key path and what was expected.
"""

from __future__ import annotations

import copy
import math
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from termforge.errors import ConfigError, os_error_problem

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = Path(os.environ.get("TERMFORGE_SCHEMA", REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"))


def load_schema() -> dict:
    if not SCHEMA_PATH.exists():
        raise ConfigError(f"config schema not found at {SCHEMA_PATH} (set TERMFORGE_SCHEMA)")
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def deep_merge(base: dict, overlay: dict) -> dict:
    """Overlay wins; nested mappings merge key by key; lists and scalars are replaced whole."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except yaml.YAMLError as exc:
        # One line: the YAML error's own text spans several (the offending line and a caret).
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1} column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"config file {path} is not valid YAML{where}: {problem}") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} {os_error_problem(exc)}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: the top level must be a mapping, got {type(data).__name__}")
    return data


def load_config(paths: list[str | Path]) -> dict:
    """Merge config files left to right (base first, overlays after) and validate."""
    merged: dict = {}
    for p in paths:
        merged = deep_merge(merged, read_yaml(p))
    return check_config(merged)


def _key_path(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top level>"


def _describe(error: jsonschema.ValidationError) -> str:
    where = _key_path(error.absolute_path)
    v = error.validator
    if v == "additionalProperties":
        allowed = sorted((error.schema.get("properties") or {}).keys())
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        key = f"{where}.{extra[0]}" if extra and where != "<top level>" else (extra[0] if extra else where)
        return f"{key}: unknown key (allowed here: {', '.join(allowed)})"
    if v == "enum":
        return f"{where}: {error.instance!r} is not one of {', '.join(map(str, error.validator_value))}"
    if v == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        return f"{where}: expected {expected}, got {type(error.instance).__name__} {error.instance!r}"
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return f"{where}: {error.instance!r} is out of range ({v} {error.validator_value})"
    return f"{where}: {error.message}"


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
    from termforge.models.base import model_spec_problem

    if problem := model_spec_problem(cfg):
        raise ConfigError(problem)
    tax = cfg["corpus"].get("taxonomy")
    if tax and not Path(tax).exists():
        raise ConfigError(f"corpus.taxonomy: file {tax} does not exist")
    for name in cfg.get("ablations") or {}:
        try:
            trained = ablation_config(cfg, name)
        except ConfigError as exc:
            raise ConfigError(f"ablations.{name}: override {exc}") from None
        # Each ablation's evals load its trained weights: the eval model must be able to.
        from termforge.evals.run import trained_policy_problem

        if problem := trained_policy_problem(trained):
            raise ConfigError(f"ablations.{name}: {problem}")


def ablation_config(cfg: dict, name: str) -> dict:
    """The config an ablation runs with: its train/eval overrides merged over the base config.
    `base` is the untrained policy under the base config."""
    if name == "base":
        return cfg
    ablations = cfg.get("ablations") or {}
    if name not in ablations:
        raise ConfigError(f"ablations.{name}: no such ablation (defined: {', '.join(sorted(ablations)) or 'none'})")
    merged = deep_merge({k: v for k, v in cfg.items() if k != "ablations"}, ablations[name])
    checked = check_config(merged)
    checked["ablations"] = ablations
    return checked


def model_names(cfg: dict) -> list[str]:
    """Everything the eval stage evaluates: the base policy, then each ablation's trained policy."""
    return ["base", *sorted(cfg.get("ablations") or {})]


def shard_ids(cfg: dict) -> list[str]:
    n, size = cfg["corpus"]["n_tasks"], cfg["corpus"]["shard_size"]
    return [f"{i:05d}" for i in range(math.ceil(n / size))]


def section(cfg: dict, *keys: str) -> Any:
    node: Any = cfg
    for k in keys:
        node = node[k]
    return node
