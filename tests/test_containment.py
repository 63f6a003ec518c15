"""Containment (termforge.containment): untrusted task ids and task directories never reach
outside the directory they belong to, and no host file reaches an import or an export.

The CLI sweep (tests/test_cli_bad_input.py) plants unsafe ids and task-directory breaches in every
input of every command; these are the rule's own cases and the commands that read task
directories from elsewhere: import-harbor (a third-party dataset), generate (task directories an
earlier run left) and the Terminal-Bench loader."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import pytest

from termforge import cli
from termforge.containment import (check_task_id, contained, copy_regular_tree, is_task_id, read_regular,
                                   tree_problem)
from termforge.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
TB_MINI = ROOT / "benchmarks" / "tb-mini"


def test_a_task_id_is_one_safe_path_component():
    for ok in ("tf-0123abcdef", "tb-mini--fix-median", "A.b_c-1", "x" * 200):
        assert is_task_id(ok), ok
    for bad in ("", ".", "..", "../x", "a/b", "/etc", "x\n", "x\ny", "-rf", ".hidden", "_x", "x" * 201, "a\0b",
                "ü", 7, None, ["a"]):
        assert not is_task_id(bad), bad
    with pytest.raises(InputError) as exc:
        check_task_id("../../x\nmore", "manifest.json")
    assert str(exc.value) == ("manifest.json: task id '../../x\\nmore' is not a single safe path component (a task "
                              "id must be one safe path component: letters, digits, '.', '_' and '-', starting with "
                              "a letter or digit, at most 200 characters)")


def test_a_path_built_under_a_base_stays_inside_it(tmp_path):
    base = tmp_path / "images"
    base.mkdir()
    assert contained(base, "tf-a", "image.json") == base / "tf-a" / "image.json"  # need not exist yet
    for parts in (("..", "x"), ("/etc",), ("a", "..", "..", "b")):
        with pytest.raises(InputError, match="would lie outside"):
            contained(base, *parts)
    (tmp_path / "elsewhere").mkdir()
    (base / "tf-out").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InputError, match="is a symlink to .*elsewhere, outside"):
        contained(base, "tf-out", "image.json")
    (base / "real").mkdir()
    (base / "tf-in").symlink_to("real")  # a link that stays inside is fine
    assert contained(base, "tf-in", "x") == base / "tf-in" / "x"


def _task(tmp_path: Path) -> Path:
    d = tmp_path / "tasks" / "tf-a"
    for rel in ("tests/test_final_state.py", "solution/solve.sh", "environment/setup.sh", "task.json"):
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(f"# {rel}\n")
    return d


def test_a_task_tree_holds_regular_files_and_links_to_its_own_files(tmp_path):
    d = _task(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    (d / "tests" / "alias.py").symlink_to("test_final_state.py")
    (d / "tests" / "abs-alias.py").symlink_to(d / "solution" / "solve.sh")
    assert tree_problem(d) is None
    cases = {
        "tests/leak": (lambda p: p.symlink_to(secret), "outside the task directory"),
        "tests/dir": (lambda p: p.symlink_to(tmp_path, target_is_directory=True), "outside the task directory"),
        "tests/subdir": (lambda p: p.symlink_to("../solution", target_is_directory=True), "to a directory"),
        "tests/dangling": (lambda p: p.symlink_to("nowhere"), "dangling symlink"),
        "tests/loop": (lambda p: p.symlink_to("loop"), "symlink loop"),
        "tests/fifo": (lambda p: os.mkfifo(p), "a FIFO"),
    }
    for rel, (plant, words) in cases.items():
        plant(d / rel)
        found = tree_problem(d)
        assert found is not None and found[0] == f"{d}/{rel}" and words in found[1], (rel, found)
        (d / rel).unlink()
    cwd = os.getcwd()
    os.chdir(d / "environment")
    try:
        socket.socket(socket.AF_UNIX).bind("sock")
    finally:
        os.chdir(cwd)
    assert tree_problem(d) == (f"{d}/environment/sock",
                               "is a socket; a task directory holds regular files and directories only")


def test_copies_out_of_a_task_write_regular_files_only(tmp_path):
    d = _task(tmp_path)
    (d / "tests" / "alias.py").symlink_to("test_final_state.py")
    copy_regular_tree(d / "tests", tmp_path / "copy")
    alias = tmp_path / "copy" / "alias.py"
    assert not alias.is_symlink() and alias.read_text() == "# tests/test_final_state.py\n"
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    (d / "tests" / "leak").symlink_to(secret)
    with pytest.raises(InputError, match="leak: is a symlink to .*secret, outside the task directory"):
        copy_regular_tree(d / "tests", tmp_path / "copy2")
    assert not (tmp_path / "copy2").exists()  # checked before anything is copied
    with pytest.raises(InputError, match="outside"):
        read_regular(d / "tests" / "leak", d)
    assert read_regular(d / "tests" / "alias.py", d) == b"# tests/test_final_state.py\n"


def test_an_export_never_holds_a_host_file(tmp_path):
    from termforge.export import write_harbor_task

    d = _task(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("root:x:0:0:host secret")
    (d / "solution" / "solve.sh").unlink()
    (d / "solution" / "solve.sh").symlink_to(secret)
    task = {"id": "tf-a", "instruction": "do it", "family": "f", "mismatch": [], "signature": {"domain": "security"}}
    out = tmp_path / "harbor"
    with pytest.raises(InputError, match="solve.sh: is a symlink"):
        write_harbor_task(task, d, out)
    assert not out.exists() or list(out.iterdir()) == []  # no staging directory left
    with pytest.raises(InputError, match="task id '../x'"):
        write_harbor_task({**task, "id": "../x"}, d, out)


# -- import-harbor: the dataset is untrusted ------------------------------------------------------


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "dataset"
    shutil.copytree(TB_MINI / "fix-median", src / "fix-median")
    return src


def _import(src: Path, out: Path, capsys, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = cli.main(["import-harbor", str(src), "--out-dir", str(out), *extra])
    return rc, capsys.readouterr().err


IMPORT_FAULTS = {
    "the oracle linking to a host file": ("fix-median/solution/solve.sh", "link"),
    "the instruction linking to a host file": ("fix-median/instruction.md", "link"),
    "a test linking to a host file": ("fix-median/tests/test_outputs.py", "link"),
    "a build-context FIFO": ("fix-median/environment/pipe", "fifo"),
    "a task directory linking out of the dataset": ("linked-task", "dirlink"),
}


@pytest.mark.parametrize("fault", sorted(IMPORT_FAULTS))
def test_import_harbor_refuses_a_dataset_reaching_outside(fault, tmp_path, capsys):
    rel, how = IMPORT_FAULTS[fault]
    src = _source(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:host secret\n")
    target = src / rel
    if how == "link":
        target.unlink()
        target.symlink_to(secret)
    elif how == "fifo":
        os.mkfifo(target)
    else:
        shutil.copytree(TB_MINI / "sort-downloads", tmp_path / "outside-task")
        target.symlink_to(tmp_path / "outside-task", target_is_directory=True)
    out = tmp_path / "out"
    rc, err = _import(src, out, capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"termforge: error: import-harbor: {target}: "), err
    assert not out.exists() or not any(out.rglob("*")), sorted(out.rglob("*"))


def test_import_harbor_copies_regular_files_and_checks_names(tmp_path, capsys):
    src = _source(tmp_path)
    (src / "fix-median" / "tests" / "helper.py").symlink_to("test_outputs.py")  # inside the task: fine
    rc, err = _import(src, tmp_path / "out", capsys, "--name", "mini")
    assert rc == 0, err
    task = tmp_path / "out" / "tasks" / "mini--fix-median"
    links = [p for p in task.rglob("*") if p.is_symlink()]
    assert links == [] and (task / "tests" / "helper.py").is_file()
    # A dataset name becomes part of ids and file names: made safe, or refused when nothing is left.
    rc, err = _import(src, tmp_path / "out2", capsys, "--name", "../../x")
    assert rc == 0 and (tmp_path / "out2" / "references" / "x.jsonl").is_file(), err
    assert (tmp_path / "out2" / "tasks" / "x--fix-median").is_dir() and not (tmp_path / "x.jsonl").exists()
    rc, err = _import(src, tmp_path / "out3", capsys, "--name", "..")
    assert rc == 2 and "dataset name '..' cannot name files" in err and not (tmp_path / "out3").exists(), err


def test_the_terminal_bench_loader_lists_a_task_reaching_outside_as_unloadable(tmp_path):
    from termforge.evals.harbor_tasks import load_harbor_dataset

    src = _source(tmp_path)
    shutil.copytree(TB_MINI / "sort-downloads", src / "sort-downloads")
    (src / "sort-downloads" / "tests" / "test_outputs.py").unlink()
    (src / "sort-downloads" / "tests" / "test_outputs.py").symlink_to("/etc/passwd")
    tasks, broken = load_harbor_dataset(src)
    assert [t.path.name for t in tasks] == ["fix-median"]
    assert len(broken) == 1 and "tests/test_outputs.py is a symlink to /etc/passwd, outside" in broken[0].reason


# -- generate keeps the task directories an earlier run left: it checks them first -----------------


def test_generate_refuses_a_kept_task_directory_reaching_outside(tmp_path, capsys):
    overlay = tmp_path / "small.yaml"
    overlay.write_text("corpus: {n_tasks: 2, shard_size: 2}\ngenerate: {workers: 1}\n")
    cfgs = [str(ROOT / "config.yaml"), str(overlay)]
    r = tmp_path / "results"
    argv = ["generate", "--configfile", *cfgs, "--signatures", str(r / "axes/signatures.jsonl"), "--shard", "00000",
            "--tasks-dir", str(r / "tasks"), "--out", str(r / "tasks/manifests/00000.json")]
    assert cli.main(["sample-axes", "--configfile", *cfgs, "--out", str(r / "axes/signatures.jsonl"),
                     "--stats", str(r / "axes/stats.json")]) == 0
    assert cli.main(argv) == 0
    manifest = r / "tasks/manifests/00000.json"
    before = manifest.read_bytes()
    manifest.unlink()
    tid = json.loads(before)["tasks"][0]["id"]
    leak = r / "tasks" / tid / "environment" / "fixtures" / "leak"
    leak.symlink_to("/etc/passwd")
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"termforge: error: generate: {leak}: is a symlink to /etc/passwd, outside"), err
    assert not manifest.exists()
    leak.unlink()
    assert cli.main(argv) == 0 and manifest.read_bytes() == before


def test_a_reference_dataset_linking_out_is_refused(tmp_path):
    """decontam.harbor_dirs names third-party datasets too: their instructions are read from
    inside them only."""
    from termforge.quality.decontam import load_harbor_references

    src = _source(tmp_path)
    assert len(load_harbor_references(src)) == 1
    (src / "fix-median" / "instruction.md").unlink()
    (src / "fix-median" / "instruction.md").symlink_to("/etc/passwd")
    with pytest.raises(InputError, match="instruction.md: resolves to /etc/passwd, outside"):
        load_harbor_references(src)
