"""dvc.yaml from the workflow: a few coarse DVC stages, each one Snakemake target, whose params
are exactly the config keys their rules read (termforge.params.STAGE_KEYS).

Regenerate with `termforge dvc-yaml --configfile config.yaml > dvc.yaml`; tests/test_dvc.py
checks that the committed file equals the generated one, so the two cannot drift apart.
"""

from __future__ import annotations

import yaml

from termforge.config import model_names, shard_ids
from termforge.params import STAGE_KEYS, resolve_key

CODE = "src/termforge"
WORKFLOW_DEPS = ("Snakefile", "rules", "workflow/schemas/config.schema.yaml")

# DVC stage -> (the Snakemake rules it covers, the library code it runs, the DVC stages it reads from).
DVC_STAGES: dict[str, dict] = {
    "data": {"rules": ["sample_axes", "generate", "make_math_set"],
             "code": ["axes", "generate", "mathdata.py", "io.py"], "upstream": []},
    "quality": {"rules": ["build_images", "decontaminate", "validate", "review", "corpus_manifest"],
                "code": ["quality", "runtime", "verifier.py", "images.py"], "upstream": ["data"],
                "extra_deps": ["benchmarks/tb-mini"]},
    "solve": {"rules": ["serve_policy", "solve", "review_traces", "passk"],
              "code": ["solve.py", "harness.py", "passk.py", "models", "serve.py"],
              "upstream": ["quality"]},
    "hints": {"rules": ["hints", "export"], "code": ["hints", "export.py"], "upstream": ["quality"]},
    # Its own stage: the package's prime-rl configs read the train config, so a training key re-runs
    # this export (cheap) and not the hints.
    "verifiers": {"rules": ["export_verifiers"], "code": ["export_verifiers.py", "verifiers_env.py"],
                  "upstream": ["quality", "hints"]},
    "train": {"rules": ["train_opsd"], "code": ["opsd"], "upstream": ["data", "hints", "solve"]},  # solve: passk (terminal)
    "eval": {"rules": ["eval_aime", "eval_tbench", "eval_table"], "code": ["evals"],
             "upstream": ["data", "train"], "extra_deps": ["benchmarks/tb-mini"]},
    "report": {"rules": ["report"], "code": ["report"], "upstream": ["solve", "hints", "train", "eval"]},
}
CACHED_STAGES = ("hints", "verifiers", "train", "eval")
RULE_PARAM_STAGE = {"make_math_set": "math_data", "hints": "hints", "export": "export",
                    "export_verifiers": "export_verifiers", "train_opsd": "train",
                    "report": "report", "review_traces": "review"}


def rule_keys(rule: str) -> tuple[str, ...]:
    return STAGE_KEYS.get(RULE_PARAM_STAGE.get(rule, rule), ())


def stage_params(cfg: dict, stage: str) -> list[str]:
    keys: list[str] = []
    for rule in DVC_STAGES[stage]["rules"]:
        for key in rule_keys(rule):
            resolved = resolve_key(cfg, key) if "{" in key else key
            if resolved not in keys:
                keys.append(resolved)
    # The verifiers export takes its prime-rl settings from an ablation's train config
    # (export_verifiers.export_config).
    if stage in ("train", "eval", "verifiers") and "ablations" not in keys:
        keys.append("ablations")
    return sorted(keys)


def stage_outputs(cfg: dict, stage: str) -> tuple[list[str], list[str]]:
    """(Snakemake targets, DVC outs) of a stage."""
    ablations = [m for m in model_names(cfg) if m != "base"]
    models = model_names(cfg)
    table = {
        "data": ([f"results/tasks/manifests/{s}.json" for s in shard_ids(cfg)] + ["results/data/math/heldout.jsonl"],
                 ["results/axes", "results/tasks", "results/data"]),
        "quality": (["results/corpus/manifest.json"],
                    ["results/images", "results/decontam", "results/validate", "results/review", "results/corpus"]),
        "solve": (["results/solve/passk.json"], ["results/solve"]),
        # results/export's parts: results/export/verifiers is the verifiers stage's.
        "hints": (["results/export/export.json"],
                  ["results/hints", "results/export/dataset", "results/export/private", "results/export/harbor",
                   "results/export/export.json"]),
        "verifiers": (["results/export/verifiers/export.json"], ["results/export/verifiers"]),
        "train": ([f"results/runs/{a}/train/summary.json" for a in ablations],
                  [f"results/runs/{a}/train" for a in ablations]),
        # results/eval/ itself holds the metrics and plots files, declared as such below.
        "eval": (["results/eval/results.csv"], [f"results/runs/{m}/eval" for m in models]),
        "report": (["results/report.html"], ["results/report.html", "results/report"]),
    }
    return table[stage]


def snakemake_rules(root) -> set[str]:
    """Names of the rules defined in rules/*.smk."""
    import re
    from pathlib import Path

    names: set[str] = set()
    for smk in sorted(Path(root, "rules").glob("*.smk")):
        names |= set(re.findall(r"^rule (\w+):", smk.read_text(), flags=re.M))
    return names


def missing_from_file(raw: dict, keys: list[str]) -> list[str]:
    """The dotted keys that the config file itself does not write out. DVC reads params from the
    file, not from the schema's defaults, so a key only a default supplies makes `dvc repro` fail."""
    missing = []
    for key in keys:
        node = raw
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                missing.append(key)
                break
            node = node[part]
    return missing


def dvc_yaml(cfg: dict, present_rules: set[str], raw: dict | None = None) -> str:
    """The dvc.yaml text for the rules the Snakefile defines (stages with none are left out).
    With `raw` (the config file as written), a param key the file lacks is an error."""
    stages = {}
    produced: dict[str, list[str]] = {}
    for name, spec in DVC_STAGES.items():
        if not set(spec["rules"]) & present_rules:
            continue
        targets, outs = stage_outputs(cfg, name)
        if not outs:
            continue
        params = stage_params(cfg, name)
        if raw is not None and (missing := missing_from_file(raw, params)):
            from termforge.errors import ConfigError

            raise ConfigError(f"config.yaml: DVC stage {name} reads {', '.join(missing)}, which the file does not "
                              "write out (DVC reads params from the file, not the schema defaults); add them")
        upstream = [o for u in spec["upstream"] for o in produced.get(u, [])]
        deps = [*WORKFLOW_DEPS, *(f"{CODE}/{c}" for c in spec["code"]), *spec.get("extra_deps", []), *upstream]
        stage = {
            "cmd": "snakemake --profile profiles/local --cores all " + " ".join(targets),
            "deps": deps,
            "params": [{"config.yaml": params}],
            # persist: Snakemake keeps its own incremental state in these directories, DVC must not
            # wipe them. Only the deliverables (exports, trained weights, eval results) go to the
            # DVC cache, so `dvc push/pull` moves them; the intermediate trees are too large.
            "outs": [{o: {"persist": True, "cache": name in CACHED_STAGES}} for o in outs],
        }
        if name == "eval":
            stage["metrics"] = [{"results/eval/metrics.json": {"cache": False}}]
            stage["plots"] = [{"results/eval/results.csv": {"cache": False, "x": "model", "y": "value"}}]
        stages[name] = stage
        produced[name] = outs
    header = "# Generated by `termforge dvc-yaml --configfile config.yaml`; do not edit by hand.\n"
    return header + yaml.safe_dump({"stages": stages}, sort_keys=False, width=120)
