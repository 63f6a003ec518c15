# pass@k solving: k rollouts per kept task per shard, the rubric review of the successful ones,
# then the pass@k tables.


rule solve:
    input:
        manifest="results/tasks/manifests/{shard}.json",
        corpus="results/corpus/manifest.json",
        builds="results/images/manifests/{shard}.json",
        server=served_policy,
        stamp=params_stamp("solve"),
    output:
        rollouts="results/solve/{shard}.json",
    params:
        options=params_of("solve"),
        server=server_flag,
    log:
        "results/logs/solve/{shard}.log",
    benchmark:
        "results/benchmarks/solve/{shard}.tsv"
    threads: CPU_THREADS
    resources:
        slurm_partition=SOLVE_PARTITION,
        mem_mb=CPU_MEM,
        runtime=CPU_RUNTIME,
    shell:
        "TERMFORGE_JOB_THREADS={threads} termforge solve --params {params.options:q} {params.server} --manifest {input.manifest} --corpus {input.corpus} "
        "--images-dir results/images --trajectories results/solve/trajectories --out {output.rollouts} "
        "2>&1 | tee {log}"


rule review_traces:
    input:
        solved="results/solve/{shard}.json",
        stamp=params_stamp("review_traces"),
    output:
        reviews="results/solve/reviews/{shard}.json",
    params:
        options=params_of("review_traces"),
    log:
        "results/logs/review_traces/{shard}.log",
    benchmark:
        "results/benchmarks/review_traces/{shard}.tsv"
    threads: 1
    resources:
        slurm_partition=CPU_PARTITION,
        mem_mb=CPU_MEM,
        runtime=CPU_RUNTIME,
    shell:
        "termforge review-traces --params {params.options:q} --solved {input.solved} --out {output.reviews} "
        "2>&1 | tee {log}"


localrules:
    passk,


rule passk:
    input:
        solved=expand("results/solve/{shard}.json", shard=SHARDS),
        reviews=expand("results/solve/reviews/{shard}.json", shard=SHARDS),
    output:
        table="results/solve/passk.json",
        csv="results/solve/passk.csv",
        sft="results/solve/sft.parquet",
    log:
        "results/logs/passk.log",
    benchmark:
        "results/benchmarks/passk.tsv"
    shell:
        "termforge passk --solved {input.solved} --trace-reviews {input.reviews} --out {output.table} "
        "--csv {output.csv} --sft {output.sft} 2>&1 | tee {log}"
