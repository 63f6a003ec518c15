# Config validation, shard helpers and resource classes. No rule logic lives here.
import sys

from snakemake.utils import validate

from termforge.cluster import preflight, serve_group_problem, train_launcher, train_resources
from termforge.config import (
    ablation_config,
    check_config_files,
    coerce_cli_overrides,
    model_names,
    shard_ids,
)
from termforge.errors import ConfigError
from termforge.export_verifiers import export_config
from termforge.params import stage_params_json, stamp_input
from termforge.plancheck import planned_config

# Schema check by Snakemake itself (fills defaults), then termforge's checks with a one-line
# message naming the key (a jsonschema traceback is not something a user should read).
try:
    # Snakemake's own YAML reading keeps the last of two equal keys: the files are read again here.
    check_config_files(workflow.configfiles)
    # Nested --config values arrive as strings: typed by the schema first (termforge.config).
    config.update(
        planned_config(coerce_cli_overrides(config, workflow.config_settings.config))
    )
except ConfigError as exc:
    sys.exit(f"termforge: config error: {exc}")
validate(config, "../workflow/schemas/config.schema.yaml")

SHARDS = shard_ids(config)


# Shard ids are five digits: results/solve/{shard}.json must not also claim results/solve/reviews/....
wildcard_constraints:
    shard=r"\d{5}",


CLUSTER = config["cluster"]

# Resource classes -> Slurm resources. CPU work never lands on the GPU partition.
CPU_PARTITION = CLUSTER["cpu_partition"]
GPU_PARTITION = CLUSTER["gpu_partition"]
CPU_THREADS = CLUSTER["cpu_threads"]
CPU_MEM = CLUSTER["mem_mb_cpu"]
CPU_RUNTIME = CLUSTER["runtime_min_cpu"]
GPUS = CLUSTER["gpus_per_job"]
GPU_THREADS = CLUSTER["gpus_per_job"] * CLUSTER["cpus_per_gpu"]
GPU_MEM = CLUSTER["mem_mb_gpu"]
GPU_RUNTIME = CLUSTER["runtime_min_gpu"]
# Training: one process per GPU, across cluster.train_nodes nodes (termforge.cluster).
TRAIN_RESOURCES = train_resources(GPU_PARTITION, GPUS, CLUSTER["train_nodes"], GPU_MEM, GPU_RUNTIME,
                                  CLUSTER["gpu_model"])
TRAIN_LAUNCH = train_launcher(GPUS, CLUSTER["train_nodes"], cpus_per_task=GPU_THREADS,
                              gres=TRAIN_RESOURCES.get("gres"))
LIGHT_MEM = 1024
LIGHT_RUNTIME = 30


# A served policy (config `serve`): one server job whose service output the solve shards read.
SERVED = config["serve"]["enabled"] and config["solve"]["agent"] == "model"
# A service runs in one group (one Slurm job) with its consumers, whose partitions must agree.
SOLVE_PARTITION = GPU_PARTITION if SERVED else CPU_PARTITION


# Server ids: `policy` (one server for every shard) or policy-000, policy-001 ... (one per
# serve.shards_per_server shards; each runs as one group job with the shards it serves).
SHARDS_PER_SERVER = config["serve"]["shards_per_server"]


# Snakemake's own refusal of a too-small --cores for these groups names no option: say which.
if SERVED:
    problem = serve_group_problem(
        workflow._cores,
        GPU_THREADS,
        CPU_THREADS,
        len(SHARDS),
        SHARDS_PER_SERVER,
    )
    if problem:
        sys.exit(f"termforge: config error: {problem}")


def server_of(shard):
    if not SHARDS_PER_SERVER:
        return "policy"
    return f"policy-{SHARDS.index(shard) // SHARDS_PER_SERVER:03d}"


def served_policy(wildcards):
    return [f"results/serve/{server_of(wildcards.shard)}.json"] if SERVED else []


def server_flag(wildcards, input):
    return f"--server {input.server}" if input.server else ""


def params_of(stage):
    """The JSON of the config keys a stage reads (termforge.params.STAGE_KEYS)."""
    return stage_params_json(config, stage)


# The verifiers export reads export.verifiers.train_from's train config (prime-rl settings).
try:
    EXPORT_VERIFIERS_PARAMS = stage_params_json(export_config(config), "export_verifiers")
except ConfigError as exc:
    sys.exit(f"termforge: config error: {exc}")


def export_verifiers_params(wildcards):
    """A function, so Snakemake does not read the train templates' {placeholders} as wildcards."""
    return EXPORT_VERIFIERS_PARAMS

MODELS = model_names(config)
ABLATIONS = [m for m in MODELS if m != "base"]


def ablation_params_of(stage):
    """A params function for per-ablation rules: the stage's keys under that ablation's config."""

    def params(wildcards):
        return stage_params_json(ablation_config(config, wildcards.model), stage)

    return params


# Params stamps: results/params/<stage>/stage.json (per ablation: results/params/<stage>/<model>.json)
# holds the stage's params and is rewritten only when they change; every rule takes its stamp as
# an input. A changed value then re-runs its rules by modification time even where Snakemake has
# no metadata to compare params with (results/ from `dvc pull` or a copy, .snakemake deleted).
# Input functions: only once the DAG is built is it known whether jobs will really run
# (termforge.params.stamp_input leaves the stamps alone in dry runs). A stage's stamps are all
# written at its first use: Snakemake lists a folder's files once and misses any written later.
STAMPS = {}


def _executing():
    return workflow.executor_plugin is not None and not workflow.dryrun


def stage_stamps(stage, models=None):
    if stage not in STAMPS:
        if models is None:
            STAMPS[stage] = stamp_input(f"results/params/{stage}/stage.json", params_of(stage), _executing())
        else:
            STAMPS[stage] = {
                model: stamp_input(f"results/params/{stage}/{model}.json",
                                   stage_params_json(ablation_config(config, model), stage), _executing())
                for model in models
            }
    return STAMPS[stage]


def params_stamp(stage):
    def stamp(wildcards):
        return stage_stamps(stage)

    return stamp


def verifiers_stamp(wildcards):
    """The verifiers export's stamp: its params come from export.verifiers.train_from's config."""
    if "export_verifiers" not in STAMPS:
        STAMPS["export_verifiers"] = stamp_input("results/params/export_verifiers/stage.json",
                                                 EXPORT_VERIFIERS_PARAMS, _executing())
    return STAMPS["export_verifiers"]


def ablation_stamp(stage, models):
    def stamp(wildcards):
        return stage_stamps(stage, models)[wildcards.model]

    return stamp


# Terminal-Bench tasks the workflow imports (eval.tbench.source, rule import_tbench): an input of
# the evals and, where decontamination names the same folder, of decontamination.
TBENCH = config["eval"]["tbench"]
IMPORTED_TBENCH = [TBENCH["tasks_dir"]] if TBENCH["source"] else []


def imported_tbench(wildcards):
    return IMPORTED_TBENCH


def imported_references(wildcards):
    return [d for d in config["decontam"]["harbor_dirs"] if d in IMPORTED_TBENCH]


def trained_summary(wildcards):
    """The training summary whose weights an eval uses; none for the base policy."""
    if wildcards.model == "base":
        return []
    return f"results/runs/{wildcards.model}/train/summary.json"


def weights_flag(wildcards, input):
    return f"--weights {input.weights}" if input.weights else ""


def eval_records():
    records = []
    if config["eval"]["aime"]["enabled"]:
        records += expand("results/runs/{model}/eval/aime.json", model=MODELS)
    if config["eval"]["tbench"]["enabled"]:
        records += expand("results/runs/{model}/eval/tbench.json", model=MODELS)
    return records


# With the Slurm executor: stop before the first sbatch when a rule asks for more than any node
# of its partition has (such a job would pend forever); termforge.cluster names the key to change.
onstart:
    preflight(workflow)
