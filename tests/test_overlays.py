"""The shipped overlays plan what they say: every overlay and ablation combination the docs show is
planned by real Snakemake (dry run), and every job's params name a model its backend accepts, the
trained model is the one the evals load the trained weights on, and configs/gpu-full.yaml plans
Qwen3-1.7B everywhere. A CPU run of gpu-full with SmolLM2 standing in for Qwen3 checks the hand-off
from training to the evaluation of the trained weights end to end."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from termforge.config import deep_merge
from termforge.models.base import check_model_spec

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
QWEN = "Qwen/Qwen3-1.7B"

# Overlays (after config.yaml) as the docs combine them.
COMBOS = {
    "default": [],
    "tmax15k": ["configs/tmax15k.yaml"],
    "gpu-full": ["configs/tmax15k.yaml", "configs/gpu-full.yaml"],
    "lr-sweep": ["configs/ablations/lr-sweep.yaml"],
    "teacher-modes": ["configs/ablations/teacher-modes.yaml"],
    "reference": ["configs/opsd-reference.yaml", "configs/ablations/trace-best.yaml"],
    "gpu-reference": ["configs/gpu-full.yaml", "configs/opsd-reference.yaml"],
    **{f"example-{p.stem}": [f"configs/examples/{p.name}"] for p in sorted((ROOT / "configs/examples").glob("*.yaml"))},
}


def test_every_shipped_overlay_is_in_a_combination():
    shipped = {str(p.relative_to(ROOT)) for p in (ROOT / "configs").rglob("*.yaml")}
    assert shipped <= {f for files in COMBOS.values() for f in files}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    work = tmp_path_factory.mktemp("overlays") / "repo"
    work.mkdir()
    for name in ("Snakefile", "rules", "workflow", "profiles", "benchmarks", "src", "configs", "config.yaml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    return work


def _env(work: Path) -> dict:
    return {"PATH": f"{BIN}:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(work.parent), "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(work / "src")}


def planned_jobs(work: Path, overlays: list[str], cores: int = 64) -> list[dict]:
    """Every job of a dry run: rule command, params, and the other arguments, from the printed shell commands."""
    res = subprocess.run([str(BIN / "snakemake"), "-n", "-p", "--cores", str(cores), "--configfile", "config.yaml",
                          *overlays], cwd=work, capture_output=True, text=True, env=_env(work))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    jobs = []
    for line in res.stdout.splitlines():
        if not line.startswith("Shell command: ") or line == "Shell command: None":  # None: rule all
            continue
        words = shlex.split(line.removeprefix("Shell command: ").split(" 2>&1")[0].split(" > ")[0])
        cli = words.index("termforge") if "termforge" in words else words.index("termforge.cli")
        job = {"command": words[cli + 1], "args": words[cli + 2:]}
        if "--params" in words:
            job["params"] = json.loads(words[words.index("--params") + 1])
        jobs.append(job)
    stats = res.stdout[res.stdout.index("Job stats:"):].split("\n\n")[0]
    total = int(re.search(r"^total\s+(\d+)$", stats, re.M).group(1))
    assert len(jobs) == total - 1, "a planned job printed no command"  # `all` has none
    return jobs


def _arg(job: dict, flag: str) -> str | None:
    return job["args"][job["args"].index(flag) + 1] if flag in job["args"] else None


def _models(params: dict) -> dict[str, dict]:
    return {k: v for k, v in params.items() if k.startswith("models.")}


@pytest.mark.slow
@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_each_job_of_each_combination_gets_a_valid_model(combo, project):
    jobs = planned_jobs(project, COMBOS[combo])
    for job in jobs:
        for where, spec in _models(job.get("params", {})).items():
            check_model_spec(spec, where)  # the backend takes every key (no leftovers of another backend)
    train = {_arg(j, "--out-dir").split("/")[2]: j["params"]["train"] for j in jobs if j["command"] == "train"}
    evals = [j for j in jobs if j["command"] in ("eval-aime", "eval-tbench")]
    assert evals and {_arg(j, "--model-name") for j in evals} == {"base", *train}
    for job in evals:
        [spec] = _models(job["params"]).values()
        name = _arg(job, "--model-name")
        if name != "base":
            # The trained weights are evaluated on the model that was trained, by a backend that loads them.
            assert _arg(job, "--weights") == f"results/runs/{name}/train/summary.json"
            assert spec["model"] == train[name]["model"] and spec["backend"] in ("transformers", "vllm")
    if combo.startswith("gpu"):
        assert {t["model"] for t in train.values()} == {QWEN}
        assert {(s["backend"], s["model"]) for j in evals for s in _models(j["params"]).values()} == {("vllm", QWEN)}
        solves = [j for j in jobs if j["command"] == "solve"]
        assert solves and all(_arg(j, "--server") for j in solves)  # the served policy
        serves = [j for j in jobs if j["command"] == "serve-policy"]
        assert {s["model"] for j in serves for s in _models(j["params"]).values()} == {QWEN}
        assert all(t["max_steps"] == 100 and t["lora_r"] == 64 for t in train.values())
    if combo == "gpu-full":
        assert len([j for j in jobs if j["command"] == "serve-policy"]) == 19  # 75 shards, 4 per server
        [imp] = [j for j in jobs if j["command"] == "import-harbor"]
        assert imp["args"][0] == "terminal-bench@2.0"
        assert _arg(imp, "--harbor-dir") == "results/imported/terminal-bench-2.0/harbor"
        assert all(j["params"]["eval.tbench"]["tasks_dir"] == _arg(imp, "--harbor-dir")
                   for j in evals if j["command"] == "eval-tbench")


# -- gpu-full on a CPU, with SmolLM2 in Qwen3's place -----------------------------------------------

SMOLLM = {"backend": "transformers", "model": "smollm2-135m-instruct", "device": "cpu"}


def stand_in_config() -> dict:
    """config.yaml + configs/gpu-full.yaml, with the model and every size small enough for a CPU,
    and the Terminal-Bench tasks imported by the workflow from a local folder."""
    cfg = deep_merge(yaml.safe_load((ROOT / "config.yaml").read_text()),
                     yaml.safe_load((ROOT / "configs/gpu-full.yaml").read_text()))
    gpu = cfg["models"]["qwen3"]
    assert gpu["model"] == cfg["train"]["model"] == QWEN  # what the stand-in replaces
    cfg["models"]["qwen3"] = dict(SMOLLM)
    cfg["ablations"] = {"fkl": {}}
    return deep_merge(cfg, {
        "corpus": {"n_tasks": 2, "shard_size": 2},
        "math_data": {"n": 8},
        "serve": {"engine": "transformers", "health_timeout_s": 600},
        "solve": {"k": 1, "concurrency": 1, "turn_cap": 1, "sampling": {"max_new_tokens": 8}},
        "train": {"model": SMOLLM["model"], "device": "cpu", "max_steps": 1, "prompts_per_step": 2,
                  "max_new_tokens": 8, "lora_r": 8, "lora_alpha": 16, "micro_batch_size": 2,
                  "gradient_checkpointing": False, "checkpoint_every": 0, "probe_size": 1, "probe_max_new_tokens": 8},
        "eval": {"aime": {"source": "math_data:heldout", "max_problems": 1, "n": 1, "thinking": None,
                          "sampling": {"max_new_tokens": 8}},
                 "tbench": {"benchmark": "tb-mini", "source": "benchmarks/tb-mini",
                            "tasks_dir": "results/imported/tb-mini/harbor", "k": 1, "n_concurrent": 1, "turn_cap": 1,
                            "sampling": {"max_new_tokens": 8}}},
        "decontam": {"harbor_dirs": ["benchmarks/tb-mini", "results/imported/tb-mini/harbor"]},
        "cluster": {"gpus_per_job": 1, "cpus_per_gpu": 1, "cpu_threads": 1, "mem_mb_gpu": 4096},
    })


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.extended  # the gate: every job of the gpu-full plan gets a valid model (above)
def test_gpu_full_with_a_tiny_stand_in_trains_then_evaluates_the_trained_weights(tmp_path):
    work = tmp_path / "repo"
    work.mkdir()
    for name in ("Snakefile", "rules", "workflow", "profiles", "benchmarks", "src"):
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, work / name)
    (work / "config.yaml").write_text(yaml.safe_dump(stand_in_config(), sort_keys=False))
    targets = ["results/solve/passk.json", "results/runs/fkl/eval/aime.json", "results/runs/fkl/eval/tbench.json"]
    res = subprocess.run([str(BIN / "snakemake"), "--cores", "2", *targets], cwd=work, capture_output=True, text=True,
                         env=_env(work), timeout=3000)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    summary = json.loads((work / "results/runs/fkl/train/summary.json").read_text())
    assert summary["steps"] == 1 and (work / summary["weights"] / "adapter_config.json").is_file()
    aime = json.loads((work / "results/runs/fkl/eval/aime.json").read_text())
    # The eval loaded the trained adapter on the policy's base weights (the model id says which).
    assert aime["model"] == "fkl" and aime["summary"]["model"]["model"] == f"{SMOLLM['model']}+fkl"
    tbench = json.loads((work / "results/runs/fkl/eval/tbench.json").read_text())
    assert tbench["benchmark"] == "tb-mini" and tbench["summary"]["n_tasks"] >= 1
    # The Terminal-Bench tasks came from the workflow's import (a local folder as the source), and
    # the policy was served to the solve shard by the workflow's server.
    assert (work / "results/imported/tb-mini/harbor/fix-median/task.toml").is_file()
    served = (work / "results/logs/serve_policy-000.log").read_text()
    assert "transformers serving" in served and "stopped after" in served
