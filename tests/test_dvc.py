"""dvc.yaml agrees with the workflow, and `dvc repro` re-runs exactly the stages a change touches
(checked from DVC's own output and Snakemake's), `dvc exp run -S` works in a git repository."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from termforge.config import deep_merge, load_config
from termforge.dvcgen import DVC_STAGES, dvc_yaml, missing_from_file, rule_keys, snakemake_rules
from termforge.errors import ConfigError
from termforge.params import STAGE_KEYS, resolve_key

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_committed_dvc_yaml_is_current():
    cfg = load_config([ROOT / "config.yaml"])
    assert (ROOT / "dvc.yaml").read_text() == dvc_yaml(cfg, snakemake_rules(ROOT)), \
        "dvc.yaml is stale: run `termforge dvc-yaml > dvc.yaml`"


def test_every_dvc_param_is_written_in_config_yaml():
    # DVC reads params from the file itself; a key only the schema's default supplies fails `dvc repro`.
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    keys = sorted({k for stage in dvc.values() for k in stage["params"][0]["config.yaml"]})
    assert keys and missing_from_file(raw, keys) == []
    without = {k: v for k, v in raw.items() if k != "prices"}
    with pytest.raises(ConfigError, match="prices"):
        dvc_yaml(load_config([ROOT / "config.yaml"]), snakemake_rules(ROOT), without)


def test_every_rule_is_in_one_dvc_stage_with_the_keys_it_reads():
    cfg = load_config([ROOT / "config.yaml"])
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    rules = snakemake_rules(ROOT) - {"all"}
    for rule in rules:
        owners = [name for name, spec in DVC_STAGES.items() if rule in spec["rules"]]
        assert len(owners) == 1, f"rule {rule} belongs to DVC stages {owners}"
        params = set(dvc[owners[0]]["params"][0]["config.yaml"])
        # What the rule really passes: the keys named in its params_of(...) call.
        text = "\n".join(p.read_text() for p in (ROOT / "rules").glob("*.smk"))
        block = re.search(rf"^rule {rule}:\n(.*?)(?=^rule |\Z)", text, flags=re.M | re.S).group(1)
        called = re.findall(r'params_of\("(\w+)"\)', block)
        assert [rule_keys(rule)] == [STAGE_KEYS[c] for c in called] or not called, rule
        for stage_key in called:
            for key in STAGE_KEYS[stage_key]:
                resolved = resolve_key(cfg, key) if "{" in key else key
                assert resolved in params, f"rule {rule} reads {resolved}, missing from DVC stage {owners[0]}"


TINY = {
    "corpus": {"n_tasks": 2, "shard_size": 2},
    "solve": {"agent": "oracle", "k": 1},
    "math_data": {"n": 8, "heldout_fraction": 0.25},
    "eval": {"aime": {"max_problems": 1, "n": 1,
                      "sampling": {"temperature": 1.0, "top_p": 0.95, "top_k": 0, "max_new_tokens": 8}},
             "tbench": {"enabled": False}},
    "train": {"max_steps": 1, "prompts_per_step": 2, "max_new_tokens": 8, "probe_size": 1, "probe_max_new_tokens": 8,
              "checkpoint_every": 0},
}


def _project(tmp: Path) -> Path:
    repo = tmp / "project"
    repo.mkdir()
    for name in ("Snakefile", "rules", "workflow", "profiles", "benchmarks", "src"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, repo / name)
    base = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg = deep_merge(base, TINY)
    cfg["ablations"] = {"fkl": {}}
    (repo / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    gen = subprocess.run([str(BIN / "termforge"), "dvc-yaml", "--configfile", str(repo / "config.yaml")],
                         capture_output=True, text=True, check=True)
    (repo / "dvc.yaml").write_text(gen.stdout)
    return repo


def _run(cmd, repo, **kw):
    env = {"PATH": f"{BIN}:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(repo.parent), "HF_HUB_OFFLINE": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    import os

    for key in ("TERMFORGE_MODEL_CACHE",):
        if key in os.environ:
            env[key] = os.environ[key]
    env.setdefault("TERMFORGE_MODEL_CACHE", str(Path.home() / ".cache" / "termforge" / "models"))
    res = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, env=env, **kw)
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout + res.stderr


def _ran_stages(output: str) -> set[str]:
    return set(re.findall(r"Running stage '(\w+)'", output))


def _set_key(repo: Path, dotted: str, value) -> None:
    cfg = yaml.safe_load((repo / "config.yaml").read_text())
    node = cfg
    *parents, last = dotted.split(".")
    for p in parents:
        node = node[p]
    node[last] = value
    (repo / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


@pytest.mark.slow
def test_dvc_repro_reruns_only_what_changed_and_exp_run_works(tmp_path):
    repo = _project(tmp_path)
    _run(["git", "init", "-q"], repo)
    _run([str(BIN / "dvc"), "init", "-q"], repo)
    first = _run([str(BIN / "dvc"), "repro"], repo)
    assert _ran_stages(first) == set(yaml.safe_load((repo / "dvc.yaml").read_text())["stages"])

    # A training key: exactly train, eval and report run again, and the verifiers export, whose
    # prime-rl configs carry the train settings.
    _set_key(repo, "train.learning_rate", 1.0e-4)
    second = _run([str(BIN / "dvc"), "repro"], repo)
    assert _ran_stages(second) == {"train", "eval", "report", "verifiers"}, second[-3000:]
    for stage in ("data", "quality", "solve", "hints"):
        assert f"Stage '{stage}' didn't change, skipping" in second
    # Snakemake's own account: the trained policy's jobs re-ran, the base policy's eval did not.
    assert re.search(r"train_opsd\s+1", second) and re.search(r"eval_aime\s+1", second)
    assert not re.search(r"\b(generate|validate|solve)\s+\d", second)

    # A sampling key changes the corpus: everything downstream runs again.
    _set_key(repo, "seed", 99)
    third = _run([str(BIN / "dvc"), "repro"], repo)
    assert {"data", "quality", "solve", "hints"} <= _ran_stages(third)

    # Experiments need git: commit, then run one with a parameter override and list it.
    _run(["git", "add", "-A"], repo)
    _run(["git", "commit", "-qm", "baseline"], repo)
    _run([str(BIN / "dvc"), "exp", "run", "-S", "config.yaml:train.learning_rate=0.0003", "-n", "lr3e-4"], repo)
    shown = _run([str(BIN / "dvc"), "exp", "show", "--no-pager", "--csv"], repo)
    assert "lr3e-4" in shown and "train.learning_rate" in shown
