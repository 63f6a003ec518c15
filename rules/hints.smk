# Leak-gated method-level hints for the kept tasks, then the exports (with the demo column): the HF
# dataset and Harbor task dirs, and the verifiers environment package with its prime-rl configs.


rule hints:
    input:
        corpus="results/corpus/manifest.json",
        stamp=params_stamp("hints"),
    output:
        demos="results/hints/demos.parquet",
        coverage="results/hints/coverage.json",
    params:
        options=params_of("hints"),
    log:
        "results/logs/hints.log",
    benchmark:
        "results/benchmarks/hints.tsv"
    threads: 1
    resources:
        slurm_partition=CPU_PARTITION,
        mem_mb=CPU_MEM,
        runtime=CPU_RUNTIME,
    shell:
        "termforge hints --params {params.options:q} --corpus {input.corpus} --out-dir results/hints "
        "2>&1 | tee {log}"


rule export:
    input:
        corpus="results/corpus/manifest.json",
        demos="results/hints/demos.parquet",
        stamp=params_stamp("export"),
    output:
        summary="results/export/export.json",
    params:
        options=params_of("export"),
    log:
        "results/logs/export.log",
    benchmark:
        "results/benchmarks/export.tsv"
    threads: 1
    resources:
        slurm_partition=CPU_PARTITION,
        mem_mb=CPU_MEM,
        runtime=CPU_RUNTIME,
    shell:
        "termforge export --params {params.options:q} --corpus {input.corpus} --demos {input.demos} "
        "--out-dir results/export 2>&1 | tee {log}"


rule export_verifiers:
    input:
        corpus="results/corpus/manifest.json",
        demos="results/hints/demos.parquet",
        images=expand("results/images/manifests/{shard}.json", shard=SHARDS),
        stamp=verifiers_stamp,
    output:
        summary="results/export/verifiers/export.json",
    params:
        options=export_verifiers_params,
    log:
        "results/logs/export_verifiers.log",
    benchmark:
        "results/benchmarks/export_verifiers.tsv"
    threads: 1
    resources:
        slurm_partition=CPU_PARTITION,
        mem_mb=CPU_MEM,
        runtime=CPU_RUNTIME,
    shell:
        "termforge export --verifiers --params {params.options:q} --corpus {input.corpus} --demos {input.demos} "
        "--images-dir results/images --out-dir results/export/verifiers 2>&1 | tee {log}"
