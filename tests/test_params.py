"""Each rule's params are the config keys it reads (termforge.params.STAGE_KEYS), so a change re-runs
exactly the rules that read the changed key: checked on the params themselves and by real Snakemake,
with its metadata and without it (the params stamps)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from termforge.config import check_config, deep_merge, load_config
from termforge.params import STAGE_KEYS, stage_params_json, sync_stamp

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# Keys only `termforge plan` and the llm backends read, and the policy model.
CHANGES = {
    # (with train.model: trained adapters are evaluated on the policy's weights, so both change)
    "models.policy": {"models": {"policy": {"model": "some/other-model"}}, "train": {"model": "some/other-model"}},
    "prices": {"prices": {"some/other-model": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}},
    "planning": {"planning": {"assumptions": {"kept_fraction": 0.5}}},
}


def _changed_stages(base: dict, overlay: dict) -> set[str]:
    """The stages whose params differ between base (default: config.yaml) and base + overlay."""
    before = base or load_config([ROOT / "config.yaml"])
    after = check_config(deep_merge(before, overlay))
    return {stage for stage in STAGE_KEYS
            if stage_params_json(before, stage) != stage_params_json(after, stage)}


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_the_offline_generator_does_not_read_model_price_or_planning_keys(key):
    changed = _changed_stages({}, CHANGES[key])
    assert "generate" not in changed and "sample_axes" not in changed
    if key == "models.policy":
        # What does read the policy: solving, training and the evals (hints are procedural here).
        # (and the verifiers export, whose prime-rl configs name the trained model)
        assert changed == {"solve", "eval_aime", "eval_tbench", "serve_policy", "train", "export_verifiers"}
    else:
        assert changed == set()


def test_the_llm_generator_reads_its_model_and_prices():
    check = load_config([ROOT / "config.yaml"])
    llm = check_config(deep_merge(check, {"generate": {"backend": "llm"}}))
    for key in ("models.policy", "prices", "planning"):
        assert "generate" in _changed_stages(llm, CHANGES[key]), key
    assert json.loads(stage_params_json(llm, "generate"))["models.policy"]["model"] == \
        check["models"]["policy"]["model"]


def test_hints_read_only_the_models_they_use():
    cfg = load_config([ROOT / "config.yaml"])
    assert not [k for k in json.loads(stage_params_json(cfg, "hints")) if k.startswith("models")]
    judged = check_config(deep_merge(cfg, {"models": {"writer": {"backend": "openai", "model": "w"},
                                                      "judge": {"backend": "anthropic", "model": "j"}},
                                           "hints": {"backend": "llm", "model": "writer", "judge": "judge"}}))
    keys = json.loads(stage_params_json(judged, "hints"))
    assert {"models.writer", "models.judge"} <= set(keys) and "models.policy" not in keys
    assert "models.None" not in keys  # no probe configured, no probe model read


def test_a_stamp_is_rewritten_only_when_its_params_change(tmp_path):
    stamp = tmp_path / "results" / "params" / "generate" / "stage.json"
    sync_stamp(stamp, '{"a":1}')
    first = stamp.stat().st_mtime_ns
    sync_stamp(stamp, '{"a":1}')
    assert stamp.stat().st_mtime_ns == first and stamp.read_text() == '{"a":1}'
    sync_stamp(stamp, '{"a":2}')
    assert stamp.read_text() == '{"a":2}'


# -- real Snakemake --------------------------------------------------------------------------------

TARGETS = ["results/tasks/manifests/00000.json", "results/data/math/train.jsonl"]


def _project(tmp: Path) -> Path:
    repo = tmp / "project"
    repo.mkdir()
    for name in ("Snakefile", "rules", "workflow", "profiles", "benchmarks", "src"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, repo / name)
    cfg = deep_merge(yaml.safe_load((ROOT / "config.yaml").read_text()),
                     {"corpus": {"n_tasks": 2, "shard_size": 2}, "math_data": {"n": 8}})
    (repo / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return repo


def _snakemake(repo: Path, *args: str) -> str:
    env = {"PATH": f"{BIN}:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(repo.parent), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(repo / "src")}
    res = subprocess.run([str(BIN / "snakemake"), "--cores", "2", *args], cwd=repo, capture_output=True, text=True,
                         env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout + res.stderr


def _planned(output: str) -> set[str]:
    """Rules a dry run would run (its job stats table)."""
    if "Nothing to be done" in output:
        return set()
    table = output[output.index("Job stats:"):].split("\n\n")[0]
    return {m.group(1) for m in re.finditer(r"^(\w+)\s+\d+$", table, re.M)} - {"total", "job"}


def _overlay(repo: Path, name: str, content: dict) -> str:
    path = repo / f"{name}.yaml"
    path.write_text(yaml.safe_dump(content))
    return str(path)


@pytest.mark.slow
def test_snakemake_reruns_only_the_rules_that_read_a_changed_key(tmp_path):
    repo = _project(tmp_path)
    _snakemake(repo, *TARGETS)
    assert _planned(_snakemake(repo, "-n", *TARGETS)) == set()
    for with_metadata in (True, False):
        if not with_metadata:
            # Results present, Snakemake's records of how they were made gone (as after `dvc pull`).
            shutil.rmtree(repo / ".snakemake")
        for key, change in CHANGES.items():
            out = _snakemake(repo, "-n", *TARGETS, "--configfile", _overlay(repo, key, change))
            assert _planned(out) == set(), (key, with_metadata, out[-2000:])
        # A key the generator reads re-runs it (and nothing before it); one of the math set re-runs that alone.
        out = _snakemake(repo, "-n", *TARGETS, "--configfile",
                         _overlay(repo, "image", {"generate": {"base_image": "debian:trixie-slim"}}))
        assert _planned(out) == {"generate"}, (with_metadata, out[-2000:])
        out = _snakemake(repo, "-n", *TARGETS, "--configfile", _overlay(repo, "math", {"math_data": {"n": 12}}))
        assert _planned(out) == {"make_math_set"}, (with_metadata, out[-2000:])
        # Back to the config the results were made with: nothing to do again.
        assert _planned(_snakemake(repo, "-n", *TARGETS)) == set()
    # Snakemake's own account, where it has metadata again: the generate job's params are unchanged.
    _snakemake(repo, "--touch", *TARGETS)
    listed = _snakemake(repo, "--list-changes", "params", "--configfile", _overlay(repo, "models.policy",
                                                                                    CHANGES["models.policy"]))
    assert "results/tasks/manifests/00000.json" not in listed

