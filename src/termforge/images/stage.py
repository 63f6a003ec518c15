"""The build-images stage for one shard: every task's image, in parallel, each with a timeout
and a kept build log. Builds are content-addressed, so an unchanged task is not rebuilt. The base
images the tasks need are built first (once each, into the per-user image cache)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

from termforge.errors import InputError, TermforgeError, show_value
from termforge.io import atomic_write_json, atomic_write_text
from termforge.images.runtimes import get_runtime
from termforge.schemas import read


def task_json(tasks_dir: Path, task_id: str) -> dict:
    """A task's task.json, whose id must be the one the shard manifest gives it: the image is
    kept under that id, so a task.json naming another (or an unsafe) id would write over another
    task's image or outside the images folder."""
    path = tasks_dir / task_id / "task.json"
    task = read("task", path)
    if task["id"] != task_id:
        raise InputError(path, f"its id {show_value(task['id'])} is not the id {show_value(task_id)} the shard "
                               "manifest gives this task directory")
    return task


def run_build_shard(manifest_path: Path, images_dir: Path, out_path: Path, backend: str = "bwrap",
                    timeout: float = 300, workers: int = 1, rootfs: str = "image") -> dict:
    manifest = read("shard_manifest", manifest_path)
    tasks_dir = Path(manifest["tasks_dir"])
    images_dir = Path(images_dir)
    runtime = get_runtime(backend, rootfs=rootfs)
    logs_dir = images_dir / "logs"
    ids = [t["id"] for t in manifest["tasks"]]
    tasks = {task_id: task_json(tasks_dir, task_id) for task_id in ids}
    if hasattr(runtime, "base_request") and rootfs != "host":
        # One build per distinct base before the pool starts, so parallel task builds never wait
        # on each other's base (and its build time shows apart from the tasks').
        requests = {}
        for task_id in ids:
            req = runtime.base_request(tasks[task_id])
            requests.setdefault((req["base"], tuple(req["apt_packages"])), req)
        for req in requests.values():
            try:
                runtime.task_base(req)
            except TermforgeError:
                pass  # each of its tasks' builds reports the failure (remembered, not retried)

    def one(task_id: str) -> dict:
        res = runtime.build(tasks_dir / task_id, images_dir, timeout=timeout)
        atomic_write_text(logs_dir / f"{task_id}.log", res.log or res.reason)
        row = {"task_id": task_id, "ok": res.ok, "reason": res.reason, "cached": res.cached,
               "seconds": round(res.duration_sec, 3), "log": str(logs_dir / f"{task_id}.log")}
        if res.ok and res.image.meta.get("image_digest"):
            row["image"] = res.image.meta
        return row

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        rows = list(tqdm(pool.map(one, ids), total=len(ids), desc=f"build {manifest['shard']}", unit="image"))
    result = {"shard": manifest["shard"], "backend": backend, "rootfs": rootfs, "tasks_dir": str(tasks_dir),
              "builds": [{k: v for k, v in r.items() if k != "seconds"} for r in rows]}
    atomic_write_json(out_path, result)
    ok = sum(r["ok"] for r in rows)
    cached = sum(r["cached"] for r in rows)
    bases = sorted({r["image"]["base"] for r in rows if r.get("image") and r["image"].get("base")})
    print(f"build-images shard {manifest['shard']}: {ok}/{len(rows)} built ({cached} cached), "
          f"{sum(r['seconds'] for r in rows):.1f}s total build time, on "
          f"{', '.join(bases) if bases else ('the host /usr' if rootfs == 'host' else 'no base')}")
    return result
