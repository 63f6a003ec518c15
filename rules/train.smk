# OPSD training, one job per ablation (a GPU job on clusters; CPU in the embedded default).


def offline_math_set(wildcards):
    """The offline math set (and its held-out probe rows) only for an ablation whose config names
    no train.dataset: a configured dataset is what the run trains on, never silently replaced."""
    if ablation_config(config, wildcards.model)["train"].get("dataset"):
        return {}
    return {"math": "results/data/math/train.jsonl", "probe": "results/data/math/heldout.jsonl"}


def offline_math_flags(wildcards, input):
    if "math" not in input.keys():
        return ""
    return f"--dataset {input.math} --probe-dataset {input.probe}"


def terminal_train_inputs(wildcards):
    """An ablation with train.data_kind terminal runs episodes: it also needs the built images and
    the solve pass rates that calibrate its GRPO pool."""
    if ablation_config(config, wildcards.model)["train"].get("data_kind") != "terminal":
        return {}
    return {"passk": "results/solve/passk.json", "corpus": "results/corpus/manifest.json",
            "images": expand("results/images/manifests/{shard}.json", shard=SHARDS)}


def terminal_train_flags(wildcards, input):
    if "passk" not in input.keys():
        return ""
    return "--images-dir results/images --passk {} --corpus {}".format(input.passk, input.corpus)


def train_inputs(wildcards):
    return {**offline_math_set(wildcards), **terminal_train_inputs(wildcards)}


rule train_opsd:
    input:
        unpack(train_inputs),
        demos="results/hints/demos.parquet",
        stamp=ablation_stamp("train", ABLATIONS),
    output:
        summary="results/runs/{model}/train/summary.json",
    params:
        options=ablation_params_of("train"),
        math_data=offline_math_flags,
        terminal=terminal_train_flags,
        launch=TRAIN_LAUNCH,
    log:
        "results/logs/train/{model}.log",
    benchmark:
        "results/benchmarks/train/{model}.tsv"
    threads: GPU_THREADS
    resources:
        **TRAIN_RESOURCES,
    shell:
        "TERMFORGE_JOB_THREADS={threads} {params.launch} -m termforge.cli train --params {params.options:q} {params.math_data} "
        "--demos {input.demos} --tasks-dir results/tasks {params.terminal} "
        "--out-dir results/runs/{wildcards.model}/train "
        "--restart-on-config-change "
        "2>&1 | tee {log}"
