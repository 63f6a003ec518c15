"""Chat-model plumbing against a real local HTTP server speaking the OpenAI protocol.

Nothing here is mocked: the client sends real HTTP to tests/fake_openai_server.py, the cache writes
real files, and serve_vllm starts and kills a real subprocess.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import termforge_lines
from fake_openai_server import FakeOpenAIServer, Scripted, count_words

from termforge.errors import ConfigError, TermforgeError
from termforge.models import CachedChatModel, Completion, ResponseCache, SamplingParams, cache_key
from termforge.models.registry import make_model
from termforge.models.openai_backend import BudgetExceededError, ModelRequestError, OpenAIChatModel
from termforge.models.vllm_serve import serve_vllm

FAKE_SERVER = Path(__file__).with_name("fake_openai_server.py")
PROTOCOLS = ("openai", "anthropic")


def convo(i: int) -> list[dict]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"question number {i}"}]


def fast_client(server: FakeOpenAIServer, protocol: str = "openai", **options):
    spec = {
        "backend": protocol,
        "model": "fake-model",
        "base_url": server.base_url_for(protocol),
        "backoff_base_s": 0.005,
        "backoff_max_s": 0.02,
        "timeout_s": 5.0,
        "jitter_seed": 1,
        **options,
    }
    return make_model(spec)


@pytest.fixture
def server():
    with FakeOpenAIServer() as srv:
        yield srv


# -- the protocols --------------------------------------------------------------------------------


def test_reply_text_tokens_and_request_body(server):
    model = fast_client(server)
    sampling = SamplingParams(temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=33, seed=5, stop=["\n\n"])
    [c] = model.chat(convo(1), sampling=sampling)
    assert c.text == "echo: question number 1"
    assert c.prompt_tokens == count_words("be brief") + count_words("question number 1")
    assert c.completion_tokens == count_words(c.text)
    assert c.finish_reason == "stop" and c.cached is False
    [body] = server.chat_bodies()
    assert body["model"] == "fake-model" and body["messages"] == convo(1)
    assert (
        body["temperature"],
        body["top_p"],
        body["top_k"],
        body["max_tokens"],
        body["seed"],
        body["stop"],
    ) == (0.7, 0.9, 20, 33, 5, ["\n\n"])
    assert "n" not in body  # n=1 is left implicit for proxies that reject the field
    # The official SDK made the request (its own headers), with the placeholder key an endpoint of
    # your own gets: a vendor key in the environment never travels to a base_url you named.
    [request] = server.requests
    assert request["headers"]["x-stainless-lang"] == "python"
    assert request["headers"]["Authorization"] == "Bearer none"


def test_messages_api_request_body_and_reply(server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-must-not-be-sent")
    model = fast_client(server, "anthropic")
    sampling = SamplingParams(temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=33, seed=5, stop=["\n\n"])
    messages = [*convo(1), {"role": "assistant", "content": "which one?"}, {"role": "user", "content": "the first"},
                {"role": "user", "content": "please"}]
    [c] = model.chat(messages, sampling=sampling)
    assert c.text == "echo: the first\nplease" and c.finish_reason == "stop"
    assert c.prompt_tokens == sum(count_words(m["content"]) for m in messages)
    [request] = server.requests
    body, headers = request["body"], request["headers"]
    assert request["path"] == "/v1/messages" and headers["anthropic-version"]
    # A base_url of your own gets no vendor key unless the config names one.
    assert headers["Authorization"] == "Bearer none" and "sk-ant" not in json.dumps(headers)
    assert body["system"] == [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
    # Turns alternate; two user messages in a row are one turn with two blocks, the last one a
    # cache breakpoint (prompt caching of the conversation so far).
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][-1]["content"] == [{"type": "text", "text": "the first"},
                                               {"type": "text", "text": "please",
                                                "cache_control": {"type": "ephemeral"}}]
    assert (body["max_tokens"], body["stop_sequences"]) == (33, ["\n\n"])
    # The Messages API (anthropic SDK 2.x) takes no n, seed or sampling fields; an endpoint that
    # still accepts them gets them through extra_body.
    assert {"n", "seed", "temperature", "top_p", "top_k"}.isdisjoint(body)
    fast_client(server, "anthropic", extra_body={"temperature": 0.5}).chat(convo(2))
    assert server.chat_bodies()[-1]["temperature"] == 0.5


def test_messages_api_prompt_cache_is_read_on_the_next_turn():
    with FakeOpenAIServer(cache_min_tokens=5) as srv:
        model = fast_client(srv, "anthropic")
        long_system = {"role": "system", "content": "you are a careful terminal agent " * 3}
        first = [long_system, {"role": "user", "content": "task: list the files"}]
        [a] = model.chat(first)
        second = [*first, {"role": "assistant", "content": "ls"}, {"role": "user", "content": "a b c"}]
        [b] = model.chat(second)
        stats = model.stats()
        prefix = count_words(long_system["content"]) + count_words("task: list the files")
        # The first request wrote its whole prompt to the cache; the second read that prefix back.
        assert stats["cache_write_tokens"] == prefix + count_words("ls") + count_words("a b c")
        assert stats["cache_read_tokens"] == prefix
        assert stats["prompt_tokens"] == a.prompt_tokens + b.prompt_tokens  # cached tokens are prompt tokens
        off = fast_client(srv, "anthropic", prompt_cache=False)
        off.chat(first)
        assert "cache_control" not in json.dumps(srv.chat_bodies()[-1])
        assert off.stats()["cache_read_tokens"] == 0


def test_n_choices_and_top_up_when_endpoint_ignores_n():
    with FakeOpenAIServer(replies=["a b", "c d e", "f"], max_n=1) as srv:
        out = fast_client(srv).chat(convo(0), n=3, sampling=SamplingParams(seed=9))
        assert [c.text for c in out] == ["a b", "c d e", "f"]
        bodies = srv.chat_bodies()
        # The first request asks for 3, the endpoint answers 1; the client asks again for the rest,
        # with a different seed each time so a seeded request cannot repeat itself.
        assert [b.get("n", 1) for b in bodies] == [3, 2, 1]
        assert len({b["seed"] for b in bodies}) == 3 and bodies[0]["seed"] == 9
    with FakeOpenAIServer(replies=["x y z", "x"]) as srv:
        out = fast_client(srv).chat(convo(0), n=2)
        assert [c.text for c in out] == ["x y z", "x"] and srv.request_count() == 1
        # Usage reports 4 completion tokens for the request: split over the two choices.
        assert sum(c.completion_tokens for c in out) == 4
    with FakeOpenAIServer(replies=["x y z", "x"]) as srv:
        # The Messages API has no n: n completions are n requests.
        out = fast_client(srv, "anthropic").chat(convo(0), n=2)
        assert [c.text for c in out] == ["x y z", "x"] and srv.request_count() == 2
        assert [c.completion_tokens for c in out] == [3, 1]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_chat_many_keeps_input_order(server, protocol):
    model = fast_client(server, protocol, concurrency=4)
    results = model.chat_many([convo(i) for i in range(10)])
    assert [r[0].text for r in results] == [f"echo: question number {i}" for i in range(10)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_async_api_from_a_running_loop(server, protocol):
    model = fast_client(server, protocol)

    async def main():
        one = await model.achat(convo(1))
        many = await model.achat_many([convo(2), convo(3)])
        return one, many

    one, many = asyncio.run(main())
    assert one[0].text.endswith("1") and [m[0].text[-1] for m in many] == ["2", "3"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_finish_reason_length_is_reported(protocol):
    with FakeOpenAIServer(replies=[Scripted("cut off", finish_reason="length")]) as srv:
        [c] = fast_client(srv, protocol).chat(convo(0))
    assert (c.text, c.finish_reason) == ("cut off", "length")


# -- reliability ----------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retries_under_30_percent_faults_complete_with_counts(protocol):
    faults = {"500": 0.1, "429": 0.1, "malformed": 0.05, "hang": 0.05}
    with FakeOpenAIServer(faults=faults, seed=3, hang_s=3.0) as srv:
        model = fast_client(srv, protocol, concurrency=6, max_retries=8, timeout_s=1.0)
        results = model.chat_many([convo(i) for i in range(40)])
        assert [r[0].text for r in results] == [f"echo: question number {i}" for i in range(40)]
        stats = model.stats()
        sent = srv.request_count()
        assert stats["requests"] == sent and sent > 40  # faults really happened and were retried
        assert stats["retries"] == sent - 40
        failures = stats["failures"]
        # Each injected fault was seen by the client as the right kind of failure.
        assert failures["http_5xx"] == srv.injected["500"]
        assert failures["http_429"] == srv.injected["429"]
        assert failures["malformed"] == srv.injected["malformed"]
        assert failures["timeout"] == srv.injected["hang"]
        assert sum(failures.values()) == stats["retries"] and stats["gave_up"] == 0
        assert stats["completions"] == 40


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retries_are_bounded_and_the_error_names_the_failure(protocol):
    with FakeOpenAIServer(faults={"500": 1.0}) as srv:
        model = fast_client(srv, protocol, max_retries=2)
        with pytest.raises(ModelRequestError) as err:
            model.chat(convo(0))
        assert srv.request_count() == 3  # one try plus exactly max_retries retries
        assert "http_5xx" in str(err.value) and "max_retries=2" in str(err.value)
        assert "failed 3 times" in str(err.value) and not err.value.is_configuration
        assert model.stats()["gave_up"] == 1 and model.stats()["failures"]["http_5xx"] == 3


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_client_errors_are_not_retried(protocol):
    with FakeOpenAIServer(require_api_key="k") as srv:
        model = fast_client(srv, protocol, max_retries=5)
        with pytest.raises(ModelRequestError, match="HTTP 401.*not retried") as err:
            model.chat(convo(0))
        assert srv.request_count() == 1 and model.stats()["retries"] == 0
        assert err.value.status == 401 and err.value.is_configuration  # a stage stops on it


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_400_fails_its_prompt_only_and_the_others_are_kept(tmp_path, protocol):
    """Per-prompt failure isolation: a prompt the endpoint rejects (HTTP 400, e.g. over the context
    length) fails alone, unretried; the batch's other replies are stored as they arrive, so a rerun
    pays only for the rejected prompt."""

    def replies(messages):
        if "number 2" in messages[-1]["content"]:
            return Scripted("prompt is too long: 210000 tokens > 200000 maximum", status=400)
        return f"ok {messages[-1]['content']}"

    with FakeOpenAIServer(replies=replies) as srv:
        model = CachedChatModel(fast_client(srv, protocol, max_retries=4, concurrency=1), tmp_path)
        with pytest.raises(ModelRequestError) as err:
            model.chat_many([convo(i) for i in range(5)])
        msg = str(err.value)
        assert "HTTP 400" in msg and "not retried" in msg and "prompt is too long" in msg
        assert err.value.status == 400 and not err.value.is_configuration
        assert srv.request_count() == 5 and model.stats()["retries"] == 0
        assert len(list(tmp_path.rglob("*.json"))) == 4  # the four answered prompts were kept
        again = CachedChatModel(fast_client(srv, protocol), tmp_path)
        results = again.chat_many([convo(i) for i in (0, 1, 3, 4)])
        assert all(r[0].cached for r in results) and srv.request_count() == 5


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_budget_exceeded_is_a_clear_error(server, protocol):
    # One at a time, so no request is still in flight (and cancelled) when the budget error ends the batch.
    model = fast_client(server, protocol, request_budget=5, concurrency=1)
    with pytest.raises(BudgetExceededError) as err:
        model.chat_many([convo(i) for i in range(10)])
    assert "request_budget" in str(err.value) and "5 requests" in str(err.value)
    assert server.request_count() == 5
    assert model.stats()["requests"] == 5


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_budget_counts_retries_and_stops_the_sdk_retry_loop(protocol):
    with FakeOpenAIServer(faults={"500": 1.0}) as srv:
        model = fast_client(srv, protocol, request_budget=3, max_retries=10)
        with pytest.raises(BudgetExceededError, match="2 of them were retries"):
            model.chat(convo(0))
        assert srv.request_count() == 3


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_concurrency_limit_is_respected(protocol):
    with FakeOpenAIServer(latency_s=0.2) as srv:
        model = fast_client(srv, protocol, concurrency=3)
        model.chat_many([convo(i) for i in range(12)])
        assert srv.request_count() == 12
        assert srv.max_in_flight == 3  # reached (requests really overlap) and never exceeded


# -- the response cache ---------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cache_hit_makes_no_request(server, tmp_path, protocol):
    model = make_model(
        {
            "backend": protocol,
            "model": "fake-model",
            "base_url": server.base_url_for(protocol),
            "cache_dir": str(tmp_path / "cache"),
        }
    )
    assert isinstance(model, CachedChatModel)
    sampling = SamplingParams(temperature=0.5, seed=1)
    first = model.chat(convo(1), sampling=sampling)
    assert server.request_count() == 1 and first[0].cached is False
    again = model.chat(convo(1), sampling=sampling)
    assert server.request_count() == 1  # served from disk
    assert again[0].cached is True
    assert (again[0].text, again[0].prompt_tokens, again[0].completion_tokens) == (
        first[0].text,
        first[0].prompt_tokens,
        first[0].completion_tokens,
    )
    # Any change to what determines the reply is a different key: seed, n, messages.
    model.chat(convo(1), sampling=sampling.replace(seed=2))
    model.chat(convo(2), sampling=sampling)
    requests = server.request_count()
    model.chat(convo(1), n=2, sampling=sampling)
    assert server.request_count() > requests
    requests = server.request_count()
    # A batch with some hits sends only the misses.
    results = model.chat_many([convo(1), convo(3), convo(2)], sampling=sampling)
    assert server.request_count() == requests + 1 and [r[0].cached for r in results] == [True, False, True]
    assert model.stats()["cache_hits"] == 3


def test_cache_files_are_sharded_json_with_prompt_and_raw_reply(server, tmp_path):
    cache = ResponseCache(tmp_path)
    model = CachedChatModel(fast_client(server), cache)
    sampling = SamplingParams(seed=4)
    model.chat(convo(7), sampling=sampling)
    key = cache_key(model.identity(), sampling, convo(7), 1)
    path = cache.path(key)
    assert path.relative_to(tmp_path).parts == (key[:2], key[2:4], f"{key}.json")
    record = json.loads(path.read_text())
    assert record["messages"] == convo(7) and record["sampling"]["seed"] == 4
    assert record["completions"][0]["raw"]["message"]["content"] == "echo: question number 7"
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]  # atomic writes left nothing
    # Keys are stable across processes: a key computed elsewhere finds the same file.
    assert key == cache_key({"backend": "openai", "model": "fake-model"}, SamplingParams(seed=4), convo(7), 1)
    # The two protocols never share entries: the backend is part of the key.
    assert key != cache_key({"backend": "anthropic", "model": "fake-model"}, SamplingParams(seed=4), convo(7), 1)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cached_replies_survive_a_failure_later_in_the_batch(server, tmp_path, protocol):
    model = CachedChatModel(fast_client(server, protocol, request_budget=3, concurrency=1), tmp_path)
    with pytest.raises(BudgetExceededError):
        model.chat_many([convo(i) for i in range(5)])
    # The three replies that did arrive were stored; a resume pays only for the rest.
    assert len(list(tmp_path.rglob("*.json"))) == 3
    resumed = CachedChatModel(fast_client(server, protocol), tmp_path)
    results = resumed.chat_many([convo(i) for i in range(5)])
    assert [r[0].cached for r in results].count(True) == 3 and server.request_count() == 5


def test_corrupt_cache_entry_is_a_miss(server, tmp_path):
    model = CachedChatModel(fast_client(server), tmp_path)
    model.chat(convo(1))
    [path] = tmp_path.rglob("*.json")
    path.write_text("{not json")
    [c] = model.chat(convo(1))
    assert c.cached is False and server.request_count() == 2
    assert json.loads(path.read_text())["completions"][0]["text"] == c.text


# -- the API key ----------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_api_key_from_env_is_sent_but_never_stored(tmp_path, monkeypatch, protocol):
    secret = "sk-test-7f3a9c1e5b"
    monkeypatch.setenv("TF_TEST_API_KEY", secret)
    with FakeOpenAIServer(require_api_key=secret) as srv:
        model = make_model(
            {
                "backend": protocol,
                "model": "fake-model",
                "base_url": srv.base_url_for(protocol),
                "api_key_env": "TF_TEST_API_KEY",
                "cache_dir": str(tmp_path),
            }
        )
        model.chat(convo(1))
        # Both SDKs send the key as a bearer token (anthropic 2.x too; the API also takes x-api-key).
        assert srv.requests[0]["headers"]["Authorization"] == f"Bearer {secret}"
        files = list(tmp_path.rglob("*"))
        assert files and not any(secret in p.read_text() for p in files if p.is_file())
        assert secret not in repr(model) and secret not in json.dumps(model.stats())
        assert secret not in json.dumps(model.identity())
        assert not any(secret in str(v) for v in vars(model.inner).values())
        # A wrong key is a clear, non-retried error that does not echo the key.
        monkeypatch.setenv("TF_TEST_API_KEY", "sk-wrong")
        with pytest.raises(ModelRequestError) as err:
            model.chat(convo(2))
        assert "HTTP 401" in str(err.value) and "sk-wrong" not in str(err.value)
        assert srv.request_count() == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_missing_api_key_env_names_the_variable(monkeypatch, protocol):
    monkeypatch.delenv("TF_TEST_NO_SUCH_KEY", raising=False)
    with pytest.raises(
        ConfigError, match="models.solver.api_key_env: environment variable TF_TEST_NO_SUCH_KEY"
    ):
        make_model(
            {
                "backend": protocol,
                "model": "m",
                "base_url": "http://127.0.0.1:9/v1",
                "api_key_env": "TF_TEST_NO_SUCH_KEY",
            },
            where="models.solver",
        )


@pytest.mark.parametrize("protocol, variable, url", [("openai", "OPENAI_API_KEY", "https://api.openai.com/v1"),
                                                     ("anthropic", "ANTHROPIC_API_KEY", "https://api.anthropic.com")])
def test_the_vendor_endpoint_is_the_default_and_needs_the_vendor_key(monkeypatch, protocol, variable, url):
    monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # the SDK's own variable does not redirect us
    with pytest.raises(ConfigError, match=f"models.writer.api_key_env: environment variable {variable} is not set"):
        make_model({"backend": protocol, "model": "m"}, where="models.writer")
    monkeypatch.setenv(variable, "sk-x")
    model = make_model({"backend": protocol, "model": "m"}, where="models.writer")
    assert model.base_url == url and model.api_key_env == variable


# -- the factory and value types ------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, culprit",
    [
        ({"model": "m"}, "model.backend: required"),
        ({"backend": "openai"}, "model.model: required"),
        ({"backend": "gemini", "model": "m"}, "model.backend: unknown backend 'gemini'"),
        ({"backend": "openai", "model": "m", "base_url": "api.example.com/v1"}, "model.base_url: expected an http(s) URL"),
        ({"backend": "anthropic", "model": "m", "base_url": "http://x", "prompt_cache": "yes"},
         "model.prompt_cache: expected true or false"),
        (
            {"backend": "openai", "model": "m", "base_url": "http://x/v1", "concurency": 2},
            "model.concurency: unknown",
        ),
        (
            {"backend": "openai", "model": "m", "base_url": "http://x/v1", "concurrency": 0},
            "model.concurrency:",
        ),
        (
            {"backend": "openai", "model": "m", "base_url": "http://x/v1", "sampling": {"temp": 1}},
            "model.sampling.temp: unknown",
        ),
        (
            {"backend": "openai", "model": "m", "base_url": "http://x/v1", "sampling": {"top_p": 0}},
            "model.sampling.top_p: expected",
        ),
        ({"backend": "transformers", "model": "m", "base_url": "http://x"}, "model.base_url: unknown option"),
        ({"backend": "transformers", "model": "m", "batch_size": 0}, "model.batch_size: expected an integer"),
    ],
)
def test_make_model_errors_name_the_key(spec, culprit):
    with pytest.raises(ConfigError) as err:
        make_model(spec)
    assert culprit in str(err.value)


def test_vllm_backend_without_vllm_says_what_to_do():
    with pytest.raises(TermforgeError) as err:
        make_model({"backend": "vllm", "model": "Qwen/Qwen3-1.7B"})
    msg = str(err.value)
    assert "vllm package, which is not installed" in msg and "backend 'openai'" in msg


def test_spec_sampling_becomes_the_default(server):
    model = make_model(
        {
            "backend": "openai",
            "model": "m",
            "base_url": server.base_url,
            "sampling": {"temperature": 0, "max_new_tokens": 7},
        }
    )
    model.chat(convo(0))
    body = server.chat_bodies()[0]
    assert body["temperature"] == 0 and body["max_tokens"] == 7


def test_sampling_params_roundtrip_and_messages_are_checked(server):
    sp = SamplingParams.from_dict({"temperature": 1.1, "top_k": 20, "stop": ["</s>"], "seed": 3})
    assert sp.stop == ("</s>",) and SamplingParams.from_dict(sp.to_dict()) == sp
    c = Completion("t", 1, 2, "length")
    assert Completion.from_dict(c.to_dict(), cached=True) == Completion("t", 1, 2, "length", cached=True)
    model = fast_client(server)
    with pytest.raises(TermforgeError, match=r"messages\[0\].role"):
        model.chat([{"role": "robot", "content": "hi"}])
    with pytest.raises(TermforgeError, match="n: expected"):
        model.chat(convo(0), n=0)
    assert server.request_count() == 0


# -- serve_vllm lifecycle, with the fake server as the stand-in executable ------------------------

STAND_IN = (sys.executable, str(FAKE_SERVER))


def _port_open(base_url: str) -> bool:
    import urllib.request

    try:
        urllib.request.urlopen(base_url.removesuffix("/v1") + "/health", timeout=1)
        return True
    except OSError:
        return False


def test_serve_vllm_waits_for_health_serves_and_stops(tmp_path):
    log = tmp_path / "serve.log"
    started = time.monotonic()
    with serve_vllm(
        "tiny-model",
        args=["--health-delay", "0.6", "--max-model-len", "512"],
        command=STAND_IN,
        health_timeout=30,
        poll_interval=0.1,
        log_path=log,
    ) as base_url:
        assert time.monotonic() - started >= 0.6  # it really waited for /health to turn 200
        [c] = make_model({"backend": "openai", "model": "tiny-model", "base_url": base_url}).chat(convo(1))
        assert c.text == "echo: question number 1"
    assert not _port_open(base_url)
    assert "serving tiny-model" in log.read_text()


def test_serve_vllm_stops_the_server_when_the_body_raises():
    with pytest.raises(RuntimeError, match="boom"):
        with serve_vllm("m", command=STAND_IN, health_timeout=30, poll_interval=0.1) as base_url:
            raise RuntimeError("boom")
    assert not _port_open(base_url)


def test_serve_vllm_escalates_to_sigkill(tmp_path):
    started = time.monotonic()
    with serve_vllm(
        "m",
        args=["--ignore-sigterm"],
        command=STAND_IN,
        health_timeout=30,
        poll_interval=0.1,
        stop_timeout=0.5,
        log_path=tmp_path / "log",
    ) as base_url:
        assert _port_open(base_url)
    assert not _port_open(base_url)
    assert time.monotonic() - started >= 0.5  # SIGTERM was ignored for stop_timeout, then SIGKILL


def test_serve_vllm_health_timeout_and_early_exit_are_reported(tmp_path):
    with pytest.raises(TermforgeError, match="health_timeout=0.5s"):
        with serve_vllm(
            "m",
            args=["--health-delay", "60"],
            command=STAND_IN,
            health_timeout=0.5,
            poll_interval=0.1,
            log_path=tmp_path / "a.log",
        ):
            pytest.fail("the body must not run when the server never became healthy")
    with pytest.raises(TermforgeError, match="exited with status 3") as err:
        with serve_vllm(
            "m",
            args=["--health-delay", "60", "--exit-after", "0.2"],
            command=STAND_IN,
            health_timeout=30,
            poll_interval=0.1,
            log_path=tmp_path / "b.log",
        ):
            pass
    assert "exiting on purpose" in str(err.value)  # the log tail is part of the message


def test_serve_vllm_missing_executable():
    with pytest.raises(TermforgeError, match="not found on PATH"):
        with serve_vllm("m", command=("definitely-not-vllm-xyz", "serve")):
            pass


def test_fake_server_script_runs_standalone(tmp_path):
    from termforge.models.vllm_serve import free_port, stop_process_group

    port = free_port()
    proc = subprocess.Popen(
        [*STAND_IN, "--port", str(port)], stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 20
        while not _port_open(f"http://127.0.0.1:{port}/v1"):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        [c] = make_model({"backend": "openai", "model": "m", "base_url": f"http://127.0.0.1:{port}/v1"}).chat(
            convo(5)
        )
        assert c.text == "echo: question number 5"
    finally:
        stop_process_group(proc, 5)
    assert proc.returncode == -signal.SIGTERM


# -- what check-config says about the models a run uses ---------------------------------------------


def _check_config(*files: str, env: dict | None = None) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-m", "termforge.cli", "check-config", *files], cwd=root,
                          capture_output=True, text=True, env={**(env or {}), "PATH": "/usr/bin:/bin",
                                                               "PYTHONPATH": str(root / "src")})


def test_check_config_names_an_unset_api_key_variable():
    res = _check_config("config.yaml", "configs/examples/anthropic.yaml")
    assert res.returncode == 0 and "config OK" in res.stdout
    assert ("termforge: warning: models.writer: environment variable ANTHROPIC_API_KEY (its API key) is not set "
            "(used by generate.model, hints.model)") in res.stderr
    res = _check_config("config.yaml", "configs/examples/anthropic.yaml", env={"ANTHROPIC_API_KEY": "sk-x"})
    assert res.returncode == 0 and "warning" not in res.stderr
    # An endpoint of your own needs no key unless the config names one.
    res = _check_config("config.yaml", "configs/examples/openai-compatible.yaml")
    assert res.returncode == 0 and "warning" not in res.stderr


def test_check_config_refuses_a_model_spec_its_backend_would_refuse(tmp_path):
    # An overlay switching the policy to vLLM merges into config.yaml's transformers spec, keeping
    # its `device`: caught when the config is read, not when a GPU job starts.
    overlay = tmp_path / "vllm.yaml"
    overlay.write_text("models:\n  policy:\n    backend: vllm\n")
    res = _check_config("config.yaml", str(overlay))
    assert res.returncode == 2, res.stderr
    assert termforge_lines(res.stderr) == [
        "termforge: error: models.policy.device: unknown option for backend 'vllm' "
        "(accepted: dtype, engine_kwargs, engine_seed, gpu_memory_utilization, lora, "
        "max_model_len, tensor_parallel_size) (used by solve.model, eval.model)"], res.stderr
