# termforge: signatures -> tasks -> export (later stages extend the DAG through rules/*.smk).
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/images.smk"
include: "rules/quality.smk"
include: "rules/serve.smk"
include: "rules/solve.smk"
include: "rules/hints.smk"
include: "rules/train.smk"
include: "rules/uplift.smk"
include: "rules/eval.smk"
include: "rules/report.smk"


rule all:
    input:
        "results/export/export.json",
        "results/export/verifiers/export.json",
        "results/corpus/manifest.json",
        "results/solve/passk.json",
        "results/eval/results.csv",
        "results/report.html",
    default_target: True
