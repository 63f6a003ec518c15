# OPSD training, one job per ablation (a GPU job on clusters; CPU in the embedded default).


rule train_opsd:
    input:
        math="results/data/math/train.jsonl",
        probe="results/data/math/heldout.jsonl",
        demos="results/hints/demos.parquet",
    output:
        summary="results/runs/{model}/train/summary.json",
    params:
        options=ablation_params_of("train"),
        launch=TRAIN_LAUNCH,
    log:
        "results/logs/train/{model}.log",
    benchmark:
        "results/benchmarks/train/{model}.tsv"
    threads: GPU_THREADS
    resources:
        **TRAIN_RESOURCES,
    shell:
        "{params.launch} -m termforge.cli train --params {params.options:q} --dataset {input.math} --probe-dataset {input.probe} "
        "--demos {input.demos} --tasks-dir results/tasks --out-dir results/runs/{wildcards.model}/train "
        "--restart-on-config-change "
        "2>&1 | tee {log}"
