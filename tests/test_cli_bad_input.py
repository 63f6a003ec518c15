"""Bad input to every `termforge` command: one line naming the file, exit status 2, no traceback,
nothing written.

The sweep reads the CLI's own argument definitions (cli.input_arg / cli.output_arg), so a new
command or option is covered as soon as it declares its file arguments, and an undeclared
path-like argument fails test_every_path_like_argument_is_declared. Commands run in-process
through cli.main; a few subprocess runs confirm the real console behaviour, and one real
Snakemake run checks that a corrupt intermediate stops its consumer with the same line and
that following the advice completes the rerun.
"""

from __future__ import annotations

import argparse
import builtins
import errno
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from termforge import cli
from termforge.errors import PRODUCERS, producer_of
from termforge.schemas import KINDS

from conftest import termforge_lines

ROOT = Path(__file__).resolve().parents[1]
PARSER = cli.build_parser()
COMMANDS = cli.subcommands(PARSER)

# An argument whose name or default looks like a path must be declared with input_arg/output_arg.
PATH_LIKE = re.compile(r"file|dir|path|out|manifest|corpus|signature|verdict|solved|record|weight|demo|dataset|"
                       r"heldout|results|table|readme|mermaid|json|csv|sft|stats|trajector|config|image|decontam|"
                       r"source|input|log|model_path|checkpoint|tasks")
# Values for required arguments that name no file.
PLAIN_VALUES = {"shard": "00000", "model_name": "base", "mode": "union"}


def _declared(action) -> str | None:
    return getattr(action, "termforge_input", None) or getattr(action, "termforge_output", None)


def undeclared_path_args(parser: argparse.ArgumentParser) -> list[str]:
    out = []
    for name, sp in cli.subcommands(parser).items():
        for a in sp._actions:
            if a.nargs == 0 or a.dest == "params" or _declared(a):  # flags take no value
                continue
            default = a.default if isinstance(a.default, str) else ""
            if PATH_LIKE.search(a.dest) or "/" in default or re.search(r"\.(json|jsonl|yaml|parquet|csv)$", default):
                out.append(f"{name} {'/'.join(a.option_strings) or a.dest}")
    return out


def test_every_path_like_argument_is_declared():
    missing = undeclared_path_args(PARSER)
    assert not missing, ("declare these with cli.input_arg(..., kind=...) or cli.output_arg(...) so bad input "
                         f"to them is checked and swept: {missing}")


def test_an_undeclared_path_argument_is_caught():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sp = sub.add_parser("import-things")
    sp.add_argument("--source-file", required=True)
    assert undeclared_path_args(parser) == ["import-things --source-file"]


def options_without_help(parser: argparse.ArgumentParser, name: str = "termforge") -> list[str]:
    """Every option, positional argument and subcommand of parser (and its subcommands) whose
    --help says nothing about it."""
    out = []
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        if isinstance(a, argparse._SubParsersAction):
            helped = {c.dest for c in a._choices_actions if c.help and c.help.strip()}
            for sub_name, sp in a.choices.items():
                if sub_name not in helped:
                    out.append(f"{name} {sub_name}")
                out += options_without_help(sp, f"{name} {sub_name}")
        elif not a.help or a.help == argparse.SUPPRESS or not a.help.strip():
            out.append(f"{name} {'/'.join(a.option_strings) or a.dest}")
    return out


def test_every_option_says_what_it_is():
    missing = options_without_help(PARSER)
    assert not missing, f"give these a help= text (what the value is, and its default): {missing}"


def test_an_option_without_help_is_caught():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sp = sub.add_parser("new-thing", help="does a new thing")
    sp.add_argument("--depth", type=int)
    sub.add_parser("unexplained")
    assert options_without_help(parser) == ["termforge new-thing --depth", "termforge unexplained"]


# -- a valid workspace: one generated shard and a valid file of every input kind ------------------


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws")
    r = root / "results"
    overlay = root / "small.yaml"
    overlay.write_text("corpus: {n_tasks: 2, shard_size: 2}\ngenerate: {workers: 1}\n")
    cfgs = [str(ROOT / "config.yaml"), str(overlay)]
    assert cli.main(["sample-axes", "--configfile", *cfgs, "--out", str(r / "axes/signatures.jsonl"),
                     "--stats", str(r / "axes/stats.json")]) == 0
    assert cli.main(["generate", "--configfile", *cfgs, "--signatures", str(r / "axes/signatures.jsonl"),
                     "--shard", "00000", "--tasks-dir", str(r / "tasks"),
                     "--out", str(r / "tasks/manifests/00000.json")]) == 0
    shard = json.loads((r / "tasks/manifests/00000.json").read_text())
    ids = [t["id"] for t in shard["tasks"]]
    tasks = str(r / "tasks")

    def put(rel: str, obj) -> Path:
        p = r / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(obj, indent=1))
        return p

    traj = put("solve/trajectories/t/rollout-0.json", {"messages": [{"role": "user", "content": "hi"}]})
    (r / "runs/a/train/weights").mkdir(parents=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    (r / "hints").mkdir()
    pq.write_table(pa.table({"task_id": ids, "demo": ["look first"] * len(ids)}), r / "hints/demos.parquet")
    (r / "data/math").mkdir(parents=True)
    (r / "data/math/heldout.jsonl").write_text(
        "".join(json.dumps({"id": f"m{i}", "problem": "1+1?", "solution": "\\boxed{2}", "answer": "2"}) + "\n"
                for i in range(3)))
    (root / "README.md").write_text("# readme\n")
    valid = {
        "config": cfgs[0],
        "signatures": r / "axes/signatures.jsonl",
        "shard_manifest": r / "tasks/manifests/00000.json",
        "decontam_report": put("decontam/report.json", {
            "flagged": [{"task_id": ids[1], "reasons": ["near_duplicate"]}], "dropped": [],
            "summary": {"tasks": 2, "flagged": 1, "dropped": 0, "contaminated_tasks_by_source": {"tb": 0}},
            "params": {"n": 13, "policy": "drop"},
            "near_duplicate_clusters": [{"kept": ids[0], "size": 2, "duplicates": [ids[1]]}]}),
        "verdicts": put("validate/00000.json", {"shard": "00000", "tasks_dir": tasks, "verdicts": [
            {"task_id": t, "kept": True, "stage": "kept", "reason": "ok", "checks": ["static"],
             "evidence": {"collected": ["test_final_state.py::test_a"]}} for t in ids]}),
        "corpus_manifest": put("corpus/manifest.json", {
            "tasks_dir": tasks, "kept": ids, "dropped": [],
            "collected": {ids[0]: ["test_final_state.py::test_a"]},
            "counts": {"total": 2, "kept": 2, "dropped": 0, "dropped_by_stage": {}}}),
        "solve_records": put("solve/00000.json", {"shard": "00000", "tasks_dir": tasks, "k": 1, "model": "m",
                                                  "rollouts": [{"task_id": ids[0], "rollout": 0, "status": "graded",
                                                                "reward": 1.0, "trajectory": str(traj),
                                                                "hacked": []}]}),
        "eval_record": put("runs/base/eval/tbench.json", {
            "model": "base", "benchmark": "b", "kind": "tbench",
            "summary": {"mean_reward": 0.5, "n_tasks": 2, "n_scored": 2, "pass_at_k": {"1": 0.5},
                        "n_tasks_pass_at_k": {"1": 2}, "n_errors": 0, "mean_by_key": {"reward": 0.5}},
            "controls": {"oracle": {"mean_reward": 1.0, "n_tasks": 2, "pass_at_k": {"1": 1.0}},
                         "noop": {"mean_reward": 0.0, "n_tasks": 2}}}),
        "train_summary": put("runs/a/train/summary.json", {
            "weights": str(r / "runs/a/train/weights"), "steps": 5, "final_loss": 0.25,
            "kl_probe": {"before": 0.5, "after": {"kl_mean": 0.25}},
            "rl_pool": {"rule": "0 < rate < 1", "pool": 1, "pool_by_band": {"hard": 1}, "fallback": None}}),
        "passk": put("solve/passk.json", {
            "tasks": 1, "k_max": 1, "overall": {"pass@1": 1.0},
            "by": {"domain": {"security": {"tasks": 1, "pass@1": 1.0}}},
            "bands": {"easy": 1}, "zero_pass": [], "per_task": [{"task_id": ids[0], "n": 1, "c": 1, "family": "f",
                                                                 "band": "easy", "pass_at_k": {"1": 1.0}}]}),
        "policy_server": put("serve/policy.json", {"base_url": "http://127.0.0.1:9/v1", "health_url":
                                                   "http://127.0.0.1:9/health", "model": "m", "pid": 1}),
        "demos": r / "hints/demos.parquet",
        "reviews": put("review/00000.json", {"shard": "00000", "kind": "tasks", "reviews": [
            {"task_id": t, "status": "not_reviewed", "reason": "no judge configured"} for t in ids]}),
        "dataset": r / "data/math/heldout.jsonl",
        "text": root / "README.md",
        "tasks_dir": r / "tasks",
        "results_dir": r,
    }
    valid["any_corpus_manifest"] = valid["corpus_manifest"]
    return {"root": root, "valid": {k: str(v) for k, v in valid.items()}, "ids": ids, "tasks": tasks}


def valid_for(ws: dict, kind: str) -> str:
    """A valid input of this kind; a folder kind without its own fixture gets an existing folder."""
    if kind not in ws["valid"] and KINDS[kind].fmt == "dir":
        return str(ws["root"])
    return ws["valid"][kind]


def test_every_input_kind_has_a_valid_fixture(ws):
    used = {getattr(a, "termforge_input", None) for sp in COMMANDS.values() for a in sp._actions} - {None}
    lacking = {k for k in used if k not in ws["valid"] and KINDS[k].fmt != "dir"}
    assert not lacking, f"add a valid fixture to ws() for {lacking}"


# -- bad variants of an input, by kind ------------------------------------------------------------


def _wrong_type_for(schema: dict):
    return 12345 if schema.get("type") == "string" else "not-the-right-type"


def bad_variants(kind: str, valid: Path, ws: dict) -> dict:
    """name -> function(path) writing a bad input at path (a missing one writes nothing)."""
    k = KINDS[kind]
    raw = valid.read_bytes() if valid.is_file() else b""
    v: dict = {"missing": lambda p: None}
    if k.fmt == "dir":
        v["a file, not a folder"] = lambda p: p.write_text("x")
        return v
    if kind != "dataset":  # a folder is a valid dataset source (datasets.load_dataset reads it)
        v["a folder, not a file"] = lambda p: p.mkdir()
    v["not UTF-8" if k.fmt != "parquet" else "garbage bytes"] = lambda p: p.write_bytes(b"\xff\xfe\x00\x81 not text")
    if kind == "config":
        v["invalid YAML"] = lambda p: p.write_text("corpus: {n_tasks: [1, 2\n  shard_size: }\n")
        v["a list at the top"] = lambda p: p.write_text("- a\n- b\n")
        return v
    if k.fmt == "text":
        return v
    v["empty"] = lambda p: p.write_bytes(b"")
    v["truncated"] = lambda p: p.write_bytes(raw[: len(raw) // 2])
    if k.fmt == "parquet":
        def no_column(p):
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({"task_id": ["x"]}), p)
        v["missing column"] = no_column
        return v
    if k.fmt == "jsonl" or kind == "dataset":
        lines = raw.decode().splitlines()
        v["last line cut off"] = lambda p: p.write_text("\n".join(lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]))
        v["a row that is not an object"] = lambda p: p.write_text("\n".join(lines[:-1] + ["[1, 2]"]) + "\n")
        if k.schema:
            key = k.schema["required"][0]
            row = json.loads(lines[0])
            row.pop(key)
            v[f"a row without {key!r}"] = lambda p: p.write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
        return v
    doc = json.loads(raw)
    v["not JSON"] = lambda p: p.write_text("{bad")
    v["a list, not an object"] = lambda p: p.write_text("[]")
    key = k.schema["required"][0]
    v[f"without {key!r}"] = lambda p: p.write_text(json.dumps({a: b for a, b in doc.items() if a != key}))
    wrong = {**doc, key: _wrong_type_for(k.schema["properties"][key])}
    v[f"{key!r} of the wrong type"] = lambda p: p.write_text(json.dumps(wrong))
    if kind == "shard_manifest":
        v["naming a task dir that does not exist"] = lambda p: p.write_text(
            json.dumps({**doc, "tasks": [*doc["tasks"], {"id": "tf-nosuchtask"}]}))

        def no_contract(p):
            empty = p.parent / "tf-emptytask"
            empty.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps({**doc, "tasks_dir": str(p.parent), "tasks": [{"id": "tf-emptytask"}]}))
        v["a task dir without task.json"] = no_contract
    if kind == "corpus_manifest":
        v["keeping a task that does not exist"] = lambda p: p.write_text(json.dumps({**doc, "kept": ["tf-gone"]}))

        def half_task(p):
            task = p.parent / "tasks" / ws["ids"][0]
            shutil.copytree(Path(ws["tasks"]) / ws["ids"][0], task)
            (task / "solution" / "solve.sh").unlink()
            p.write_text(json.dumps({**doc, "tasks_dir": str(p.parent / "tasks"), "kept": [ws["ids"][0]]}))
        v["a kept task without its oracle"] = half_task
    if kind == "solve_records":
        v["a rollout of a task that does not exist"] = lambda p: p.write_text(json.dumps(
            {**doc, "rollouts": [{**doc["rollouts"][0], "task_id": "tf-gone"}]}))
    if kind == "train_summary":
        v["naming weights that do not exist"] = lambda p: p.write_text(json.dumps({"weights": str(p.parent / "gone")}))
    return v


def _argv(cmd: str, sp, ws: dict, case: Path, target: str | None = None, bad: str | None = None) -> list[str]:
    """argv for cmd: valid inputs everywhere, outputs under case/out, the bad path for target."""
    argv, positional = [cmd], []
    for a in sp._actions:
        if isinstance(a, argparse._HelpAction) or a.dest == "params" or isinstance(a, argparse._StoreTrueAction):
            continue
        kind = getattr(a, "termforge_input", None)
        out = getattr(a, "termforge_output", None)
        if kind:
            vals = [valid_for(ws, kind)]  # stage commands get a valid --configfile: the input is the only fault
            if a.dest == target:
                vals = [valid_for(ws, kind), bad] if a.nargs == "+" else [bad]
        elif out:
            vals = [str(case / "out" / (a.dest + ("" if out == "dir" else ".json")))]
        elif a.required or not a.option_strings:
            vals = [PLAIN_VALUES.get(a.dest) or (a.choices and sorted(a.choices)[0]) or "x"]
        else:
            continue
        if a.option_strings:
            argv += [a.option_strings[0], *vals]
        else:
            positional += vals
    return argv + positional


def _tree(p: Path) -> list[str]:
    return sorted(str(x.relative_to(p)) for x in p.rglob("*")) if p.exists() else []


def run_main(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        rc = cli.main(argv)
    except SystemExit as exc:  # argparse
        rc = exc.code
    err = capsys.readouterr().err
    return rc, err


def check_line(cmd: str, kind: str, bad: str, rc, err: str) -> str | None:
    """None when err is the one-line answer for a bad `bad`, else what is wrong with it."""
    lines = err.strip("\n").splitlines()
    if rc != 2 or len(lines) != 1 or "Traceback" in err:
        return f"rc={rc}, {len(lines)} lines: {err[-800:]!r}"
    line = lines[0]
    if len(line) > MAX_LINE:
        return f"a line of {len(line)} characters: {line[:300]!r}"
    prefix = "termforge: error: " if kind == "config" else f"termforge: error: {cmd}: {bad}: "
    if not line.startswith(prefix) or bad not in line:
        return f"expected {prefix!r}...: {line!r}"
    found = producer_of(bad)
    if found and kind != "config" and f"snakemake --forcerun {found[1]}" not in line:
        return f"no rebuild advice for a workflow file: {line!r}"
    return None


INPUTS = [(cmd, a.dest, a.termforge_input) for cmd, sp in COMMANDS.items() for a in sp._actions
          if getattr(a, "termforge_input", None)]


@pytest.mark.parametrize("cmd,dest,kind", INPUTS, ids=[f"{c}-{d}" for c, d, _ in INPUTS])
def test_bad_input_gives_one_line(cmd, dest, kind, ws, tmp_path, capsys):
    valid = Path(valid_for(ws, kind))
    rel = valid.relative_to(ws["root"]) if valid.is_relative_to(ws["root"]) else Path(valid.name)
    rel = Path("a-folder") if rel == Path(".") else rel
    failures = []
    for i, (name, make) in enumerate(bad_variants(kind, valid, ws).items()):
        case = tmp_path / f"case{i}"
        bad = case / rel
        bad.parent.mkdir(parents=True, exist_ok=True)
        make(bad)
        before = _tree(case)
        rc, err = run_main(_argv(cmd, COMMANDS[cmd], ws, case, dest, str(bad)), capsys)
        problem = check_line(cmd, kind, str(bad), rc, err)
        if problem is None and _tree(case) != before:
            problem = f"files written: {sorted(set(_tree(case)) - set(before))}"
        if problem:
            failures.append(f"{name}: {problem}")
    assert not failures, f"{cmd} {dest} ({kind}):\n" + "\n".join(failures)


@pytest.mark.parametrize("cmd", ["passk", "validate", "eval-table", "train"])
def test_unreadable_input_gives_one_line(cmd, ws, tmp_path, capsys, monkeypatch):
    """Permission denied (simulated: the tests run as root, who reads any file)."""
    import termforge.io

    sp = COMMANDS[cmd]
    action = next(a for a in sp._actions if getattr(a, "termforge_input", None) not in (None, "config"))
    bad = tmp_path / "results" / "locked.json"
    bad.parent.mkdir(parents=True)
    shutil.copy(ws["valid"][action.termforge_input], bad)
    real_open = builtins.open

    def locked_open(file, *a, **kw):
        if os.fspath(file) == str(bad):
            raise PermissionError(errno.EACCES, "Permission denied", str(bad))
        return real_open(file, *a, **kw)

    monkeypatch.setattr(termforge.io, "open", locked_open, raising=False)
    rc, err = run_main(_argv(cmd, sp, ws, tmp_path, action.dest, str(bad)), capsys)
    assert check_line(cmd, action.termforge_input, str(bad), rc, err) is None, err
    assert "permission denied" in err


def test_valid_inputs_pass_the_checks(ws):
    """The sweep means something only if the valid fixtures pass: otherwise every case would fail early."""
    for cmd, sp in COMMANDS.items():
        args = PARSER.parse_args(_argv(cmd, sp, ws, ws["root"] / "unused"))
        cli.check_inputs(sp, args)


def test_library_readers_give_the_same_error(ws, tmp_path):
    """A file a stage finds through another file (a trajectory named by a solve record) gets the same answer."""
    from termforge.errors import InputError
    from termforge.passk import run_passk

    record = json.loads(Path(ws["valid"]["solve_records"]).read_text())
    traj = tmp_path / "results" / "solve" / "trajectories" / "t" / "rollout-0.json"
    traj.parent.mkdir(parents=True)
    traj.write_text('{"messages": [{"role": "us')
    record["rollouts"][0]["trajectory"] = str(traj)
    solved = tmp_path / "results" / "solve" / "00000.json"
    solved.write_text(json.dumps(record))
    with pytest.raises(InputError) as exc:
        run_passk([solved], tmp_path / "out" / "passk.json", tmp_path / "out" / "passk.csv", tmp_path / "out" / "sft.parquet")
    assert str(exc.value).startswith(f"{traj}: is not valid JSON") and "snakemake --forcerun solve" in str(exc.value)
    assert not (tmp_path / "out").exists()


def test_an_os_error_the_readers_did_not_anticipate_is_one_line(ws, tmp_path, capsys, monkeypatch):
    """main()'s last net: an OSError with a file name (here: the output folder cannot be made)."""
    blocker = tmp_path / "results"
    blocker.write_text("a file where the output folder should go")
    rc, err = run_main(["eval-table", "--records", ws["valid"]["eval_record"], "--out", str(blocker / "eval" / "results.csv")],
                       capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"termforge: error: eval-table: {blocker}")


# -- the rebuild table is the rules' own outputs --------------------------------------------------

SIDE_OUTPUTS = {("results/tasks/{task}/", "generate"), ("results/solve/trajectories/", "solve")}


def rule_outputs() -> set[tuple[str, str]]:
    found = set()
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        for m in re.finditer(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", smk.read_text(), flags=re.M | re.S):
            out = re.search(r"^    output:\n((?:        .*\n)+)", m.group(2), flags=re.M)
            for line in (out.group(1).splitlines() if out else []):
                path = re.search(r'"(results/[^"]+)"', line).group(1)
                found.add((path + ("/" if "directory(" in line else ""), m.group(1)))
    return found


def test_rebuild_table_matches_the_rules():
    assert set(PRODUCERS) - SIDE_OUTPUTS == rule_outputs()
    assert producer_of("/x/results/tasks/manifests/00003.json") == ("results/tasks/manifests/{shard}.json", "generate")
    assert producer_of("results/tasks/tf-abc/task.json")[1] == "generate"
    assert producer_of("/elsewhere/my.json") is None


# -- the real console ---------------------------------------------------------------------------


CONSOLE_CASES = {
    # the issue's own examples: a truncated solve record, a manifest holding '{bad', a missing file
    "passk": ("results/solve/00000.json", lambda ws: Path(ws["valid"]["solve_records"]).read_bytes()[:40],
              ["passk", "--solved", "{bad}", "--out", "{out}/passk.json", "--csv", "{out}/passk.csv"],
              "is not valid JSON", "solve"),
    "validate": ("results/tasks/manifests/00000.json", lambda ws: b"{bad",
                 ["validate", "--params", "{{}}", "--manifest", "{bad}", "--images-dir", "{out}/images", "--out",
                  "{out}/verdicts.json"], "is not valid JSON", "generate"),
    "generate": ("results/axes/signatures.jsonl", None,
                 ["generate", "--params", "{{}}", "--signatures", "{bad}", "--shard", "00000", "--tasks-dir",
                  "{out}/tasks", "--out", "{out}/00000.json"], "does not exist", "sample_axes"),
}


@pytest.mark.parametrize("case", sorted(CONSOLE_CASES))
def test_console_one_line_and_exit_2(case, ws, tmp_path):
    rel, content, argv, problem, rule = CONSOLE_CASES[case]
    bad, out = tmp_path / rel, tmp_path / "out"
    bad.parent.mkdir(parents=True)
    if content is not None:
        bad.write_bytes(content(ws))
    res = subprocess.run([sys.executable, "-m", "termforge.cli", *(a.format(bad=bad, out=out) for a in argv)],
                         capture_output=True, text=True)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith(f"termforge: error: {case}: {bad}: {problem}"), res.stderr
    assert f"snakemake --forcerun {rule}`" in res.stderr and not out.exists()


# -- inside a real Snakemake run ------------------------------------------------------------------


@pytest.mark.slow
def test_snakemake_corrupt_intermediate_then_rerun_after_the_advice(tmp_path):
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    (tmp_path / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    (tmp_path / "small.yaml").write_text("corpus: {n_tasks: 2, shard_size: 2}\ngenerate: {workers: 1}\n")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    target = "results/tasks/manifests/00000.json"

    def smk():
        return subprocess.run([snakemake, target, "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
                               "--cores", "1", "--configfile", str(tmp_path / "small.yaml")],
                              capture_output=True, text=True, env=env)

    first = smk()
    assert first.returncode == 0, first.stderr[-3000:]
    sigs = tmp_path / "results" / "axes" / "signatures.jsonl"
    text = sigs.read_text()
    sigs.write_text(text[: len(text) - 40])  # a torn last line, newer than the manifest: generate reruns
    failed = smk()
    assert failed.returncode != 0
    lines = [ln for ln in (failed.stdout + failed.stderr).splitlines() if ln.startswith("termforge: error:")]
    assert len(lines) == 1, lines
    assert re.fullmatch(r"termforge: error: generate: results/axes/signatures\.jsonl: line 2 is cut off \(truncated "
                        r"file\?\): .* at column \d+; it is made by rule sample_axes: delete it and rerun snakemake "
                        r"\(or run `snakemake --forcerun sample_axes`\)", lines[0]), lines[0]
    assert "Traceback" not in failed.stdout + failed.stderr
    assert lines[0] in (tmp_path / "results" / "logs" / "generate" / "00000.log").read_text()
    assert not (tmp_path / target).exists()
    sigs.unlink()  # the advice
    rerun = smk()
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert len(json.loads((tmp_path / target).read_text())["tasks"]) == 2


def test_a_file_changed_after_its_check_is_checked_again(ws, tmp_path):
    """schemas.read skips the repeat check of an unchanged file only."""
    from termforge.errors import InputError
    from termforge.schemas import read

    path = tmp_path / "results" / "eval" / "record.json"
    path.parent.mkdir(parents=True)
    good = Path(ws["valid"]["eval_record"]).read_text()
    path.write_text(good)
    read("eval_record", path)
    path.write_text(json.dumps({"model": "base"}))  # in place: another size and mtime
    with pytest.raises(InputError, match="missing key"):
        read("eval_record", path)


# -- containment: task ids and task directories that reach outside --------------------------------
# Third-party datasets and whatever a generator model wrote are untrusted: a task id is one safe
# path component, and a task directory holds regular files and directories only (symlinks inside
# it to its own files excepted). termforge.containment is the rule; these plant each kind of
# breach in every input that names tasks, on every command that takes one.

MAX_LINE = 2100  # errors.LINE_CHARS plus the prefix: every message line is bounded

# Where each kind of document names task ids.
ID_SLOTS = {
    "shard_manifest": lambda doc, bad: {**doc, "tasks": [{**doc["tasks"][0], "id": bad}, *doc["tasks"][1:]]},
    "corpus_manifest": lambda doc, bad: {**doc, "kept": [bad, *doc["kept"][1:]]},
    "any_corpus_manifest": lambda doc, bad: {**doc, "kept": [bad, *doc["kept"][1:]]},
    "verdicts": lambda doc, bad: {**doc, "verdicts": [{**doc["verdicts"][0], "task_id": bad}, *doc["verdicts"][1:]]},
    "solve_records": lambda doc, bad: {**doc, "rollouts": [{**doc["rollouts"][0], "task_id": bad}]},
    "decontam_report": lambda doc, bad: {**doc, "dropped": [bad]},
    "passk": lambda doc, bad: {**doc, "per_task": [{**doc["per_task"][0], "task_id": bad}]},
}
BAD_IDS = ["../../outside/tf-x", "..", ".", "a/b", "/etc", "tf-x\nsecond line", "", "x" * 300, "-rf"]
ID_INPUTS = [(c, d, k) for c, d, k in INPUTS if k in ID_SLOTS or k == "demos"]


def check_refusal(cmd: str, rc, err: str, must_name: str) -> str | None:
    """None when err is one bounded line, exit 2, naming must_name (as messages show it)."""
    from termforge.errors import one_line

    lines = err.strip("\n").splitlines()
    if rc != 2 or len(lines) != 1 or "Traceback" in err:
        return f"rc={rc}, {len(lines)} lines: {err[-800:]!r}"
    if not lines[0].startswith(f"termforge: error: {cmd}: ") or len(lines[0]) > MAX_LINE:
        return f"not one bounded line of {cmd}: {lines[0][:300]!r}"
    if one_line(must_name)[:60] not in lines[0]:
        return f"does not name {must_name[:60]!r}: {lines[0][:400]!r}"
    return None


@pytest.mark.parametrize("cmd,dest,kind", ID_INPUTS, ids=[f"{c}-{d}" for c, d, _ in ID_INPUTS])
def test_an_unsafe_task_id_is_refused(cmd, dest, kind, ws, tmp_path, capsys):
    from termforge.errors import show_value

    valid = Path(valid_for(ws, kind))
    failures = []
    for i, bad_id in enumerate(BAD_IDS):
        case = tmp_path / f"case{i}"
        bad = case / "results" / valid.relative_to(ws["root"] / "results")
        bad.parent.mkdir(parents=True)
        # The old join made these real: a task directory where `../../outside/tf-x` leads.
        outside = Path(ws["tasks"]).parent.parent / "outside" / "tf-x"
        outside.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(ws["tasks"]) / ws["ids"][0] / "task.json", outside / "task.json")
        if kind == "demos":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({"task_id": [bad_id, ws["ids"][1]], "demo": ["a", "b"]}), bad)
        else:
            bad.write_text(json.dumps(ID_SLOTS[kind](json.loads(valid.read_text()), bad_id)))
        before = _tree(case)
        rc, err = run_main(_argv(cmd, COMMANDS[cmd], ws, case, dest, str(bad)), capsys)
        problem = check_refusal(cmd, rc, err, str(bad)) or check_refusal(cmd, rc, err, show_value(bad_id))
        if problem is None and "safe path component" not in err:
            problem = f"does not say what a task id must be: {err!r}"
        if problem is None and _tree(case) != before:
            problem = f"files written: {sorted(set(_tree(case)) - set(before))}"
        if problem:
            failures.append(f"id {bad_id[:40]!r}: {problem}")
    assert not failures, f"{cmd} {dest} ({kind}):\n" + "\n".join(failures)


def _socket_at(path: Path) -> None:
    import socket

    cwd = os.getcwd()
    os.chdir(path.parent)  # a unix socket's path is limited to 108 bytes; bind it by its name
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(path.name)
        sock.close()
    finally:
        os.chdir(cwd)


def _device_at(path: Path) -> None:
    import stat as st

    try:
        os.mknod(path, st.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    except PermissionError:
        pytest.skip("mknod is not permitted here")


def tree_faults(secret: Path, elsewhere: Path) -> dict:
    """name -> (function(task_dir) planting the fault, the path a message must name, relative)."""
    return {
        "a test file linking to a host file": (lambda d: (d / "tests" / "leak.py").symlink_to(secret), "tests/leak.py"),
        "the oracle replaced by a link to a host file": (
            lambda d: ((d / "solution" / "solve.sh").unlink(), (d / "solution" / "solve.sh").symlink_to(secret)),
            "solution/solve.sh"),
        "task.json linking out": (
            lambda d: (shutil.copy(d / "task.json", secret.parent / "task.json"), (d / "task.json").unlink(),
                       (d / "task.json").symlink_to(secret.parent / "task.json")), "task.json"),
        "a fixture folder linking to a host folder": (
            lambda d: (d / "environment" / "fixtures" / "host").symlink_to(secret.parent, target_is_directory=True),
            "environment/fixtures/host"),
        "a relative link out": (lambda d: (d / "tests" / "up").symlink_to("../../../secret.txt"), "tests/up"),
        "a dangling link": (lambda d: (d / "tests" / "gone.py").symlink_to(d / "nothing-here"), "tests/gone.py"),
        "a symlink loop": (lambda d: (d / "tests" / "loop").symlink_to("loop"), "tests/loop"),
        "a FIFO": (lambda d: os.mkfifo(d / "environment" / "fifo"), "environment/fifo"),
        "a socket": (lambda d: _socket_at(d / "environment" / "sock"), "environment/sock"),
        "a device node": (lambda d: _device_at(d / "environment" / "null"), "environment/null"),
        "the task directory linking out of the tasks folder": (
            lambda d: (shutil.move(d, elsewhere), d.symlink_to(elsewhere, target_is_directory=True)), ""),
    }


TREE_KINDS = ("shard_manifest", "corpus_manifest", "solve_records")
TREE_INPUTS = [(c, d, k) for c, d, k in INPUTS if k in TREE_KINDS]


@pytest.mark.parametrize("cmd,dest,kind", TREE_INPUTS, ids=[f"{c}-{d}" for c, d, _ in TREE_INPUTS])
def test_a_task_directory_reaching_outside_is_refused(cmd, dest, kind, ws, tmp_path, capsys):
    """Every command that reads task directories refuses, with the offending file named, before
    it writes anything: a symlink out (to a host file, a host folder, nowhere, itself), a special
    file, a task directory that is itself a link out."""
    from termforge.errors import show_path

    valid = Path(valid_for(ws, kind))
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:host secret\n")
    failures = []
    for i, (name, (plant, rel)) in enumerate(tree_faults(secret, tmp_path / "elsewhere").items()):
        case = tmp_path / f"case{i}"
        tasks = case / "tasks"
        shutil.copytree(ws["tasks"], tasks, ignore=shutil.ignore_patterns("manifests"))
        task_dir = tasks / ws["ids"][0]
        plant(task_dir)
        doc = json.loads(valid.read_text())
        doc["tasks_dir"] = str(tasks)
        bad = case / "results" / valid.relative_to(ws["root"] / "results")
        bad.parent.mkdir(parents=True)
        bad.write_text(json.dumps(doc))
        before = _tree(case)
        rc, err = run_main(_argv(cmd, COMMANDS[cmd], ws, case, dest, str(bad)), capsys)
        problem = check_refusal(cmd, rc, err, show_path(task_dir / rel if rel else task_dir))
        if problem is None and _tree(case) != before:
            problem = f"files written: {sorted(set(_tree(case)) - set(before))}"
        if problem:
            failures.append(f"{name}: {problem}")
        shutil.rmtree(tmp_path / "elsewhere", ignore_errors=True)
    assert not failures, f"{cmd} {dest} ({kind}):\n" + "\n".join(failures)


def test_a_symlink_to_the_tasks_own_file_is_fine(ws, tmp_path, capsys):
    """The rule is containment, not "no symlinks": a link to a regular file of the same task passes
    the checks, and the export holds a copy of that file, not a link."""
    tasks = tmp_path / "tasks"
    shutil.copytree(ws["tasks"], tasks, ignore=shutil.ignore_patterns("manifests"))
    task_dir = tasks / ws["ids"][0]
    (task_dir / "tests" / "same.py").symlink_to("test_final_state.py")
    doc = {**json.loads(Path(ws["valid"]["corpus_manifest"]).read_text()), "tasks_dir": str(tasks)}
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps(doc))
    rc, err = run_main(["export", "--configfile", ws["valid"]["config"], "--corpus", str(corpus),
                        "--out-dir", str(tmp_path / "export")], capsys)
    assert rc == 0, err
    copied = tmp_path / "export" / "harbor" / ws["ids"][0] / "tests" / "same.py"
    assert not copied.is_symlink() and copied.read_text() == (task_dir / "tests" / "test_final_state.py").read_text()


# -- shapes to the leaves -----------------------------------------------------------------------


def _types(node: dict | None) -> list[str]:
    t = (node or {}).get("type")
    return [t] if isinstance(t, str) else list(t or [])


def schema_at(schema: dict, doc, path: list) -> dict | None:
    """The schema node a value at path in doc is checked against (properties, patternProperties,
    additionalProperties, items, and the eval record's if/then/else), or None."""
    node: dict | None = schema
    for key in path:
        if node is None:
            return None
        if "if" in node:  # the eval record: then for tbench, else for aime
            branch = node["then"] if doc.get("kind") == "tbench" else node.get("else", {})
            props = {**node.get("properties", {}), **branch.get("properties", {})}
            node = {**node, "properties": props}
        if isinstance(key, int):
            node = node.get("items")
            continue
        props = node.get("properties") or {}
        if key in props:
            node = props[key]
            continue
        pattern = next((v for p, v in (node.get("patternProperties") or {}).items() if re.search(p, key)), None)
        node = pattern if pattern is not None else (
            node["additionalProperties"] if isinstance(node.get("additionalProperties"), dict) else None)
    return node


def leaves(value, path=()):
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from leaves(v, (*path, k))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from leaves(v, (*path, i))
    else:
        yield list(path), value


def wrong_value(node: dict):
    """A JSON value whose type the schema node does not allow."""
    allowed = _types(node)
    for value, t in ((12345, "integer"), ("not-the-type", "string"), ([1, 2], "array"), ({"a": 1}, "object"),
                     (True, "boolean")):
        if t not in allowed and not (t == "integer" and "number" in allowed):
            return value
    raise AssertionError(node)


def put_at(doc, path: list, value):
    doc = json.loads(json.dumps(doc))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


JSON_INPUTS = [(c, d, k) for c, d, k in INPUTS if KINDS[k].fmt == "json"]


def test_every_leaf_of_the_exchanged_files_is_typed(ws):
    """The schemas go to the leaves: every value in the valid example of each exchanged file has
    a declared type (so a reader never indexes into an unchecked value)."""
    untyped = []
    for kind in sorted({k for _, _, k in JSON_INPUTS}):
        doc = json.loads(Path(ws["valid"][kind]).read_text())
        for path, _ in leaves(doc):
            if not _types(schema_at(KINDS[kind].schema, doc, path)):
                untyped.append(f"{kind}: {path}")
    assert not untyped, "declare these in termforge/schemas.py:\n" + "\n".join(untyped)


@pytest.mark.parametrize("cmd,dest,kind", JSON_INPUTS, ids=[f"{c}-{d}" for c, d, _ in JSON_INPUTS])
def test_a_wrong_type_anywhere_gives_one_line(cmd, dest, kind, ws, tmp_path, capsys):
    """Nested shapes: each leaf of the valid document, in turn, gets a value of the wrong type."""
    valid = Path(valid_for(ws, kind))
    doc = json.loads(valid.read_text())
    failures = []
    for i, (path, _) in enumerate(leaves(doc)):
        node = schema_at(KINDS[kind].schema, doc, path)
        if not _types(node):
            continue  # test_every_leaf_of_the_exchanged_files_is_typed reports these
        case = tmp_path / f"case{i}"
        bad = case / valid.relative_to(ws["root"])
        bad.parent.mkdir(parents=True)
        bad.write_text(json.dumps(put_at(doc, path, wrong_value(node))))
        before = _tree(case)
        rc, err = run_main(_argv(cmd, COMMANDS[cmd], ws, case, dest, str(bad)), capsys)
        problem = check_line(cmd, kind, str(bad), rc, err)
        if problem is None and "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") \
                .split(".")[0].split("[")[0] not in err:
            problem = f"does not name the key: {err!r}"
        if problem is None and _tree(case) != before:
            problem = f"files written: {sorted(set(_tree(case)) - set(before))}"
        if problem:
            failures.append(f"{path}: {problem}")
    assert not failures, f"{cmd} {dest} ({kind}):\n" + "\n".join(failures)


def test_task_json_fields_are_checked_by_their_readers(ws, tmp_path, capsys):
    """task.json's signature fields and records, read by export (through a corpus manifest) and
    passk (through a solve record), each to the leaves."""
    tasks = tmp_path / "tasks"
    shutil.copytree(ws["tasks"], tasks, ignore=shutil.ignore_patterns("manifests"))
    task_json = tasks / ws["ids"][0] / "task.json"
    good = json.loads(task_json.read_text())
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps({**json.loads(Path(ws["valid"]["corpus_manifest"]).read_text()),
                                  "tasks_dir": str(tasks)}))
    solved = tmp_path / "solved.json"
    solved.write_text(json.dumps({**json.loads(Path(ws["valid"]["solve_records"]).read_text()),
                                  "tasks_dir": str(tasks)}))
    cases = {"signature.domain": 12345, "signature.skills": "not-a-list", "signature.task_complexity": [1],
             "actual.verifier_kind": {"a": 1}, "mismatch": "x", "environment.timeout_sec": "soon",
             "id": "../../x"}
    failures = []
    for key, value in cases.items():
        bad = put_at(good, key.split("."), value)
        task_json.write_text(json.dumps(bad))
        for argv in (["export", "--configfile", ws["valid"]["config"], "--corpus", str(corpus), "--out-dir",
                      str(tmp_path / "out")],
                     ["passk", "--solved", str(solved), "--out", str(tmp_path / "out" / "p.json"), "--csv",
                      str(tmp_path / "out" / "p.csv"), "--sft", str(tmp_path / "out" / "sft.parquet")]):
            rc, err = run_main(argv, capsys)
            problem = check_refusal(argv[0], rc, err, str(task_json))
            if problem is None and key.split(".")[-1] not in err:
                problem = f"does not name {key}: {err!r}"
            if problem is None and (tmp_path / "out").exists():
                problem = f"wrote {_tree(tmp_path / 'out')}"
            if problem:
                failures.append(f"{argv[0]} {key}: {problem}")
    task_json.write_text(json.dumps(good))
    assert not failures, "\n".join(failures)


def test_trajectory_message_contents_are_checked(ws, tmp_path, capsys):
    record = json.loads(Path(ws["valid"]["solve_records"]).read_text())
    traj = tmp_path / "traj.json"
    traj.write_text(json.dumps({"messages": [{"role": "user", "content": {"parts": ["hi"]}}]}))
    record["rollouts"][0]["trajectory"] = str(traj)
    solved = tmp_path / "solved.json"
    solved.write_text(json.dumps(record))
    rc, err = run_main(["passk", "--solved", str(solved), "--out", str(tmp_path / "out" / "p.json"), "--csv",
                        str(tmp_path / "out" / "p.csv"), "--sft", str(tmp_path / "out" / "sft.parquet")], capsys)
    assert check_refusal("passk", rc, err, str(traj)) is None, err
    assert "messages[0].content" in err and not (tmp_path / "out").exists()


# -- one line, whatever the input holds ---------------------------------------------------------


def test_a_newline_in_a_path_stays_on_one_line(ws, tmp_path, capsys):
    bad = tmp_path / "results" / "eval" / "re\ncord.json"
    rc, err = run_main(["eval-table", "--records", str(bad), "--out", str(tmp_path / "out.csv")], capsys)
    assert check_refusal("eval-table", rc, err, repr(str(bad))) is None, err
    assert "does not exist" in err


def test_a_newline_in_a_config_key_stays_on_one_line(tmp_path, capsys):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text('corpus:\n  "n_tasks\\nevil": 3\n')
    rc, err = run_main(["check-config", str(ROOT / "config.yaml"), str(cfg)], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "'n_tasks\\nevil'" in err, err


def test_a_huge_value_is_shortened_with_its_length(ws, tmp_path, capsys):
    huge = "x" * 5_000_000
    record = json.loads(Path(ws["valid"]["eval_record"]).read_text())
    record["summary"]["n_tasks"] = huge
    bad = tmp_path / "results" / "eval" / "record.json"
    bad.parent.mkdir(parents=True)
    bad.write_text(json.dumps(record))
    rc, err = run_main(["eval-table", "--records", str(bad), "--out", str(tmp_path / "out.csv")], capsys)
    assert check_refusal("eval-table", rc, err, str(bad)) is None, err
    assert "(5000000 chars)" in err and len(err) < 600, err[:700]


def test_a_huge_config_file_is_refused_by_its_size(tmp_path, capsys):
    import time

    cfg = tmp_path / "huge.yaml"
    cfg.write_text("run_name: " + "x" * 50_000_000 + "\n")
    start = time.monotonic()
    rc, err = run_main(["check-config", str(cfg)], capsys)
    assert rc == 2 and "50,000,011 bytes" in err and "not parsed" in err and len(err) < 400, err[:500]
    assert time.monotonic() - start < 60  # parsing it would take minutes (a bound, not a timing claim)


def test_an_output_that_is_a_directory_is_named_as_given(ws, tmp_path, capsys):
    out = tmp_path / "results" / "eval" / "results.csv"
    out.mkdir(parents=True)
    rc, err = run_main(["eval-table", "--records", ws["valid"]["eval_record"], "--out", str(out)], capsys)
    assert rc == 2 and err.startswith(f"termforge: error: eval-table: {out}: is a directory"), err
    assert ".tmp" not in err and len(err.strip().splitlines()) == 1


def test_a_symlink_loop_is_named_as_one(ws, tmp_path, capsys):
    loop = tmp_path / "results" / "solve" / "00000.json"
    loop.parent.mkdir(parents=True)
    loop.symlink_to(loop.name)
    rc, err = run_main(["passk", "--solved", str(loop), "--out", str(tmp_path / "p.json"), "--csv",
                        str(tmp_path / "p.csv")], capsys)
    assert check_line("passk", "solve_records", str(loop), rc, err) is None, err
    assert "symlink loop" in err
    rc, err = run_main(["train", "--configfile", ws["valid"]["config"], "--out-dir", str(tmp_path / "t"),
                        "--tasks-dir", str(loop)], capsys)
    assert rc == 2 and "symlink loop" in err and "does not exist" not in err, err


def test_a_failed_export_leaves_nothing_and_the_next_removes_stale_staging(ws, tmp_path, capsys):
    """A failure after the checks writes nothing (the outputs are staged and published together),
    and staging left by a killed run is removed by the next one."""
    out = tmp_path / "export"
    stale = [out / "harbor" / f".{ws['ids'][0]}.k1ll3d.partial", out / "dataset" / ".train.parquet.k1ll3d.partial"]
    for p in stale:
        p.mkdir(parents=True)
    argv = ["export", "--configfile", ws["valid"]["config"], "--corpus", ws["valid"]["corpus_manifest"],
            "--out-dir", str(out)]
    import termforge.export

    real = termforge.export.private_row

    def fail_late(task_dir):  # past every check: as a full disk would
        raise OSError(28, "No space left on device", str(task_dir / "private"))

    termforge.export.private_row = fail_late
    try:
        rc, err = run_main(argv, capsys)
    finally:
        termforge.export.private_row = real
    assert rc == 2 and "no space left" in err and str(out) in err and ws["tasks"] not in err, err
    assert not (out / "export.json").exists() and not (out / "dataset" / "train.parquet").exists()
    assert [p for p in out.rglob("*") if p.name.endswith(".partial") and p not in stale] == []
    rc, err = run_main(argv, capsys)
    assert rc == 0, err
    assert not any(p.exists() for p in stale) and (out / "export.json").is_file()
    assert sorted(p.name for p in (out / "harbor").iterdir()) == sorted(ws["ids"])


def test_an_output_folder_entry_linking_out_is_refused(ws, tmp_path, capsys):
    """<images-dir>/<task id> is where build-images writes: a symlink there leading out of the
    folder stops the command before anything is built."""
    images, elsewhere = tmp_path / "images", tmp_path / "elsewhere"
    images.mkdir()
    elsewhere.mkdir()
    (images / ws["ids"][0]).symlink_to(elsewhere, target_is_directory=True)
    rc, err = run_main(["build-images", "--configfile", ws["valid"]["config"], "--manifest",
                        ws["valid"]["shard_manifest"], "--images-dir", str(images), "--out",
                        str(tmp_path / "out.json")], capsys)
    assert check_refusal("build-images", rc, err, str(images / ws["ids"][0])) is None, err
    assert "outside" in err and list(elsewhere.iterdir()) == [] and not (tmp_path / "out.json").exists()


def test_stale_staging_is_removed_for_its_own_outputs_only(tmp_path):
    """generate's shards share results/tasks: a shard removes its own tasks' leftovers, never the
    staging directory another shard is writing at the same time."""
    from termforge.io import clean_stale_staging

    for name in (".tf-a.x1y2_z.partial", ".tf-b.k3j4ab.partial", ".tf-a.old-12", ".p.json.q9w8e7.tmp", ".keep"):
        (tmp_path / name).mkdir()
    assert clean_stale_staging(tmp_path, ["tf-a"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [".keep", ".p.json.q9w8e7.tmp", ".tf-b.k3j4ab.partial"]
    assert clean_stale_staging(tmp_path) == 2 and [p.name for p in tmp_path.iterdir()] == [".keep"]


# -- operator edges (issue 45) ------------------------------------------------------------------


def _shard_with_task_json_id(ws: dict, root: Path, bad_id: str) -> Path:
    """A copy of the workspace's shard whose first task.json names bad_id (the manifest keeps the
    safe id): what a generator model or a hand edit could leave."""
    tasks = root / "tasks"
    shutil.copytree(ws["tasks"], tasks, ignore=shutil.ignore_patterns("manifests"))
    task_json = tasks / ws["ids"][0] / "task.json"
    task_json.write_text(json.dumps({**json.loads(task_json.read_text()), "id": bad_id}))
    manifest = root / "results" / "tasks" / "manifests" / "00000.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({**json.loads(Path(ws["valid"]["shard_manifest"]).read_text()),
                                    "tasks_dir": str(tasks)}))
    return manifest


@pytest.mark.parametrize("bad_id", ["../../escaped-image", "<absolute>", "..", "tf-other"])
def test_build_images_keeps_a_task_json_id_inside_the_images_dir(bad_id, ws, tmp_path, capsys):
    """build-images takes the image's name from the manifest's checked id: a task.json naming an
    unsafe id (or another task's) is refused before anything is built."""
    bad_id = str(tmp_path / "abs-image") if bad_id == "<absolute>" else bad_id
    case = tmp_path / "a" / "b"
    manifest = _shard_with_task_json_id(ws, case, bad_id)
    images = case / "images"
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    rc, err = run_main(["build-images", "--configfile", ws["valid"]["config"], "--manifest", str(manifest),
                        "--images-dir", str(images), "--out", str(case / "out.json")], capsys)
    task_json = case / "tasks" / ws["ids"][0] / "task.json"
    assert check_refusal("build-images", rc, err, str(task_json)) is None, err
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_a_runtime_build_refuses_an_unsafe_task_json_id(ws, tmp_path):
    """The runtimes' own build (validate, generate's checks and mutation call it directly)."""
    from termforge.errors import InputError
    from termforge.images.runtimes import BwrapRuntime

    task = tmp_path / "x" / "y" / "task"
    shutil.copytree(Path(ws["tasks"]) / ws["ids"][0], task)
    (task / "task.json").write_text(json.dumps({**json.loads((task / "task.json").read_text()),
                                                "id": "../../escaped-image"}))
    with pytest.raises(InputError, match="safe path component"):
        BwrapRuntime(rootfs="host").build(task, tmp_path / "x" / "y" / "images")
    assert not (tmp_path / "escaped-image").exists() and not (tmp_path / "x" / "y" / "images").exists()


def test_a_reward_probe_task_id_stays_inside_the_tasks_dir(tmp_path):
    """train.reward_probe_tasks lists ids whose instruction.md is read: `..` reaches no other file."""
    from termforge.errors import InputError
    from termforge.opsd.config import OPSDConfig
    from termforge.opsd.reward_probe import split_reward_probe

    (tmp_path / "instruction.md").write_text("a file outside the tasks folder\n")
    (tmp_path / "tasks").mkdir()
    listed = tmp_path / "probe.json"
    listed.write_text(json.dumps([".."]))
    cfg = OPSDConfig(data_kind="terminal", tasks_dir=str(tmp_path / "tasks"), reward_probe_tasks=str(listed))
    with pytest.raises(InputError, match="safe path component"):
        split_reward_probe([], cfg)


@pytest.mark.parametrize("argv", [["plan", "--configfile", str(ROOT / "config.yaml")],
                                  ["check-config", str(ROOT / "config.yaml")],
                                  ["dvc-yaml", "--configfile", str(ROOT / "config.yaml")]],
                         ids=lambda a: a[0])
def test_a_reader_that_stops_early_gets_no_traceback(argv, tmp_path):
    """`termforge plan | head -2`: stdout is a pipe whose reader is gone (closed before the
    command writes, so the write always meets it closed)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        res = subprocess.run([sys.executable, "-m", "termforge.cli", *argv], cwd=ROOT, stdout=write_end,
                             stderr=subprocess.PIPE, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    finally:
        os.close(write_end)
    assert termforge_lines(res.stderr) == [] and res.stderr.strip() == "", res.stderr
    assert res.returncode == 141, res.returncode
    # Through a shell pipe, as an operator types it.
    res = subprocess.run(f"{shlex.join([sys.executable, '-m', 'termforge.cli', *argv])} | head -c 1", shell=True,
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr, res.stderr


@pytest.fixture
def small_disk(tmp_path):
    """A real, tiny file system (a tmpfs mounted here: needs root), and a way to fill it up to a
    given number of free bytes."""
    mount = tmp_path / "disk"
    mount.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")

    def fill(leave: int) -> None:
        filler = mount / ".filler"
        filler.unlink(missing_ok=True)
        free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
        with open(filler, "wb") as fh:
            fh.write(b"\0" * max(free - leave, 0))

    try:
        yield mount, fill
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


# (command, its arguments with OUT for the folder on the small disk, the outputs it writes)
FULL_DISK_CASES = {
    "passk": (lambda ws, out: ["passk", "--solved", ws["valid"]["solve_records"], "--out", f"{out}/solve/passk.json",
                               "--csv", f"{out}/solve/passk.csv", "--sft", f"{out}/solve/sft.parquet"]),
    "export": (lambda ws, out: ["export", "--configfile", ws["valid"]["config"], "--corpus",
                                ws["valid"]["corpus_manifest"], "--out-dir", f"{out}/export"]),
    "eval-table": (lambda ws, out: ["eval-table", "--records", ws["valid"]["eval_record"], "--out",
                                    f"{out}/eval/results.csv"]),
    "sample-axes": (lambda ws, out: ["sample-axes", "--configfile", ws["valid"]["config"], "--out",
                                     f"{out}/axes/signatures.jsonl", "--stats", f"{out}/axes/stats.json"]),
    "generate": (lambda ws, out: ["generate", "--configfile", ws["valid"]["config"], "--signatures",
                                  ws["valid"]["signatures"], "--shard", "00000", "--tasks-dir", f"{out}/tasks",
                                  "--out", f"{out}/tasks/manifests/00000.json"]),
}


@pytest.mark.parametrize("cmd", sorted(FULL_DISK_CASES))
def test_a_full_disk_names_the_output_and_leaves_nothing(cmd, ws, small_disk, capsys):
    """ENOSPC on an output: one line naming an output (never an input) and the space needed;
    nothing half-made, not even an empty folder. Filled to several levels, so the disk fills
    before the first output and part way through the later ones."""
    mount, fill = small_disk
    argv = FULL_DISK_CASES[cmd](ws, mount / "results")
    inputs = [a for a in argv[1:] if not a.startswith(str(mount)) and Path(a).exists()]
    failures = []
    for leave in (0, 4096, 12288, 40960, 98304):
        shutil.rmtree(mount / "results", ignore_errors=True)
        fill(leave)
        rc, err = run_main(argv, capsys)
        # generate keeps the task directories it finished (the next run resumes from them)
        done = [p for p in (mount / "results" / "tasks").glob("*/task.json")] if cmd == "generate" else []
        left = sorted(str(p.relative_to(mount)) for p in mount.rglob("*") if p.name != ".filler" and
                      not any(d.parent == p or d.parent in p.parents or p in d.parents for d in done))
        if rc == 0:
            continue  # it fitted
        lines = termforge_lines(err)  # progress bars aside
        line = lines[0] if lines else ""
        if rc != 2 or len(lines) != 1 or not line.startswith(f"termforge: error: {cmd}: {mount}/results/"):
            failures.append(f"leave {leave}: rc {rc}: {err[-600:]!r}")
        elif any(i in line for i in inputs):
            failures.append(f"leave {leave}: names no output (or an input): {line!r}")
        elif "no space left" not in line or "free" not in line:
            failures.append(f"leave {leave}: does not say the space needed: {line!r}")
        elif left:
            failures.append(f"leave {leave}: left {left}")
    (mount / ".filler").unlink()
    assert not failures, "\n".join(failures)


DUPLICATE_OVERLAY = "corpus:\n  n_tasks: 4\n  shard_size: 2\n  # a later edit\n  n_tasks: 6\n"


def _names_the_duplicate(line: str, key: str, first: int, second: int) -> bool:
    return f"key {key} is written twice (line {first} and line {second})" in line


def test_a_key_written_twice_in_a_config_is_one_line(tmp_path, capsys):
    overlay = tmp_path / "dup.yaml"
    overlay.write_text(DUPLICATE_OVERLAY)
    for argv in (["check-config", str(ROOT / "config.yaml"), str(overlay)],
                 ["plan", "--configfile", str(ROOT / "config.yaml"), str(overlay)],
                 ["sample-axes", "--configfile", str(ROOT / "config.yaml"), str(overlay), "--out",
                  str(tmp_path / "out" / "s.jsonl"), "--stats", str(tmp_path / "out" / "stats.json")]):
        rc, err = run_main(argv, capsys)
        lines = termforge_lines(err)
        assert rc == 2 and len(lines) == 1 and str(overlay) in lines[0], (argv[0], err)
        assert _names_the_duplicate(lines[0], "corpus.n_tasks", 2, 5), lines[0]
    assert not (tmp_path / "out").exists()
    # Nested in a list, and the same key spelled as a different YAML scalar of the same value.
    overlay.write_text("ablations:\n  a: {train: {lr: 1, lr: 2}}\n")
    rc, err = run_main(["check-config", str(overlay)], capsys)
    assert rc == 2 and _names_the_duplicate(err, "ablations.a.train.lr", 2, 2), err
    overlay.write_text("seed: 1\n'seed': 2\n")
    rc, err = run_main(["check-config", str(overlay)], capsys)
    assert rc == 2 and _names_the_duplicate(err, "seed", 1, 2), err


def test_a_key_written_twice_in_a_taxonomy_is_one_line(tmp_path, capsys):
    from termforge.axes.taxonomy import package_taxonomy_path

    text = package_taxonomy_path().read_text()
    first = next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith("languages:"))
    lang = next(line for line in text.splitlines()[first:] if line.startswith("  "))
    taxonomy = tmp_path / "taxonomy.yaml"
    lines = text.splitlines()
    lines.insert(first + 1, lang)  # the first language again, one line below itself
    taxonomy.write_text("\n".join(lines) + "\n")
    overlay = tmp_path / "tax.yaml"
    overlay.write_text(f"corpus: {{taxonomy: {taxonomy}}}\n")
    rc, err = run_main(["sample-axes", "--configfile", str(ROOT / "config.yaml"), str(overlay), "--out",
                        str(tmp_path / "out" / "s.jsonl"), "--stats", str(tmp_path / "out" / "stats.json")], capsys)
    out = termforge_lines(err)
    key = "languages." + lang.split(":")[0].strip()
    assert rc == 2 and len(out) == 1 and str(taxonomy) in out[0], err
    assert _names_the_duplicate(out[0], key, first + 1, first + 2), out[0]


def test_a_key_written_twice_in_a_base_declaration_is_refused(tmp_path):
    from termforge.errors import ConfigError
    from termforge.images.declarations import BASES_DIR, load_declarations

    bases = tmp_path / "bases"
    shutil.copytree(BASES_DIR, bases)
    decl = bases / "debian-bookworm-slim.yaml"
    decl.write_text(decl.read_text() + "suite: trixie\n")
    suite_line = next(i for i, line in enumerate(decl.read_text().splitlines(), 1) if line.startswith("suite:"))
    last = len(decl.read_text().splitlines())
    with pytest.raises(ConfigError) as info:
        load_declarations(bases)
    assert str(decl) in str(info.value) and _names_the_duplicate(str(info.value), "suite", suite_line, last)


@pytest.mark.slow
def test_snakemake_stops_on_a_key_written_twice(tmp_path):
    """Snakemake reads config files with its own YAML loader (last key wins): the workflow reads
    them again and stops with termforge's line."""
    overlay = tmp_path / "dup.yaml"
    overlay.write_text(DUPLICATE_OVERLAY)
    res = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "-s", str(ROOT / "Snakefile"),
                          "-d", str(ROOT), "--configfile", str(ROOT / "config.yaml"), str(overlay)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    lines = termforge_lines(res.stderr + res.stdout)
    assert res.returncode != 0 and len(lines) == 1, res.stderr[-2000:]
    assert str(overlay) in lines[0] and _names_the_duplicate(lines[0], "corpus.n_tasks", 2, 5), lines[0]


@pytest.fixture
def read_only_disk(tmp_path):
    """A real read-only file system (a tmpfs mounted read-only: needs root, whom a chmod'ed folder
    would not stop)."""
    mount = tmp_path / "ro"
    mount.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(mount)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_read_only_output_is_named_as_given(ws, read_only_disk, capsys):
    """Never under a staging sibling's name (`.tf-….partial`), which the user never gave."""
    ro = read_only_disk
    cases = {
        "generate": (["generate", "--configfile", ws["valid"]["config"], "--signatures", ws["valid"]["signatures"],
                      "--shard", "00000", "--tasks-dir", str(ro), "--out", str(ws["root"] / "ro-m.json")], str(ro)),
        "generate-sub": (["generate", "--configfile", ws["valid"]["config"], "--signatures", ws["valid"]["signatures"],
                          "--shard", "00000", "--tasks-dir", str(ro / "tasks"), "--out",
                          str(ws["root"] / "ro-m.json")], str(ro / "tasks")),
        "sample-axes": (["sample-axes", "--configfile", ws["valid"]["config"], "--out", str(ro / "s.jsonl"),
                         "--stats", str(ws["root"] / "ro-stats.json")], str(ro / "s.jsonl")),
        "export": (["export", "--configfile", ws["valid"]["config"], "--corpus", ws["valid"]["corpus_manifest"],
                    "--out-dir", str(ro / "export")], str(ro / "export")),
        "passk": (["passk", "--solved", ws["valid"]["solve_records"], "--out", str(ro / "p.json"), "--csv",
                   str(ro / "p.csv")], str(ro / "p.json")),
    }
    failures = []
    for name, (argv, given) in cases.items():
        rc, err = run_main(argv, capsys)
        lines = termforge_lines(err)
        want = f"termforge: error: {argv[0]}: {given}: is on a read-only file system"
        if rc != 2 or len(lines) != 1 or not lines[0].startswith(want) or ".partial" in err:
            failures.append(f"{name}: rc {rc}: {err[-500:]!r}")
    assert not (ws["root"] / "ro-m.json").exists() and not (ws["root"] / "ro-stats.json").exists()
    assert not failures, "\n".join(failures)


def test_serve_group_cores_is_where_snakemake_stops_refusing():
    from termforge.cluster import serve_group_problem

    # gpu-full + tmax15k: servers of 16 threads, 4 shards of 8 threads each per server
    assert serve_group_problem(47, 16, 8, 40, 4) is not None and "--cores 48" in serve_group_problem(2, 16, 8, 40, 4)
    assert serve_group_problem(48, 16, 8, 40, 4) is None
    # one server for every shard; fewer shards than a server takes; no --cores known
    assert "--cores 22" in serve_group_problem(2, 2, 4, 5, 0)
    assert "--cores 10" in serve_group_problem(9, 2, 4, 2, 3) and serve_group_problem(10, 2, 4, 2, 3) is None
    assert serve_group_problem(None, 16, 8, 40, 4) is None


@pytest.mark.slow
def test_a_served_dry_run_without_enough_cores_says_which_cores(tmp_path):
    """Snakemake refuses the policy server groups below their summed threads with a WorkflowError
    about `_cores`; the workflow says first which --cores they need, and that --cores plans."""
    overlay = tmp_path / "served.yaml"
    overlay.write_text("corpus: {n_tasks: 4, shard_size: 2}\nserve: {enabled: true, shards_per_server: null}\n"
                       "solve: {agent: model}\ncluster: {cpu_threads: 2, gpus_per_job: 1, cpus_per_gpu: 3}\n")

    def dry(*cores):
        return subprocess.run([sys.executable, "-m", "snakemake", "-n", *cores, "-s", str(ROOT / "Snakefile"),
                               "-d", str(tmp_path), "--configfile", str(ROOT / "config.yaml"), str(overlay)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")})

    for cores in (["--cores", "2"], ["--cores", "6"]):
        res = dry(*cores)
        lines = termforge_lines(res.stderr + res.stdout)
        assert res.returncode != 0 and len(lines) == 1, res.stderr[-2000:]
        assert "needs --cores 7 (serve_policy 3 threads + 2 x solve 2 threads" in lines[0], lines[0]
        assert "WorkflowError" not in res.stderr
    res = dry("--cores", "7")
    assert res.returncode == 0 and "serve_policy" in res.stdout, res.stderr[-2000:]


# -- bench scripts: an unknown name is an error, never an empty measurement ---------------------

# (script, arguments with one unknown name or missing path, the option named in the error)
BENCH_BAD_NAMES = {
    "attacks-families": ("bench_attacks.py", ["--families", "nosuch"], "--families"),
    "attacks-attacks": ("bench_attacks.py", ["--attacks", "disk_fill,nosuch"], "--attacks"),
    "compose-families": ("bench_compose.py", ["--families", "nosuch"], "--families"),
    "compose-fixtures": ("bench_compose.py", ["--fixtures", "nosuch"], "--fixtures"),
    "mutation-families": ("bench_mutation.py", ["--families", "nosuch"], "--families"),
    "validate-families": ("bench_validate.py", ["--families", "log_level_filter", "nosuch"], "--families"),
    "validate-paths": ("bench_validate.py", ["--paths", "old,nosuch"], "--paths"),
    "opsd-loss-variants": ("bench_opsd_loss.py", ["--variants", "nosuch"], "--variants"),
    "opsd-step-variants": ("bench_opsd_step.py", ["--variants", "nosuch"], "--variants"),
    "terminal-learning-levels": ("bench_terminal_learning.py", ["--levels", "nosuch"], "--levels"),
    "terminal-learning-objectives": ("bench_terminal_learning.py", ["--objectives", "nosuch", "--quick"],
                                     "--objectives"),
    "plan-overlay": ("bench_plan.py", ["--overlay", "nosuch.yaml"], "--overlay"),
    "scale-overlay": ("bench_scale.py", ["--overlay", "nosuch.yaml"], "--overlay"),
    "generate-signatures": ("bench_generate.py", ["--signatures", "nosuch.yaml"], "--signatures"),
    "hint-gate-corpus": ("bench_hint_gate.py", ["--corpus", "nosuch"], "--corpus"),
    "hint-gate-disguises": ("bench_hint_gate.py", ["--disguises", "nosuch"], "--disguises"),
    "hint-gate-holdout": ("bench_hint_gate.py", ["--holdout", "nosuch"], "--holdout"),
    "attacks-escapes": ("bench_attacks.py", ["--escapes", "proc1_root,nosuch"], "--escapes"),
    "attacks-builds-only-families": ("bench_attacks.py", ["--builds-only", "--families", "nosuch"], "--families"),
    "dockerfile-builds-baseline-src": ("bench_dockerfile_builds.py", ["--baseline-src", "nosuch"], "--baseline-src"),
    "dockerfile-builds-task": ("bench_dockerfile_builds.py", ["--baseline-src", str(ROOT / "src"), "--task", "nosuch"],
                               "--task"),
    "honour-config": ("bench_honour.py", ["--config", "configs/nosuch.yaml"], "--config"),
    "input-sensitivity-families": ("bench_input_sensitivity.py", ["--families", "log_level_filter,nosuch"],
                                   "--families"),
    "mutation-names": ("bench_mutation.py", ["--names", "values_swapped,nosuch"], "--names"),
    "shared-node-settings": ("bench_shared_node.py", ["--settings", "spin,nosuch"], "--settings"),
    "tb2-share-path": ("bench_tb2_native_share.py", ["nosuch"], "path"),
    "tb2-share-baseline-src": ("bench_tb2_native_share.py", [str(ROOT / "benchmarks" / "tb-mini"), "--baseline-src",
                                                             "nosuch"], "--baseline-src"),
    "tb2-share-registry": ("bench_tb2_native_share.py", [str(ROOT / "benchmarks" / "tb-mini"), "--registry",
                                                         "nosuch.json", "--dataset", "tb@2.0"], "--registry"),
    # (registry.json: the one-dataset registry the test writes into the run's folder)
    "tb2-share-dataset": ("bench_tb2_native_share.py", [str(ROOT / "benchmarks" / "tb-mini"), "--registry",
                                                        "registry.json", "--dataset", "nosuch@2.0"], "--dataset"),
    "terminal-learning-lrs": ("bench_terminal_learning.py", ["--lrs", "2e-3,nosuch"], "--lrs"),
    "terminal-learning-temperatures": ("bench_terminal_learning.py", ["--temperatures", "nosuch"], "--temperatures"),
    "terminal-learning-turn-caps": ("bench_terminal_learning.py", ["--turn-caps", "1,nosuch"], "--turn-caps"),
    "terminal-learning-token-caps": ("bench_terminal_learning.py", ["--token-caps", "nosuch"], "--token-caps"),
}
# Bench options that name nothing to check: numbers, files the script writes, free text, internal.
BENCH_FREE_OPTIONS = {
    "bench_decontam.py --keep": "a folder it creates", "bench_scale.py --keep": "a folder it creates",
    "bench_harness.py --concurrency": "numbers", "bench_hint_gate.py --judge": "a model spec (JSON)",
    "bench_hint_gate.py --probe": "a model spec (JSON)", "bench_hint_gate.py --split": "argparse choices",
    "bench_opsd_loss.py --worker": "internal (argparse choices)", "bench_opsd_loss.py --out": "internal: written",
    "bench_opsd_step.py --variant": "internal: one of --variants, checked there",
    "bench_terminal_learning.py --out": "written", "bench_terminal_learning.py --select": "argparse choices",
    "bench_terminal_step.py --model": "a Hub id or a local model (the loader names it)",
    "bench_shared_node.py --model": "passed to bench_terminal_step.py --model (the loader names it)",
    "bench_terminal_step.py --device": "a torch device (torch names it)", "bench_terminal_step.py --json": "written",
    "bench_tb2_native_share.py --json": "written",
    "bench_validate.py --baseline": "a git revision (git names it)", "stress_suite.py --out": "written",
    "stress_suite.py pytest_args": "passed to pytest", "validate_at_commit.py sample": "internal (bench_validate)",
    "validate_at_commit.py --limits": "internal (bench_validate)",
    "validate_at_commit.py --cpu-usage-file": "internal (bench_validate)",
}


def bench_value_options() -> set[str]:
    """Every bench option that takes a value other than a number."""
    found = set()
    for script in sorted((ROOT / "bench").glob("*.py")):
        for m in re.finditer(r"add_argument\(\s*\"([^\"]+)\"([^)]*)", script.read_text()):
            rest = m.group(2)
            if re.search(r"type=(int|float)|action=\"store_(true|false)\"", rest):
                continue
            found.add(f"{script.name} {m.group(1)}")
    return found


def test_every_bench_name_option_is_checked():
    covered = {f"{s} {opt}" for s, _, opt in BENCH_BAD_NAMES.values()}
    unlisted = bench_value_options() - covered - set(BENCH_FREE_OPTIONS)
    assert not unlisted, f"check these with bench/bench_args.py and add a case to BENCH_BAD_NAMES: {sorted(unlisted)}"
    assert len(BENCH_FREE_OPTIONS) <= 25  # the exceptions stay few, each with its reason


@pytest.mark.parametrize("case", sorted(BENCH_BAD_NAMES))
def test_a_bench_script_refuses_an_unknown_name(case, tmp_path):
    script, args, option = BENCH_BAD_NAMES[case]
    (tmp_path / "registry.json").write_text(json.dumps([{"name": "tb", "version": "2.0", "tasks": []}]))
    # (before the fix an unknown level sampled signatures forever: the timeout bounds that)
    res = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    lines = [line for line in res.stderr.splitlines() if line.startswith(f"{script}: error: ")]
    assert "Traceback" not in res.stderr and res.returncode == 2, (res.returncode, res.stderr[-1500:])
    assert len(lines) == 1 and f"{option}: " in lines[0] and "nosuch" in lines[0], res.stderr[-1500:]
    assert res.stdout.strip() == "" or "0 families" not in res.stdout, res.stdout[-500:]
