"""The solve stage: k rollouts per kept task through the vanillux harness, each graded by the
clean verifier after the agent stopped and checkpointed as it finishes.

Rollouts of different tasks run concurrently (threads) so the model endpoint stays busy, and a
slow rollout never holds the others back. An infrastructure failure (sandbox start, a model
endpoint still failing after its retries) is recorded as such and retried up to a limit: never
counted as reward 0, never silently dropped.
"""

from __future__ import annotations

import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tqdm import tqdm

from termforge.errors import TermforgeError
from termforge.harness import SUBMIT_MARKER, HarnessConfig, run_episode
from termforge.io import append_jsonl, atomic_write_json, read_jsonl_tolerant, seed_from
from termforge.models.base import ChatModel, Completion, Messages, SamplingParams
from termforge.images.runtimes import get_runtime
from termforge.runtime.base import Limits, task_image
from termforge.grading.verifier import run_verifier

VERIFIER_PATHS = ("/logs/verifier", "reward.txt", "reward.json", "/tests/", "test_final_state", "/verifier/")


class OracleReplayModel(ChatModel):
    """An 'agent' that replays the task's solution/solve.sh through the harness, then submits.
    With it, pass@k must be 1 on every kept task: harness, sandbox and grading are correct."""

    backend = "oracle"
    batched = False

    def __init__(self, tasks_dir: Path):
        super().__init__("oracle-replay")
        self.tasks_dir = Path(tasks_dir)

    def chat_many(self, conversations: Sequence[Messages], n: int = 1,
                  sampling: SamplingParams | None = None) -> list[list[Completion]]:
        out = []
        for messages in conversations:
            turn = sum(1 for m in messages if m["role"] == "assistant")
            if turn == 0:
                script = self._script_for(messages)
                text = f"Running the reference solution.\n```bash\nbash <<'TF_ORACLE_EOF'\n{script}\nTF_ORACLE_EOF\n```"
            else:
                text = f"```bash\necho {SUBMIT_MARKER}\n```"
            out.append([Completion(text, 0, 0, "stop")] * n)
        return out

    def _script_for(self, messages: Messages) -> str:
        instruction = messages[1]["content"]
        for task_dir in self._index():
            if (task_dir / "instruction.md").read_text() == instruction:
                return (task_dir / "solution" / "solve.sh").read_text()
        raise TermforgeError("oracle agent: no task in the corpus has this instruction")

    def _index(self) -> list[Path]:
        return sorted(p for p in self.tasks_dir.iterdir() if (p / "instruction.md").exists())


@dataclass
class SolveSettings:
    k: int = 2
    concurrency: int = 2
    max_infra_retries: int = 2
    seed: int = 0
    harness: HarnessConfig = None  # type: ignore[assignment]
    limits: Limits = None  # type: ignore[assignment]
    backend: str = "bwrap"


def suspicious_flags(commands: list[str], oracle_script: str) -> list[str]:
    """Commands that look like reward hacking (informational only: `hacked` comes from the
    grader's integrity findings, evidence an obfuscated command cannot hide)."""
    flags = []
    joined = "\n".join(commands)
    for path in VERIFIER_PATHS:
        if path in joined:
            flags.append(f"touched verifier path {path!r}")
    oracle_lines = {ln.strip() for ln in oracle_script.splitlines()
                    if len(ln.strip()) >= 24 and not ln.strip().startswith(("#", "set -"))}
    copied = [ln for ln in oracle_lines if ln in joined]
    if copied:
        flags.append(f"ran {len(copied)} literal oracle command line(s)")
    return flags


def rollout_once(model: ChatModel, runtime, images_dir: Path, task_dir: Path, rollout: int,
                 settings: SolveSettings, model_lock: threading.Lock | None,
                 expected: list[str] | None = None) -> dict:
    """One rollout: fresh sandbox, the harness episode, the agent stops, the clean verifier grades."""
    task_id = task_dir.name
    instruction = (task_dir / "instruction.md").read_text()
    image = task_image(runtime, images_dir, task_dir)
    sampling = settings.harness.sampling.replace(seed=seed_from(settings.seed, task_id, rollout) % (2**31))
    locked = _Locked(model, model_lock) if model_lock else model
    start = time.monotonic()
    with runtime.start(image, settings.limits) as session:
        shell = session.open_shell()
        try:
            episode = run_episode(locked, shell, instruction, settings.harness, sampling)
        finally:
            shell.close()  # the agent's processes end with its sandbox, before grading
        # Whatever the agent left (a FIFO, a symlink, a full disk, a read-only reward dir) is graded
        # 0 with a reason here: run_verifier raises only when the infrastructure itself fails.
        verdict = run_verifier(session, task_dir, timeout=settings.limits.wall_sec, expected=expected)
    oracle = (task_dir / "solution" / "solve.sh").read_text()
    return {
        "task_id": task_id, "rollout": rollout, "status": "graded", "reward": verdict.reward,
        "verifier": {"reason": verdict.reason, "tests_ran": verdict.tests_ran, "passed": verdict.passed,
                     "collected": verdict.collected, "graded_by": verdict.graded_by,
                     "limit_hit": verdict.limit_hit},
        "end_reason": episode.end_reason, "turns": len(episode.turns),
        "format_errors": sum(t.format_error for t in episode.turns),
        "prompt_tokens": episode.prompt_tokens, "completion_tokens": episode.completion_tokens,
        "model_seconds": round(episode.model_seconds, 3), "exec_seconds": round(episode.exec_seconds, 3),
        "wall_seconds": round(time.monotonic() - start, 3),
        "hacked": list(verdict.findings),
        # What the agent's own commands ran into (a 0 needs no more; recorded, as a grade's is).
        "agent_limit_hits": [t.limit_hit for t in episode.turns if t.limit_hit],
        "suspicious": suspicious_flags(episode.commands, oracle),
        "episode": episode.to_dict(),
    }


class _Locked(ChatModel):
    """Serialises calls into an in-process model that is not safe to call from several threads."""

    def __init__(self, inner: ChatModel, lock: threading.Lock):
        super().__init__(inner.model_name)
        self.inner, self.lock, self.backend = inner, lock, inner.backend

    def chat_many(self, conversations, n=1, sampling=None):
        with self.lock:
            return self.inner.chat_many(conversations, n=n, sampling=sampling)


def run_solve_shard(shard_manifest: Path, corpus_manifest: Path, images_dir: Path, out_path: Path,
                    trajectories_dir: Path, model: ChatModel, settings: SolveSettings) -> dict:
    from termforge.schemas import read

    shard = read("shard_manifest", shard_manifest)
    # The kept tasks of this shard are checked through the shard manifest; checking every kept
    # task of the corpus again in each shard's job would cost a stat storm on a cluster filesystem.
    corpus = read("corpus_manifest", corpus_manifest, check_refs=False)
    kept = set(corpus["kept"])
    collected = corpus.get("collected", {})
    tasks_dir = Path(shard["tasks_dir"])
    task_ids = [t["id"] for t in shard["tasks"] if t["id"] in kept]
    checkpoint = Path(str(out_path) + ".partial.jsonl")
    finished = {(r["task_id"], r["rollout"]): r for r in read_jsonl_tolerant(checkpoint)}
    todo = [(t, r) for t in task_ids for r in range(settings.k) if (t, r) not in finished]
    runtime = get_runtime(settings.backend)
    lock = threading.Lock() if getattr(model, "backend", "") in ("transformers", "vllm") else None
    infra_failures = 0

    def one(task_id: str, rollout: int) -> dict:
        nonlocal infra_failures
        attempts = []
        for attempt in range(settings.max_infra_retries + 1):
            try:
                row = rollout_once(model, runtime, images_dir, tasks_dir / task_id, rollout, settings, lock,
                                   expected=collected.get(task_id))
                row["infra_attempts"] = attempts
                break
            except Exception as exc:  # noqa: BLE001 - every failure is recorded, never swallowed
                infra_failures += 1
                attempts.append({"attempt": attempt, "error": f"{type(exc).__name__}: {exc}"[:500],
                                 "trace": traceback.format_exc(limit=3)[-1500:]})
        else:
            row = {"task_id": task_id, "rollout": rollout, "status": "infra_failed", "reward": None,
                   "infra_attempts": attempts}
        episode = row.pop("episode", None)
        if episode is not None:
            traj = Path(trajectories_dir) / task_id / f"rollout-{rollout}.json"
            atomic_write_json(traj, {"task_id": task_id, "rollout": rollout, **episode})
            row["trajectory"] = str(traj)
        append_jsonl(checkpoint, row)
        return row

    with ThreadPoolExecutor(max_workers=max(1, settings.concurrency)) as pool:
        futures = [pool.submit(one, t, r) for t, r in todo]
        for fut in tqdm(as_completed(futures), total=len(futures), desc=f"solve {shard['shard']}", unit="rollout"):
            row = fut.result()
            finished[(row["task_id"], row["rollout"])] = row
    rows = [finished[(t, r)] for t in task_ids for r in range(settings.k)]
    result = {"shard": shard["shard"], "tasks_dir": str(tasks_dir), "k": settings.k, "model": model.model_id,
              "rollouts": rows, "model_stats": _safe_stats(model)}
    atomic_write_json(out_path, result)
    checkpoint.unlink(missing_ok=True)
    graded = [r for r in rows if r["status"] == "graded"]
    solved = sum(1 for r in graded if r["reward"] == 1.0 and not r.get("hacked"))
    print(f"solve shard {shard['shard']}: {len(rows)} rollouts over {len(task_ids)} tasks, {solved} solved, "
          f"{len(rows) - len(graded)} infra failures, {infra_failures} infra retries this run, "
          f"{len(rows) - len(todo)} resumed from checkpoint")
    return result


def _safe_stats(model: ChatModel) -> dict:
    try:
        return model.stats()
    except Exception:  # noqa: BLE001 - stats are informational
        return {}
