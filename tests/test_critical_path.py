"""scripts/critical_path.py: rule times from Snakemake's benchmark files and the critical path
through the job DAG, on a hand-made benchmark tree and on a real (tiny) Snakemake run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "critical_path.py"

SNAKEFILE = '''
rule all:
    input: "out/merged.txt"

rule make:
    output: "out/{part}.txt"
    benchmark: "bench/make/{part}.tsv"
    shell: "sleep $(cat ../pause_{wildcards.part} 2>/dev/null || echo 0); echo {wildcards.part} > {output}"

rule check:
    input: "out/{part}.txt"
    output: "out/{part}.ok"
    benchmark:
        "bench/check/{part}.tsv"
    shell: "cp {input} {output}"

rule merge:
    input: expand("out/{part}.ok", part=["a", "b"])
    output: "out/merged.txt"
    benchmark:
        "bench/merge.tsv"
    shell: "cat {input} > {output}"
'''

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def run(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_a_hand_made_benchmark_tree(tmp_path):
    """make[a] 5 s -> check[a] 1 s (its label shows no wildcard: inherited) -> merge 2 s is the
    longest chain; make[b] 9 s -> check[b] 0.5 s is longer alone but b's chain ends in merge too."""
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    times = {"make/a": 5, "make/b": 9, "check/a": 1, "check/b": 0.5, "merge": 2}
    for name, secs in times.items():
        p = tmp_path / "bench" / f"{name}.tsv"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(HEADER + f"{secs}\t0:00:0{int(secs)}\t{10 * secs}\t1\t1\t1\t0\t0\t0\t{secs}\n")
    # As Snakemake prints it: check jobs show no `part`, which they share with their make job.
    (tmp_path / "jobs.dot").write_text('digraph snakemake_dag {\n'
                                       '\t0[label = "all", color = "0 0 0"];\n'
                                       '\t1[label = "merge", color = "0 0 0"];\n'
                                       '\t2[label = "check", color = "0 0 0"];\n'
                                       '\t3[label = "make\\npart: a", color = "0 0 0"];\n'
                                       '\t4[label = "check", color = "0 0 0"];\n'
                                       '\t5[label = "make\\npart: b", color = "0 0 0"];\n'
                                       '\t1 -> 0\n\t2 -> 1\n\t4 -> 1\n\t3 -> 2\n\t5 -> 4\n}\n')
    res = run("--dot", "jobs.dot", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    path = res.stdout.split("critical path:\n")[1].splitlines()
    assert [line.split()[0] for line in path[:3]] == ["make[part=b]", "check[part=b]", "merge"], res.stdout
    assert "critical path 11.5 s" in res.stdout and "of 17.5 s serial job time" in res.stdout, res.stdout
    table = res.stdout.split("\n\n")[0].splitlines()[1:]
    rules = {line.split()[0]: line.split()[1:] for line in table}
    assert rules["make"] == ["2", "14.0", "9.0", "90"], rules
    assert "no benchmark file (counted 0 s): all" in res.stdout
    # A bad argument is one line.
    res = run("--dot", "nosuch.dot", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == ["critical_path.py: error: --dot: nosuch.dot does not exist"]


def test_a_real_snakemake_run(tmp_path):
    """Snakemake runs the tiny workflow and writes its benchmark files; the script asks Snakemake
    for the job DAG itself and finds the chain through the slow part."""
    work = tmp_path / "run"
    work.mkdir()
    (work / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "pause_a").write_text("1.5\n")
    res = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "-q"], cwd=work, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    res = run(cwd=work)
    assert res.returncode == 0, res.stderr
    path = [line.split()[0] for line in res.stdout.split("critical path:\n")[1].splitlines()[:3]]
    assert path == ["make[part=a]", "check[part=a]", "merge"], res.stdout
    first = next(line for line in res.stdout.splitlines() if line.startswith("  make[part=a]"))
    assert float(first.split()[1]) >= 1.5  # the pause it was given
    assert "no benchmark file (counted 0 s): all" in res.stdout
