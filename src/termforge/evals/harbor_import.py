"""`termforge import-harbor`: a folder of Harbor tasks (or a Harbor dataset id, fetched with the
harbor CLI) brought into the canonical task-directory contract (README, "What you get"), as a corpus the
later stages take like a generated shard: decontamination, validation, solving and export.

What a Harbor task becomes:
- task.json: id, a signature (domain from [metadata].category when it is one of ours, skills from
  the tags), the canary-stripped instruction, family `harbor-import`, the environment the bwrap
  runtime builds, and provenance (source directory, Harbor name, content digest).
- environment/: the task's build context, plus setup.sh, written from the interpreted Dockerfile
  (the bwrap builder's plan: its COPY/ADD/WORKDIR/RUN steps, in order).
- tests/: the task's tests; its single pytest file becomes test_final_state.py, run by the
  canonical test.sh through the clean verifier; test_initial_state.py checks that the build put
  in place what the Dockerfile copies.
- solution/solve.sh as it is; private/truth.json is empty (a Harbor task has no answer key apart
  from its tests) and private/method.md says where the task came from.

A task that cannot run here is not written; the import report records why (the same reasons the
native Terminal-Bench runner gives). The dataset's instructions are also written as a JSONL
reference set, so the dataset can be registered for decontamination (decontam.jsonl).
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from termforge.containment import (TASK_ID_MAX, check_task_id, check_tree, contained, copy_regular_tree,
                                   is_task_id)
from termforge.errors import TermforgeError, show_value
from termforge.evals.harbor_tasks import (TASK_ROOT, CopyStep, EnvironmentUnsupported, HarborTask, RunStep,
                                          dataset_root, load_harbor_dataset, native_plan)
from termforge.io import (StagedOutputs, atomic_write_json, atomic_write_text, clean_stale_staging, publish_dir,
                          stable_hash, staging_dir)
from termforge.runtime.bwrap import tree_digest

FAMILY = "harbor-import"
DOMAINS = ("security", "software_engineering", "file_operations", "data_querying", "data_science", "debugging",
           "scientific_computing", "data_processing", "system_administration")
# Image variables that change nothing a task's programs see (the canonical runtime drops ENV).
HARMLESS_ENV = {"DEBIAN_FRONTEND", "LANG", "LC_ALL", "TZ", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
                "PIP_NO_CACHE_DIR", "PIP_DISABLE_PIP_VERSION_CHECK"}
TESTS_PY = re.compile(r"/tests/([A-Za-z0-9_.-]+\.py)\b")


def task_id_for(dataset: str, task: HarborTask) -> str:
    """A safe task id (termforge.containment) from the dataset's and the task's names; a name too
    long for one is cut and keeps a digest of the whole, so two long names stay apart."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{dataset}--{task.slug}").strip("._-")
    if len(slug) > TASK_ID_MAX:
        slug = f"{slug[:TASK_ID_MAX - 17].rstrip('._-')}-{stable_hash(slug, 16)}"
    return slug


def dataset_name(name: str) -> str:
    """The dataset's name as it goes into task ids and file names: one safe path component."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("._-")
    if not is_task_id(clean) or len(clean) > 64:
        raise TermforgeError(f"import-harbor: dataset name {show_value(name)} cannot name files (use letters, "
                             "digits, '.', '_' and '-', at most 64 characters; set --name)")
    return clean


def _domain(category: str | None) -> str:
    norm = re.sub(r"[^a-z]+", "_", (category or "").lower()).strip("_")
    return norm if norm in DOMAINS else "imported"


def _final_test(task: HarborTask) -> str:
    """The one pytest file test.sh runs, which becomes test_final_state.py."""
    text = "\n".join(line.split("#", 1)[0] for line in
                     task.test_sh.read_text(encoding="utf-8", errors="replace").splitlines())
    files = sorted(set(TESTS_PY.findall(text))) if re.search(r"\bpytest\b", text) else []
    if len(files) != 1 or not (task.tests_dir / files[0]).is_file():
        raise EnvironmentUnsupported(
            "tests/test.sh does not run exactly one pytest file from /tests, so the canonical verifier "
            f"cannot run it with proof that its tests ran (found {files or 'none'})")
    return files[0]


def _q(text: str) -> str:
    return shlex.quote(text)


def setup_sh(task: HarborTask, plan) -> str:
    """The bwrap build script for the canonical runtime (environment bound at /tmp/env)."""
    env_dir = task.environment_dir.resolve()
    lines = ["#!/bin/bash", f"# Written by termforge import-harbor from {task.name}'s environment/Dockerfile",
             f"# (base {plan.base_image}); the canonical bwrap build runs it with the context at /tmp/env.",
             "set -euo pipefail"]
    for step in plan.steps:
        if isinstance(step, CopyStep):
            dest = step.dest
            if not step.sources:
                lines.append(f"mkdir -p {_q(dest)}")
                continue
            for src in step.sources:
                rel = "/tmp/env/" + src.resolve().relative_to(env_dir).as_posix()
                if step.extract and src.name.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz",
                                                       ".txz")):
                    lines.append(f"mkdir -p {_q(dest)} && tar -xf {_q(rel)} -C {_q(dest)} --no-same-owner")
                    continue
                if src.is_dir():
                    lines.append(f"mkdir -p {_q(dest)} && cp -a {_q(rel)}/. {_q(dest)}/")
                    target = dest
                elif step.dest_is_dir:
                    lines.append(f"mkdir -p {_q(dest)} && cp -a {_q(rel)} {_q(dest)}/")
                    target = posixpath.join(dest, src.name)
                else:
                    lines.append(f"mkdir -p {_q(posixpath.dirname(dest))} && cp -a {_q(rel)} {_q(dest)}")
                    target = dest
                if step.chmod is not None:
                    lines.append(f"chmod -R {step.chmod:o} {_q(target)}")
        elif isinstance(step, RunStep):
            assignments = " ".join(f"{k}={_q(v)}" for k, v in sorted(step.env.items()))
            argv = " ".join(_q(a) for a in step.argv)
            lines.append(f"(cd {_q(step.cwd)} && env {assignments} {argv})".replace("env  ", "env "))
    return "\n".join(lines) + "\n"


def initial_state_test(plan) -> str:
    """Checks that the build left in /app what the Dockerfile puts there."""
    paths = sorted({s.dest for s in plan.steps if isinstance(s, CopyStep) and s.dest.startswith(TASK_ROOT)})
    return ("\"\"\"Written by termforge import-harbor: the build put in place what the Dockerfile copies.\"\"\"\n"
            "import os\n\nimport pytest\n\n\n"
            f"@pytest.mark.parametrize(\"path\", {paths!r})\n"
            "def test_the_build_put_it_in_place(path):\n    assert os.path.exists(path), path\n")


def _canonical_blocker(task: HarborTask, plan) -> str | None:
    if plan.canonical_blocker:
        return f"{plan.canonical_blocker}: the canonical form (setup.sh over /app) cannot carry it"
    if plan.workdir != TASK_ROOT:
        return f"the image's WORKDIR is {plan.workdir}; canonical sessions start in {TASK_ROOT}"
    extra = sorted(set(plan.env) - HARMLESS_ENV)
    if extra:
        return f"the image sets ENV {extra}, which canonical sessions do not carry"
    if task.verifier_env or task.environment_env or task.solution_env:
        return "task.toml env tables ([verifier]/[solution]/[environment].env) are not carried by canonical tasks"
    if task.solve_sh is None:
        return "no solution/solve.sh: validation needs an oracle"
    return None


def _write_task(task: HarborTask, task_id: str, plan, final_test: str, stage: Path, source: str) -> dict:
    """Write one canonical task directory into stage (published with the import's other outputs)."""
    # Regular files only: a task directory never holds a symlink to the host (containment).
    copy_regular_tree(task.environment_dir, stage / "environment")
    (stage / "environment" / "setup.sh").write_text(setup_sh(task, plan))
    copy_regular_tree(task.tests_dir, stage / "tests")
    from termforge.grading.verifier import TEST_SH

    (stage / "tests" / "test_final_state.py").write_text((task.tests_dir / final_test).read_text())
    if final_test != "test_final_state.py":
        (stage / "tests" / final_test).unlink()
    (stage / "tests" / "test_initial_state.py").write_text(initial_state_test(plan))
    (stage / "tests" / "test.sh").write_text(TEST_SH)
    (stage / "tests" / "test.sh").chmod(0o755)
    copy_regular_tree(task.path / "solution", stage / "solution")
    (stage / "private").mkdir()
    atomic_write_json(stage / "private" / "truth.json", {})
    (stage / "private" / "method.md").write_text(
        f"Imported from the Harbor task {task.name} ({source}); its tests are the verifier, its "
        "solution/solve.sh the oracle.\n")
    (stage / "instruction.md").write_text(task.instruction)
    sig = {"id": task_id, "domain": _domain(task.category), "skills": task.tags, "corpus_kind": "imported",
           "task_complexity": {"easy": "short", "medium": "moderate", "hard": "complex"}.get(
               task.difficulty or "", None)}
    record = {
        "id": task_id, "signature": sig, "instruction": task.instruction, "family": FAMILY,
        "environment": {"allow_network": task.allow_internet, "apt_packages": plan.apt_packages,
                        "timeout_sec": task.agent_timeout_sec, "base": plan.base_image},
        "mismatch": [], "output_paths": [],
        "provenance": {"backend": FAMILY, "source": source, "harbor_name": task.name,
                       "harbor_path": str(task.path), "checksum": tree_digest(task.path)},
    }
    atomic_write_json(stage / "task.json", record)
    return record


def fetch_dataset(dataset_id: str, dest: Path, harbor: str = "harbor", timeout: float | None = None) -> Path:
    """A Harbor Hub dataset id (NAME or NAME@VERSION) downloaded with `harbor dataset download`."""
    exe = shutil.which(harbor)
    if exe is None:
        raise TermforgeError(f"import-harbor: {dataset_id!r} is not a local folder, and fetching a Harbor dataset "
                             f"needs the harbor CLI ({harbor!r} is not on PATH; `uv tool install harbor`)")
    dest.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([exe, "dataset", "download", dataset_id, "-o", str(dest)], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=timeout)
    if res.returncode != 0:
        raise TermforgeError(f"import-harbor: `harbor dataset download {dataset_id}` exited {res.returncode}: "
                             f"{(res.stdout + res.stderr).strip()[-400:]}")
    return dest


def source_name(source: str | Path) -> str:
    """The default dataset name of a source: a folder's own name, or a dataset id's NAME[@VERSION]
    last part. Anything else is not a source."""
    src = Path(source)
    if src.is_dir():
        return src.resolve().name
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]*(@[A-Za-z0-9._-]+)?", str(source)) and not str(
            source).startswith((".", "/")):
        return str(source).rsplit("/", 1)[-1]
    raise TermforgeError(f"import-harbor: {source} is not a directory")


def harbor_copy(source: str | Path, dest: Path) -> Path:
    """The Harbor tasks of `source` (a local folder, or a Harbor dataset id NAME[@VERSION] fetched
    with the harbor CLI) as a folder at `dest`, replaced whole; returns dest. The
    copy is what the Terminal-Bench runners read (eval.tbench.tasks_dir) wherever the tasks came
    from, and what the imported tasks' provenance names. The dataset is untrusted input: a symlink
    out of it, or a special file, stops the copy before anything is written (termforge.containment);
    the copy holds regular files only."""
    src = Path(source)
    source_name(source)  # a folder or a dataset id, else an error before anything is written
    if src.is_dir():
        check_tree(src)
        if src.resolve() == dest.resolve():
            return dest
    staging = staging_dir(dest)
    try:
        if src.is_dir() and (src / "task.toml").exists():
            # One task: it keeps its folder's name (a task without [task].name is named after it).
            copy_regular_tree(src, staging / src.resolve().name)
        elif src.is_dir():
            shutil.rmtree(staging)
            copy_regular_tree(src, staging)
        else:
            fetched = staging.parent / (staging.name + ".fetch")
            try:
                fetch_dataset(str(source), fetched)
                shutil.rmtree(staging)
                check_tree(fetched)  # what a registry served is as untrusted as a folder
                # Harbor exports into a dataset-name folder (OUT/NAME/<task>/): the tasks are its.
                copy_regular_tree(dataset_root(fetched), staging)
            finally:
                shutil.rmtree(fetched, ignore_errors=True)
        publish_dir(staging, dest)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return dest


def import_harbor(source: str | Path, out_dir: str | Path, name: str | None = None,
                  harbor_dir: str | Path | None = None) -> dict:
    """Import a Harbor dataset into out_dir: harbor/ (the Harbor tasks as given or fetched; or
    `harbor_dir`), tasks/<id>/ (canonical), manifest.json (a shard manifest),
    references/<name>.jsonl (for decontam.jsonl) and import.json (per task: imported, or why not).

    `source` is a folder of Harbor tasks or a Harbor dataset id NAME[@VERSION]
    (`terminal-bench@2.0`: name terminal-bench-2.0)."""
    out_dir = Path(out_dir)
    # The name first: a name that cannot name files stops the import before anything is written.
    name = dataset_name(name or source_name(source))
    src = harbor_copy(source, Path(harbor_dir) if harbor_dir else contained(out_dir, "harbor"))
    tasks, broken = load_harbor_dataset(src)
    tasks_dir = contained(out_dir, "tasks")
    tasks_dir.mkdir(parents=True, exist_ok=True)
    clean_stale_staging(tasks_dir)
    with StagedOutputs() as staged:  # every task and file of the import, published together
        report, entries, refs = [], [], []
        for task in tasks:
            task_id = check_task_id(task_id_for(name, task), task.path)
            refs.append({"id": f"{name}/{task.name}", "text": task.instruction})
            row = {"id": task_id, "harbor_name": task.name, "path": str(task.path), "native": None, "imported": False,
                   "reason": None}
            try:
                plan = native_plan(task)
            except EnvironmentUnsupported as exc:
                row["native"] = row["reason"] = str(exc)
                report.append(row)
                continue
            try:
                if task.steps:
                    raise EnvironmentUnsupported("a multi-step task has no canonical form (one instruction, one "
                                                 "verifier); the Terminal-Bench runners run it")
                final_test = _final_test(task)
            except EnvironmentUnsupported as exc:
                row["reason"] = str(exc)
                report.append(row)
                continue
            row["reason"] = _canonical_blocker(task, plan)
            if row["reason"] is None:
                record = _write_task(task, task_id, plan, final_test, staged.dir(contained(tasks_dir, task_id)),
                                     str(src))
                entries.append({"id": task_id, "family": FAMILY, "domain": record["signature"]["domain"],
                                "mismatch": []})
                row["imported"] = True
            report.append(row)
        for b in broken:
            refs_row = {"id": b.name, "harbor_name": b.name, "path": str(b.path), "native": b.reason, "imported": False,
                        "reason": b.reason}
            report.append(refs_row)
        manifest = {"shard": f"harbor-{name}", "tasks_dir": str(tasks_dir), "backend": FAMILY, "tasks": entries}
        atomic_write_json(staged.file(contained(out_dir, "manifest.json")), manifest)
        # Named after the dataset: decontamination names a reference set by its file's stem.
        ref_path = contained(out_dir, "references", f"{name}.jsonl")
        atomic_write_text(staged.file(ref_path), "".join(json.dumps(r, sort_keys=True) + "\n" for r in refs))
        summary = {"dataset": name, "source": str(source), "harbor_dir": str(src),
                   "n_tasks": len(tasks) + len(broken), "n_imported": len(entries), "n_unloadable": len(broken),
                   "manifest": str(out_dir / "manifest.json"), "references": str(ref_path),
                   "decontam_reference": {"path": str(ref_path), "column": "text"},
                   "digest": stable_hash(refs, 16), "tasks": sorted(report, key=lambda r: r["id"])}
        atomic_write_json(staged.file(contained(out_dir, "import.json")), summary)
        staged.publish()
    return summary


__all__ = ["import_harbor", "harbor_copy", "fetch_dataset", "setup_sh", "task_id_for", "FAMILY"]
