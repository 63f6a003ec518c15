# Per-shard image builds (bwrap task layers here; Apptainer SIFs on clusters).


rule build_images:
    input:
        manifest="results/tasks/manifests/{shard}.json",
        stamp=params_stamp("build_images"),
    output:
        builds="results/images/manifests/{shard}.json",
    params:
        options=params_of("build_images"),
    log:
        "results/logs/build_images/{shard}.log",
    benchmark:
        "results/benchmarks/build_images/{shard}.tsv"
    threads: CPU_THREADS
    resources:
        slurm_partition=CPU_PARTITION,
        mem_mb=CPU_MEM,
        runtime=CPU_RUNTIME,
    shell:
        "termforge build-images --params {params.options:q} --manifest {input.manifest} "
        "--images-dir results/images --out {output.builds} 2>&1 | tee {log}"
