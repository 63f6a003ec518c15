# Evaluations of the base policy and of each ablation's trained policy, then the tidy table.
# GPU rules: on a cluster they run in the GPU partition (vLLM or transformers on the GPU).


rule eval_aime:
    input:
        heldout="results/data/math/heldout.jsonl",
        weights=trained_summary,
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
        "termforge eval-aime --params {params.options:q} --model-name {wildcards.model} {params.weights} "
        "--math-heldout {input.heldout} --out-dir results/runs/{wildcards.model}/eval/aime "
        "--out {output.record} 2>&1 | tee {log}"


rule eval_tbench:
    input:
        weights=trained_summary,
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
        "termforge eval-tbench --params {params.options:q} --model-name {wildcards.model} {params.weights} "
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
