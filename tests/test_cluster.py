"""termforge.cluster: Slurm's partitions and nodes read from scontrol's own output, every rule's
request checked against them, and `snakemake --profile slurm` / the workflow profile."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from termforge.cluster import (Request, check_request, format_table, link_slurm_profile, parse_gres,
                               parse_inventory, parse_time_min, rule_requests, workflow_rules)

REPO = Path(__file__).resolve().parents[1]

# As `scontrol -o show node/partition` prints them (22.05), trimmed of fields not read.
NODES = """\
NodeName=g1 Arch=x86_64 CoresPerSocket=16 CPUAlloc=0 CPUEfctv=32 CPUTot=32 Gres=gpu:a100:4(S:0-1) RealMemory=256000 MemSpecLimit=2000 Partitions=gpu,all State=IDLE
NodeName=g2 Arch=x86_64 CoresPerSocket=8 CPUAlloc=0 CPUEfctv=16 CPUTot=16 Gres=gpu:v100:2 RealMemory=128000 Partitions=gpu,all State=IDLE
NodeName=c1 Arch=x86_64 CoresPerSocket=4 CPUAlloc=0 CPUTot=8 Gres=(null) RealMemory=32000 Partitions=cpu,all State=IDLE
"""
PARTITIONS = """\
PartitionName=cpu AllowGroups=ALL Default=YES MaxNodes=UNLIMITED MaxTime=2-00:00:00 MaxCPUsPerNode=UNLIMITED Nodes=c1 State=UP
PartitionName=gpu AllowGroups=ALL Default=NO MaxNodes=2 MaxTime=12:00:00 MaxCPUsPerNode=UNLIMITED MaxMemPerNode=UNLIMITED Nodes=g[1-2] State=UP
PartitionName=empty Default=NO MaxTime=UNLIMITED Nodes=(null) State=UP
"""


@pytest.fixture()
def inv():
    return parse_inventory(PARTITIONS, NODES)


def test_scontrol_output_parses(inv):
    assert set(inv.partitions) == {"cpu", "gpu", "empty"}
    assert inv.partitions["cpu"].max_time_min == 2 * 1440 and inv.partitions["gpu"].max_time_min == 720
    assert inv.partitions["empty"].max_time_min is None and inv.partitions["gpu"].max_nodes == 2
    g1 = next(n for n in inv.nodes if n.name == "g1")
    assert (g1.cpus, g1.mem_mb, g1.gpus) == (32, 254000, {"a100": 4})  # MemSpecLimit is not for jobs
    assert [n.name for n in inv.nodes_in("gpu")] == ["g1", "g2"]
    assert parse_gres("gpu:2") == {"": 2} and parse_gres("(null)") == {}
    assert parse_gres("gpu:a100:2,gpu:v100:1(S:0),shard:4") == {"a100": 2, "v100": 1}
    assert [parse_time_min(t) for t in ("30", "2:00:00", "1-12", "45:30", "UNLIMITED")] == [30, 120, 2160, 46, None]


def test_a_request_that_fits_passes(inv):
    v = check_request(Request(("train_opsd",), "gpu", 32, 200000, gpus=4, runtime=600), inv)
    assert v.ok and v.largest.name == "g1"
    assert check_request(Request(("solve",), "cpu", 8, 32000, runtime=2880), inv).ok


@pytest.mark.parametrize("request_, problems, keys", [
    (Request(("train_opsd",), "gpu", 64, 1000, gpus=1), ("cpus",), ["cluster.cpus_per_gpu"]),
    (Request(("train_opsd",), "gpu", 8, 300000, gpus=1), ("mem_mb",), ["cluster.mem_mb_gpu"]),
    (Request(("train_opsd",), "gpu", 8, 1000, gpus=8), ("gpus",), ["cluster.gpus_per_job"]),
    (Request(("train_opsd",), "gpu", 8, 1000, gpus=1, gpu_model="h100"), ("gpus",), ["cluster.gpu_model"]),
    (Request(("train_opsd",), "gpu", 8, 1000, gpus=1, runtime=721), ("runtime",), ["cluster.runtime_min_gpu"]),
    (Request(("train_opsd",), "gpu", 8, 1000, gpus=4, nodes=2), ("nodes",), ["cluster.train_nodes"]),
    (Request(("solve",), "cpu", 16, 64000), ("cpus", "mem_mb"), ["cluster.cpu_threads", "cluster.mem_mb_cpu"]),
    (Request(("solve",), "gpus", 1, 1000), ("partition",), ["cluster.cpu_partition"]),
    (Request(("solve",), "empty", 1, 1000), ("partition",), ["cluster.cpu_partition"]),
])
def test_a_request_no_node_can_run_names_the_key(inv, request_, problems, keys):
    v = check_request(request_, inv)
    assert v.problems == problems and v.keys() == keys
    line = v.line()
    assert "\n" not in line and request_.rules[0] in line and all(k in line for k in keys)
    if "partition" not in problems:
        assert f"partition '{request_.partition}'" in line and f"({v.largest.name})" in line


def test_the_message_names_rule_ask_and_largest_node(inv):
    v = check_request(Request(("eval_aime", "train_opsd"), "gpu", 64, 65536, gpus=1, runtime=60), inv)
    assert v.line() == ("rules eval_aime, train_opsd ask 64 CPUs, 65536 MB, 1 GPU, 60 min in partition 'gpu'; "
                        "the largest node there (g1) has 32 CPUs, 254000 MB, 4 a100 GPUs; change cluster.cpus_per_gpu")
    assert "NO: change cluster.cpus_per_gpu" in format_table([v])


def test_workflow_rules_give_the_cluster_block_requests(tmp_path):
    overlay = tmp_path / "o.yaml"
    overlay.write_text("cluster: {gpu_partition: big, gpus_per_job: 2, cpus_per_gpu: 3, mem_mb_gpu: 5000,"
                       " runtime_min_gpu: 99, cpu_threads: 3}\n")
    requests = rule_requests(*workflow_rules(REPO / "Snakefile", [str(overlay)]))
    by_rule = {rule: r for r in requests for rule in r.rules}
    assert {"passk", "report", "corpus_manifest", "all"}.isdisjoint(by_rule)  # localrules run on the login node
    train = by_rule["train_opsd"]
    assert (train.partition, train.cpus, train.mem_mb, train.gpus, train.runtime) == ("big", 6, 5000, 2, 99)
    assert by_rule["solve"].cpus == 3 and by_rule["solve"].gpus == 0


def test_slurm_profile_link_is_made_once_and_yields_to_a_site_profile(tmp_path):
    repo = tmp_path / "repo"
    (repo / "profiles" / "slurm").mkdir(parents=True)
    (repo / "profiles" / "slurm" / "profile.yaml").write_text("executor: slurm\n")
    user, site = tmp_path / "user", tmp_path / "site"
    msg = link_slurm_profile(repo, [user, site])
    assert (repo / "slurm").is_symlink() and (repo / "slurm" / "profile.yaml").is_file(), msg
    assert "uses profiles/slurm" in link_slurm_profile(repo, [user, site])
    # Snakemake itself resolves the name to ours from the repository.
    code = "from snakemake.cli import get_profile_dir; print(get_profile_dir('slurm')[1])"
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=True).stdout
    assert Path(repo, out.strip()).resolve() == (repo / "profiles/slurm/profile.yaml").resolve()

    # A site's own `slurm` profile stays the one `--profile slurm` means; we say how to use ours.
    (site / "slurm").mkdir(parents=True)
    msg = link_slurm_profile(repo, [user, site])
    assert not (repo / "slurm").exists() and str(site / "slurm") in msg and "--profile profiles/slurm" in msg


def _snakemake(*args, cwd=REPO):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_plain_snakemake_uses_the_workflow_profile_and_profile_slurm_resolves(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.yaml").write_text((REPO / "config.yaml").read_text())
    # No --profile, no --cores: profiles/default gives them.
    local = _snakemake("-n", "--directory", str(work))
    assert local.returncode == 0, local.stderr[-2000:]
    assert "workflow specific profile profiles/default" in local.stderr
    # `--profile slurm` as users type it, from a checkout that setup linked.
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "profiles").symlink_to(REPO / "profiles")
    link_slurm_profile(checkout, [])
    res = _snakemake("--profile", "slurm", "-n", "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
                     cwd=checkout)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Using profiles slurm and workflow specific profile" in res.stderr


def test_a_group_job_is_checked_as_one_request(inv):
    """The policy server and the solve shards it serves run as one Slurm job asking for the sum."""
    v = check_request(Request(("serve_policy", "solve x40"), "gpu", 48, 100000, gpus=1, runtime=720, group=True),
                      inv)
    assert v.problems == ("cpus",) and v.keys() == ["cluster.cpu_threads", "corpus.shard_size"]
    assert v.line().startswith("the group job of serve_policy, solve x40 (one Slurm job, all at once) asks 48 CPUs")


def _check_cluster(tmp_path, scontrol: str | None):
    """`termforge check-cluster` with no scontrol on PATH, or with a stand-in printing what
    Debian's scontrol prints where no controller can be reached."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # The host's programs (Snakemake wants bash, which ...) but its scontrol, if any.
    for exe in [*Path("/usr/bin").iterdir(), *Path("/bin").iterdir()]:
        if exe.name != "scontrol" and not (bin_dir / exe.name).exists():
            (bin_dir / exe.name).symlink_to(exe)
    if scontrol is not None:
        (bin_dir / "scontrol").write_text(f"#!/bin/sh\nprintf '%s\\n' {scontrol} >&2\nexit 1\n")
        (bin_dir / "scontrol").chmod(0o755)
    return subprocess.run([sys.executable, "-m", "termforge.cli", "check-cluster", "--configfile",
                           "configs/gpu-full.yaml"], cwd=REPO, capture_output=True, text=True,
                          env={"PATH": str(bin_dir), "PYTHONPATH": str(REPO / "src"), "HOME": str(tmp_path)})


@pytest.mark.parametrize("scontrol, reason", [
    (None, "scontrol not found: this machine is not a Slurm submit host"),
    ("'scontrol: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host' "
     "'scontrol: error: fetch_config: DNS SRV lookup failed' "
     "'scontrol: fatal: Could not establish a configuration source'",
     "'scontrol show partition': scontrol: fatal: Could not establish a configuration source"),
])
def test_check_cluster_off_a_cluster_is_skipped(tmp_path, scontrol, reason):
    res = _check_cluster(tmp_path, scontrol)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"termforge: check-cluster: no Slurm controller reachable: skipped ({reason})"
    assert res.stderr == ""
