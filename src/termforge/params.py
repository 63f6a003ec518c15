"""Which config keys each stage reads. The Snakefile passes exactly these to a rule's `params:`
(so Snakemake re-runs the jobs whose values changed) and dvc.yaml lists the same keys."""

from __future__ import annotations

from termforge.io import canonical_json

# stage -> config key paths it depends on (dotted). The single source for rules and dvc.yaml.
STAGE_KEYS: dict[str, tuple[str, ...]] = {
    "sample_axes": ("seed", "corpus.n_tasks", "corpus.domains", "corpus.mix", "corpus.sft_v2_new_bucket_weight",
                    "corpus.anchor_prob", "corpus.taxonomy"),
    "generate": ("corpus.shard_size", "generate.backend", "generate.base_image", "generate.workers"),
    "build_images": ("runtime.backend", "runtime.build_timeout_sec", "validate.workers"),
    "decontaminate": ("decontam.n", "decontam.min_shared", "decontam.policy", "decontam.near_dup_threshold",
                      "decontam.harbor_dirs", "decontam.hf_datasets", "decontam.jsonl"),
    "validate": ("runtime.backend", "runtime.exec_timeout_sec", "runtime.cpu_sec", "runtime.memory_mb",
                 "validate.oracle_repeats", "validate.workers"),
    "export": ("export.hf_repo_id", "export.hf_token_env", "export.hf_private"),
}


def get_key(cfg: dict, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = node[part]
    return node


def stage_params(cfg: dict, stage: str) -> dict:
    """The flat {dotted key: value} a stage needs, taken from a validated config."""
    return {key: get_key(cfg, key) for key in STAGE_KEYS[stage]}


def stage_params_json(cfg: dict, stage: str) -> str:
    return canonical_json(stage_params(cfg, stage))
