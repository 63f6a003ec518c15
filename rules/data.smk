# Axis sampling, per-shard task generation, and the offline math set.


rule sample_axes:
    input:
        stamp=params_stamp("sample_axes"),
    output:
        signatures="results/axes/signatures.jsonl",
        stats="results/axes/stats.json",
    params:
        options=params_of("sample_axes"),
    log:
        "results/logs/sample_axes.log",
    benchmark:
        "results/benchmarks/sample_axes.tsv"
    threads: 1
    resources:
        slurm_partition=CPU_PARTITION,
        mem_mb=LIGHT_MEM,
        runtime=LIGHT_RUNTIME,
    shell:
        "termforge sample-axes --params {params.options:q} --out {output.signatures} "
        "--stats {output.stats} > {log} 2>&1"


rule generate:
    input:
        signatures="results/axes/signatures.jsonl",
        stamp=params_stamp("generate"),
    output:
        manifest="results/tasks/manifests/{shard}.json",
    params:
        options=params_of("generate"),
    log:
        "results/logs/generate/{shard}.log",
    benchmark:
        "results/benchmarks/generate/{shard}.tsv"
    threads: CPU_THREADS
    resources:
        slurm_partition=CPU_PARTITION,
        mem_mb=CPU_MEM,
        runtime=CPU_RUNTIME,
    shell:
        "termforge generate --params {params.options:q} --signatures {input.signatures} "
        "--shard {wildcards.shard} --tasks-dir results/tasks --images-dir results/images "
        "--out {output.manifest} 2>&1 | tee {log}"


rule make_math_set:
    input:
        stamp=params_stamp("math_data"),
    output:
        train="results/data/math/train.jsonl",
        heldout="results/data/math/heldout.jsonl",
    params:
        options=params_of("math_data"),
    log:
        "results/logs/make_math_set.log",
    benchmark:
        "results/benchmarks/make_math_set.tsv"
    threads: 1
    resources:
        slurm_partition=CPU_PARTITION,
        mem_mb=LIGHT_MEM,
        runtime=LIGHT_RUNTIME,
    shell:
        "termforge make-math-set --params {params.options:q} --out-dir results/data/math > {log} 2>&1"
