"""The data stages through the CLI and through real Snakemake: deterministic bytes, crash-safe
resumption after kill -9, and an end-to-end run of the workflow on a small config."""

import filecmp
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import needs_bwrap
from termforge.config import load_config
from termforge.params import stage_params_json

ROOT = Path(__file__).resolve().parents[1]
TERMFORGE = [sys.executable, "-m", "termforge.cli"]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
REQUIRED = ("task.json", "instruction.md", "environment/setup.sh", "environment/container.def",
            "environment/Dockerfile", "tests/test_initial_state.py", "tests/test_final_state.py", "tests/test.sh",
            "solution/solve.sh", "private/truth.json", "private/method.md")


def _config(tmp_path, n_tasks, shard_size, workers=1):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(f"corpus: {{n_tasks: {n_tasks}, shard_size: {shard_size}}}\ngenerate: {{workers: {workers}}}\n")
    return load_config([ROOT / "config.yaml", overlay])


def _run_stages(workdir: Path, cfg: dict) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    run = lambda *a: subprocess.run([*TERMFORGE, *a], cwd=workdir, check=True, capture_output=True, text=True)  # noqa: E731
    run("sample-axes", "--params", stage_params_json(cfg, "sample_axes"), "--out", "results/axes/signatures.jsonl",
        "--stats", "results/axes/stats.json")
    n_shards = -(-cfg["corpus"]["n_tasks"] // cfg["corpus"]["shard_size"])
    manifests = []
    for shard in range(n_shards):
        manifests.append(f"results/tasks/manifests/{shard:05d}.json")
        run("generate", "--params", stage_params_json(cfg, "generate"), "--signatures",
            "results/axes/signatures.jsonl", "--shard", f"{shard:05d}", "--tasks-dir", "results/tasks",
            "--out", manifests[-1])
    run("export", "--params", stage_params_json(cfg, "export"), "--manifests", *manifests, "--out-dir",
        "results/export")


def _tree_equal(a: Path, b: Path) -> list[str]:
    files_a = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
    files_b = sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    return [f for f in files_a if not filecmp.cmp(a / f, b / f, shallow=False)]


def test_two_runs_are_byte_identical(tmp_path):
    cfg = _config(tmp_path, 12, 6)
    _run_stages(tmp_path / "a", cfg)
    _run_stages(tmp_path / "b", cfg)
    assert _tree_equal(tmp_path / "a" / "results", tmp_path / "b" / "results") == []
    dataset = tmp_path / "a" / "results" / "export" / "dataset" / "train.parquet"
    import datasets

    ds = datasets.load_dataset("parquet", data_files=str(dataset), split="train")
    assert len(ds) == 12
    for col in ("domain", "skill_type", "skills", "persona", "language", "anchor", "task_complexity",
                "command_complexity", "verifier_kind", "fixture_kind", "corpus_kind", "instruction"):
        assert col in ds.column_names
    for forbidden in ("truth", "tests", "oracle", "method_note"):
        assert forbidden not in ds.column_names


def test_harbor_export_layout(tmp_path):
    import tomllib

    cfg = _config(tmp_path, 6, 6)
    _run_stages(tmp_path / "w", cfg)
    harbor = tmp_path / "w" / "results" / "export" / "harbor"
    dirs = sorted(harbor.iterdir())
    assert len(dirs) == 6
    for d in dirs:
        meta = tomllib.loads((d / "task.toml").read_text())
        assert meta["metadata"]["termforge_id"] == d.name
        assert meta["metadata"]["domain"] and meta["agent"]["timeout_sec"] > 0
        assert meta["environment"]["network_mode"] == "no-network" and meta["schema_version"] == "1.4"
        assert meta["task"]["name"].startswith("termforge/")  # Harbor's publisher needs [task].name
        for rel in ("instruction.md", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh"):
            assert (d / rel).is_file(), rel
        assert not (d / "private").exists()
        assert "reward.txt" in (d / "tests" / "test.sh").read_text()


def test_push_to_hub_without_token_is_a_dry_run(tmp_path, capsys):
    from termforge.export import push_to_hub

    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "train.parquet").write_bytes(b"x")
    res = push_to_hub(tmp_path, "someone/termforge-test", "TERMFORGE_TEST_NO_SUCH_TOKEN")
    assert res["dry_run"] and res["files"] == ["dataset/train.parquet"]
    assert "TERMFORGE_TEST_NO_SUCH_TOKEN is not set" in capsys.readouterr().out


def _complete(task_dir: Path) -> bool:
    return all((task_dir / rel).is_file() for rel in REQUIRED)


def test_kill_9_during_generate_then_resume(tmp_path):
    cfg = _config(tmp_path, 24, 24)
    work = tmp_path / "killed"
    (work / "results" / "axes").mkdir(parents=True)
    subprocess.run([*TERMFORGE, "sample-axes", "--params", stage_params_json(cfg, "sample_axes"), "--out",
                    "results/axes/signatures.jsonl", "--stats", "results/axes/stats.json"], cwd=work, check=True)
    gen = [*TERMFORGE, "generate", "--params", stage_params_json(cfg, "generate"), "--signatures",
           "results/axes/signatures.jsonl", "--shard", "00000", "--tasks-dir", "results/tasks", "--out",
           "results/tasks/manifests/00000.json"]
    tasks = work / "results" / "tasks"
    half_written: list[str] = []
    stop = threading.Event()

    def watch():  # every visible task directory must be complete at every moment
        while not stop.is_set():
            if tasks.exists():
                for d in tasks.glob("tf-*"):
                    if d.is_dir() and not _complete(d) and d.exists():
                        half_written.append(d.name)
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    proc = subprocess.Popen(gen, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(tasks.glob("tf-*"))) < 4:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = {d.name for d in tasks.glob("tf-*")}
    assert 4 <= len(done_before) < 24, "the kill must land in the middle of the shard"
    mtimes = {name: os.stat(tasks / name / "task.json").st_mtime_ns for name in done_before}
    res = subprocess.run(gen, cwd=work, capture_output=True, text=True, check=True)
    stop.set()
    watcher.join()
    assert not half_written, f"half-written task directories were visible: {sorted(set(half_written))}"
    assert f"{24 - len(done_before)} new, {len(done_before)} already done" in res.stdout
    assert all(os.stat(tasks / n / "task.json").st_mtime_ns == mtimes[n] for n in done_before)  # not redone
    assert not [p for p in tasks.iterdir() if p.name.startswith(".")]  # no staging leftovers
    # The resumed result equals an uninterrupted run.
    clean = tmp_path / "clean"
    (clean / "results" / "axes").mkdir(parents=True)
    subprocess.run([*TERMFORGE, "sample-axes", "--params", stage_params_json(cfg, "sample_axes"), "--out",
                    "results/axes/signatures.jsonl", "--stats", "results/axes/stats.json"], cwd=clean, check=True)
    subprocess.run(gen, cwd=clean, check=True, capture_output=True)
    assert _tree_equal(work / "results" / "tasks", clean / "results" / "tasks") == []


@pytest.mark.slow
@needs_bwrap
def test_snakemake_runs_data_quality_hints_and_export(tmp_path):
    (tmp_path / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")
    (tmp_path / "small.yaml").write_text("corpus: {n_tasks: 4, shard_size: 2}\n")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    # The target goes first: --configfile takes several values and would swallow it.
    res = subprocess.run([SNAKEMAKE, "results/export/export.json", "-s", str(ROOT / "Snakefile"), "--directory",
                          str(tmp_path), "--cores", "2", "--configfile", str(tmp_path / "small.yaml")],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / "results" / "export" / "export.json").read_text())
    corpus = json.loads((tmp_path / "results" / "corpus" / "manifest.json").read_text())
    assert corpus["counts"]["total"] == 4 and summary["tasks"] == corpus["counts"]["kept"] >= 1
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "results" / "export" / "dataset" / "train.parquet").to_pylist()
    assert all(r["demo"] for r in rows)  # every kept procedural task got a gate-passing hint
    for log in ("sample_axes.log", "hints.log", "export.log"):
        assert (tmp_path / "results" / "logs" / log).stat().st_size > 0
    assert (tmp_path / "results" / "benchmarks" / "export.tsv").exists()
