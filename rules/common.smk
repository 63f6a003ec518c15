# Config validation, shard helpers and resource classes. No rule logic lives here.
import sys

from snakemake.utils import validate

from termforge.config import check_config, shard_ids
from termforge.errors import ConfigError
from termforge.params import stage_params_json

# Schema check by Snakemake itself (fills defaults), then termforge's checks with a one-line
# message naming the key (a jsonschema traceback is not something a user should read).
try:
    config.update(check_config(config))
except ConfigError as exc:
    sys.exit(f"termforge: config error: {exc}")
validate(config, "../workflow/schemas/config.schema.yaml")

SHARDS = shard_ids(config)
CLUSTER = config["cluster"]

# Resource classes -> Slurm resources. CPU work never lands on the GPU partition.
CPU_PARTITION = CLUSTER["cpu_partition"]
GPU_PARTITION = CLUSTER["gpu_partition"]
CPU_THREADS = CLUSTER["cpu_threads"]
CPU_MEM = CLUSTER["mem_mb_cpu"]
CPU_RUNTIME = CLUSTER["runtime_min_cpu"]
LIGHT_MEM = 1024
LIGHT_RUNTIME = 30


def params_of(stage):
    """The JSON of the config keys a stage reads (termforge.params.STAGE_KEYS)."""
    return stage_params_json(config, stage)
