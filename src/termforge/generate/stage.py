"""The generate stage for one shard: signatures in, task directories and a shard manifest out."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tqdm import tqdm

from termforge.containment import check_task_dir
from termforge.errors import InputError, TermforgeError
from termforge.generate.procedural import write_task
from termforge.io import atomic_write_json, clean_stale_staging, make_parents, remove_empty
from termforge.quality.decontam import documents_path, task_document_bytes, task_document_from_files, write_task_documents
from termforge.schemas import read


def shard_signatures(signatures_path: Path, shard: int, shard_size: int) -> list[dict]:
    sigs = read("signatures", signatures_path)
    chunk = sigs[shard * shard_size:(shard + 1) * shard_size]
    if not chunk:
        raise InputError(signatures_path, f"has {len(sigs)} signatures, none for shard {shard:05d} "
                                          f"(shard_size {shard_size})")
    return chunk


def check_kept_task_dirs(tasks_dir: Path, sigs: list[dict]) -> None:
    """A task directory an earlier run left is kept as it is, so it is checked first: one that
    is a symlink out of tasks_dir or holds one (or a special file) stops the shard before
    anything is written (termforge.containment)."""
    for sig in sigs:
        if os.path.lexists(tasks_dir / sig["id"]):
            check_task_dir(tasks_dir, sig["id"])


def _one(args: tuple[dict, str, str, str]) -> tuple[str, bool, bytes]:
    """Generate one task; returns its id, whether it was already there, and its text for the
    shard documents file (from memory for a new task: reading it back would cost what
    decontaminate saves)."""
    sig, tasks_dir, backend, base_image = args
    existed = (Path(tasks_dir) / sig["id"] / "task.json").exists()
    if backend != "procedural":
        raise TermforgeError(f"generate.backend: {backend!r} runs through the llm stage, not the procedural one")
    final, files = write_task(sig, Path(tasks_dir), base_image=base_image)
    document = task_document_bytes(final) if files is None else task_document_from_files(files)
    return sig["id"], existed, document


def run_generate_shard(signatures_path: Path, shard: int, shard_size: int, tasks_dir: Path, manifest_path: Path,
                       backend: str = "procedural", base_image: str = "termforge/base:bookworm",
                       workers: int = 1) -> dict:
    """Generate every task of the shard (finished ones are skipped) and write the shard manifest."""
    sigs = shard_signatures(Path(signatures_path), shard, shard_size)  # before anything is written
    tasks_dir = Path(tasks_dir)
    check_kept_task_dirs(tasks_dir, sigs)
    made = make_parents(tasks_dir / sigs[0]["id"])
    try:
        return _generate_shard(sigs, shard, tasks_dir, manifest_path, backend, base_image, workers)
    except BaseException:
        remove_empty(made)  # a failed first run leaves no empty tasks folder (finished tasks stay)
        raise


def _generate_shard(sigs: list[dict], shard: int, tasks_dir: Path, manifest_path: Path, backend: str,
                    base_image: str, workers: int) -> dict:
    removed = clean_stale_staging(tasks_dir, [s["id"] for s in sigs])  # other shards write beside it
    jobs = [(s, str(tasks_dir), backend, base_image) for s in sigs]
    skipped = 0
    desc = f"generate shard {shard:05d}"
    if workers > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(tqdm(pool.map(_one, jobs), total=len(jobs), desc=desc, unit="task"))
    else:
        results = [_one(j) for j in tqdm(jobs, desc=desc, unit="task")]
    skipped = sum(1 for _, existed, _ in results if existed)
    entries = []
    for sig in sigs:
        task = read("full_task", tasks_dir / sig["id"] / "task.json")
        entries.append({"id": sig["id"], "family": task["family"], "domain": sig["domain"],
                        "mismatch": [m["axis"] for m in task["mismatch"]],
                        "fallback": bool((task.get("generation") or {}).get("fallback"))})
    manifest = {"shard": f"{shard:05d}", "tasks_dir": str(tasks_dir), "tasks": entries}
    # The documents file first (after every task directory is published, so that they are all
    # fresh against it), then the manifest: a manifest implies its documents file is complete.
    write_task_documents(documents_path(manifest_path), manifest["tasks_dir"],
                         [(tid, doc) for tid, _, doc in results])
    atomic_write_json(manifest_path, manifest)
    mismatched = sum(1 for e in entries if e["mismatch"])
    fallbacks = sum(1 for e in entries if e["fallback"])
    print(f"generate shard {shard:05d}: {len(entries)} tasks ({len(entries) - skipped} new, {skipped} already done, "
          f"{mismatched} with a recorded axis mismatch, {fallbacks} built after a failed draw (see task.json "
          f"generation), {removed} stale partial dirs removed)")
    return manifest
