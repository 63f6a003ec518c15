# Hint uplift (docs/opsd.md, "Hint uplift"): each hinted task's pass rate with its hint in the
# policy's context vs without, k episodes per arm on the same seeds, with the terminal ablation's
# policy, harness and sandbox settings (export.verifiers.train_from's choice of ablation).

try:
    HINT_UPLIFT_PARAMS = stage_params_json(export_config(config), "train")
except ConfigError as exc:
    sys.exit(f"termforge: config error: {exc}")


def hint_uplift_params(wildcards):
    """A function, so Snakemake does not read the train templates' {placeholders} as wildcards."""
    return HINT_UPLIFT_PARAMS


rule hint_uplift:
    input:
        demos="results/hints/demos.parquet",
        corpus="results/corpus/manifest.json",
        images=expand("results/images/manifests/{shard}.json", shard=SHARDS),
        stamp=params_stamp("hint_uplift"),
    output:
        uplift="results/hints/uplift.json",
    params:
        options=hint_uplift_params,
        tasks=config["hints"]["uplift_tasks"],
    log:
        "results/logs/hints/uplift.log",
    benchmark:
        "results/benchmarks/hints/uplift.tsv"
    threads: CPU_THREADS
    shell:
        "TERMFORGE_JOB_THREADS={threads} termforge hint-uplift --params {params.options:q} --demos {input.demos} "
        "--tasks-dir results/tasks --images-dir results/images --corpus {input.corpus} --task-count {params.tasks} "
        "--out {output.uplift} "
        "2>&1 | tee {log}"
