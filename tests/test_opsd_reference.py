"""The reference OPSD recipe as the workflow runs it (issue 13): the configured dataset, the
prompt preset, the reference's token weighting, the EMA teacher's timing, metric names and the
tuning trace's data filter and schedule.

The reference is siyan-zhao/OPSD and its fork zhaoruizhi/OPSD-main; file:line citations below
point into the fork unless they say otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from termforge.errors import ConfigError
from termforge.opsd.config import OPSDConfig

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_OVERLAY = ROOT / "configs" / "opsd-reference.yaml"


# -- the workflow passes the configured dataset -------------------------------------------------

def _dry_run(tmp_path: Path, *overlays: Path, targets: tuple[str, ...]) -> dict[str, list[str]]:
    """`snakemake -n -p` of the real Snakefile: {ablation: argv of its planned `termforge train`}."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    configfiles = [str(ROOT / "config.yaml"), *map(str, overlays)]
    # The targets go first: --configfile takes several values and would swallow them.
    res = subprocess.run([sys.executable, "-m", "snakemake", *targets, "-n", "-p", "-s", str(ROOT / "Snakefile"),
                          "--directory", str(work), "--configfile", *configfiles],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    commands = {}
    for line in (res.stdout + res.stderr).splitlines():
        line = line.strip().removeprefix("Shell command:").strip()
        if line.startswith("termforge train "):
            argv = shlex.split(line.split(" 2>&1")[0])
            out_dir = argv[argv.index("--out-dir") + 1]
            commands[out_dir.split("/")[2]] = argv
    return commands


def _params(argv: list[str]) -> dict:
    return json.loads(argv[argv.index("--params") + 1])["train"]


def test_workflow_trains_on_the_dataset_the_overlay_names(tmp_path):
    targets = ("results/runs/fkl/train/summary.json",)
    reference = _dry_run(tmp_path, REFERENCE_OVERLAY, targets=targets)["fkl"]
    # The Hub set named by the overlay reaches the trainer, and no offline file overrides it.
    assert _params(reference)["dataset"] == "siyanzhao/Openthoughts_math_30k_opsd"
    assert "--dataset" not in reference and "--probe-dataset" not in reference
    # Without a configured dataset (the embedded default) the offline math set is the data.
    default = _dry_run(tmp_path, targets=targets)["fkl"]
    assert _params(default)["dataset"] is None
    assert default[default.index("--dataset") + 1] == "results/data/math/train.jsonl"
    assert default[default.index("--probe-dataset") + 1] == "results/data/math/heldout.jsonl"


def test_unloadable_hub_dataset_stops_with_one_line_naming_the_key(tmp_path):
    """Offline, a Hub set that is not cached is an error naming train.dataset, not a switch to
    other data."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    params = json.dumps({"train": {"dataset": "siyanzhao/Openthoughts_math_30k_opsd"}})
    res = subprocess.run([sys.executable, "-m", "termforge.cli", "train", "--params", params,
                          "--out-dir", str(tmp_path / "run")], capture_output=True, text=True, env=env)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert re.match(r"termforge: error: train\.dataset: dataset siyanzhao/Openthoughts_math_30k_opsd .*"
                    r"could not be loaded", lines[0])
    assert not (tmp_path / "run" / "summary.json").exists()
