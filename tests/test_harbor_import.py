"""`termforge import-harbor`: Harbor tasks become canonical task directories that the later stages
take like generated ones (decontamination, validation, export), each task not imported is listed
with its reason, and the dataset can be registered as a decontamination reference."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needs_bwrap
from termforge.errors import TermforgeError
from termforge.evals.harbor_import import import_harbor
from termforge.evals.harbor_tasks import load_harbor_task
from termforge.export import write_harbor_task
from termforge.io import read_json
from termforge.quality.decontam import decontaminate, load_jsonl_references
from termforge.quality.validate import static_checks, validate_task
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime
from termforge.grading.verifier import TEST_SH

ROOT = Path(__file__).resolve().parents[1]
TB_MINI = ROOT / "benchmarks" / "tb-mini"
CONFORMANCE = Path(__file__).parent / "data" / "harbor_conformance"


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("import")
    return out, import_harbor(TB_MINI, out)


def test_import_writes_canonical_tasks_and_a_shard_manifest(imported):
    out, summary = imported
    manifest = read_json(out / "manifest.json")
    names = sorted(p.name for p in TB_MINI.iterdir() if p.is_dir())
    assert [t["id"] for t in manifest["tasks"]] == [f"tb-mini--{n}" for n in names]
    assert summary["n_imported"] == summary["n_tasks"] == len(names)
    for entry in manifest["tasks"]:
        d = Path(manifest["tasks_dir"]) / entry["id"]
        task = static_checks(d)  # the validation stage's contract checks pass
        assert task["family"] == "harbor-import" and task["provenance"]["harbor_name"] in names
        assert (d / "tests" / "test_final_state.py").read_text() == (
            TB_MINI / task["provenance"]["harbor_name"] / "tests" / "test_outputs.py").read_text()
        assert (d / "tests" / "test.sh").read_text() == TEST_SH  # the canonical, proof-of-run verifier


def test_the_imported_dataset_is_a_decontamination_reference(imported):
    out, summary = imported
    ref = summary["decontam_reference"]
    refs = load_jsonl_references(ref["path"], ref["column"])
    assert len(refs) == summary["n_tasks"] and refs[0].source == "tb-mini"
    manifest = read_json(out / "manifest.json")
    dirs = [Path(manifest["tasks_dir"]) / t["id"] for t in manifest["tasks"]]
    report = decontaminate(dirs, refs, policy="drop")
    # Every imported task is found in the reference set it came from.
    assert sorted(report["dropped"]) == sorted(t["id"] for t in manifest["tasks"])


@needs_bwrap
def test_an_imported_task_passes_the_whole_validation_stage(imported, tmp_path):
    out, _ = imported
    d = out / "tasks" / "tb-mini--fix-median"
    verdict = validate_task(d, BwrapRuntime(), tmp_path / "images", Limits(wall_sec=60, cpu_sec=60, memory_mb=2048))
    assert verdict.kept, (verdict.stage, verdict.reason)
    assert "oracle_x2" in verdict.checks and "noop" in verdict.checks
    # On the image its Dockerfile names (FROM debian:bookworm-slim + its apt packages), not ours.
    image = verdict.evidence["image"]
    assert image["base"].startswith("debian-bookworm-slim+") and image["apt_packages"] == ["python3", "python3-pytest"]


def test_imported_tasks_export_back_to_loadable_harbor_tasks(imported, tmp_path):
    out, _ = imported
    d = out / "tasks" / "tb-mini--sort-downloads"
    write_harbor_task(read_json(d / "task.json"), d, tmp_path / "harbor")
    task = load_harbor_task(tmp_path / "harbor" / "tb-mini--sort-downloads")
    assert task.name == "termforge/tb-mini--sort-downloads" and task.network_mode == "no-network"


def test_tasks_that_cannot_run_here_are_listed_with_their_reason(tmp_path):
    summary = import_harbor(CONFORMANCE, tmp_path)
    rows = {r["harbor_name"]: r for r in summary["tasks"]}
    assert summary["n_imported"] == 0 and summary["n_unloadable"] == 1
    assert "gpus" in rows["gpu-task"]["native"]
    assert rows["multi-step"]["native"] is None and "multi-step" in rows["multi-step"]["reason"]
    assert "python:3.12-slim-bookworm" in rows["toolchain-image"]["native"]
    assert "cpus must be a positive number" in rows["invalid-config"]["reason"]
    # Runs natively, but its shell test.sh gives the canonical verifier no proof of run.
    assert rows["canary"]["native"] is None and "exactly one pytest file" in rows["canary"]["reason"]
    assert not any((tmp_path / "tasks").iterdir())
    refs = load_jsonl_references(tmp_path / "references" / "harbor_conformance.jsonl", "text")
    assert len(refs) == len(list(CONFORMANCE.iterdir())) - 1  # every task but invalid-config


def test_a_dataset_id_is_fetched_with_the_harbor_cli(tmp_path, monkeypatch):
    host_path = os.environ["PATH"]
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no harbor CLI
    with pytest.raises(TermforgeError, match="needs the harbor CLI"):
        import_harbor("terminal-bench@2.0", tmp_path / "a")
    # A stand-in harbor CLI: `harbor dataset download ORG/NAME@V -o DIR` exports the tasks to
    # DIR/NAME/ (harbor/cli/download.py: the dataset-name wrapper folder of export mode).
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "harbor"
    fake.write_text(f"#!{sys.executable}\nimport shutil, sys\n"
                    "assert sys.argv[1:3] == ['dataset', 'download'] and sys.argv[4] == '-o', sys.argv\n"
                    "wrapper = sys.argv[5] + '/' + sys.argv[3].split('@')[0].split('/')[-1]\n"
                    f"shutil.copytree({str(TB_MINI / 'fix-median')!r}, wrapper + '/fix-median')\n"
                    "open(wrapper + '/dataset.toml', 'w').write('[dataset]\\n')\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{host_path}")
    summary = import_harbor("tb-mini@1.0", tmp_path / "b", name="tbm")
    assert summary["n_imported"] == 1 and (tmp_path / "b" / "tasks" / "tbm--fix-median" / "task.json").is_file()
    # Without --name the dataset is named after the id; the Harbor tasks themselves are kept (what a
    # Terminal-Bench eval reads: eval.tbench.tasks_dir), at harbor/ or where harbor_dir says.
    summary = import_harbor("terminal-bench@2.0", tmp_path / "c", harbor_dir=tmp_path / "tb2")
    assert summary["dataset"] == "terminal-bench-2.0" and summary["source"] == "terminal-bench@2.0"
    assert (tmp_path / "tb2" / "fix-median" / "task.toml").is_file()
    assert (tmp_path / "c" / "tasks" / "terminal-bench-2.0--fix-median" / "task.json").is_file()


def test_a_dataset_whose_task_folders_lie_one_level_down_imports(tmp_path):
    """Harbor's export wrapper (OUT/NAME/<task>/) and corpora published as tasks/<task_id>/ beside
    their metadata: the one subfolder holding task folders is the dataset."""
    from termforge.evals.harbor_tasks import HarborTaskError, dataset_root, load_harbor_dataset

    src = tmp_path / "corpus"
    for name in ("fix-median", "sort-downloads"):
        shutil.copytree(TB_MINI / name, src / "tasks" / name)
    (src / "data").mkdir()
    (src / "data" / "tasks.jsonl").write_text("{}\n")
    (src / "manifest.json").write_text("{}\n")
    assert dataset_root(src) == src / "tasks"
    tasks, broken = load_harbor_dataset(src)
    assert sorted(t.name for t in tasks) == ["fix-median", "sort-downloads"] and not broken
    summary = import_harbor(src, tmp_path / "out")
    assert summary["dataset"] == "corpus" and summary["n_imported"] == 2, summary
    # Two subfolders holding tasks: which one is the dataset is not guessed.
    shutil.copytree(TB_MINI / "fix-median", src / "more" / "fix-median")
    with pytest.raises(HarborTaskError, match="several subfolders hold some \\(more, tasks\\)"):
        dataset_root(src)


def test_a_local_dataset_is_copied_whole_for_the_evals(imported):
    out, summary = imported
    assert sorted(p.name for p in (out / "harbor").iterdir()) == sorted(p.name for p in TB_MINI.iterdir())
    assert summary["harbor_dir"] == str(out / "harbor") and summary["dataset"] == "tb-mini"


def test_import_harbor_cli(tmp_path):
    res = subprocess.run([sys.executable, "-m", "termforge.cli", "import-harbor", str(CONFORMANCE / "canary"),
                          "--out-dir", str(tmp_path)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert res.returncode == 0, res.stderr
    assert "canary: not imported" in res.stdout and "decontam.jsonl" in res.stdout
