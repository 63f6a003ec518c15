"""dvc.yaml from the workflow: a few coarse DVC stages, each one Snakemake target, whose params
are exactly the config keys their rules read (termforge.params.STAGE_KEYS).

Regenerate with `termforge dvc-yaml --configfile config.yaml [overlays] > dvc.yaml`; with overlays,
each stage's command passes them to Snakemake and its params name each key in every file that
writes it. tests/test_dvc.py checks that the committed file (config.yaml alone) equals the
generated one, so the two cannot drift apart.

How the stages are chained: each stage ends by writing a receipt, `dvc-receipts/<stage>.json`
(the sha256 of each Snakemake target it built), and a downstream stage depends on its upstream's
receipt rather than on its output folders. The receipts are small files kept in git (DVC outputs
with `cache: false`), so every dependency of every stage exists in a fresh clone and `dvc repro
--dry` can plan the pipeline there (DVC 3.67 stops on a dependency folder that does not exist
yet). A stage still re-runs when its upstream's results change: their targets, and so the
receipt, change with them.
"""

from __future__ import annotations

import yaml

from termforge.config import model_names, shard_ids
from termforge.params import STAGE_KEYS, stage_keys

CODE = "src/termforge"
WORKFLOW_DEPS = ("Snakefile", "rules", "workflow/schemas/config.schema.yaml")

# DVC stage -> (the Snakemake rules it covers, the library code it runs, the DVC stages it reads from).
DVC_STAGES: dict[str, dict] = {
    "data": {"rules": ["sample_axes", "generate", "make_math_set", "import_tbench"],
             "code": ["axes", "generate", "mathdata.py", "io.py", "evals/harbor_import.py"], "upstream": []},
    "quality": {"rules": ["build_images", "decontaminate", "validate", "review", "corpus_manifest"],
                "code": ["quality", "runtime", "grading", "images"], "upstream": ["data"]},
    "solve": {"rules": ["serve_policy", "solve", "review_traces", "passk"],
              "code": ["solve.py", "harness.py", "passk.py", "models", "serve.py"],
              "upstream": ["quality"]},
    # hint_uplift runs the terminal ablation's policy on the hinted tasks (its train config, the
    # trainer's episode code): its report sits beside the hints it measures.
    "hints": {"rules": ["hints", "export", "hint_uplift"], "code": ["hints", "export.py", "opsd"],
              "upstream": ["quality"]},
    # Its own stage: the package's prime-rl configs read the train config, so a training key re-runs
    # this export (cheap) and not the hints.
    "verifiers": {"rules": ["export_verifiers"], "code": ["export_verifiers.py", "verifiers_env.py"],
                  "upstream": ["quality", "hints"]},
    "train": {"rules": ["train_opsd"], "code": ["opsd"], "upstream": ["data", "hints", "solve"]},  # solve: passk (terminal)
    "eval": {"rules": ["eval_aime", "eval_tbench", "eval_table"], "code": ["evals"],
             "upstream": ["data", "train"]},
    "report": {"rules": ["report"], "code": ["report"], "upstream": ["solve", "hints", "train", "eval"]},
}
# The deliverables DVC caches, so `dvc push`/`pull` move them: exports, trained adapters, eval
# results, the report. The intermediate trees (tasks, images, verdicts, rollouts) are too large.
CACHED_STAGES = ("hints", "verifiers", "train", "eval", "report")
RECEIPTS = "dvc-receipts"
# Stages that write no receipt: nothing depends on them.
NO_RECEIPT = ("report",)
RULE_PARAM_STAGE = {"make_math_set": "math_data", "hints": "hints", "export": "export",
                    "export_verifiers": "export_verifiers", "train_opsd": "train",
                    "report": "report"}


def rule_keys(cfg: dict, rule: str) -> list[str]:
    """The config keys a rule passes to its command under cfg (termforge.params.STAGE_KEYS)."""
    stage = RULE_PARAM_STAGE.get(rule, rule)
    return stage_keys(cfg, stage) if stage in STAGE_KEYS else []


def stage_params(cfg: dict, stage: str) -> list[str]:
    keys: list[str] = []
    for rule in DVC_STAGES[stage]["rules"]:
        for key in rule_keys(cfg, rule):
            if key not in keys:
                keys.append(key)
    # The verifiers export takes its prime-rl settings from an ablation's train config
    # (export_verifiers.export_config).
    if stage in ("train", "eval", "verifiers", "hints") and "ablations" not in keys:
        keys.append("ablations")
    # hint_uplift passes the terminal ablation's train config (as export_verifiers), not a stamp.
    if stage == "hints":
        keys += [k for k in stage_keys(cfg, "train") if k not in keys]
    return sorted(keys)


def _in_results(path: str) -> bool:
    return path == "results" or path.startswith("results/")


def extra_deps(cfg: dict, stage: str) -> list[str]:
    """Folders of the repository a stage reads (benchmarks): the reference sets decontamination
    checks against, the Terminal-Bench tasks the eval runs (those the workflow imports are outputs
    of the data stage instead)."""
    if stage == "quality":
        return [d for d in cfg["decontam"]["harbor_dirs"] if not _in_results(d)]
    tbench = cfg["eval"]["tbench"]
    if stage == "eval" and tbench["enabled"] and not _in_results(tbench["tasks_dir"]):
        return [tbench["tasks_dir"]]
    return []


def stage_outputs(cfg: dict, stage: str) -> tuple[list[str], list[str]]:
    """(Snakemake targets, DVC outs) of a stage."""
    ablations = [m for m in model_names(cfg) if m != "base"]
    models = model_names(cfg)
    tbench = cfg["eval"]["tbench"]
    # Terminal-Bench tasks the workflow imports (rule import_tbench) into results/imported/<benchmark>.
    imported = ([tbench["tasks_dir"]], [f"results/imported/{tbench['benchmark']}"]) if tbench.get("source") else ([], [])
    if imported[0] and not imported[0][0].startswith(imported[1][0] + "/"):
        imported[1].append(imported[0][0])
    table = {
        "data": ([f"results/tasks/manifests/{s}.json" for s in shard_ids(cfg)] + ["results/data/math/heldout.jsonl",
                                                                                  *imported[0]],
                 ["results/axes", "results/tasks", "results/data", *imported[1]]),
        "quality": (["results/corpus/manifest.json"],
                    ["results/images", "results/decontam", "results/validate", "results/review", "results/corpus"]),
        "solve": (["results/solve/passk.json"], ["results/solve"]),
        # results/export's parts: results/export/verifiers is the verifiers stage's.
        "hints": (["results/export/export.json", "results/hints/uplift.json"],
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


def receipt_path(stage: str) -> str:
    return f"{RECEIPTS}/{stage}.json"


def stamp_outputs(cfg: dict, stage: str) -> list[str]:
    """The params stamp folders (rules/common.smk) of a stage's rules: results/params/<stage>/ holds
    stage.json, or one <model>.json per ablation. They travel with the stage's outputs, so results
    from `dvc pull` carry the params they were made with."""
    runs = {"serve_policy": False, "import_tbench": bool(cfg["eval"]["tbench"].get("source")),
            "eval_aime": cfg["eval"]["aime"]["enabled"], "eval_tbench": cfg["eval"]["tbench"]["enabled"]}
    out = []
    for rule in DVC_STAGES[stage]["rules"]:
        param_stage = RULE_PARAM_STAGE.get(rule, rule)
        if param_stage not in STAGE_KEYS or not runs.get(rule, True):
            continue
        # Folders: DVC re-copies a cached file output from its cache when it commits it (a new
        # modification time, newer than what was made with it), but not the files of a folder.
        path = f"results/params/{param_stage}"
        if path not in out:
            out.append(path)
    return out


def file_params(files: list[tuple[str, dict]], keys: list[str], stage: str) -> list[dict]:
    """DVC params entries: each key under every config file that writes it (DVC reads params from
    the files, not from the schema's defaults, so a key no file writes is an error)."""
    entries = []
    for path, raw in files:
        present = [k for k in keys if not missing_from_file(raw, [k])]
        if present:
            entries.append({path: present})
    written = {k for e in entries for ks in e.values() for k in ks}
    missing = [k for k in keys if k not in written]
    if missing:
        from termforge.errors import ConfigError

        raise ConfigError(f"{files[0][0]}: DVC stage {stage} reads {', '.join(missing)}, which no config file "
                          "writes out (DVC reads params from the files, not the schema defaults); add them")
    return entries


def dvc_yaml(cfg: dict, present_rules: set[str], raw: dict | None = None,
             files: list[tuple[str, dict]] | None = None) -> str:
    """The dvc.yaml text for the rules the Snakefile defines (stages with none are left out).

    `files` are the config files as written, (path, mapping), config.yaml first: params are named
    in the files that write them, and the files after config.yaml are passed to Snakemake as
    overlays. `raw` alone stands for [("config.yaml", raw)]. Without either, params are listed
    under config.yaml unchecked."""
    if files is None and raw is not None:
        files = [("config.yaml", raw)]
    overlays = [path for path, _ in (files or [])[1:]]
    stages = {}
    for name, spec in DVC_STAGES.items():
        if not set(spec["rules"]) & present_rules:
            continue
        targets, outs = stage_outputs(cfg, name)
        if not outs:
            continue
        params = stage_params(cfg, name)
        upstream = [receipt_path(u) for u in spec["upstream"] if u in stages]
        deps = [*WORKFLOW_DEPS, *(f"{CODE}/{c}" for c in spec["code"]), *extra_deps(cfg, name), *upstream]
        cmd = "snakemake --profile profiles/local --cores all " + " ".join(targets)
        if overlays:
            cmd += " --configfile " + " ".join(overlays)  # after the targets: --configfile takes several
        if name not in NO_RECEIPT:
            cmd += f" && termforge dvc-receipt --stage {name} --targets {' '.join(targets)} --out {receipt_path(name)}"
        cached = name in CACHED_STAGES
        stage = {
            "cmd": cmd,
            "deps": deps,
            "params": file_params(files, params, name) if files else [{"config.yaml": params}],
            # persist: Snakemake keeps its own incremental state in these directories, DVC must not
            # wipe them.
            "outs": [{o: {"persist": True, "cache": cached}} for o in [*stamp_outputs(cfg, name), *outs]],
        }
        if not params:
            del stage["params"]  # reads no config key
        if name not in NO_RECEIPT:
            stage["outs"].append({receipt_path(name): {"cache": False}})
        if name == "eval":
            # Not cached: DVC re-copies a cached file output when it commits it, which would make
            # the table newer than the report made from it (and Snakemake re-run the report).
            stage["metrics"] = [{"results/eval/metrics.json": {"cache": False}}]
            stage["plots"] = [{"results/eval/results.csv": {"cache": False, "x": "model", "y": "value"}}]
        stages[name] = stage
    given = " ".join(path for path, _ in files) if files else "config.yaml"
    header = f"# Generated by `termforge dvc-yaml --configfile {given}`; do not edit by hand.\n"
    return header + yaml.safe_dump({"stages": stages}, sort_keys=False, width=120)


def write_receipt(stage: str, targets: list[str], out: str) -> dict:
    """The receipt a DVC stage leaves for the stages after it: the sha256 of each target it built."""
    import hashlib

    from termforge.io import atomic_write_json

    digests = {}
    for target in targets:
        h = hashlib.sha256()
        with open(target, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        digests[target] = h.hexdigest()
    receipt = {"stage": stage, "targets": digests}
    atomic_write_json(out, receipt)
    return receipt
