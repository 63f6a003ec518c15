"""The served policy: one process that starts an OpenAI-compatible server for a model, says where
it listens once healthy, and stops it (and everything it started) when told to.

The workflow's `serve_policy` job runs this with a Snakemake `service` output: the JSON written
here (base_url, model) is what the solve jobs read, and Snakemake sends SIGTERM once the last of
them has finished. Engines:

- `vllm`: `vllm serve <model>` (termforge.models.vllm_serve), the model's vLLM options as flags;
- `transformers`: a small aiohttp server in this process over the project's own ChatModel
  backends (`/health`, `/v1/models`, `/v1/chat/completions`), so the same path runs on a CPU.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from termforge.errors import ConfigError, TermforgeError
from termforge.io import atomic_write_json

ENGINES = ("transformers", "vllm")
# The options of a `backend: vllm` model spec that `vllm serve` takes as flags of the same name.
_VLLM_FLAGS = ("dtype", "tensor_parallel_size", "gpu_memory_utilization", "max_model_len")


def vllm_serve_args(spec: dict[str, Any], extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """`vllm serve` flags for a model spec: its engine options (`engine_kwargs` too) as
    `--key-name value`, a true boolean as a bare flag, then `extra` as given."""
    args: list[str] = []
    opts = {k: spec[k] for k in _VLLM_FLAGS if spec.get(k) is not None}
    opts.update(spec.get("engine_kwargs") or {})
    if spec.get("engine_seed") is not None:
        opts["seed"] = spec["engine_seed"]
    for key, value in opts.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False or value is None:
            continue
        else:
            args += [flag, str(value)]
    return [*args, *extra]


def _completion_reply(model_name: str, completions, created: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{created}",
        "object": "chat.completion",
        "created": created,
        "model": model_name,
        "choices": [
            {"index": i, "message": {"role": "assistant", "content": c.text}, "finish_reason": c.finish_reason}
            for i, c in enumerate(completions)
        ],
        "usage": {
            "prompt_tokens": completions[0].prompt_tokens if completions else 0,
            "completion_tokens": sum(c.completion_tokens for c in completions),
            "total_tokens": (completions[0].prompt_tokens if completions else 0)
            + sum(c.completion_tokens for c in completions),
        },
    }


def make_app(model, served_name: str):
    """An aiohttp application speaking the OpenAI chat protocol for `model` (a ChatModel)."""
    from aiohttp import web

    from termforge.models.base import SamplingParams, check_messages, check_n

    # In-process backends are not safe to call from two threads at once; requests queue here.
    lock = asyncio.Lock()
    counters = {"requests": 0}

    async def health(_request):
        return web.json_response({"status": "ok"})

    async def models(_request):
        return web.json_response({"object": "list", "data": [{"id": served_name, "object": "model"}]})

    async def chat(request):
        try:
            body = await request.json()
            messages = check_messages(body.get("messages"))
            n = check_n(body.get("n", 1))
            sampling = SamplingParams(
                temperature=body.get("temperature", 1.0), top_p=body.get("top_p", 1.0), top_k=body.get("top_k", 0),
                max_new_tokens=body.get("max_tokens") or body.get("max_completion_tokens") or 256,
                seed=body.get("seed"), stop=tuple(body.get("stop") or ()))
        except (ValueError, TermforgeError) as exc:
            return web.json_response({"error": {"message": str(exc), "type": "invalid_request_error"}}, status=400)
        if body.get("model") not in (None, served_name):
            return web.json_response({"error": {"message": f"model {body.get('model')!r} is not served here "
                                                f"(serving {served_name!r})", "type": "invalid_request_error"}},
                                     status=404)
        async with lock:
            completions = await model.achat(messages, n=n, sampling=sampling)
        counters["requests"] += 1
        return web.json_response(_completion_reply(served_name, completions, int(time.time())))

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app["counters"] = counters
    return app


async def _serve_in_process(model, served_name: str, host: str, port: int, on_ready, stop: asyncio.Event) -> int:
    from aiohttp import web

    app = make_app(model, served_name)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    try:
        on_ready(port)
        await stop.wait()
    finally:
        await runner.cleanup()
    return app["counters"]["requests"]


def _stop_event_on_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)


async def _watch_parent(stop: asyncio.Event, parent: int) -> None:
    # A server orphaned by a killed job (its parent gone, no SIGTERM) must not outlive it.
    while not stop.is_set():
        if os.getppid() != parent:
            stop.set()
            return
        await asyncio.sleep(1.0)


def run_policy_server(spec: dict[str, Any], where: str, engine: str, out: Path, host: str = "127.0.0.1",
                      port: int | None = None, vllm_args: tuple[str, ...] = (), health_timeout_s: float = 900.0,
                      log=print) -> int:
    """Serve `spec` (a models.* entry) until SIGTERM/SIGINT; write `out` (base_url, model, engine,
    pid) once it answers. Returns the number of chat requests answered (in-process engine) or 0."""
    from termforge.models.vllm_serve import free_port, serve_vllm

    parent = os.getppid()  # the job's shell or Snakemake; when it is gone, so is the server
    if engine not in ENGINES:
        raise ConfigError(f"serve.engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    served_name = spec["model"]
    connect_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    out = Path(out)
    port = port or free_port(connect_host)
    base_url = f"http://{connect_host}:{port}/v1"

    # Written before the server is up: Snakemake starts a service's consumers as soon as the
    # service runs and gives its output only --latency-wait seconds to appear, far less than a
    # model takes to load. Clients wait for `health_url` themselves (served_model_spec).
    atomic_write_json(out, {"base_url": base_url, "health_url": f"http://{connect_host}:{port}/health",
                            "model": served_name, "engine": engine, "pid": os.getpid(),
                            "host": socket.gethostname(), "health_timeout_s": health_timeout_s})

    def announce(url: str) -> None:
        log(f"serve-policy: {engine} serving {served_name!r} at {url} (pid {os.getpid()}); -> {out}")

    if engine == "vllm":
        if spec.get("backend") != "vllm":
            raise ConfigError(f"{where}.backend: serve.engine vllm serves a `backend: vllm` model, got "
                              f"{spec.get('backend')!r}")
        args = vllm_serve_args(spec, vllm_args)
        stop = {"flag": False}

        def handler(*_):
            stop["flag"] = True

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, handler)
        with serve_vllm(served_name, port=port, args=args, host=host, health_timeout=health_timeout_s) as url:
            announce(url)
            while not stop["flag"] and os.getppid() == parent:
                time.sleep(0.5)
        log("serve-policy: vllm stopped")
        return 0

    from termforge.models.registry import make_model

    model = make_model(dict(spec), where=where)

    async def main() -> int:
        stop = asyncio.Event()
        _stop_event_on_signals(asyncio.get_running_loop(), stop)
        watcher = asyncio.create_task(_watch_parent(stop, parent))
        try:
            return await _serve_in_process(model, served_name, host, port,
                                           lambda p: announce(base_url), stop)
        finally:
            watcher.cancel()

    try:
        answered = asyncio.run(main())
    finally:
        model.close()
    log(f"serve-policy: stopped after {answered} chat requests")
    return answered


def wait_until_healthy(info: dict[str, Any], where: str, poll_s: float = 0.5) -> None:
    """Block until the server of `info` answers /health; fail when it is gone or too slow."""
    from termforge.models.vllm_serve import _healthy

    deadline = time.monotonic() + float(info.get("health_timeout_s") or 900)
    same_host = info.get("host") == socket.gethostname()
    while not _healthy(info["health_url"]):
        if same_host and info.get("pid") and not _pid_alive(int(info["pid"])):
            raise TermforgeError(f"{where}: the policy server (pid {info['pid']}) is gone; see its log "
                                 "(results/logs/serve_policy.log)")
        if time.monotonic() > deadline:
            raise TermforgeError(f"{where}: {info['health_url']} not healthy within {info.get('health_timeout_s')}s")
        time.sleep(poll_s)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def served_model_spec(server_json: str | os.PathLike, concurrency: int, wait: bool = True) -> dict[str, Any]:
    """The `backend: openai` spec a client uses to reach the server described by `server_json`,
    once that server answers."""
    from termforge.schemas import read

    info = read("policy_server", server_json)
    for key in ("base_url", "health_url", "model"):
        if not info[key]:
            raise TermforgeError(f"{server_json}: no {key!r}; not written by `termforge serve-policy`")
    if wait:
        wait_until_healthy(info, str(server_json))
    # Requests queue on the server; a client retrying a slow CPU model must not give up early.
    return {"backend": "openai", "model": info["model"], "base_url": info["base_url"],
            "concurrency": max(1, int(concurrency)), "timeout_s": 3600, "max_retries": 2}
