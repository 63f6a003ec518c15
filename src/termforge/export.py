"""Exports: a Hugging Face dataset (policy-facing columns only), a separate private table
(truth, tests, oracle), and Harbor-format task directories that `harbor run -p <dir>` can run.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from termforge.containment import check_task_id, contained, copy_regular_tree, read_regular
from termforge.errors import TermforgeError
from termforge.io import StagedOutputs, atomic_write_json, canonical_json, clean_stale_staging
from termforge.schemas import kept_task_dirs, read

AXIS_COLUMNS = ("corpus_kind", "domain", "skill_type", "skills", "persona", "language", "anchor",
                "task_complexity", "command_complexity", "verifier_kind", "fixture_kind")
DIFFICULTY = {"short": "easy", "moderate": "medium", "complex": "hard", "intricate": "hard"}


def load_tasks(manifests: list[Path], kind: str = "task") -> list[tuple[dict, Path]]:
    """(task.json, task_dir) for every task listed in the shard manifests, in manifest order."""
    out = []
    for m in manifests:
        manifest = read("shard_manifest", m)
        tasks_dir = Path(manifest["tasks_dir"])
        for entry in manifest["tasks"]:
            task_dir = tasks_dir / entry["id"]
            out.append((read(kind, task_dir / "task.json"), task_dir))
    return out


def task_axes(task: dict) -> dict:
    """What the task IS on every axis column: the values the family really produced (task.json
    "actual"), the signature's where the task records none (persona, corpus kind)."""
    return {**task["signature"], **(task.get("actual") or {})}


# What an export records of the image each task was validated on (the corpus manifest's
# `images`, from validation): None where it is not known (an export of unvalidated tasks).
IMAGE_COLUMNS = ("image_digest", "base_image", "base_digest", "base_lock_digest", "rootfs")


def image_columns(image: dict | None) -> dict:
    image = image or {}
    names = image.get("base_names") or []
    return {"image_digest": image.get("image_digest"), "base_image": names[0] if names else image.get("base"),
            "base_digest": image.get("base_digest"), "base_lock_digest": image.get("base_lock_digest"),
            "rootfs": image.get("rootfs")}


def policy_row(task: dict, demos: dict[str, str] | None = None, image: dict | None = None) -> dict:
    sig, axes = task["signature"], task_axes(task)
    row = {"task_id": task["id"], "instruction": task["instruction"], "family": task["family"]}
    for col in AXIS_COLUMNS:
        row[col] = axes.get(col)
    # The sampled values stay beside them, so a user can see what was asked and what was honoured.
    for col in AXIS_COLUMNS:
        row[f"requested_{col}"] = sig.get(col)
    row["honoured_all"] = not task["mismatch"]
    row["mismatch"] = canonical_json(task["mismatch"])
    if demos is not None:
        row["demo"] = demos.get(task["id"])
    row.update(image_columns(image))
    return row


def private_row(task_dir: Path) -> dict:
    # Regular files inside the task directory only (termforge.containment): a symlink in a task
    # never brings a host file into the private table.
    def text(*rel: str) -> str:
        return read_regular(task_dir.joinpath(*rel), task_dir).decode("utf-8", errors="replace")

    tests = {p.name: text("tests", p.name) for p in sorted((task_dir / "tests").iterdir())
             if p.is_file() or p.is_symlink()}
    return {
        "task_id": task_dir.name,
        "truth": text("private", "truth.json"),
        "method_note": text("private", "method.md"),
        "tests": canonical_json(tests),
        "oracle": text("solution", "solve.sh"),
    }


def _toml_str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


# Harbor's current task.toml schema (harbor/models/task/config.py TaskConfig.schema_version) and
# the org of exported task names: Harbor's publisher refuses a task.toml without [task].name
# ("org/name", harbor/publisher/publisher.py), so every export carries one.
HARBOR_SCHEMA_VERSION = "1.4"
HARBOR_ORG = "termforge"


def harbor_task_name(task_id: str, org: str = HARBOR_ORG) -> str:
    """`org/name` in Harbor's package-name alphabet (letters, digits, . _ -; no leading dot, no ..)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", task_id).strip(".-") or "task"
    return f"{org}/{re.sub(r'[.]{2,}', '.', name)}"


def harbor_task_toml(task: dict, image: dict | None = None) -> str:
    sig = task_axes(task)
    env = task.get("environment", {})
    keywords = [sig["domain"], task["family"], *sig.get("skills", [])]
    lines = [f'schema_version = "{HARBOR_SCHEMA_VERSION}"', "", "[task]",
             f"name = {_toml_str(harbor_task_name(task['id']))}",
             "description = " + _toml_str(f"termforge task {task['id']} ({task['family']})"),
             'authors = [{ name = "termforge" }]',
             "keywords = [" + ", ".join(_toml_str(s) for s in keywords) + "]",
             "", "[metadata]", 'author_name = "termforge"',
             f"difficulty = {_toml_str(DIFFICULTY.get(sig.get('task_complexity'), 'medium'))}",
             f"category = {_toml_str(sig['domain'])}",
             "tags = [" + ", ".join(_toml_str(s) for s in keywords) + "]",
             f"termforge_id = {_toml_str(task['id'])}", f"family = {_toml_str(task['family'])}"]
    for col in AXIS_COLUMNS:
        value = sig.get(col)
        if isinstance(value, list):
            lines.append(f"{col} = [" + ", ".join(_toml_str(v) for v in value) + "]")
        elif value is not None:
            lines.append(f"{col} = {_toml_str(str(value))}")
    # The environment the task was validated on: environment/Dockerfile starts FROM base_image
    # (`termforge images save` writes it as an OCI archive for docker/podman load).
    for col, value in image_columns(image).items():
        if value is not None:
            lines.append(f"{col} = {_toml_str(str(value))}")
    timeout = float(600 if env.get("timeout_sec") is None else env["timeout_sec"])
    lines += ["", "[verifier]", "timeout_sec = 120.0", "", "[agent]", f"timeout_sec = {timeout}", "",
              "[environment]", "build_timeout_sec = 600.0", "cpus = 1", "memory_mb = 2048", "storage_mb = 10240",
              f"network_mode = {_toml_str('public' if env.get('allow_network') else 'no-network')}", ""]
    return "\n".join(lines)


def _world_readable(root: Path) -> None:
    """Exports are published for others: directories 0755, files at least 0644 (executables keep
    their x bits). The staging directory comes from mkdtemp, which is 0700."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode & 0o7777
        path.chmod(mode | (0o755 if path.is_dir() or mode & 0o100 else 0o644))


def write_harbor_task(task: dict, task_dir: Path, out_dir: Path, staged: StagedOutputs | None = None,
                      image: dict | None = None) -> None:
    """One Harbor task directory: everything except private/ and our own task.json (`image`: the
    corpus manifest's record of the image it was validated on). With staged, it is published with
    the command's other outputs; otherwise at once."""
    final = contained(out_dir, check_task_id(task["id"], task_dir / "task.json"))
    own = staged is None
    staged = staged or StagedOutputs()
    try:
        _write_harbor_task(task, task_dir, staged.dir(final), image)
        if own:
            staged.publish()
    finally:
        if own:
            staged.discard()


def _write_harbor_task(task: dict, task_dir: Path, stage: Path, image: dict | None = None) -> None:
    (stage / "instruction.md").write_text(task["instruction"])
    (stage / "task.toml").write_text(harbor_task_toml(task, image))
    for sub in ("environment", "tests", "solution"):
        copy_regular_tree(task_dir / sub, stage / sub)  # regular files only, never a host file
    (stage / "environment" / "container.def").unlink(missing_ok=True)
    _world_readable(stage)
    # Harbor runs tests/test.sh itself: always the current one, which runs pytest isolated from
    # /app (cd /tests, python3 -I, importlib mode), whatever an older task directory holds.
    from termforge.grading.verifier import TEST_SH

    (stage / "tests" / "test.sh").write_text(TEST_SH)
    (stage / "tests" / "test.sh").chmod(0o755)
    for path in sorted(stage.rglob("*"), reverse=True):
        os.utime(path, (0, 0), follow_symlinks=False)


def write_parquet(rows: list[dict], path: Path) -> None:
    """Write rows through `datasets` (so the file loads as a Hugging Face dataset), atomically."""
    import datasets

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        datasets.Dataset.from_list(rows).to_parquet(str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load_kept_tasks(corpus_manifest: Path, kind: str = "task") -> list[tuple[dict, Path]]:
    """(task.json, task_dir) for the tasks validation kept, in the manifest's order."""
    corpus = read("corpus_manifest", corpus_manifest)
    return [(read(kind, d / "task.json"), d) for _, d in kept_task_dirs(Path(corpus_manifest), corpus)]


def run_export(manifests: list[Path], out_dir: Path, demos_path: Path | None = None,
               corpus_manifest: Path | None = None, require_demo: bool = False,
               oci_images_dir: Path | None = None) -> dict:
    """Export the kept tasks of the corpus manifest (or every task of the shard manifests); with
    `oci_images_dir` (the built images), also every task's image as an OCI layout and archive
    (out_dir/oci, out_dir/oci.tar) in which the base images are stored once.

    Every output is staged and published together at the end: a failure part way (a task
    directory holding what no task may, a full disk) leaves the previous export as it was."""
    out_dir = Path(out_dir)
    tasks = (load_kept_tasks(corpus_manifest, "full_task") if corpus_manifest
             else load_tasks(manifests, "full_task"))
    images = read("corpus_manifest", corpus_manifest).get("images", {}) if corpus_manifest else {}
    if not tasks:
        raise TermforgeError("export: the manifests list no tasks")
    demos = None
    if demos_path is not None:
        table = read("demos", demos_path).to_pylist()
        demos = {r["task_id"]: r["demo"] for r in table}
    if require_demo:
        if demos is None:
            raise TermforgeError("export.require_demo: needs the hints stage's demos.parquet")
        tasks = [(t, d) for t, d in tasks if demos.get(t["id"])]
    dataset = contained(out_dir, "dataset", "train.parquet")
    private = contained(out_dir, "private", "private.parquet")
    harbor = contained(out_dir, "harbor")
    with StagedOutputs() as staged:
        clean_stale_staging(harbor)  # a failed export's staging directories
        write_parquet([policy_row(t, demos, images.get(t["id"])) for t, _ in tasks], staged.file(dataset))
        write_parquet([private_row(d) for _, d in tasks], staged.file(private))
        for task, task_dir in tasks:
            write_harbor_task(task, task_dir, harbor, staged, images.get(task["id"]))
        summary = {"tasks": len(tasks), "dataset": str(dataset), "private": str(private), "harbor_dir": str(harbor),
                   "images": {t["id"]: images[t["id"]]["image_digest"] for t, _ in tasks if t["id"] in images},
                   "with_demo": sum(1 for t, _ in tasks if demos and demos.get(t["id"]))}
        if oci_images_dir is not None:
            from termforge.images.oci import export_task_images

            layout, archive = contained(out_dir, "oci"), contained(out_dir, "oci.tar")
            oci = export_task_images([(t["id"], contained(oci_images_dir, t["id"])) for t, _ in tasks],
                                     staged.dir(layout), archive=staged.file(archive))
            summary["oci"] = {"layout": str(layout), "archive": str(archive),
                              "images": {k: v["name"] for k, v in oci["images"].items()}}
        atomic_write_json(staged.file(contained(out_dir, "export.json")), summary)
        staged.publish()
    print(f"export: {len(tasks)} tasks -> dataset, private table and Harbor task dirs"
          f"{' and OCI images' if oci_images_dir is not None else ''} in {out_dir}")
    return summary


def push_to_hub(export_dir: Path, repo_id: str | None, token_env: str, private: bool = True) -> dict:
    """Upload the policy-facing dataset only; without a repo id and token, list what would be sent."""
    files = sorted(str(p.relative_to(export_dir)) for p in (Path(export_dir) / "dataset").rglob("*") if p.is_file())
    token = os.environ.get(token_env)
    if not repo_id or not token:
        why = "no export.hf_repo_id configured" if not repo_id else f"${token_env} is not set"
        print(f"push_to_hub dry run ({why}); would upload to {repo_id or '<repo id>'}: {', '.join(files)}")
        return {"dry_run": True, "reason": why, "files": files}
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    api.upload_folder(folder_path=str(Path(export_dir) / "dataset"), repo_id=repo_id, repo_type="dataset",
                      path_in_repo="data")
    return {"dry_run": False, "repo_id": repo_id, "files": files}
