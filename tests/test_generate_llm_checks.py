"""What the llm backend refuses to publish, and how one bad prompt stays one failed task.

A scripted author (a real OpenAI-protocol server) answers the way real models often go wrong: a
reply cut at the token limit that still compiles, a block the reply never closes, an answer shipped
as a fixture file, a final test that passes on the untouched environment, a prompt the endpoint
rejects with HTTP 400, a wrong API key. Each case must end in a repaired task or a recorded
failure, never in a published task that accepts a wrong answer.
"""

import functools
import json

import pytest

from conftest import make_signature, needs_bwrap
from fake_openai_server import FakeOpenAIServer, Scripted
from test_generate_llm import (LIMITS, _blocks_of, environment_reply, final_reply, initial_reply, second_reply,
                               task_reply)
from termforge.generate import llm_prompts as P
from termforge.generate.llm import failure_record_path, generate_task_llm, run_generate_shard_llm
from termforge.io import read_json
from termforge.models.cache import CachedChatModel
from termforge.models.openai_backend import ModelRequestError, OpenAIChatModel
from termforge.planning import generation_cost
from termforge.quality.validate import run_validate_shard

PERSONAS = {
    "a terse reviewer": "cut",          # final test: cut at the token limit, then unclosed, then whole
    "a careless clerk": "notes",        # task: ships a hidden rule as a fixture file, then repaired
    "an optimistic intern": "lazy",     # final test: passes untouched, then repaired
    "a careful surveyor": "survey",     # every reply right the first time
    "a long-winded analyst": "huge",    # task prompt rejected with HTTP 400
    "a hasty grader": "loose",          # final test: accepts any census with the right line count
}
HIDDEN_RULE = "ignore the white background and count each rectangle once"

# What a cut test looks like: it compiles, and accepts any non-empty census.
CUT_TEST = """```python test_final_state.py
import os


def test_census_matches():
    got = open("/app/out/census.txt").read()
    assert got
```"""


def _root_of(prompt: str) -> str:
    fixtures = json.loads(_blocks_of(prompt)["fixtures"])
    return fixtures[0]["install_to"].split("/")[2]


def author(messages: list[dict]):
    step = P.step_of(messages)
    prompt = messages[1]["content"]
    if step == "second_solution":
        return second_reply(prompt)
    rounds = (len(messages) - 2) // 2  # 0 for a first attempt, 1 for a repair
    if step == "task":
        root = next(r for persona, r in PERSONAS.items() if persona in prompt)
        if root == "huge":
            return Scripted("This model's maximum context length is 8192 tokens", status=400)
        reply = task_reply(root)
        if root == "notes" and not rounds:
            task = json.loads(_blocks_of(reply)["task"])
            task["truth"]["trap"] = HIDDEN_RULE
            task["fixtures"].append({"path": "notes.txt", "install_to": f"/app/{root}/notes.txt", "kind": "text",
                                     "content": f"reminder: {HIDDEN_RULE}\n"})
            reply = reply.replace(_blocks_of(reply)["task"], json.dumps(task, indent=1))
        return reply
    root = _root_of(prompt)
    if step == "initial_test":
        return initial_reply(prompt)
    if step == "final_test":
        good = final_reply(prompt)
        # The expected block repeats the output path, which the instruction states: not a leak.
        good = good.replace('```json expected\n{', '```json expected\n{"output": "/app/out/census.txt", ')
        if root == "cut":
            if not rounds and "(repair)" not in messages[-1]["content"]:
                return Scripted(CUT_TEST, finish_reason="length")
            if "finish_reason: length" in messages[-1]["content"]:
                return good.rsplit("```", 1)[0]  # the closing fence is missing
            return good
        if root == "loose" and not rounds:
            # Fails untouched and passes the oracle, but a census with a wrong count also passes.
            n_lines = json.loads(good.split("```json expected\n")[1].split("```")[0])["census"].count("\n")
            return ("```python test_final_state.py\nimport os\n\n\ndef test_census_shape():\n"
                    "    assert os.path.isfile('/app/out/census.txt')\n"
                    f"    assert len(open('/app/out/census.txt').read().splitlines()) == {n_lines}\n```\n\n"
                    "```json expected\n{}\n```")
        if root == "lazy" and not rounds:
            return "```python test_final_state.py\ndef test_ok():\n    assert True\n```\n\n```json expected\n{}\n```"
        return good
    if step == "environment":
        return environment_reply(prompt, writes_outside=False)
    raise AssertionError(f"unexpected conversation: {messages[-1]['content'][:200]}")


def _sig(index: int, persona: str) -> dict:
    return make_signature(index, "data_science", "exact_text", "image", persona=persona,
                          skills=["image decoding", "connected components", "careful output formatting"])


def _model(server, cache_dir, **kw):
    return CachedChatModel(OpenAIChatModel("fake-author", base_url=server.base_url, max_retries=0, **kw), cache_dir)


def _triggers(task_dir) -> list[tuple[str, str]]:
    prov = read_json(task_dir / "task.json")["provenance"]
    return [(r["trigger"]["step"], r["trigger"]["stage"]) for r in prov["rounds"] if r["trigger"]]


@needs_bwrap
def test_a_cut_reply_is_never_kept_even_when_it_compiles(tmp_path):
    with FakeOpenAIServer(replies=author) as server:
        task_dir = generate_task_llm(_sig(10, "a terse reviewer"), tmp_path / "tasks", _model(server, tmp_path / "c"),
                                     max_repair_rounds=3, images_dir=tmp_path / "images", limits=LIMITS)
        final_calls = [b for b in server.chat_bodies() if P.step_of(b["messages"]) == "final_test"]
    # Cut at the limit, then sent without its closing fence, then whole.
    assert _triggers(task_dir) == [("final_test", "truncated"), ("final_test", "format")]
    prov = read_json(task_dir / "task.json")["provenance"]
    assert prov["truncated_replies"] == {"final_test": 1}
    # The retry after a cut reply gets twice the token budget.
    assert final_calls[1]["max_tokens"] == 2 * final_calls[0]["max_tokens"]
    assert "not closed" in prov["rounds"][2]["trigger"]["reason"]
    final_test = (task_dir / "tests" / "test_final_state.py").read_text()
    assert "assert got\n" not in final_test and "EXPECTED" in final_test


@needs_bwrap
def test_an_answer_shipped_as_a_fixture_is_blamed_on_the_task_step(tmp_path):
    with FakeOpenAIServer(replies=author) as server:
        task_dir = generate_task_llm(_sig(11, "a careless clerk"), tmp_path / "tasks", _model(server, tmp_path / "c"),
                                     max_repair_rounds=2, images_dir=tmp_path / "images", limits=LIMITS)
    prov = read_json(task_dir / "task.json")["provenance"]
    trigger = prov["rounds"][1]["trigger"]
    assert (trigger["step"], trigger["stage"]) == ("task", "static")
    assert "environment/fixtures/notes.txt" in trigger["reason"]
    # The repair message names where the leak is, never the leaked text itself.
    assert HIDDEN_RULE not in trigger["reason"]
    assert not list(task_dir.rglob("notes.txt"))
    # The expected block repeated a path the instruction states: that cost no repair round.
    assert len(prov["rounds"]) == 2


@needs_bwrap
def test_a_final_test_that_passes_untouched_is_sent_back_to_its_author(tmp_path):
    with FakeOpenAIServer(replies=author) as server:
        task_dir = generate_task_llm(_sig(12, "an optimistic intern"), tmp_path / "tasks",
                                     _model(server, tmp_path / "c"), max_repair_rounds=2,
                                     images_dir=tmp_path / "images", limits=LIMITS)
        repair = [b for b in server.chat_bodies() if P.step_of(b["messages"]) == "final_test"][1]
    assert _triggers(task_dir) == [("final_test", "final_fails_untouched")]
    assert "passes on the untouched environment" in repair["messages"][-1]["content"]


@needs_bwrap
def test_a_final_test_that_accepts_a_wrong_answer_is_never_published(tmp_path):
    with FakeOpenAIServer(replies=author) as server:
        task_dir = generate_task_llm(_sig(15, "a hasty grader"), tmp_path / "tasks", _model(server, tmp_path / "c"),
                                     max_repair_rounds=2, images_dir=tmp_path / "images", limits=LIMITS)
    # The mutation probe (an oracle output with a count off by one scored 1) sent it back.
    assert _triggers(task_dir) == [("final_test", "mutation")]
    assert "def test_census_shape" not in (task_dir / "tests" / "test_final_state.py").read_text()
    assert any(c.startswith("mutation:") for c in read_json(task_dir / "task.json")["provenance"]["checks"])


@needs_bwrap
def test_a_rejected_prompt_fails_only_its_task_and_the_shard_is_validated(tmp_path):
    good, bad = _sig(13, "a careful surveyor"), _sig(14, "a long-winded analyst")
    sigs_path = tmp_path / "signatures.jsonl"
    sigs_path.write_text("".join(json.dumps(s) + "\n" for s in (bad, good)))
    tasks_dir, manifest_path = tmp_path / "tasks", tmp_path / "manifest.json"
    with FakeOpenAIServer(replies=author) as server:
        cost_config = {"generate": {"backend": "llm", "model": "author", "max_repair_rounds": 2},
                       "models": {"author": {"backend": "openai", "model": "fake-author"}},
                       "prices": {"fake-author": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}}
        manifest = run_generate_shard_llm(sigs_path, 0, 2, tasks_dir, manifest_path, _model(server, tmp_path / "c"),
                                          images_dir=tmp_path / "images", limits=LIMITS,
                                          cost=functools.partial(generation_cost, cost_config))
    assert [t["id"] for t in manifest["tasks"]] == [good["id"]]
    [failed] = manifest["failed"]
    assert failed["id"] == bad["id"] and failed["step"] == "task" and failed["stage"] == "request"
    assert "HTTP 400" in failed["reason"] and "maximum context length" in failed["reason"]
    assert read_json(failure_record_path(tasks_dir, bad["id"]))["stage"] == "request"
    assert manifest["summary"]["candidates"] == 2 and manifest["summary"]["requests"]["requests"] == 6
    # What it cost, at the configured price, beside what `termforge plan` projects for two tasks.
    usage, cost = manifest["summary"]["requests"], manifest["summary"]["cost"]
    assert cost["actual"]["cost_usd"] == round((usage["prompt_tokens"] * 3 + usage["completion_tokens"] * 15) / 1e6, 4)
    assert cost["planned"]["phase"] == "generate" and cost["planned"]["calls"] >= 8 and cost["planned"]["cost_usd"] > 0
    verdicts = run_validate_shard(manifest_path, tmp_path / "verdicts.json", tmp_path / "images", LIMITS)
    assert [(v["task_id"], v["kept"]) for v in verdicts["verdicts"]] == [(good["id"], True)]


@needs_bwrap
def test_a_wrong_key_stops_the_run_at_the_first_request(tmp_path, monkeypatch):
    sigs_path = tmp_path / "signatures.jsonl"
    sigs_path.write_text("".join(json.dumps(_sig(i, "a careful surveyor")) + "\n" for i in (20, 21)))
    monkeypatch.setenv("FAKE_KEY", "sk-wrong")
    with FakeOpenAIServer(replies=author, require_api_key="sk-right") as server:
        model = _model(server, tmp_path / "c", api_key_env="FAKE_KEY")
        with pytest.raises(ModelRequestError, match="HTTP 401") as exc:
            run_generate_shard_llm(sigs_path, 0, 2, tmp_path / "tasks", tmp_path / "manifest.json", model,
                                   limits=LIMITS)
        assert server.request_count() == 1
    assert exc.value.is_configuration
    assert not (tmp_path / "manifest.json").exists()
    assert not [p for p in (tmp_path / "tasks").iterdir() if not p.name.startswith(".")]


def _spec(truth: dict, instruction: str, setup_sh: str = "#!/bin/bash\n"):
    from termforge.generate.base import TaskSpec

    return TaskSpec(instruction=instruction, setup_sh=setup_sh, test_initial="", test_final="", solve_sh="",
                    truth=truth, method_note="", verifier_kind="exact_text", fixture_kind="text_only",
                    fixtures={}, output_paths=[])


def _text_fixture(path: str, content: str) -> dict:
    return {"path": path, "kind": "text", "data": content.encode()}


def test_restated_and_file_shipped_answers_are_leaks_and_stated_values_are_not():
    from termforge.generate.llm import visible_leak

    instruction = "Count the errors per service in `/app/logs/` and write `/app/out/errors.txt` (one `name=count` line)."
    truth = {"given": {"output": "/app/out/errors.txt"},
             "expected": {"output": "/app/out/errors.txt", "errors": {"auth": 2, "cache": 1, "db": 17}}}
    # The answer restated in another format, in a notes file the task ships.
    leak = visible_leak(_spec(truth, instruction), [_text_fixture("notes/summary.txt", "seen: auth=2, cache=1, db=17\n")])
    assert leak is not None and leak[:2] == ("task", "environment/fixtures/notes/summary.txt")
    assert "17" not in leak[2]  # the description never quotes the value
    # The same values written as words in setup.sh are blamed on the environment step.
    leak = visible_leak(_spec(truth, instruction, "#!/bin/bash\necho 'db had seventeen errors'\n"), [])
    assert leak is not None and leak[:2] == ("environment", "environment/setup.sh")
    # The output path the instruction states is repeated by the expected block: not a leak.
    assert visible_leak(_spec(truth, instruction), [_text_fixture("logs/app.log", "db: timeout\nauth: denied\n")]) is None


def test_digits_inside_a_timestamp_date_or_id_are_no_statement_of_a_short_answer():
    """Issue 40: the answer key `auth: 2` next to a log line at `10:00:02` was refused as a leak of the
    answer into the input. A short value is stated only as a number of its own beside its key."""
    from termforge.generate.llm import visible_leak

    instruction = "Count the failed logins per service in `/app/logs/auth.log`; write `/app/out/counts.txt`."
    truth = {"given": {"output": "/app/out/counts.txt"}, "expected": {"counts": {"auth": 2, "sshd": 3}}}
    incidental = [
        "2024-05-01 10:00:02 auth: failed password for bob\n2024-05-01 10:00:03 sshd: failed password for eve\n",
        "auth session 7f02-0002 opened at 2024-03-02T11:02:03Z by uid 1002\nsshd build 3.2.3 auth v2.3\n",
        "auth from 10.0.0.2 port 22/3 sshd pid 4411/3 req_0003 retry 1/2\n",
    ]
    for log in incidental:
        assert visible_leak(_spec(truth, instruction), [_text_fixture("logs/auth.log", log)]) is None, log
    # The same numbers, stated as the answer's own values in a file the task ships, still leak.
    for stated in ("summary\nauth: 2\nsshd: 3\n", "auth=2 sshd=3\n", "2 auth\n3 sshd\n", "auth:2,sshd:3\n",
                   "auth-2 sshd-3\n"):
        leak = visible_leak(_spec(truth, instruction), [_text_fixture("logs/auth.log", stated)])
        assert leak is not None and leak[1] == "environment/fixtures/logs/auth.log", stated
    # An instruction naming the log's first timestamp states no piece of the answer either.
    told = instruction + " Lines before 10:00:02 are from the previous rotation."
    assert visible_leak(_spec(truth, told), [_text_fixture("logs/auth.log", incidental[0])]) is None
