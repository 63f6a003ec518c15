# The run report: one self-contained HTML page (plots embedded) plus the same tables as CSV.


localrules:
    report,


rule report:
    input:
        stats="results/axes/stats.json",
        corpus="results/corpus/manifest.json",
        passk="results/solve/passk.json",
        hints="results/hints/coverage.json",
        uplift="results/hints/uplift.json",
        evals="results/eval/results.csv",
        training=expand("results/runs/{model}/train/summary.json", model=ABLATIONS),
    output:
        html="results/report.html",
        tables=directory("results/report"),
    log:
        "results/logs/report.log",
    benchmark:
        "results/benchmarks/report.tsv"
    shell:
        "termforge report --results results --out {output.html} --tables {output.tables} 2>&1 | tee {log}"
