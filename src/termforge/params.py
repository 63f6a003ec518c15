"""Which config keys each stage reads. The Snakefile passes exactly these to a rule's `params:`
(so Snakemake re-runs the jobs whose values changed) and dvc.yaml lists the same keys."""

from __future__ import annotations

from dataclasses import dataclass

from termforge.io import canonical_json

NOT_NULL = object()


@dataclass(frozen=True)
class When:
    """A key a stage reads only in some configurations: `key` is read when every (condition key,
    value) pair holds (value NOT_NULL: the condition key is set). Condition keys are themselves keys
    the stage reads, so a rule's params always carry what decides which keys apply."""

    key: str
    conditions: tuple[tuple[str, object], ...]

    def applies(self, lookup) -> bool:
        for key, want in self.conditions:
            value = lookup(key)
            if (value is None) if want is NOT_NULL else (value != want):
                return False
        return True


def _when(*conditions: tuple[str, object]):
    return lambda *keys: tuple(When(k, conditions) for k in keys)


_LLM_GENERATE = _when(("generate.backend", "llm"))
_LLM_HINTS = _when(("hints.backend", "llm"))
_REVIEW_KEYS = ("review", *_when(("review.judge", NOT_NULL))("models.{review.judge}"))

# stage -> config key paths it depends on (dotted). The single source for rules and dvc.yaml: a rule
# passes exactly these to its `params:` (so Snakemake re-runs exactly the jobs whose values changed),
# and the DVC stage lists them. A key only one backend reads is a `When`: the offline procedural
# generator does not re-run because a price, a planning assumption or the policy model changed.
STAGE_KEYS: dict[str, tuple[str | When, ...]] = {
    "sample_axes": ("seed", "corpus.n_tasks", "corpus.domains", "corpus.mix", "corpus.sft_v2_new_bucket_weight",
                    "corpus.anchor_prob", "corpus.taxonomy"),
    "generate": ("corpus.shard_size", "generate.backend", "generate.base_image", "generate.workers",
                 # the llm backend's task writer and its cost line (prices, planning assumptions), and
                 # the runtime its candidates are built and validated on
                 *_LLM_GENERATE("generate.model", "generate.max_repair_rounds", "generate.second_solution",
                                "models.{generate.model}", "prices", "planning", "runtime.rootfs")),
    "build_images": ("runtime.backend", "runtime.rootfs", "runtime.build_timeout_sec", "validate.workers"),
    "decontaminate": ("decontam.n", "decontam.min_shared", "decontam.policy", "decontam.near_dup_policy",
                      "decontam.near_dups", "decontam.near_dup_threshold",
                      "decontam.harbor_dirs", "decontam.hf_datasets", "decontam.jsonl"),
    "validate": ("runtime.backend", "runtime.rootfs", "runtime.exec_timeout_sec", "runtime.cpu_sec",
                 "runtime.memory_mb", "runtime.limits", "validate.oracle_repeats", "validate.workers",
                 "validate.mutants", "validate.input_sensitivity", "validate.grade_pool",
                 "validate.concurrent_checks"),
    "solve": ("seed", "solve", *_when(("solve.agent", "model"))("models.{solve.model}"), "runtime.backend",
              "runtime.exec_timeout_sec", "runtime.cpu_sec", "runtime.memory_mb", "runtime.limits"),
    "serve_policy": ("serve", "solve.model", "models.{solve.model}"),
    "math_data": ("seed", "math_data"),
    "train": ("train",),
    "eval_aime": ("seed", "eval.aime", "eval.model", "models.{eval.model}"),
    "eval_tbench": ("seed", "eval.tbench", "eval.model", "models.{eval.model}", "runtime.exec_timeout_sec",
                    "runtime.cpu_sec", "runtime.memory_mb", "runtime.limits"),
    "hints": ("hints.backend", "hints.max_rounds", "hints.ngram", "hints.max_words",
              *_LLM_HINTS("hints.model", "models.{hints.model}", "hints.judge", "hints.probe", "hints.judge_corpus"),
              *_when(("hints.backend", "llm"), ("hints.judge", NOT_NULL))("models.{hints.judge}"),
              *_when(("hints.backend", "llm"), ("hints.probe", NOT_NULL))("models.{hints.probe}")),
    # hint_uplift also passes the terminal ablation's train config (export_verifiers.export_config)
    "hint_uplift": ("hints.uplift_tasks",),
    # (a rule only when eval.tbench.source is set)
    "import_tbench": _when(("eval.tbench.source", NOT_NULL))("eval.tbench.source", "eval.tbench.tasks_dir",
                                                             "eval.tbench.benchmark"),
    # the rubric review of tasks and of successful traces: its judge model only when one is configured
    "review": _REVIEW_KEYS,
    "review_traces": _REVIEW_KEYS,
    "export": ("export.hf_repo_id", "export.hf_token_env", "export.hf_private", "export.require_demo"),
    # `train` is export.verifiers.train_from's (export_verifiers.export_config), for the prime-rl configs.
    "export_verifiers": ("run_name", "export.verifiers", "solve.turn_cap", "solve.max_format_errors",
                         "solve.command_timeout_sec", "solve.task_timeout_sec", "runtime.backend",
                         "runtime.exec_timeout_sec", "runtime.cpu_sec", "runtime.memory_mb", "runtime.limits",
                         "train"),
}


def _keys_read(stage: str, lookup) -> list[str]:
    """The dotted keys `stage` reads, `When` conditions decided and placeholders expanded by `lookup`."""
    out = []
    for entry in STAGE_KEYS[stage]:
        if isinstance(entry, When):
            if not entry.applies(lookup):
                continue
            entry = entry.key
        out.append(_expand(entry, lookup))
    return out


def _expand(dotted: str, lookup) -> str:
    """Expand `{other.key}` placeholders with `lookup`: "models.{solve.model}" -> "models.policy"."""
    import re

    return re.sub(r"\{([^}]+)\}", lambda m: str(lookup(m.group(1))), dotted) if "{" in dotted else dotted


def stage_keys(cfg: dict, stage: str) -> list[str]:
    """The dotted keys `stage` reads under cfg (a full config), placeholders resolved."""
    return _keys_read(stage, lambda k: get_key(cfg, k))


def flat_stage_keys(opts: dict, stage: str) -> list[str]:
    """The same from the flat params a rule passed (what a stage command checks it was given)."""
    return _keys_read(stage, lambda k: flat_lookup(opts, k))


def resolve_key(cfg: dict, dotted: str) -> str:
    """Expand a `{other.key}` placeholder from a full config."""
    return _expand(dotted, lambda k: get_key(cfg, k))


def get_key(cfg: dict, dotted: str):
    dotted = resolve_key(cfg, dotted) if "{" in dotted else dotted
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    return node


def stage_params(cfg: dict, stage: str) -> dict:
    """The flat {dotted key: value} a stage needs, taken from a validated config."""
    out = {}
    try:
        keys = stage_keys(cfg, stage)
    except KeyError as exc:
        from termforge.errors import ConfigError

        raise ConfigError(f"{exc.args[0]}: not defined (needed by the {stage} stage)") from None
    for key in keys:
        try:
            out[key] = get_key(cfg, key)
        except KeyError:
            from termforge.errors import ConfigError

            raise ConfigError(f"{key}: not defined (needed by the {stage} stage)") from None
    return out


def stage_params_json(cfg: dict, stage: str) -> str:
    return canonical_json(stage_params(cfg, stage))


def flat_lookup(opts: dict, dotted: str):
    """Look a dotted key up in a flat params dict whose keys may be prefixes ("solve" holds "solve.model")."""
    if dotted in opts:
        return opts[dotted]
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in opts:
            node = opts[prefix]
            for p in parts[i:]:
                node = node[p]
            return node
    raise KeyError(dotted)


def resolve_flat(opts: dict, dotted: str) -> str:
    """Expand placeholders of a STAGE_KEYS entry from the flat params a rule passed."""
    return _expand(dotted, lambda k: flat_lookup(opts, k))


def sync_stamp(path, text: str) -> str:
    """Make the file at `path` hold `text`, writing it only when its content differs: its
    modification time then says when the params it records last changed. The workflow writes one
    such stamp per stage (and per ablation) when it reads the config, and every rule of the stage
    takes it as an input, so a changed value re-runs the stage by modification time alone: also
    where Snakemake has no record of the params a file was made with (.snakemake/metadata is
    gone, or results/ came from `dvc pull` or a copy), where its params trigger cannot see it."""
    from pathlib import Path

    from termforge.io import atomic_write_text

    target = Path(path)
    try:
        if target.read_text(encoding="utf-8") == text:
            return str(path)
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        pass
    atomic_write_text(target, text)
    return str(path)


PREVIEW_DIR = ".snakemake/termforge-preview"


def stamp_input(path, text: str, executing: bool) -> str:
    """The params stamp a rule takes as its input. A run that executes jobs brings the stamp up to
    date (sync_stamp). A dry run, or a command that only inspects the workflow, must not: a preview
    of another config would make the real config's results look stale afterwards. So when the params
    differ, it gets a fresh copy under .snakemake/ (newer than every result, so the plan shows the
    re-run) and the stamp itself is left alone."""
    from pathlib import Path

    from termforge.io import atomic_write_text

    if executing:
        return sync_stamp(path, text)
    try:
        if Path(path).read_text(encoding="utf-8") == text:
            return str(path)
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        pass
    preview = Path(PREVIEW_DIR) / path
    atomic_write_text(preview, text)
    return str(preview)
