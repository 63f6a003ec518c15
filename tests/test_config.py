"""Bad configs are rejected with one message naming the key; overlays merge; the CLI prints no traceback."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from termforge.config import ablation_config, check_config, load_config, model_names, run_ablations, shard_ids
from termforge.plancheck import planned_config
from termforge.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
BASE = yaml.safe_load((ROOT / "config.yaml").read_text())

BAD = [
    ({"corpus": {"shard_sise": 3}}, "corpus.shard_sise", "unknown key"),
    ({"colour": "blue"}, "colour", "unknown key"),
    ({"corpus": {"n_tasks": "many"}}, "corpus.n_tasks", "expected integer"),
    ({"corpus": {"n_tasks": 0}}, "corpus.n_tasks", "out of range"),
    ({"corpus": {"anchor_prob": 1.5}}, "corpus.anchor_prob", "out of range"),
    ({"corpus": {"domains": ["securty"]}}, "corpus.domains[0]", "securty"),
    ({"corpus": {"mix": {"legacy": 0.5, "rl_v3": 0.5}}}, "corpus.mix.rl_v3", "unknown key"),
    ({"corpus": {"mix": {"legacy": 0.7, "rl_v2": 0.7}}}, "corpus.mix", "sum to 1"),
    ({"generate": {"backend": "magic"}}, "generate.backend", "'magic' is not one of"),
    ({"runtime": {"backend": "docker-in-docker"}}, "runtime.backend", "not one of"),
    ({"runtime": {"exec_timeout_sec": -1}}, "runtime.exec_timeout_sec", "out of range"),
    ({"seed": 1.5}, "seed", "expected integer"),
    ({"corpus": {"taxonomy": "/nonexistent/tax.yaml"}}, "corpus.taxonomy", "does not exist"),
    ({"cluster": {"gpus_per_job": 0}}, "cluster.gpus_per_job", "out of range"),
    ({"corpus": {"domains": "security"}}, "corpus.domains", "expected array"),
    # Names that become folders are one safe path component.
    ({"ablations": {"..": {}}}, "ablations", "'..' is not a safe name"),
    ({"run_name": "run\nx"}, "run_name", "'run\\nx' is not a safe name"),
]


def _merged(overlay):
    from termforge.config import deep_merge

    return deep_merge(BASE, overlay)


@pytest.mark.parametrize("overlay,key,fragment", BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_config_names_the_key(overlay, key, fragment):
    with pytest.raises(ConfigError) as exc:
        check_config(_merged(overlay))
    msg = str(exc.value)
    assert msg.startswith(key + ":") or msg.startswith(key + " "), msg
    assert fragment in msg


def test_defaults_fill_missing_sections():
    cfg = check_config({})
    assert cfg["corpus"]["n_tasks"] == 18
    assert cfg["runtime"]["backend"] == "bwrap"
    assert cfg["export"]["hf_repo_id"] is None


def test_overlay_merges_and_full_scale_plans_shards():
    cfg = load_config([ROOT / "config.yaml", ROOT / "configs" / "tmax15k.yaml"])
    assert cfg["corpus"]["n_tasks"] == 15000
    assert cfg["runtime"]["backend"] == "bwrap"  # untouched keys survive the overlay
    assert len(shard_ids(cfg)) == 75


def test_cli_rejects_bad_config_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("corpus:\n  mix: {legacy: 2}\n")
    res = subprocess.run([sys.executable, "-m", "termforge.cli", "check-config", str(ROOT / "config.yaml"), str(bad)],
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert "corpus.mix.legacy" in res.stderr
    assert "Traceback" not in res.stderr


def test_cli_missing_config_file(tmp_path):
    res = subprocess.run([sys.executable, "-m", "termforge.cli", "check-config", str(tmp_path / "nope.yaml")],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "nope.yaml does not exist" in res.stderr


def test_schema_train_section_is_the_trainer_config():
    """The workflow schema's `train` section is generated from OPSDConfig: the two never drift."""
    from termforge.config import load_schema
    from termforge.opsd.config import config_schema

    assert load_schema()["properties"]["train"] == config_schema()


def test_ablation_overrides_are_validated():
    cfg = _merged({"ablations": {"fast": {"train": {"learning_rate": -1}}}})
    with pytest.raises(ConfigError) as exc:
        check_config(cfg)
    assert str(exc.value).startswith("ablations.fast: train.learning_rate: -1 is out of range")


# -- plan-time validation of every job --------------------------------------------------------

@pytest.mark.parametrize("ablation, message", [
    # Valid for the schema, refused by the trainer when its job starts: now when planned.
    ({"train": {"warmup_steps": 9, "max_steps": 5}}, "ablations.x: train.warmup_steps: 9 exceeds max_steps 5"),
    ({"train": {"objective": "grpo"}}, "ablations.x: train.objective: grpo trains on the verifier's reward"),
    ({"train": {"answer_pattern": "("}}, "ablations.x: train.answer_pattern: not a valid regular expression"),
    ({"eval": {"aime": {"sampling": {"top_p": 1.5}}}}, "ablations.x: eval.aime.sampling.top_p:"),
])
def test_every_planned_job_is_checked_as_it_will_start(ablation, message):
    with pytest.raises(ConfigError) as exc:
        planned_config(_merged({"ablations": {"x": ablation}}))
    assert str(exc.value).startswith(message), str(exc.value)


def test_an_inherited_key_that_breaks_an_ablation_is_named():
    """The reference overlay's math prompt preset reaches config.yaml's terminal ablation."""
    reference = yaml.safe_load((ROOT / "configs" / "opsd-reference.yaml").read_text())
    merged = _merged({**reference, "ablations_only": None})
    with pytest.raises(ConfigError, match=r"^ablations\.terminal: train\.prompt_preset: the reference preset"):
        planned_config(merged)
    # With the overlay's ablations_only, terminal is neither planned nor checked.
    assert model_names(planned_config(_merged(reference))) == ["base", "fkl"]


def test_trained_weights_need_a_backend_that_loads_them():
    cfg = _merged({})
    cfg["models"]["policy"] = {"backend": "openai", "model": "smollm2-135m-instruct", "base_url": "http://h/v1"}
    with pytest.raises(ConfigError, match=r"^ablations\.fkl: models\.policy\.backend: evaluating trained weights "
                                          r"needs the transformers or the vllm backend .*got 'openai' "
                                          r"\(eval_aime of the trained weights\)"):
        planned_config(cfg)
    cfg["ablations"] = {}  # the untrained base policy evaluates through any backend
    planned_config(cfg)
    # The adapters are evaluated on the eval model's weights: both must name the same model.
    cfg = _merged({"ablations": {"fkl": {"train": {"model": "other-model"}}}})
    with pytest.raises(ConfigError, match=r"^ablations\.fkl: train\.model: 'other-model' is not models\.policy\.model"):
        planned_config(cfg)


# -- ablations an overlay can replace ---------------------------------------------------------

def _snakemake_merge(*paths: Path) -> dict:
    """The config `snakemake --configfile <paths>` gives the Snakefile (its own merge, its loader)."""
    from snakemake.common.configfile import load_configfile
    from snakemake.utils import update_config

    config: dict = {}
    for path in paths:
        update_config(config, load_configfile(str(path)))
    return config


def test_ablations_only_sets_exactly_the_ablations_under_snakemakes_merge(tmp_path):
    reference, trace = ROOT / "configs" / "opsd-reference.yaml", ROOT / "configs" / "ablations" / "trace-best.yaml"
    cases = [((), ["fkl", "jsd", "terminal"]),
             ((reference,), ["fkl"]),
             ((reference, trace), ["fkl", "trace_best"]),
             ((ROOT / "configs" / "ablations" / "lr-sweep.yaml",), ["fkl", "jsd", "lr_1e-3", "lr_1e-4", "lr_5e-4",
                                                                    "terminal"])]
    for overlays, expected in cases:
        files = [ROOT / "config.yaml", *overlays]
        # termforge's merge and Snakemake's give the same config, and the same runs.
        assert check_config(_snakemake_merge(*files)) == load_config(files)
        assert model_names(load_config(files)) == ["base", *expected], overlays
    # The ablations not run are still defined (an overlay cannot delete a mapping's keys), not planned.
    cfg = load_config([ROOT / "config.yaml", reference])
    assert set(cfg["ablations"]) == {"fkl", "jsd", "terminal"} and run_ablations(cfg) == ["fkl"]
    with pytest.raises(ConfigError, match=r"^ablations\.jsd: not run \(ablations_only: fkl\)"):
        ablation_config(cfg, "jsd")
    # A name that is not defined is named with its position.
    bad = tmp_path / "bad.yaml"
    bad.write_text("ablations_only: [fkl, trace_bset]\n")
    with pytest.raises(ConfigError, match=r"^ablations_only\[1\]: no ablation 'trace_bset' is defined "
                                          r"\(defined: fkl, jsd, terminal\)"):
        load_config([ROOT / "config.yaml", bad])
    # An empty list plans no training at all.
    bad.write_text("ablations_only: []\n")
    assert model_names(load_config([ROOT / "config.yaml", bad])) == ["base"]


# -- one meaning of --configfile --------------------------------------------------------------

def _cli(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "termforge.cli", *argv], capture_output=True, text=True, cwd=cwd)


def test_configfile_is_overlays_on_config_yaml_in_every_command(tmp_path):
    """`--configfile X` is config.yaml then X, as `snakemake --configfile X`: the 15k overlay alone
    plans the 15k corpus with config.yaml's settings (24k solve calls), not the schema defaults'."""
    tmax = "configs/tmax15k.yaml"
    alone, both = tmp_path / "alone.json", tmp_path / "both.json"
    assert _cli("plan", "--configfile", tmax, "--json", str(alone)).returncode == 0
    assert _cli("plan", "--configfile", "config.yaml", tmax, "--json", str(both)).returncode == 0
    import json

    plan = json.loads(alone.read_text())
    assert plan == json.loads(both.read_text())
    solve = next(p for p in plan["phases"] if p["phase"] == "solve")
    assert solve["max_calls"] == 15000 * BASE["solve"]["k"] * BASE["solve"]["turn_cap"] and solve["calls"] == 24000
    # check-config: the same files, as arguments or after --configfile.
    for argv in ((tmax,), ("--configfile", tmax), ("config.yaml", tmax)):
        res = _cli("check-config", *argv)
        assert res.returncode == 0, res.stderr
        assert "config OK (config.yaml + configs/tmax15k.yaml): run 'tmax15k', 15000 tasks in 75 shards" in res.stdout
    # A stage command by hand reads the keys config.yaml + overlay give.
    from termforge import cli
    from termforge.params import stage_params

    args = cli.build_parser().parse_args(["solve", "--configfile", tmax, "--manifest", "m", "--corpus", "c",
                                          "--images-dir", "i", "--trajectories", "t", "--out", "o"])
    import os

    here = os.getcwd()
    os.chdir(ROOT)
    try:
        assert cli._stage_options(args, "solve") == stage_params(load_config([ROOT / "config.yaml", ROOT / tmax]),
                                                                   "solve")
    finally:
        os.chdir(here)
    # dvc-yaml without --configfile is config.yaml's, as with it.
    assert _cli("dvc-yaml").stdout == _cli("dvc-yaml", "--configfile", "config.yaml").stdout != ""
    # Where no config.yaml is, the overlays merge onto the schema's defaults, and that is said.
    res = _cli("check-config", str(ROOT / tmax), cwd=tmp_path)
    assert res.returncode == 0 and "merged onto the schema's defaults" in res.stderr


def test_every_configfile_option_states_its_meaning_in_help():
    from termforge import cli
    from termforge.config import CONFIGFILE_HELP

    parser = cli.build_parser()
    options = 0
    for name, sub in cli.subcommands(parser).items():
        for action in sub._actions:
            if "--configfile" in action.option_strings:
                assert CONFIGFILE_HELP in (action.help or ""), name
                options += 1
    assert options >= 15
    assert "config.yaml first, then each file" in _cli("plan", "--help").stdout.replace("\n", " ").replace("  ", " ")


# -- nested `snakemake --config` values ----------------------------------------------------------
# Snakemake parses a nested --config value with YAML's BaseLoader: every scalar arrives as a
# string (snakemake/cli.py parse_config). termforge.config.coerce_cli_overrides types them by the
# schema.

def test_nested_cli_overrides_are_typed_by_the_schema():
    from termforge.config import coerce_cli_overrides, deep_merge

    overrides = {"corpus": {"n_tasks": "6", "mix": {"legacy": "0.25", "rl_v2": "0.75"}, "domains": ["security"]},
                 "eval": {"aime": {"max_problems": "null", "thinking": "true"}},
                 "ablations": {"lr": {"train": {"learning_rate": "1e-5", "lora_r": "4"}}}}
    cfg = check_config(coerce_cli_overrides(deep_merge(BASE, overrides), overrides))
    assert cfg["corpus"]["n_tasks"] == 6 and cfg["corpus"]["mix"] == {"legacy": 0.25, "rl_v2": 0.75}
    assert cfg["corpus"]["domains"] == ["security"]
    assert cfg["eval"]["aime"]["max_problems"] is None and cfg["eval"]["aime"]["thinking"] is True
    assert cfg["ablations"]["lr"]["train"] == {"learning_rate": 1e-5, "lora_r": 4}
    # A string that is not of the key's type stays a string: the error names the key and the value.
    bad = {"corpus": {"n_tasks": "abc"}}
    with pytest.raises(ConfigError, match=r"^corpus\.n_tasks: expected integer, got str 'abc'$"):
        check_config(coerce_cli_overrides(deep_merge(BASE, bad), bad))
    # Only the values given on the command line are converted: a config file stays strict.
    with pytest.raises(ConfigError, match="corpus.n_tasks: expected integer"):
        check_config(coerce_cli_overrides(deep_merge(BASE, bad), {}))


def _dry_run(tmp_path, *config: str) -> subprocess.CompletedProcess:
    (tmp_path / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    env = {**__import__("os").environ, "PATH": f"{Path(sys.executable).parent}:{__import__('os').environ['PATH']}"}
    return subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "1", "-s", str(ROOT / "Snakefile"),
                           "--directory", str(tmp_path), "results/axes/signatures.jsonl", "--config", *config],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_snakemake_nested_config_plans_the_given_number_of_tasks(tmp_path):
    res = _dry_run(tmp_path, "corpus={n_tasks: 6}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert '"corpus.n_tasks":6' in res.stdout + res.stderr
    bad = _dry_run(tmp_path, "corpus={n_tasks: abc}")
    assert bad.returncode != 0
    assert "termforge: config error: corpus.n_tasks: expected integer, got str 'abc'" in bad.stdout + bad.stderr


def test_a_config_key_or_value_never_breaks_the_line(tmp_path):
    cfg = _merged({"corpus": {"n_tasks\nx": 1}})
    with pytest.raises(ConfigError) as exc:
        check_config(cfg)
    assert "\n" not in str(exc.value) and "'n_tasks\\nx'" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        check_config(_merged({"seed": "y" * 100_000}))
    assert "(100000 chars)" in str(exc.value) and len(str(exc.value)) < 400


def test_a_config_file_is_refused_by_size_before_it_is_parsed(tmp_path):
    from termforge.config import MAX_CONFIG_BYTES, read_yaml

    big = tmp_path / "big.yaml"
    big.write_text("run_name: " + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ConfigError, match="bytes, more than a config file may be .*not parsed"):
        read_yaml(big)
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop.name)
    with pytest.raises(ConfigError, match="symlink loop"):
        read_yaml(loop)
