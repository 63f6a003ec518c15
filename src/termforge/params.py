"""Which config keys each stage reads. The Snakefile passes exactly these to a rule's `params:`
(so Snakemake re-runs the jobs whose values changed) and dvc.yaml lists the same keys."""

from __future__ import annotations

from termforge.io import canonical_json

# stage -> config key paths it depends on (dotted). The single source for rules and dvc.yaml.
STAGE_KEYS: dict[str, tuple[str, ...]] = {
    "sample_axes": ("seed", "corpus.n_tasks", "corpus.domains", "corpus.mix", "corpus.sft_v2_new_bucket_weight",
                    "corpus.anchor_prob", "corpus.taxonomy"),
    "generate": ("corpus.shard_size", "generate.backend", "generate.base_image", "generate.workers", "runtime.rootfs",
                 "generate.model", "generate.max_repair_rounds", "models.{generate.model}", "prices", "planning"),
    "build_images": ("runtime.backend", "runtime.rootfs", "runtime.build_timeout_sec", "validate.workers"),
    "decontaminate": ("decontam.n", "decontam.min_shared", "decontam.policy", "decontam.near_dup_policy",
                      "decontam.near_dups", "decontam.near_dup_threshold",
                      "decontam.harbor_dirs", "decontam.hf_datasets", "decontam.jsonl"),
    "validate": ("runtime.backend", "runtime.rootfs", "runtime.exec_timeout_sec", "runtime.cpu_sec", "runtime.memory_mb",
                 "runtime.limits", "validate.oracle_repeats", "validate.workers", "validate.mutants"),
    "solve": ("seed", "solve", "models.{solve.model}", "runtime.backend", "runtime.exec_timeout_sec", "runtime.cpu_sec",
              "runtime.memory_mb", "runtime.limits"),
    "serve_policy": ("serve", "solve.model", "models.{solve.model}"),
    "math_data": ("seed", "math_data"),
    "train": ("train",),
    "eval_aime": ("seed", "eval.aime", "eval.model", "models.{eval.model}"),
    "eval_tbench": ("seed", "eval.tbench", "eval.model", "models.{eval.model}", "runtime.exec_timeout_sec",
                    "runtime.cpu_sec", "runtime.memory_mb", "runtime.limits"),
    "hints": ("hints.backend", "hints.model", "hints.max_rounds", "hints.ngram", "hints.max_words",
              "hints.judge", "hints.probe", "hints.judge_corpus", "models"),
    "export": ("export.hf_repo_id", "export.hf_token_env", "export.hf_private", "export.require_demo"),
}


def resolve_key(cfg: dict, dotted: str) -> str:
    """Expand a `{other.key}` placeholder: "models.{solve.model}" -> "models.policy"."""
    import re

    return re.sub(r"\{([^}]+)\}", lambda m: str(get_key(cfg, m.group(1))), dotted)


def get_key(cfg: dict, dotted: str):
    dotted = resolve_key(cfg, dotted) if "{" in dotted else dotted
    node = cfg
    for part in dotted.split("."):
        node = node[part]
    return node


def stage_params(cfg: dict, stage: str) -> dict:
    """The flat {dotted key: value} a stage needs, taken from a validated config."""
    out = {}
    for key in STAGE_KEYS[stage]:
        try:
            out[resolve_key(cfg, key) if "{" in key else key] = get_key(cfg, key)
        except KeyError:
            from termforge.errors import ConfigError

            raise ConfigError(f"{resolve_key(cfg, key)}: not defined (needed by the {stage} stage)") from None
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
    import re

    return re.sub(r"\{([^}]+)\}", lambda m: str(flat_lookup(opts, m.group(1))), dotted)
