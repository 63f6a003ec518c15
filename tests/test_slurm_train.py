"""One training process per GPU: the train rule's launcher (termforge.cluster.train_launcher) run
for real. Two CPU processes with gloo, started by torchrun inside a Slurm job of the test cluster,
and two torchrun agents started as two `srun` tasks that meet through Slurm's variables (the
multi-node path, on one node), each give the adapter one process gives; so does terminal training
(episodes in sandboxes, spread over the processes) launched the same way."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import REORDERED_FLOAT32, needs_bwrap
from slurm_helpers import REPO_ROOT, slurm_cluster, snakemake_env  # noqa: F401
from test_opsd_terminal_train import corpus  # noqa: F401
from test_opsd_trainer import DATA_PARALLEL_SCRIPT, smol_tokenizer, tiny_model_dir  # noqa: F401

from termforge.cluster import train_launcher, train_resources


def test_launcher_per_layout():
    assert train_launcher(1) == "python"  # the embedded default: no launcher start-up
    assert train_launcher(4) == "torchrun --standalone --nproc-per-node=4 --role=rank --tee=3"
    multi = train_launcher(8, nodes=2, cpus_per_task=64, gres="gpu:h100:8")
    assert multi.startswith("srun --ntasks=2 --ntasks-per-node=1 --cpus-per-task=64 --kill-on-bad-exit=1 "
                            "--gres=gpu:h100:8 bash -c ")
    for part in ('--nnodes="$SLURM_NTASKS"', '--node-rank="$SLURM_PROCID"', "SLURM_JOB_NODELIST",
                 "SLURM_JOB_ID % 20000", "--nproc-per-node=8"):
        assert part in multi
    assert train_resources("gpu", 2, 1, 1000, 60) == {"slurm_partition": "gpu", "mem_mb": 1000, "runtime": 60,
                                                      "gpu": 2}
    assert train_resources("gpu", 8, 4, 1000, 60, "h100") == {
        "slurm_partition": "gpu", "mem_mb": 1000, "runtime": 60, "nodes": 4, "tasks": 4, "mpi": "srun",
        "tasks_per_gpu": 0, "gres": "gpu:h100:8"}


def _adapter(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / "adapter" / "adapter_model.safetensors"))


def _sbatch(script: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sbatch", "--wait", "--parsable", *args, str(script)], cwd=script.parent,
                          env=snakemake_env(), capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.extended  # the gate: the terminal trainer's 2 processes through Slurm, below, and 2 local ranks
def test_two_processes_through_slurm_give_the_adapter_of_one(slurm_cluster, tiny_model_dir, tmp_path):
    program = tmp_path / "data_parallel_run.py"
    program.write_text(DATA_PARALLEL_SCRIPT + "\nimport os\nprint('rank', os.environ.get('RANK', '0'), 'of', "
                                               "os.environ.get('WORLD_SIZE', '1'), flush=True)\n")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    one = subprocess.run([sys.executable, str(program), tiny_model_dir, str(tmp_path / "one")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-2000:]
    reference = _adapter(tmp_path / "one")

    layouts = {
        # one node, two processes: what a job with gpus_per_job: 2 runs
        "torchrun": (train_launcher(2), ["--ntasks=1", "--cpus-per-task=2"]),
        # two srun tasks, one torchrun each, rendezvous from SLURM_* (train_nodes: 2, here on one node)
        "srun": (train_launcher(1, nodes=2, cpus_per_task=1, tasks_per_node=2), ["--ntasks=2", "--cpus-per-task=1"]),
    }
    for name, (launch, sbatch_args) in layouts.items():
        out = tmp_path / name
        job = tmp_path / f"{name}.sh"
        job.write_text(textwrap.dedent(f"""\
            #!/bin/bash
            set -euo pipefail
            export OMP_NUM_THREADS=1 PYTHONPATH={REPO_ROOT / 'src'}
            {launch} {program} {tiny_model_dir} {out}
            """))
        res = _sbatch(job, "-p", "cpu", "--mem=6000", f"--output={tmp_path / name}.log", *sbatch_args)
        log = (tmp_path / f"{name}.log").read_text(errors="replace") if (tmp_path / f"{name}.log").exists() else ""
        assert res.returncode == 0, f"{name}: sbatch {res.stderr}\n{log[-3000:]}"
        two = _adapter(out)
        assert two.keys() == reference.keys()
        for key in reference:
            torch.testing.assert_close(two[key], reference[key], **REORDERED_FLOAT32)
        # torchrun --tee prefixes each line with the process's role and local rank.
        ranks = ("[rank0]:rank 0 of 2", "[rank1]:rank 1 of 2") if name == "torchrun" else (
            "[node0.gpu0]:rank 0 of 2", "[node1.gpu0]:rank 1 of 2")
        assert all(r in log for r in ranks), log[-2000:]


@pytest.fixture(scope="module")
def terminal_model_dir(tmp_path_factory):
    from conftest import save_tiny_llama, smollm2_tokenizer

    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama-slurm-terminal"), smollm2_tokenizer(),
                           max_positions=4096)


@pytest.mark.slow
@needs_bwrap
def test_terminal_training_on_two_processes_through_slurm(slurm_cluster, terminal_model_dir, corpus, tmp_path):
    """The train rule's launcher for `cluster.gpus_per_job: 2` (torchrun, two processes) in a job of
    the test cluster runs terminal training (episodes in bwrap sandboxes, spread over the two
    processes) to the adapter one process gives."""
    import json

    from test_opsd_terminal_train import DISTRIBUTED_TERMINAL_SCRIPT, distributed_terminal_config

    root, _, _ = corpus
    cfg = distributed_terminal_config(terminal_model_dir, root)
    program = tmp_path / "terminal_run.py"
    program.write_text(DISTRIBUTED_TERMINAL_SCRIPT)
    params = tmp_path / "params.json"
    params.write_text(json.dumps(cfg.to_dict()))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO_ROOT / "src"))
    one = subprocess.run([sys.executable, str(program), params.read_text(), str(tmp_path / "one")], env=env,
                         capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-2000:]
    reference = _adapter(tmp_path / "one")

    job = tmp_path / "terminal.sh"
    job.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        set -euo pipefail
        export OMP_NUM_THREADS=1 PYTHONPATH={REPO_ROOT / 'src'}
        {train_launcher(2)} {program} "$(cat {params})" {tmp_path / 'two'}
        """))
    res = _sbatch(job, "-p", "cpu", "--mem=6000", "--ntasks=1", "--cpus-per-task=2",
                  f"--output={tmp_path / 'terminal'}.log")
    log = (tmp_path / "terminal.log").read_text(errors="replace") if (tmp_path / "terminal.log").exists() else ""
    assert res.returncode == 0, f"sbatch {res.stderr}\n{log[-3000:]}"
    two = _adapter(tmp_path / "two")
    assert two.keys() == reference.keys()
    for key in reference:
        torch.testing.assert_close(two[key], reference[key], **REORDERED_FLOAT32)
    assert "[rank0]:rank 0 of 2 sampled" in log and "[rank1]:rank 1 of 2 sampled" in log, log[-2000:]
