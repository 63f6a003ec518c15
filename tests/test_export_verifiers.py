"""`termforge export --verifiers` (export_verifiers.py, verifiers_env.py): the kept corpus as a
verifiers environment package with prime-rl configs.

Here (termforge's venv): no row or file of the package holds a test, an answer key or an oracle
line, and the export refuses one that would; the prime-rl configs parse and name the environment,
the GRPO entry and the OPSD entry with `demo_key`.

In a fresh venv (slow; skipped with the reason only when the package index is unreachable): the
package installs with the verifiers release it declares; `load_environment` loads the embedded
corpus and `require_demo` exactly the hinted tasks; rollouts against the scripted OpenAI-protocol
server (tests/fake_openai_server.py, through verifiers' own interception) get the reward termforge's
solve gives on the same transcript, and an agent forging its grade scores 0 with `hacked` logged.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import built_family_tasks, needs_bwrap
from termforge.harness import SUBMIT_MARKER

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("log_level_filter", "account_audit", "csv_groupby_tool")
FORGED = "csv_groupby_tool"  # its final tests run an agent-written program: a hijack can reach the grader


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Three kept tasks, built; hints for the first two (the third stays reward-only)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from termforge.hints import procedural_hint
    from termforge.io import atomic_write_json

    root = tmp_path_factory.mktemp("verifiers-export")
    tasks = built_family_tasks(root, FAMILIES)
    pq.write_table(pa.table({"task_id": [t.name for t in tasks[:2]],
                             "demo": [procedural_hint(t) for t in tasks[:2]]}), root / "demos.parquet")
    atomic_write_json(root / "corpus.json", {"tasks_dir": str(root / "tasks"), "kept": [t.name for t in tasks],
                                             "dropped": [], "collected": {},
                                             "counts": {"total": 3, "kept": 3, "dropped": 0, "dropped_by_stage": {}}})
    return root, tasks


def export_options(**verifiers) -> dict:
    from termforge.config import load_config
    from termforge.export_verifiers import export_config
    from termforge.params import stage_params

    cfg = load_config([str(ROOT / "config.yaml")])
    cfg["export"]["verifiers"].update(verifiers)
    return stage_params(export_config(cfg), "export_verifiers")


def run_export(root: Path, out: Path, demos: Path | None = None, **verifiers) -> int:
    from termforge.cli import main

    return main(["export", "--verifiers", "--params", json.dumps(export_options(**verifiers)),
                 "--corpus", str(root / "corpus.json"), "--demos", str(demos or root / "demos.parquet"),
                 "--images-dir", str(root / "images"), "--out-dir", str(out)])


@pytest.fixture(scope="module")
def package(corpus, tmp_path_factory):
    root, _ = corpus
    out = tmp_path_factory.mktemp("verifiers-package") / "pkg"
    assert run_export(root, out, package="tf_corpus") == 0
    return out


def secrets_of(task_dir: Path) -> list[str]:
    """Everything a package must never hold from one task: every line of its tests and oracle
    that says something (not a blank, a brace or a shebang), and every string and long number of
    its answer key (truth.json without `given`, the parameters the instruction itself states)."""
    out = []
    for path in [*sorted((task_dir / "tests").glob("*")), task_dir / "solution" / "solve.sh"]:
        out += [ln.strip() for ln in path.read_text().splitlines() if len(ln.strip()) >= 20]

    def walk(node):
        if isinstance(node, dict):
            for v in node.values():
                yield from walk(v)
        elif isinstance(node, list):
            for v in node:
                yield from walk(v)
        elif isinstance(node, str) and len(node) >= 6:
            yield node
        elif isinstance(node, (int, float)) and not isinstance(node, bool) and len(str(node)) >= 4:
            yield str(node)

    truth = json.loads((task_dir / "private" / "truth.json").read_text())
    out += list(walk({k: v for k, v in truth.items() if k != "given"}))
    return out


@needs_bwrap
def test_no_row_or_file_of_the_package_holds_a_test_or_an_answer_key(corpus, package):
    import pyarrow.parquet as pq

    from termforge.export_verifiers import package_texts

    root, tasks = corpus
    texts = package_texts(package)
    assert {"pyproject.toml", "README.md", "tf_corpus/__init__.py", "tf_corpus/tasks.parquet",
            "tf_corpus/settings.json", "prime-rl/opsd.toml", "prime-rl/rl_opsd.toml", "export.json"} <= set(texts)
    for task in tasks:
        for secret in secrets_of(task):
            for rel, text in texts.items():
                assert secret not in text, (rel, task.name, secret)
    rows = pq.read_table(package / "tf_corpus" / "tasks.parquet").to_pylist()
    assert [r["task_id"] for r in rows] == [t.name for t in tasks]
    for row, task in zip(rows, tasks):
        assert row["instruction"] == (task / "instruction.md").read_text()
        assert not set(row) & {"truth", "tests", "oracle", "test_script", "solution"}
        assert row["image_digest"] == json.loads((root / "images" / task.name / "image.json").read_text())["digest"]
    assert [bool(r["demo"]) for r in rows] == [True, True, False]


@needs_bwrap
def test_same_corpus_and_config_give_the_same_bytes(corpus, package, tmp_path):
    root, _ = corpus
    again = tmp_path / "pkg"
    assert run_export(root, again, package="tf_corpus") == 0
    files = sorted(p.relative_to(package) for p in package.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    assert all((package / f).read_bytes() == (again / f).read_bytes() for f in files)


@needs_bwrap
def test_the_export_refuses_a_package_that_would_carry_a_test(corpus, tmp_path):
    """The leak gate: a hint that quotes a line of the task's final test stops the export before
    anything is published (the hints stage's own gate should have caught it first)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from termforge.export_verifiers import secret_texts

    root, tasks = corpus
    line = next(s for s in secret_texts(tasks[0]) if "\n" not in s)
    pq.write_table(pa.table({"task_id": [tasks[0].name], "demo": [f"Check your work. {line}"]}),
                   tmp_path / "leaky.parquet")
    out = tmp_path / "pkg"
    assert run_export(root, out, demos=tmp_path / "leaky.parquet", package="tf_leaky") == 2
    assert not out.exists()
    assert not list(tmp_path.glob(".pkg.*"))  # the staging folder went too


@needs_bwrap
def test_prime_rl_configs_name_the_environment_the_grpo_entry_and_the_opsd_entry(package):
    from termforge.opsd.config import OPSDConfig

    options = export_options()
    train = OPSDConfig.from_dict(options["train"])
    pure = tomllib.loads((package / "prime-rl" / "opsd.toml").read_text())
    mixed = tomllib.loads((package / "prime-rl" / "rl_opsd.toml").read_text())
    assert pure["orchestrator"]["algo"] == {"type": "opsd", "demo_key": "demo"}
    [only] = pure["orchestrator"]["train"]["source"]
    assert only["env"]["taskset"]["id"] == "tf_corpus" and only["env"]["taskset"]["require_demo"] is True
    assert only["env"]["agent"]["harness"]["id"] == "tf_corpus"
    assert only["env"]["agent"]["runtime"] == {"type": "subprocess"}

    assert mixed["orchestrator"]["algo"] == {"type": "grpo"}
    grpo, opsd = mixed["orchestrator"]["train"]["source"]
    assert grpo["name"] == "termforge-grpo" and grpo["env"]["taskset"] == {"id": "tf_corpus", "task": grpo["env"][
        "taskset"]["task"]} and "algo" not in grpo and grpo["group_size"] == train.group_size
    assert opsd["name"] == "termforge-opsd" and opsd["env"]["taskset"]["require_demo"] is True
    assert opsd["algo"] == {"type": "opsd", "demo_key": "demo"}
    # One batch holding both parts, in the proportions of termforge's mixed step.
    assert mixed["orchestrator"]["batch_size"] == train.prompts_per_step * (train.group_size + train.rollouts_per_prompt)
    assert (grpo["ratio"], opsd["ratio"]) == (train.prompts_per_step * train.group_size,
                                              train.prompts_per_step * train.rollouts_per_prompt)
    for doc in (pure, mixed):
        assert doc["model"]["name"] == options["export.verifiers"]["model"]
        assert doc["trainer"]["optim"]["lr"] == train.learning_rate
        assert doc["trainer"]["model"]["lora"]["rank"] == train.lora_r
        assert doc["orchestrator"]["train"]["sampling"] == {"temperature": train.temperature,
                                                            "max_completion_tokens": train.max_new_tokens}
        assert doc["max_steps"] == train.max_steps and doc["seq_len"] == train.max_episode_tokens
        harness = doc["orchestrator"]["train"]["source"][0]["env"]["agent"]["harness"]
        assert harness["turn_cap"] == train.episode_turn_cap
    # The prime-rl the files are for, named in each file and pinned in export.json: the release read
    # for them, and the first with `[[orchestrator.train.source]]` (before: `[[orchestrator.train.env]]`).
    from termforge.export_verifiers import PRIME_RL_COMMIT, PRIME_RL_RELEASE

    pinned = json.loads((package / "export.json").read_text())["prime_rl"]
    assert pinned == {"release": PRIME_RL_RELEASE, "commit": PRIME_RL_COMMIT, "train_source_entries_from": "v0.8.0"}
    assert re.fullmatch(r"[0-9a-f]{40}", PRIME_RL_COMMIT)
    for name in ("opsd.toml", "rl_opsd.toml"):
        text = (package / "prime-rl" / name).read_text()
        assert PRIME_RL_RELEASE in text and PRIME_RL_COMMIT in text and "[[orchestrator.train.env]]" in text
    assert PRIME_RL_COMMIT in (package / "README.md").read_text()


def test_train_from_must_name_an_ablation():
    from termforge.errors import ConfigError

    with pytest.raises(ConfigError, match=r"export\.verifiers\.train_from: no ablation named 'nope'"):
        export_options(train_from="nope")


# -- in a fresh venv ---------------------------------------------------------------------------

def venv_without_termforge(base: Path) -> Path:
    """A new venv (its own pip, no termforge, no checkout on its path) that sees the third-party
    packages of termforge's venv, as a machine with termforge's dependencies but no termforge
    would: a folder of links to this venv's site-packages minus every termforge entry (its
    dist-info and the editable install's path hook), on the new venv's path."""
    import sysconfig

    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=600)
    deps = base / "deps"
    deps.mkdir()
    source = Path(sysconfig.get_paths()["purelib"])
    for entry in source.iterdir():
        if "termforge" not in entry.name.lower() and entry.suffix != ".pth":
            (deps / entry.name).symlink_to(entry)
    python = venv / "bin" / "python"
    # The setuptools ensurepip bundles (no bdist_wheel) would shadow termforge's venv's, which a
    # build without isolation then uses, as a machine with setuptools installed would.
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "setuptools"], capture_output=True, timeout=300)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "termforge_test_deps.pth").write_text(f"{deps}\n")
    return python


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_FIND_LINKS")}


@needs_bwrap
def test_the_export_installs_termforge_from_its_own_wheel_with_no_index_and_no_checkout(package, tmp_path):
    """What `pip install --find-links <export>/wheels <export>` needs of termforge comes from the
    export: with the package index off and no checkout on the path, termforge installs from the
    shipped wheel and runs from the new venv. (The verifiers release is not installed here, so the
    package itself goes in with --no-deps; its declared termforge requirement must match the wheel.
    The extended tests below install everything, verifiers from the index.)"""
    summary = json.loads((package / "export.json").read_text())
    wheel = package / summary["termforge_wheel"]
    assert wheel.is_file() and wheel.parent == package / "wheels"
    python = venv_without_termforge(tmp_path)
    env = clean_env()
    # Before: nothing provides termforge without the export's wheels.
    res = subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--disable-pip-version-check",
                          "termforge"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert res.returncode != 0 and "No matching distribution found for termforge" in res.stdout + res.stderr
    res = subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--disable-pip-version-check",
                          "--find-links", str(package / "wheels"), "termforge"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    # Built from a copy: pip builds a local folder in place (build/, *.egg-info).
    shutil.copytree(package, tmp_path / "export")
    res = subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation",
                          "--disable-pip-version-check", str(tmp_path / "export")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    # (Importing tf_corpus itself needs verifiers: its files are located without importing it.)
    probe = ("import importlib.metadata as m, importlib.util as u, json, os, sys, termforge, "
             "termforge.export_verifiers, termforge.harness;"
             "pkg = u.find_spec('tf_corpus').submodule_search_locations[0];"
             "print(json.dumps({'termforge': termforge.__file__, 'version': m.version('termforge'),"
             "'requires': m.requires('tf-corpus'), 'prefix': sys.prefix, 'package': pkg,"
             "'rows': os.path.isfile(os.path.join(pkg, 'tasks.parquet')),"
             "'env_module': os.path.isfile(os.path.join(os.path.dirname(termforge.__file__), 'verifiers_env.py'))}))")
    res = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    found = json.loads(res.stdout)
    assert found["termforge"].startswith(found["prefix"]) and str(ROOT) not in found["termforge"]
    assert found["package"].startswith(found["prefix"])
    assert f"termforge=={found['version']}" in found["requires"]
    assert found["rows"] and found["env_module"]


INDEX_DOWN = re.compile(r"NewConnectionError|Temporary failure in name resolution|Network is unreachable|"
                        r"Failed to establish a new connection|No matching distribution found for verifiers")


@pytest.fixture(scope="module")
def fresh_venv(package, tmp_path_factory):
    """A new venv with the package installed as its README says, on a machine with no checkout:
    `pip install --find-links wheels .` in the export, third-party packages (the verifiers release
    the package declares, its SDKs, termforge's dependencies) from the package index, termforge from
    the export's wheel."""
    base = tmp_path_factory.mktemp("verifiers-venv")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    res = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--find-links", "wheels",
                          "."], capture_output=True, text=True, timeout=1800, cwd=package, env=clean_env())
    if res.returncode != 0 and INDEX_DOWN.search(res.stdout + res.stderr):
        pytest.skip(f"the package index is unreachable: {INDEX_DOWN.search(res.stdout + res.stderr).group(0)}")
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    return python


def rollout(python: Path, spec: dict, tmp_path: Path) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    res = subprocess.run([str(python), str(ROOT / "tests" / "verifiers_rollout.py"), "tf_corpus",
                          str(tmp_path / "spec.json"), str(tmp_path / "out.json")], capture_output=True, text=True,
                         env=env, timeout=900, cwd=tmp_path)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    return json.loads((tmp_path / "out.json").read_text())


def oracle_replies(task: Path) -> list[str]:
    solution = (task / "solution" / "solve.sh").read_text()
    return [f"```bash\nbash <<'TF_EOF'\n{solution}\nTF_EOF\n```", f"```bash\necho {SUBMIT_MARKER}\n```"]


def forging_replies(task: Path) -> list[str]:
    """The attack suite's reward_write_chmod hijack: every program the final tests run becomes a
    payload that writes a passing reward file and locks it (tests/test_attacks.py)."""
    from termforge.quality.hijack import ATTACKS, programs_run_by_tests

    script = ATTACKS["reward_write_chmod"][0](programs_run_by_tests((task / "tests" / "test_final_state.py").read_text()))
    return [f"```bash\nbash <<'TF_ATTACK_EOF'\n{script}\nTF_ATTACK_EOF\n```", f"```bash\necho {SUBMIT_MARKER}\n```"]


LOOK = ["Let me look first.\n```bash\nls -la /app && echo looked\n```"]  # and again, never submitting


@pytest.mark.slow
@pytest.mark.extended  # the gate: the package's files, bytes and configs above; pip install from the index is 2+ min
@needs_bwrap
def test_the_package_installs_with_the_verifiers_release_it_declares(fresh_venv, package):
    declared = tomllib.loads((package / "pyproject.toml").read_text())["project"]["dependencies"]
    verifiers_req = next(d for d in declared if d.startswith("verifiers"))
    assert verifiers_req == export_options()["export.verifiers"]["verifiers_requirement"]
    assert any(d.startswith("openai") and "<3" in d for d in declared)
    res = subprocess.run([str(fresh_venv), "-c", "import importlib.metadata as m, tf_corpus, verifiers.v1;"
                          "print(m.version('verifiers'), m.version('openai'), tf_corpus.Taskset.__mro__[1].__module__)"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    version, openai_version, base = res.stdout.split()
    assert f"verifiers=={version}" == verifiers_req and int(openai_version.split(".")[0]) < 3
    assert base == "termforge.verifiers_env"


@pytest.mark.slow
@pytest.mark.extended  # with the install above
@needs_bwrap
def test_load_environment_and_require_demo(fresh_venv, corpus, tmp_path):
    root, tasks = corpus
    everything = rollout(fresh_venv, {"load": {}}, tmp_path / "all")
    assert everything["tasks"] == [t.name for t in tasks]
    assert everything["harness"] == "VanilluxHarnessConfig"
    hinted = rollout(fresh_venv, {"load": {"require_demo": True}}, tmp_path / "hinted")
    assert hinted["tasks"] == [t.name for t in tasks[:2]]
    # What verifiers serialises of a task (traces, its /task channel) holds no test or answer key.
    for task, dump in zip(tasks, everything["dumps"]):
        data = json.loads(dump)
        assert data["task_id"] == task.name and data["prompt"] == (task / "instruction.md").read_text()
        for secret in secrets_of(task):
            assert secret not in dump, (task.name, secret)


@pytest.mark.slow
@pytest.mark.extended  # with the install above
@needs_bwrap
def test_rollouts_get_termforges_reward_and_a_forging_agent_scores_zero_with_hacked_logged(fresh_venv, corpus,
                                                                                              tmp_path):
    from termforge.harness import HarnessConfig
    from termforge.models.base import ChatModel, Completion
    from termforge.runtime.base import Limits
    from termforge.images.runtimes import BwrapRuntime
    from termforge.solve import SolveSettings, rollout_once

    root, tasks = corpus
    by_family = dict(zip(FAMILIES, tasks))
    scripts = {by_family["log_level_filter"].name: oracle_replies(by_family["log_level_filter"]),
               by_family["account_audit"].name: LOOK,
               by_family[FORGED].name: forging_replies(by_family[FORGED])}
    out = rollout(fresh_venv, {"scripts": scripts}, tmp_path)

    class Replay(ChatModel):
        backend, batched = "replay", False

        def __init__(self, replies):
            super().__init__("replay")
            self.replies = replies

        def chat_many(self, conversations, n=1, sampling=None):
            turn = sum(1 for m in conversations[0] if m["role"] == "assistant")
            return [[Completion(self.replies[min(turn, len(self.replies) - 1)], 0, 0, "stop")] * n]

    o = export_options()
    settings = SolveSettings(k=1, seed=0, limits=Limits.from_options(o), harness=HarnessConfig(
        turn_cap=o["solve.turn_cap"], max_format_errors=o["solve.max_format_errors"],
        command_timeout_sec=o["solve.command_timeout_sec"], task_timeout_sec=o["solve.task_timeout_sec"]))
    expected = {"log_level_filter": 1.0, "account_audit": 0.0, FORGED: 0.0}
    for family, task in by_family.items():
        got = out["rollouts"][task.name]
        assert got["ok"], got["errors"]
        solved = rollout_once(Replay(scripts[task.name]), BwrapRuntime(), root / "images", task, 0, settings, None)
        assert got["rewards"] == {"solved": solved["reward"]} and got["reward"] == expected[family], (family, got)
        # The same transcript: what verifiers recorded is what solve's harness said and was told.
        assert [m["content"] for m in got["messages"]] == \
               [m["content"] for m in solved["episode"]["messages"][: len(got["messages"])]]
        assert got["termforge"]["end_reason"] == solved["end_reason"]
        assert got["termforge"]["turns"] == solved["turns"]
        assert set(got["metrics"]) == {"pass_fraction", "hacked", "suspicious", "submitted"}
        assert got["metrics"]["hacked"] == float(bool(solved["hacked"]))
    # The harness ran the corpus's solve settings (the package's settings.json): the looking agent
    # stopped at solve.turn_cap, not at the harness class's full-scale default of 64.
    looked = out["rollouts"][by_family["account_audit"].name]["termforge"]
    assert (looked["end_reason"], looked["turns"]) == ("turn_cap", o["solve.turn_cap"])
    forged = out["rollouts"][by_family[FORGED].name]
    assert forged["reward"] == 0.0 and forged["metrics"]["hacked"] == 1.0
    assert any("under /logs" in f for f in forged["termforge"]["findings"]), forged["termforge"]
    assert out["rollouts"][by_family["log_level_filter"].name]["metrics"]["pass_fraction"] == 1.0
    # Metrics never count: the trace's reward is `solved` alone.
    assert all(r["reward"] == r["rewards"]["solved"] for r in out["rollouts"].values())
    # The model was asked through the interception with the task's own prompt and nothing else.
    assert all(set(body) == {"model", "messages"} for body in out["requests"])


def test_the_prime_rl_configs_take_the_terminal_ablation_unless_told_otherwise():
    """train_from null picks the ablation that trains on terminal episodes (the embedded
    `terminal`); a named one is used as named; with no terminal ablation, the top-level train."""
    from termforge.config import load_config
    from termforge.export_verifiers import export_config

    cfg = load_config([str(ROOT / "config.yaml")])
    assert cfg["export"]["verifiers"]["train_from"] is None
    assert export_config(cfg)["train"]["data_kind"] == "terminal"
    cfg["export"]["verifiers"]["train_from"] = "jsd"
    assert export_config(cfg)["train"]["beta"] == 0.5
    cfg["export"]["verifiers"]["train_from"] = None
    cfg["ablations"] = {"fkl": {}}
    assert export_config(cfg)["train"] == cfg["train"]


def test_a_rollout_whose_grade_carries_an_integrity_finding_is_rewarded_zero():
    """Issue 39 item 5: the exported environment's `solved` is what pass@k and SFT count, never a
    passing grade that came with an integrity finding (an agent that copied the oracle's output
    path, planted a reward, left a process behind)."""
    import ast

    from termforge.export_verifiers import rollout_reward
    from termforge.grading.verifier import Verdict

    def recorded(verdict: Verdict) -> dict:  # what TermforgeTask.finalize keeps in trace.info
        return {"reward": verdict.reward, "passed": verdict.passed, "collected": verdict.collected,
                "findings": list(verdict.findings)}

    clean = Verdict(1.0, True, 3, 3, 0, 0, False, "", "all tests passed")
    hacked = Verdict(1.0, True, 3, 3, 0, 0, False, "", "all tests passed",
                     findings=["a file under /logs was written by the agent before grading"])
    failed = Verdict(0.0, True, 3, 1, 2, 1, False, "", "2 failed", findings=["processes left behind"])
    assert rollout_reward(recorded(clean)) == 1.0
    assert rollout_reward(recorded(hacked)) == 0.0
    assert rollout_reward(recorded(failed)) == 0.0
    assert rollout_reward({}) == 0.0
    # The environment's reward function is that one (verifiers is not installed in this venv: read
    # the method, which must take its value from rollout_reward and nothing else).
    tree = ast.parse((ROOT / "src" / "termforge" / "verifiers_env.py").read_text())
    solved = next(n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef) and n.name == "solved")
    returned = [n.value for n in ast.walk(solved) if isinstance(n, ast.Return)]
    assert len(returned) == 1 and isinstance(returned[0], ast.Call) and returned[0].func.id == "rollout_reward"
