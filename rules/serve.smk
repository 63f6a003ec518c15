# The served policy (config `serve`): one job serves the solve stage's model while the solve shards
# that read its service output run; Snakemake stops it (SIGTERM) after the last of them. `exec`
# makes the server the job's own process, so that signal reaches it (a pipe into tee would not).


rule serve_policy:
    output:
        info=service("results/serve/policy.json"),
    params:
        options=params_of("serve_policy"),
    # No benchmark: Snakemake writes one when a job ends, and a service does not end, it is
    # terminated (its benchmark would be missing and fail the job).
    log:
        "results/logs/serve_policy.log",
    threads: GPU_THREADS
    resources:
        slurm_partition=GPU_PARTITION,
        gpu=GPUS,
        mem_mb=GPU_MEM,
        runtime=GPU_RUNTIME,
    shell:
        "exec termforge serve-policy --params {params.options:q} --out {output.info} --log {log}"
