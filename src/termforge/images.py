"""The build-images stage for one shard: every task's image, in parallel, each with a timeout
and a kept build log. Builds are content-addressed, so an unchanged task is not rebuilt."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

from termforge.io import atomic_write_json, atomic_write_text
from termforge.runtime.base import get_runtime


def run_build_shard(manifest_path: Path, images_dir: Path, out_path: Path, backend: str = "bwrap",
                    timeout: float = 300, workers: int = 1) -> dict:
    from termforge.schemas import read

    manifest = read("shard_manifest", manifest_path)
    tasks_dir = Path(manifest["tasks_dir"])
    images_dir = Path(images_dir)
    runtime = get_runtime(backend)
    logs_dir = images_dir / "logs"

    def one(task_id: str) -> dict:
        res = runtime.build(tasks_dir / task_id, images_dir, timeout=timeout)
        atomic_write_text(logs_dir / f"{task_id}.log", res.log or res.reason)
        return {"task_id": task_id, "ok": res.ok, "reason": res.reason, "cached": res.cached,
                "seconds": round(res.duration_sec, 3), "log": str(logs_dir / f"{task_id}.log")}

    ids = [t["id"] for t in manifest["tasks"]]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        rows = list(tqdm(pool.map(one, ids), total=len(ids), desc=f"build {manifest['shard']}", unit="image"))
    result = {"shard": manifest["shard"], "backend": backend, "tasks_dir": str(tasks_dir),
              "builds": [{k: v for k, v in r.items() if k != "seconds"} for r in rows]}
    atomic_write_json(out_path, result)
    ok = sum(r["ok"] for r in rows)
    cached = sum(r["cached"] for r in rows)
    print(f"build-images shard {manifest['shard']}: {ok}/{len(rows)} built ({cached} cached), "
          f"{sum(r['seconds'] for r in rows):.1f}s total build time")
    return result
