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
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from termforge import cli
from termforge.errors import PRODUCERS, producer_of
from termforge.schemas import KINDS

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
        "decontam_report": put("decontam/report.json", {"flagged": [], "dropped": [], "summary": {}}),
        "verdicts": put("validate/00000.json", {"shard": "00000", "tasks_dir": tasks, "verdicts": [
            {"task_id": t, "kept": True, "stage": "kept", "reason": "ok"} for t in ids]}),
        "corpus_manifest": put("corpus/manifest.json", {"tasks_dir": tasks, "kept": ids, "dropped": []}),
        "solve_records": put("solve/00000.json", {"shard": "00000", "tasks_dir": tasks, "k": 1, "model": "m",
                                                  "rollouts": [{"task_id": ids[0], "rollout": 0, "status": "graded",
                                                                "reward": 1.0, "trajectory": str(traj)}]}),
        "eval_record": put("runs/base/eval/aime.json", {"model": "base", "benchmark": "b", "kind": "aime",
                                                         "summary": {"num_problems": 1, "avg@1": 0.0}}),
        "train_summary": put("runs/a/train/summary.json", {"weights": str(r / "runs/a/train/weights")}),
        "passk": put("solve/passk.json", {"tasks": 1, "overall": {"pass@1": 1.0},
                                          "per_task": [{"task_id": ids[0], "n": 1, "c": 1}]}),
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
