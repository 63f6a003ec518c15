"""Run an exported termforge verifiers environment in the venv it was installed into (a fresh venv
with the verifiers release it declares): tests/test_export_verifiers.py starts this script there.

    python verifiers_rollout.py PACKAGE SPEC.json OUT.json

SPEC: {"load": {load_environment kwargs}, "scripts": {task_id: [reply, reply, ...]}} where the
scripted OpenAI-protocol server (tests/fake_openai_server.py) answers each task's turns with its
replies in order (the last one repeats). OUT: the loaded tasks (ids, rows as the policy sees them)
and, per scripted task, the verifiers trace's rewards, metrics, messages and termforge info.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_openai_server import FakeOpenAIServer  # noqa: E402


def main() -> None:
    package, spec_path, out_path = sys.argv[1:4]
    spec = json.loads(Path(spec_path).read_text())
    import verifiers.v1 as vf

    module = importlib.import_module(package)
    env = module.load_environment(**spec.get("load", {}))
    tasks = list(env.taskset)
    out: dict = {"tasks": [t.data.task_id for t in tasks],
                 "dumps": [t.data.model_dump_json() for t in tasks],
                 "harness": type(env._default_harness).__name__, "rollouts": {}}
    scripts: dict = spec.get("scripts", {})

    def reply(messages: list[dict]) -> str:
        instruction = next(m["content"] for m in messages if m["role"] == "user")
        task_id = next(t.data.task_id for t in tasks if t.data.prompt == instruction)
        turn = sum(1 for m in messages if m["role"] == "assistant")
        replies = scripts[task_id]
        return replies[min(turn, len(replies) - 1)]

    async def run(server: FakeOpenAIServer) -> None:
        ctx = vf.ModelContext(model="fake", client=vf.EvalClientConfig(base_url=server.base_url,
                                                                        api_key_var="TF_FAKE_KEY"))
        async with env.serving():
            for task in tasks:
                if task.data.task_id not in scripts:
                    continue
                episode = await env.run_episode(task, ctx)
                trace = episode.traces[0]
                messages = [{"role": m.role, "content": m.content if isinstance(m.content, str) else str(m.content)}
                            for m in (trace.branches[-1].messages if trace.branches else [])]
                out["rollouts"][task.data.task_id] = {
                    "ok": trace.ok, "errors": [f"{e.type}: {e.message}" for e in trace.errors],
                    "reward": trace.reward, "rewards": {k: (r.value if r is not None else None)
                                                        for k, r in trace.rewards.items()},
                    "metrics": dict(trace.metrics), "termforge": trace.info.get("termforge"),
                    "messages": messages, "wire": trace.model_dump_json()}

    with FakeOpenAIServer(replies=reply) as server:
        asyncio.run(run(server))
        out["requests"] = server.chat_bodies()
    Path(out_path).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
