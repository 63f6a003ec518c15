# Evaluations of the base policy and of each ablation's trained policy, then the tidy table.
# GPU rules: on a cluster they run in the GPU partition (vLLM or transformers on the GPU).


rule eval_aime:
    input:
        heldout="results/data/math/heldout.jsonl",
        weights=trained_summary,
        stamp=ablation_stamp("eval_aime", MODELS),
    output:
        record="results/runs/{model}/eval/aime.json",
    params:
        options=ablation_params_of("eval_aime"),
        weights=weights_flag,
    log:
        "results/logs/eval_aime/{model}.log",
    benchmark:
        "results/benchmarks/eval_aime/{model}.tsv"
    threads: GPU_THREADS
    resources:
        slurm_partition=GPU_PARTITION,
        gpu=GPUS,
        mem_mb=GPU_MEM,
        runtime=GPU_RUNTIME,
    shell:
        "TERMFORGE_JOB_THREADS={threads} termforge eval-aime --params {params.options:q} --model-name {wildcards.model} {params.weights} "
        "--math-heldout {input.heldout} --out-dir results/runs/{wildcards.model}/eval/aime "
        "--out {output.record} 2>&1 | tee {log}"


rule eval_tbench:
    input:
        tasks=imported_tbench,
        weights=trained_summary,
        stamp=ablation_stamp("eval_tbench", MODELS),
    output:
        record="results/runs/{model}/eval/tbench.json",
    params:
        options=ablation_params_of("eval_tbench"),
        weights=weights_flag,
    log:
        "results/logs/eval_tbench/{model}.log",
    benchmark:
        "results/benchmarks/eval_tbench/{model}.tsv"
    threads: GPU_THREADS
    resources:
        slurm_partition=GPU_PARTITION,
        gpu=GPUS,
        mem_mb=GPU_MEM,
        runtime=GPU_RUNTIME,
    shell:
        "TERMFORGE_JOB_THREADS={threads} termforge eval-tbench --params {params.options:q} --model-name {wildcards.model} {params.weights} "
        "--images-dir results/images/tbench --out-dir results/runs/{wildcards.model}/eval/tbench "
        "--out {output.record} 2>&1 | tee {log}"


localrules:
    eval_table,


rule eval_table:
    input:
        records=eval_records(),
    output:
        table="results/eval/results.csv",
        metrics="results/eval/metrics.json",
    log:
        "results/logs/eval_table.log",
    benchmark:
        "results/benchmarks/eval_table.tsv"
    shell:
        "termforge eval-table --records {input.records} --out {output.table} 2>&1 | tee {log}"


# The Terminal-Bench tasks, when eval.tbench.source names where they come from: a Harbor dataset id
# (NAME@VERSION, fetched with the harbor CLI) or a local folder (copied). A local rule: it runs where
# Snakemake runs, which is where a registry is reachable (a cluster's compute nodes often are not).
if config["eval"]["tbench"]["source"]:

    localrules:
        import_tbench,

    rule import_tbench:
        input:
            stamp=params_stamp("import_tbench"),
        output:
            tasks=directory(config["eval"]["tbench"]["tasks_dir"]),
        params:
            source=config["eval"]["tbench"]["source"],
            name=config["eval"]["tbench"]["benchmark"],
        log:
            "results/logs/import_tbench.log",
        benchmark:
            "results/benchmarks/import_tbench.tsv"
        shell:
            "termforge import-harbor {params.source:q} --name {params.name:q} --harbor-dir {output.tasks} "
            "--out-dir results/imported/{params.name} > {log} 2>&1"
