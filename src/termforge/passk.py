"""pass@k over the solve stage's rollouts: per task, per axis bucket, difficulty bands, and the
SFT warm-start dataset of successful rollouts.

A hacked rollout (the grader recorded integrity findings: docs/grading.md) is never a success:
it counts as a failed attempt in pass@k, whatever its reward, and never enters the SFT set; nor is
a rollout the rubric review of solve traces rejected (quality/review.py)."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from pathlib import Path

from termforge.io import StagedOutputs, atomic_write_json, atomic_write_text
from termforge.metrics import pass_at_k
from termforge.schemas import read

GROUP_AXES = ("domain", "task_complexity", "verifier_kind")


def difficulty_band(n: int, c: int) -> str:
    if n == 0:
        return "no_graded_rollouts"
    rate = c / n
    if c == 0:
        return "unsolved"
    if rate < 1 / 3:
        return "hard"
    if rate < 2 / 3:
        return "medium"
    return "easy"


def run_passk(solve_paths: list[Path], out_json: Path, out_csv: Path, sft_path: Path | None = None,
              trace_reviews: list[Path] | None = None) -> dict:
    """`trace_reviews` (quality/review.py): a rollout the rubric review judged illegitimate is no
    success, like a hacked one."""
    from termforge.quality.review import rejected_by_review

    rejected = rejected_by_review(trace_reviews or [])
    per_task = []
    sft_rows = []
    infra = 0
    for path in solve_paths:
        shard = read("solve_records", path)
        tasks_dir = Path(shard["tasks_dir"])
        by_task: dict[str, list[dict]] = defaultdict(list)
        for r in shard["rollouts"]:
            by_task[r["task_id"]].append(r)
        for task_id, rows in by_task.items():
            task = read("task", tasks_dir / task_id / "task.json")
            # What the task really is (a family may stand in for a requested axis value).
            sig = {**task["signature"], **task.get("actual", {})}
            graded = [r for r in rows if r["status"] == "graded"]
            infra += len(rows) - len(graded)
            judged_out = {r["rollout"] for r in graded if f"{task_id}#{r['rollout']}" in rejected}
            n, c = len(graded), sum(1 for r in graded if r["reward"] == 1.0 and not r.get("hacked")
                                    and r["rollout"] not in judged_out)
            entry = {"task_id": task_id, "family": task.get("family"), **{a: sig.get(a) for a in GROUP_AXES}, "n": n, "c": c,
                     "infra_failed": len(rows) - len(graded), "band": difficulty_band(n, c), "zero_pass": c == 0,
                     "hacked_rollouts": sum(1 for r in graded if r.get("hacked")),
                     "review_rejected_rollouts": len(judged_out),
                     "pass_at_k": {str(k): round(pass_at_k(n, c, k), 6) for k in range(1, n + 1)}}
            per_task.append(entry)
            if sft_path is not None:
                for r in graded:
                    if r["reward"] == 1.0 and not r.get("hacked") and r.get("trajectory") and \
                            r["rollout"] not in judged_out:
                        traj = read("trajectory", r["trajectory"])
                        sft_rows.append({"task_id": task_id, "rollout": r["rollout"], "domain": sig["domain"],
                                         "reward": r["reward"], "hacked": bool(r.get("hacked")),
                                         "messages": traj["messages"]})
    per_task.sort(key=lambda e: e["task_id"])
    k_max = min((e["n"] for e in per_task if e["n"]), default=0)
    groups: dict[str, dict] = {}
    for axis in GROUP_AXES:
        buckets: dict[str, list[dict]] = defaultdict(list)
        for e in per_task:
            if e["n"]:
                buckets[str(e[axis])].append(e)
        groups[axis] = {b: {"tasks": len(es), **{f"pass@{k}": round(sum(e["pass_at_k"][str(k)] for e in es) / len(es), 6)
                                                   for k in range(1, k_max + 1)}}
                        for b, es in sorted(buckets.items())}
    graded_tasks = [e for e in per_task if e["n"]]
    overall = {f"pass@{k}": round(sum(e["pass_at_k"][str(k)] for e in graded_tasks) / len(graded_tasks), 6)
               for k in range(1, k_max + 1)} if graded_tasks else {}
    bands = defaultdict(int)
    for e in per_task:
        bands[e["band"]] += 1
    result = {"tasks": len(per_task), "k_max": k_max, "overall": overall,
              "review_rejected_rollouts": sum(e["review_rejected_rollouts"] for e in per_task), "by": groups, "bands": dict(sorted(bands.items())),
              "zero_pass": [e["task_id"] for e in per_task if e["zero_pass"]], "infra_failed_rollouts": infra,
              "per_task": per_task, "sft_rows": len(sft_rows)}
    # Everything is read and computed above; the outputs are published together, so a failure
    # (a bad trajectory, a full disk) never leaves passk.json beside a missing SFT set.
    with StagedOutputs() as staged:
        atomic_write_json(staged.file(out_json), result)
        atomic_write_text(staged.file(out_csv), _csv_text(per_task, k_max))
        if sft_path is not None:
            from termforge.export import write_parquet

            if sft_rows:
                write_parquet(sft_rows, staged.file(sft_path))
            else:
                _write_empty_sft(staged.file(sft_path))
        staged.publish()
    print(f"passk: {len(per_task)} tasks, overall {overall}, bands {dict(bands)}, {infra} infra-failed rollouts, "
          f"{len(sft_rows)} successful rollouts in the SFT set")
    return result


def _csv_text(per_task: list[dict], k_max: int) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["task_id", *GROUP_AXES, "n", "c", "band", "infra_failed", *[f"pass@{k}" for k in range(1, k_max + 1)]])
    for e in per_task:
        w.writerow([e["task_id"], *[e[a] for a in GROUP_AXES], e["n"], e["c"], e["band"], e["infra_failed"],
                    *[e["pass_at_k"].get(str(k), "") for k in range(1, k_max + 1)]])
    return buf.getvalue()


def _write_empty_sft(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("task_id", pa.string()), ("rollout", pa.int64()), ("domain", pa.string()),
                        ("reward", pa.float64()), ("hacked", pa.bool_()),
                        ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])))])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        pq.write_table(schema.empty_table(), tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
