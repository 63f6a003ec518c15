# Decontamination (whole corpus, before validation so dropped tasks cost nothing further),
# per-shard validation, the rubric review of the kept tasks, and the corpus manifest of kept tasks.


rule decontaminate:
    input:
        manifests=expand("results/tasks/manifests/{shard}.json", shard=SHARDS),
        references=imported_references,
        stamp=params_stamp("decontaminate"),
    output:
        report="results/decontam/report.json",
    params:
        options=params_of("decontaminate"),
    log:
        "results/logs/decontaminate.log",
    benchmark:
        "results/benchmarks/decontaminate.tsv"
    threads: CPU_THREADS
    resources:
        slurm_partition=CPU_PARTITION,
        mem_mb=CPU_MEM,
        runtime=CPU_RUNTIME,
    shell:
        "termforge decontaminate --params {params.options:q} --manifests {input.manifests} "
        "--workers {threads} --out {output.report} 2>&1 | tee {log}"


rule validate:
    input:
        manifest="results/tasks/manifests/{shard}.json",
        builds="results/images/manifests/{shard}.json",
        decontam="results/decontam/report.json",
        stamp=params_stamp("validate"),
    output:
        verdicts="results/validate/{shard}.json",
    params:
        options=params_of("validate"),
    log:
        log="results/logs/validate/{shard}.log",
        # Per-step count, wall and CPU seconds (the report's validation-cost table): a log, not
        # data, as the verdicts are the same bytes however long the steps took.
        profile="results/logs/validate/{shard}.profile.json",
    benchmark:
        "results/benchmarks/validate/{shard}.tsv"
    threads: CPU_THREADS
    resources:
        slurm_partition=CPU_PARTITION,
        mem_mb=CPU_MEM,
        runtime=CPU_RUNTIME,
    shell:
        "termforge validate --params {params.options:q} --manifest {input.manifest} "
        "--images-dir results/images --decontam {input.decontam} --out {output.verdicts} "
        "--profile {log.profile} 2>&1 | tee {log.log}"


rule review:
    input:
        verdicts="results/validate/{shard}.json",
        stamp=params_stamp("review"),
    output:
        reviews="results/review/{shard}.json",
    params:
        options=params_of("review"),
    log:
        "results/logs/review/{shard}.log",
    benchmark:
        "results/benchmarks/review/{shard}.tsv"
    threads: 1
    resources:
        slurm_partition=CPU_PARTITION,
        mem_mb=CPU_MEM,
        runtime=CPU_RUNTIME,
    shell:
        "termforge review --params {params.options:q} --verdicts {input.verdicts} --out {output.reviews} "
        "2>&1 | tee {log}"


localrules:
    corpus_manifest,


rule corpus_manifest:
    input:
        verdicts=expand("results/validate/{shard}.json", shard=SHARDS),
        reviews=expand("results/review/{shard}.json", shard=SHARDS),
    output:
        manifest="results/corpus/manifest.json",
    log:
        "results/logs/corpus_manifest.log",
    benchmark:
        "results/benchmarks/corpus_manifest.tsv"
    shell:
        "termforge corpus-manifest --verdicts {input.verdicts} --reviews {input.reviews} --out {output.manifest} "
        "2>&1 | tee {log}"
