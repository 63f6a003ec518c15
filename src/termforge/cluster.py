"""What a Slurm cluster can run, checked before anything is submitted.

A job that asks for more CPUs, memory or GPUs than any node of its partition has, or more time
than the partition allows, pends forever (`PENDING (PartitionConfig)`) or is rejected one job at
a time; Snakemake then waits without end. `check` compares every rule's request with the nodes
`scontrol` reports and names, per request that cannot run, the `cluster.*` key to change.

Also here: how the train rule starts one process per GPU (torchrun), on one node or across
nodes through `srun`, and the repository's `slurm` profile made reachable as
`snakemake --profile slurm`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from termforge.errors import TermforgeError

# The config key behind each field of a request, by resource class (rules/common.smk): a rule
# that asks for GPUs is a GPU-class rule, any other submitted rule a CPU-class one.
KEYS = {
    "gpu": {"partition": "cluster.gpu_partition", "cpus": "cluster.cpus_per_gpu", "mem_mb": "cluster.mem_mb_gpu",
            "gpus": "cluster.gpus_per_job", "gpu_model": "cluster.gpu_model", "runtime": "cluster.runtime_min_gpu",
            "nodes": "cluster.train_nodes"},
    "cpu": {"partition": "cluster.cpu_partition", "cpus": "cluster.cpu_threads", "mem_mb": "cluster.mem_mb_cpu",
            "runtime": "cluster.runtime_min_cpu"},
    # A group job (the policy server with every solve shard it serves) asks for the sum of its
    # members: fewer, larger shards or smaller per-job requests bring it down.
    "group": {"partition": "cluster.gpu_partition", "cpus": "cluster.cpu_threads",
              "mem_mb": "cluster.mem_mb_cpu", "gpus": "cluster.gpus_per_job", "runtime": "cluster.runtime_min_gpu",
              "nodes": "cluster.train_nodes", "group": "corpus.shard_size"},
}
UNLIMITED = None


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    mem_mb: int
    gpus: dict = field(default_factory=dict)  # GPU type (or "" when untyped) -> count
    partitions: tuple = ()

    def gpu_count(self, model: str | None = None) -> int:
        if model:
            return self.gpus.get(model, 0)
        return sum(self.gpus.values())


@dataclass(frozen=True)
class Partition:
    name: str
    max_time_min: int | None  # None: no limit
    max_nodes: int | None = None
    max_cpus_per_node: int | None = None
    max_mem_per_node: int | None = None


@dataclass(frozen=True)
class Inventory:
    partitions: dict  # name -> Partition
    nodes: tuple  # Node, ...

    def nodes_in(self, partition: str) -> list[Node]:
        return [n for n in self.nodes if partition in n.partitions]


@dataclass(frozen=True)
class Request:
    """What one or more rules ask of Slurm for each of their jobs."""

    rules: tuple
    partition: str
    cpus: int
    mem_mb: int | None
    gpus: int = 0
    gpu_model: str | None = None
    runtime: int | None = None
    nodes: int = 1
    group: bool = False  # one Slurm job running all of `rules` at once

    @property
    def kind(self) -> str:
        return "group" if self.group else "gpu" if self.gpus else "cpu"

    def describe(self) -> str:
        parts = [f"{self.cpus} CPU{'s' if self.cpus != 1 else ''}"]
        if self.mem_mb is not None:
            parts.append(f"{self.mem_mb} MB")
        if self.gpus:
            parts.append(f"{self.gpus} {self.gpu_model + ' ' if self.gpu_model else ''}GPU{'s' if self.gpus != 1 else ''}")
        if self.runtime is not None:
            parts.append(f"{self.runtime} min")
        text = ", ".join(parts)
        return f"{text} on each of {self.nodes} nodes" if self.nodes > 1 else text


@dataclass(frozen=True)
class Verdict:
    request: Request
    problems: tuple  # the request fields that cannot be met: "partition", "cpus", "mem_mb", ...
    largest: Node | None
    partition: Partition | None
    fitting: int = 0  # nodes of the partition that fit one task of the request

    @property
    def ok(self) -> bool:
        return not self.problems

    def keys(self) -> list[str]:
        keys = KEYS[self.request.kind]
        out = []
        for problem in self.problems:
            key = keys.get(problem)
            if problem == "gpus" and self.request.gpu_model and self.largest and self.largest.gpu_count() >= self.request.gpus:
                key = keys.get("gpu_model", key)  # GPUs exist, just not of that model
            if key and key not in out:
                out.append(key)
        if self.request.group and "corpus.shard_size" not in out:
            out.append(KEYS["group"]["group"])
        return out

    def line(self) -> str:
        """The one-line message for a request that cannot run."""
        r = self.request
        who = f"rule{'s' if len(r.rules) > 1 else ''} {', '.join(r.rules)} ask{'' if len(r.rules) > 1 else 's'}"
        if r.group:
            who = f"the group job of {', '.join(r.rules)} (one Slurm job, all at once) asks"
        keys = ", ".join(self.keys()) or "the rule's resources"
        if "partition" in self.problems:
            return (f"{who} for partition '{r.partition}', which has no nodes or does not exist; "
                    f"set {keys}")
        where = f"{who} {r.describe()} in partition '{r.partition}'"
        node = self.largest
        has = (f"the largest node there ({node.name}) has {node.cpus} CPUs, {node.mem_mb} MB, "
               f"{_gpus_text(node)}")
        limits = []
        if "runtime" in self.problems:
            limits.append(f"the partition's time limit is {self.partition.max_time_min} min")
        if "nodes" in self.problems:
            limits.append(f"{self.fitting} of its nodes fit, {r.nodes} are asked for")
        return f"{where}; {has}{'; ' + '; '.join(limits) if limits else ''}; change {keys}"


def _gpus_text(node: Node) -> str:
    if not node.gpus:
        return "no GPU"
    return " + ".join(f"{n} {t + ' ' if t else ''}GPU{'s' if n != 1 else ''}" for t, n in sorted(node.gpus.items()))


# ---------------------------------------------------------------------------------------------
# Reading Slurm


def _fields(line: str) -> dict[str, str]:
    # `scontrol -o` prints Key=Value pairs separated by spaces; values themselves hold no spaces
    # except a few free-text ones (Reason=...), which come last and are not read here.
    out = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


def parse_time_min(text: str) -> int | None:
    """Slurm's time limits ("UNLIMITED", "30", "2:00:00", "1-12:00:00", "1-12") in minutes."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE", "NONE", ""):
        return UNLIMITED
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
        parts = [int(p) for p in text.split(":")] + [0, 0]
        hours, minutes, seconds = parts[0], parts[1], parts[2]
    else:
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        else:
            hours, minutes, seconds = parts[:3]
    return days * 1440 + hours * 60 + minutes + (1 if seconds else 0)


def parse_gres(text: str) -> dict[str, int]:
    """GPUs in a node's Gres ("gpu:a100:4(S:0-1),gpu:v100:2", "gpu:2", "(null)") by type."""
    gpus: dict[str, int] = {}
    for item in re.sub(r"\([^)]*\)", "", text).split(","):
        parts = item.strip().split(":")
        if not parts or parts[0] != "gpu" or len(parts) < 2:
            continue
        count = parts[-1]
        kind = parts[1] if len(parts) >= 3 else ""
        if count.isdigit():
            gpus[kind] = gpus.get(kind, 0) + int(count)
    return gpus


def _limit(value: str | None) -> int | None:
    if value is None or not value.isdigit():
        return None  # UNLIMITED, or absent
    return int(value)


def parse_inventory(partitions_text: str, nodes_text: str) -> Inventory:
    """An Inventory from `scontrol -o show partition` and `scontrol -o show node`."""
    partitions = {}
    for line in partitions_text.splitlines():
        f = _fields(line)
        if "PartitionName" not in f:
            continue
        partitions[f["PartitionName"]] = Partition(
            name=f["PartitionName"], max_time_min=parse_time_min(f.get("MaxTime", "UNLIMITED")),
            max_nodes=_limit(f.get("MaxNodes")), max_cpus_per_node=_limit(f.get("MaxCPUsPerNode")),
            max_mem_per_node=_limit(f.get("MaxMemPerNode")))
    nodes = []
    for line in nodes_text.splitlines():
        f = _fields(line)
        if "NodeName" not in f:
            continue
        # CPUEfctv (Slurm >= 22.05) leaves out cores reserved by CoreSpecCount.
        cpus = int(f.get("CPUEfctv") or f.get("CPUTot") or 0)
        mem = int(f.get("RealMemory") or 0) - int(f.get("MemSpecLimit") or 0)
        part_names = tuple(p for p in f.get("Partitions", "").split(",") if p)
        nodes.append(Node(name=f["NodeName"], cpus=cpus, mem_mb=mem, gpus=parse_gres(f.get("Gres", "")),
                          partitions=part_names))
    return Inventory(partitions=partitions, nodes=tuple(nodes))


class NoController(TermforgeError):
    """No Slurm controller answers here: scontrol is missing, or cannot reach slurmctld."""


def read_inventory() -> Inventory:
    """Partitions and nodes of the cluster this machine submits to, asked of `scontrol`."""
    if shutil.which("scontrol") is None:
        raise NoController("scontrol not found: this machine is not a Slurm submit host")

    def show(what: str) -> str:
        try:
            res = subprocess.run(["scontrol", "-o", "show", what], capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            raise NoController(f"'scontrol show {what}' did not answer within 60 s") from None
        if res.returncode != 0:
            # scontrol's complaint spans several lines; its last (the fatal one, e.g. "Could not
            # establish a configuration source" or "Unable to contact slurm controller") says it.
            lines = [ln.strip() for ln in (res.stderr or res.stdout).splitlines() if ln.strip()]
            raise NoController(f"'scontrol show {what}': {lines[-1][:200] if lines else f'exit {res.returncode}'}")
        return res.stdout

    return parse_inventory(show("partition"), show("node"))


# ---------------------------------------------------------------------------------------------
# Checking requests


def _fits(node: Node, req: Request, part: Partition) -> set[str]:
    """The fields of `req` that `node` cannot give (empty: it fits)."""
    cpu_cap = min(node.cpus, part.max_cpus_per_node or node.cpus)
    mem_cap = min(node.mem_mb, part.max_mem_per_node or node.mem_mb)
    short = set()
    if req.cpus > cpu_cap:
        short.add("cpus")
    if req.mem_mb is not None and req.mem_mb > mem_cap:
        short.add("mem_mb")
    if req.gpus and node.gpu_count(req.gpu_model) < req.gpus:
        short.add("gpus")
    return short


def check_request(req: Request, inv: Inventory) -> Verdict:
    part = inv.partitions.get(req.partition)
    nodes = inv.nodes_in(req.partition)
    if part is None or not nodes:
        return Verdict(req, ("partition",), None, part)
    shortfalls = [(_fits(n, req, part), n) for n in nodes]
    # The node to name: the one missing the fewest fields, then the biggest.
    best_short, largest = min(shortfalls, key=lambda s: (len(s[0]), -s[1].gpu_count(), -s[1].cpus, -s[1].mem_mb))
    problems = set(best_short)
    fitting = sum(1 for short, _ in shortfalls if not short)
    if not problems and (fitting < req.nodes or (part.max_nodes is not None and req.nodes > part.max_nodes)):
        problems.add("nodes")
    if req.runtime is not None and part.max_time_min is not None and req.runtime > part.max_time_min:
        problems.add("runtime")
    order = ("cpus", "mem_mb", "gpus", "runtime", "nodes")
    return Verdict(req, tuple(p for p in order if p in problems), largest, part, fitting)


def check(requests: list[Request], inv: Inventory) -> list[Verdict]:
    return [check_request(r, inv) for r in requests]


def format_table(verdicts: list[Verdict]) -> str:
    rows = [("rules", "partition", "asks", "largest node", "fits")]
    for v in verdicts:
        node = v.largest
        node_text = f"{node.name}: {node.cpus} CPUs, {node.mem_mb} MB, {_gpus_text(node)}" if node else "-"
        if v.partition is not None and v.partition.max_time_min is not None:
            node_text += f"; limit {v.partition.max_time_min} min"
        rows.append((", ".join(v.request.rules), v.request.partition, v.request.describe(), node_text,
                     "yes" if v.ok else "NO: change " + ", ".join(v.keys())))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Requests from a Snakemake workflow


def _value(resource):
    try:
        value = getattr(resource, "value", resource)
    except ValueError:  # a Resource computed per job (a function of wildcards or inputs)
        return None
    return None if callable(value) else value


def rule_requests(rules, localrules=frozenset()) -> list[Request]:
    """One Request per distinct ask of the rules Slurm would run (localrules and rules without a
    `slurm_partition` are left out), rules with the same ask merged into one."""
    grouped: dict[tuple, list[str]] = {}
    for rule in rules:
        if rule.name in localrules:
            continue
        res = rule.resources
        partition = _value(res.get("slurm_partition"))
        if not partition:
            continue
        gpus = _value(res.get("gpu")) or 0
        model = _value(res.get("gpu_model"))
        gres = _value(res.get("gres"))
        if not gpus and gres:  # --gres counts per node
            by_type = parse_gres(str(gres))
            gpus = sum(by_type.values())
            model = model or next((t for t in by_type if t), None)
        key = (partition, int(_value(res.get("_cores")) or 1),
               _value(res.get("mem_mb")), int(gpus), model,
               _value(res.get("runtime")), int(_value(res.get("nodes")) or _value(res.get("_nodes")) or 1))
        grouped.setdefault(key, []).append(rule.name)
    return [Request(tuple(sorted(names)), *key) for key, names in grouped.items()]


def workflow_rules(snakefile: Path, configfiles: list[str] | None = None):
    """(rules, localrules) of the workflow as Snakemake parses it with these config files."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (ConfigSettings, OutputSettings, Quietness, ResourceSettings,
                                          StorageSettings)

    snakefile = Path(snakefile).resolve()
    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        wf = api.workflow(resource_settings=ResourceSettings(),
                          config_settings=ConfigSettings(configfiles=[Path(c).resolve() for c in configfiles or []]),
                          storage_settings=StorageSettings(), snakefile=snakefile, workdir=snakefile.parent)
        workflow = wf._workflow  # parses the Snakefile (no DAG, nothing runs)
        return list(workflow.rules), frozenset(workflow._localrules)


def group_request(group) -> Request:
    """The Request of a Snakemake group job (its merged resources, as the executor submits them)."""
    res = group.resources
    counts: dict[str, int] = {}
    for job in group.jobs:
        counts[job.rule.name] = counts.get(job.rule.name, 0) + 1
    names = tuple(f"{n} x{c}" if c > 1 else n for n, c in sorted(counts.items()))
    return Request(names, res.get("slurm_partition"), int(res.get("_cores") or 1), res.get("mem_mb"),
                   int(res.get("gpu") or 0), res.get("gpu_model"), res.get("runtime"),
                   int(res.get("nodes") or 1), group=True)


def serve_group_cores(server_threads: int, solve_threads: int, shards_per_group: int) -> int:
    """The --cores a policy server's job group needs: Snakemake caps each job's threads at
    --cores and then sums the group's, so below the full sum no --cores is enough."""
    return server_threads + shards_per_group * solve_threads


def serve_group_problem(cores: int | None, server_threads: int, solve_threads: int, shards: int,
                        shards_per_server: int) -> str | None:
    """Why Snakemake would refuse to plan the policy server groups with `cores` (None: it plans
    them), as one line saying which --cores they need."""
    per_group = min(shards_per_server or shards, shards)
    need = serve_group_cores(server_threads, solve_threads, per_group)
    if cores is None or per_group == 0 or cores >= need:
        return None
    return (f"serve.enabled: each policy server runs as one job group with the {per_group} solve shard(s) it "
            f"serves, which needs --cores {need} (serve_policy {server_threads} threads + {per_group} x solve "
            f"{solve_threads} threads; --cores also bounds group jobs on Slurm), and this run has {cores}: give "
            f"--cores {need} (a dry run too), or lower serve.shards_per_server or cluster.cpu_threads")


def preflight(workflow) -> None:
    """Snakefile `onstart` hook: with the Slurm executor, stop before the first submission when a
    rule of this run asks for what its partition cannot give."""
    import sys

    plugin = getattr(workflow, "executor_plugin", None)
    if plugin is None or getattr(plugin, "name", "") != "slurm":
        return
    needrun = list(workflow.dag.needrun_jobs())
    rules = {job.rule.name: job.rule for job in needrun}
    requests = rule_requests(rules.values(), workflow._localrules)
    groups = {id(g): g for g in (workflow.dag.get_job_group(j) for j in needrun if j.group is not None) if g}
    for group in groups.values():
        try:
            requests.append(group_request(group))
        except Exception as exc:  # a group Snakemake itself cannot size (partitions differ, or
            # more cores than --cores, which also bounds group jobs under the Slurm executor)
            sys.exit(f"termforge: cluster check: group of {', '.join(sorted({j.rule.name for j in group.jobs}))}: "
                     f"{' '.join(str(exc).split())} (raise --cores to at least the group's CPUs)")
    if not requests:
        return
    try:
        inv = read_inventory()
    except NoController as exc:
        print(f"termforge: cluster check: no Slurm controller reachable: skipped ({exc})", file=sys.stderr)
        return
    bad = [v for v in check(requests, inv) if not v.ok]
    if bad:
        sys.exit("\n".join(f"termforge: cluster check: {v.line()}" for v in bad))


# ---------------------------------------------------------------------------------------------
# One training process per GPU


def train_launcher(procs_per_node: int, nodes: int = 1, cpus_per_task: int = 1, gres: str | None = None,
                   tasks_per_node: int = 1) -> str:
    """The command that starts a Python program (`-m termforge.cli train ...` follows it) with one
    process per GPU. torchrun sets RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR, which accelerate's
    Accelerator in the trainer reads; `--tee 3` prefixes every output line with the process's
    role and local rank, so the rule's log shows each rank.

    - one process: plain `python` (the embedded default pays no launcher start-up);
    - one node: `torchrun --standalone` (a rendezvous on a free local port);
    - `nodes` > 1: `srun` starts one torchrun per node inside the job's allocation, and each
      finds the others through Slurm's variables: the main address is the allocation's first
      host, the port derives from the job id (two jobs sharing a first node do not collide) and
      the machine rank is the task's SLURM_PROCID. Snakemake's Slurm job step strips the job's
      SLURM_* task settings from the rule's environment, so `srun` is told its geometry here.
    """
    if nodes <= 1 and procs_per_node <= 1:
        return "python"
    if nodes <= 1:
        return f"torchrun --standalone --nproc-per-node={procs_per_node} --role=rank --tee=3"
    rendezvous = (
        'exec torchrun --nnodes="$SLURM_NTASKS" --node-rank="$SLURM_PROCID" '
        '--master-addr="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)" '
        '--master-port="$((20000 + SLURM_JOB_ID % 20000))" '
        f'--nproc-per-node={procs_per_node} --role="node$SLURM_PROCID.gpu" --tee=3 "$@"'
    )
    step = [f"--ntasks={nodes}", f"--ntasks-per-node={tasks_per_node}", f"--cpus-per-task={cpus_per_task}",
            "--kill-on-bad-exit=1"]
    if gres:
        step.append(f"--gres={gres}")
    return f"srun {' '.join(step)} bash -c {shlex.quote(rendezvous)} torchrun"


def train_resources(partition: str, gpus_per_node: int, nodes: int, mem_mb: int, runtime: int,
                    gpu_model: str | None = None) -> dict:
    """Snakemake resources of the train rule. One node: `gpu` (sbatch --gpus). Several: the
    snakemake-executor-plugin-slurm's MPI form, so the job step runs the rule in the batch script
    (not inside `srun -n1`) and the rule's own `srun` spreads over the nodes: `nodes`, one task
    per node (`tasks`), GPUs per node as `gres` (`--gpus` would be a total Slurm may place
    unevenly), and `tasks_per_gpu=0`, which keeps the plugin from turning `tasks` into
    `--ntasks-per-gpu`."""
    res = {"slurm_partition": partition, "mem_mb": mem_mb, "runtime": runtime}
    if nodes <= 1:
        res["gpu"] = gpus_per_node
        if gpu_model:
            res["gpu_model"] = gpu_model
        return res
    res.update(nodes=nodes, tasks=nodes, mpi="srun", tasks_per_gpu=0,
               gres=f"gpu:{gpu_model}:{gpus_per_node}" if gpu_model else f"gpu:{gpus_per_node}")
    return res


# ---------------------------------------------------------------------------------------------
# `snakemake --profile slurm`


def snakemake_profile_dirs() -> list[Path]:
    """Where Snakemake looks a profile name up besides the working directory (user, site)."""
    from snakemake.cli import get_appdirs

    dirs = get_appdirs()
    return [Path(dirs.user_config_dir), Path(dirs.site_config_dir)]


def link_slurm_profile(repo: Path, search_dirs: list[Path] | None = None, name: str = "slurm") -> str:
    """Make `snakemake --profile slurm` find the repository's profiles/slurm when run from the
    repository: Snakemake looks a profile name up in the working directory first, so a link
    `<repo>/slurm -> profiles/slurm` does it without touching ~/.config or /etc. A `slurm`
    profile the user or site already has is left in charge; the message says how to use ours."""
    repo = Path(repo)
    link = repo / name
    target = Path("profiles") / name
    for d in search_dirs if search_dirs is not None else snakemake_profile_dirs():
        theirs = Path(d) / name
        if theirs.exists():
            if link.is_symlink():
                link.unlink()  # ours would shadow theirs inside the repository
            return (f"a Snakemake profile '{name}' already exists at {theirs}; `snakemake --profile {name}` "
                    f"uses it. termforge's is `snakemake --profile {target}`")
    if link.is_symlink() and os.readlink(link) == str(target):
        return f"`snakemake --profile {name}` uses {target}"
    if link.exists() or link.is_symlink():
        return f"{link} exists and is not a link to {target}; use `snakemake --profile {target}`"
    link.symlink_to(target, target_is_directory=True)
    return f"`snakemake --profile {name}` uses {target} (link {name} -> {target})"
