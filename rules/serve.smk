# The served policy (config `serve`): a job serves the solve stage's model while the solve shards
# that read its service output run (all of them, or serve.shards_per_server of them per server);
# Snakemake stops it (SIGTERM) after the last of them. `exec`
# makes the server the job's own process, so that signal reaches it (a pipe into tee would not).


wildcard_constraints:
    server=r"policy(-\d+)?",


rule serve_policy:
    output:
        info=service("results/serve/{server}.json"),
    params:
        options=params_of("serve_policy"),
    # No benchmark: Snakemake writes one when a job ends, and a service does not end, it is
    # terminated (its benchmark would be missing and fail the job).
    log:
        "results/logs/serve_{server}.log",
    threads: GPU_THREADS
    resources:
        slurm_partition=GPU_PARTITION,
        gpu=GPUS,
        mem_mb=GPU_MEM,
        runtime=GPU_RUNTIME,
    shell:
        "TERMFORGE_JOB_THREADS={threads} exec termforge serve-policy --params {params.options:q} --out {output.info} --log {log}"
