"""Data a lab can train on without reading it: what the llm backend never publishes, and whom it
blames (a real OpenAI-protocol server with a scripted author, real bwrap sandboxes).

One small text task (count the ERROR lines per service of a log) is written by authors that go
wrong the ways issue #23 lists. Each case must end repaired, with the right step blamed, or as a
recorded failure; never as a published task that gives the answer away or grades a wrong one:

- the answer in the instruction as an "example" of the format, or restated in prose: the task step
  (it writes the instruction), at the leak scan;
- an oracle that hard-codes a wrong answer key, with a final test written from it: the task step
  (the oracle), at input sensitivity;
- an oracle that reads a data file encoding the answer: the step that wrote the file (a readable
  encoding: the leak scan of the fixture) or the oracle (an encoding no scan reads: input
  sensitivity);
- a final test that accepts a format-only fake: the final test, at the mutation probe;
- an oracle that computes something other than what the instruction asks, with a final test
  written from it: the task step, at the second solution (an independent solution written from the
  instruction and /app alone disagrees);
- a final test stricter than the instruction: the final test, at the second solution.
"""

import base64
import json
import re

import pytest

from conftest import make_signature, needs_bwrap
from fake_openai_server import FakeOpenAIServer
from termforge.generate import llm_prompts as P
from termforge.generate.llm import failure_record_path, generate_task_llm
from termforge.io import read_json
from termforge.models.cache import CachedChatModel
from termforge.models.openai_backend import OpenAIChatModel
from termforge.quality.validate import validate_task
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime

pytestmark = needs_bwrap
LIMITS = Limits(wall_sec=60, cpu_sec=60, memory_mb=4096)

SERVICES = ("auth", "billing", "cache", "db", "search")
LOG = "".join(
    f"2024-05-0{1 + i % 9}T1{i % 10}:0{i % 6}:00 {SERVICES[(i * 7) % 5]} {('ERROR', 'INFO', 'ERROR', 'WARN')[i % 4]} "
    f"request {1000 + 37 * i} {('timed out', 'ok', 'refused', 'slow')[i % 4]}\n" for i in range(36))


def census(log: str, levels=("ERROR",)) -> str:
    counts: dict[str, int] = {}
    for line in log.splitlines():
        _, service, level, *_ = line.split()
        if level in levels:
            counts[service] = counts.get(service, 0) + 1
    return "".join(f"{s} {counts[s]}\n" for s in sorted(counts))


ANSWER = census(LOG)
ALL_LINES = census(LOG, ("ERROR", "INFO", "WARN"))

# The case an author plays, told apart by the persona (task step) or by the directory its log is
# installed in (later steps see only the task, not the persona).
CASES = {
    "a helpful tutor": "example",        # the real census as a format "example", then placeholders
    "a chatty lead": "restated",         # the census restated in prose, then not
    "a hurried admin": "wrongkey",       # oracle writes a wrong constant; the final test is written from it
    "a tidy archivist": "b64file",       # the answer ships base64-encoded as a fixture the oracle decodes
    "a secretive dev": "xorfile",        # setup.sh writes the answer XOR-ed; the oracle decodes it
    "a lenient grader": "formatonly",    # final test checks the line format only
    "a sloppy coder": "alllines",        # oracle counts every line, not the ERROR ones
    "a pedantic tester": "strict",       # final test demands a trailing END line the instruction never asks for
    "a steady engineer": "good",         # right the first time
}


def _root(text: str) -> str:
    m = re.search(r"/app/(\w+)/app\.log", text)
    assert m, text[:300]
    return m.group(1)


BODY = ("The service log `/app/{root}/app.log` has one request per line: timestamp, service, level, "
        "request id and outcome, separated by single spaces. Count the `ERROR` lines of each service.")
# A repaired task says so in its instruction: later steps (which never see the persona or the
# repair) answer a regenerated task as a careful author would.
REPAIRED = " Lines never wrap."
COUNT_SH = ("#!/bin/bash\nset -euo pipefail\nmkdir -p /app/out\n"
            "awk '$3 == \"ERROR\" {{n[$2]++}} END {{for (s in n) print s, n[s]}}' /app/{root}/app.log "
            "| sort{tail} > /app/out/errors.txt\n")


def task_reply(root: str, repair: bool) -> str:
    body = BODY.format(root=root) + (REPAIRED if repair else "")
    solve = COUNT_SH.format(root=root, tail=" | head -c -1" if root == "strict" else "")
    fixtures = [{"path": "app.log", "install_to": f"/app/{root}/app.log", "kind": "text", "content": LOG}]
    if not repair:
        if root == "example":
            body += f"\n\nFor example, `/app/out/errors.txt` could read:\n\n```\n{ANSWER}```"
        elif root == "restated":
            parts = [ln.split() for ln in ANSWER.splitlines()]
            body += " (Last week's count, for reference: " + ", ".join(f"{n} for {s}" for s, n in parts) + ".)"
        elif root == "wrongkey":
            first = ANSWER.splitlines()[0]
            wrong = ANSWER.replace(first, first.split()[0] + " 99")
            solve = f"#!/bin/bash\nset -euo pipefail\nmkdir -p /app/out\nprintf '%s' '{wrong}' > /app/out/errors.txt\n"
        elif root == "b64file":
            fixtures.append({"path": "state.b64", "install_to": f"/app/{root}/state.b64", "kind": "text",
                             "content": base64.b64encode(ANSWER.encode()).decode() + "\n"})
            solve = f"#!/bin/bash\nset -euo pipefail\nmkdir -p /app/out\nbase64 -d /app/{root}/state.b64 > /app/out/errors.txt\n"
        elif root == "xorfile":
            solve = ("#!/bin/bash\nset -euo pipefail\nmkdir -p /app/out\npython3 - <<'PY'\n"
                     f"data = bytes.fromhex(open('/app/{root}/.cache/idx').read().strip())\n"
                     "open('/app/out/errors.txt', 'wb').write(bytes(b ^ 0x2A for b in data))\nPY\n")
        elif root == "alllines":
            solve = ("#!/bin/bash\nset -euo pipefail\nmkdir -p /app/out\n"
                     f"awk '{{n[$2]++}} END {{for (s in n) print s, n[s]}}' /app/{root}/app.log | sort > /app/out/errors.txt\n")
    task = {
        "title": "Errors per service",
        "body": body,
        "deliverables": ["`/app/out/errors.txt`: one line `<service> <count>` per service with at least one ERROR "
                         "line, sorted by service name, single spaces, nothing else"],
        "output_paths": ["/app/out/errors.txt"],
        "fixtures": fixtures,
        "truth": {"given": {"output": "/app/out/errors.txt"}, "rule": "count ERROR lines per service"},
        "method_note": "Split each line on spaces, keep level ERROR, count per service, sort by name.",
    }
    return f"```json task\n{json.dumps(task, indent=1)}\n```\n\n```bash solve.sh\n{solve}```\n"


def initial_reply(prompt: str) -> str:
    fixtures = json.loads({b.name: b.body for b in P.fenced_blocks(prompt) if b.name}["fixtures"])
    checks = "\n".join(f"    assert hashlib.sha256(open({f['install_to']!r}, 'rb').read()).hexdigest() == {f['sha256']!r}"
                       for f in fixtures)
    return (f"```python test_initial_state.py\nimport hashlib\nimport os\n\n\ndef test_inputs():\n{checks}\n\n\n"
            "def test_no_output_yet():\n    assert not os.path.exists('/app/out/errors.txt')\n```")


def final_reply(root: str, solve_sh: str, repair: bool) -> str:
    """A final test written from the oracle the prompt shows (as the prompt asks)."""
    if "printf '%s'" in solve_sh:
        expected = re.search(r"printf '%s' '([^']*)'", solve_sh).group(1)
    elif "$3 ==" not in solve_sh and "awk" in solve_sh:
        expected = ALL_LINES
    else:
        expected = ANSWER[:-1] if "head -c -1" in solve_sh else ANSWER
    if root == "formatonly" and not repair:
        test = ("import re\n\n\ndef test_format():\n    lines = open('/app/out/errors.txt').read().splitlines()\n"
                "    assert lines and all(re.fullmatch(r'[a-z]+ [0-9]+', ln) for ln in lines)\n")
    elif root == "strict" and repair:
        test = (f"EXPECTED = {expected!r}\n\n\ndef test_errors():\n"
                "    got = open('/app/out/errors.txt').read()\n"
                "    assert got.rstrip('\\n') == EXPECTED.rstrip('\\n'), 'wrong census'\n")
    else:
        test = (f"EXPECTED = {expected!r}\n\n\ndef test_errors():\n"
                "    assert open('/app/out/errors.txt').read() == EXPECTED, 'wrong census'\n")
    return f"```python test_final_state.py\n{test}```\n\n```json expected\n{json.dumps({'census': expected})}\n```"


def environment_reply(root: str, task_repaired: bool) -> str:
    extra = ""
    if root == "xorfile" and not task_repaired:
        key = bytes(b ^ 0x2A for b in ANSWER.encode()).hex()
        extra = f"mkdir -p /app/{root}/.cache\necho {key} > /app/{root}/.cache/idx\n"
    return (f"```bash setup.sh\n#!/bin/bash\nset -euo pipefail\nmkdir -p /app/{root}\n"
            f"cp /tmp/env/fixtures/app.log /app/{root}/app.log\n"
            f"if [ -f /tmp/env/fixtures/state.b64 ]; then cp /tmp/env/fixtures/state.b64 /app/{root}/; fi\n"
            f"{extra}```\n\n"
            '```json environment\n{"apt_packages": []}\n```')


SECOND_SH = ("#!/bin/bash\nset -euo pipefail\nmkdir -p /app/out\npython3 - <<'PY'\nimport collections\n"
             "c = collections.Counter(l.split()[1] for l in open('/app/{root}/app.log') if l.split()[2] == 'ERROR')\n"
             "open('/app/out/errors.txt', 'w').write(''.join(f'{{s}} {{c[s]}}\\n' for s in sorted(c)))\nPY\n")


def author(messages: list[dict]):
    step = P.step_of(messages)
    prompt = messages[1]["content"]
    repair = len(messages) > 2  # this step's own conversation goes on after a failure
    if step == "task":
        case = next(c for persona, c in CASES.items() if persona in prompt)
        return task_reply(case, repair)
    root = _root(prompt)
    if step == "initial_test":
        return initial_reply(prompt)
    if step == "final_test":
        solve = {b.name: b.body for b in P.fenced_blocks(prompt) if b.name}["solve.sh"]
        return final_reply(root, solve, repair)
    if step == "environment":
        return environment_reply(root, REPAIRED.strip() in prompt)
    if step == "second_solution":
        return f"```bash solve.sh\n{SECOND_SH.format(root=root)}```"
    raise AssertionError(f"unexpected conversation: {messages[-1]['content'][:200]}")


def _sig(index: int, persona: str) -> dict:
    return make_signature(index, "data_processing", "exact_text", "text_only", persona=persona,
                          skills=["log parsing", "text aggregation", "careful output formatting"])


def _generate(tmp_path, index: int, persona: str, rounds: int = 2):
    server = FakeOpenAIServer(replies=author)
    with server:
        model = CachedChatModel(OpenAIChatModel("fake-author", base_url=server.base_url, max_retries=0),
                                tmp_path / "cache")
        try:
            task_dir = generate_task_llm(_sig(index, persona), tmp_path / "tasks", model, max_repair_rounds=rounds,
                                         images_dir=tmp_path / "images", limits=LIMITS)
        except Exception as exc:  # noqa: BLE001 - a case may end in a recorded failure
            return None, exc, server.chat_bodies()
        return task_dir, None, server.chat_bodies()


def _triggers(task_dir) -> list[tuple[str, str]]:
    prov = read_json(task_dir / "task.json")["provenance"]
    return [(r["trigger"]["step"], r["trigger"]["stage"]) for r in prov["rounds"] if r["trigger"]]


def _published_answer_free(task_dir):
    instruction = (task_dir / "instruction.md").read_text()
    assert ANSWER.splitlines()[0] not in instruction
    v = validate_task(task_dir, BwrapRuntime(), task_dir.parent.parent / "images", LIMITS)
    assert v.kept, (v.stage, v.reason)


@pytest.mark.parametrize("persona,stage", [("a helpful tutor", "static"),
                                           pytest.param("a chatty lead", "static", marks=pytest.mark.extended)])
def test_an_answer_in_the_instruction_is_blamed_on_the_task_step(tmp_path, persona, stage):
    task_dir, exc, bodies = _generate(tmp_path, 40 if "tutor" in persona else 41, persona)
    assert exc is None, exc
    [trigger] = [r["trigger"] for r in read_json(task_dir / "task.json")["provenance"]["rounds"] if r["trigger"]]
    assert (trigger["step"], trigger["stage"]) == ("task", stage)
    assert "instruction.md" in trigger["reason"] and ANSWER.splitlines()[0] not in trigger["reason"]
    # Nothing was filed as "given" to let the answer through.
    truth = read_json(task_dir / "private" / "truth.json")
    assert truth["given"] == {"output": "/app/out/errors.txt"} and truth["expected"]["census"] == ANSWER
    _published_answer_free(task_dir)


def test_a_hard_coded_wrong_key_is_blamed_on_the_oracle(tmp_path):
    task_dir, exc, _ = _generate(tmp_path, 42, "a hurried admin")
    assert exc is None, exc
    [trigger] = [r["trigger"] for r in read_json(task_dir / "task.json")["provenance"]["rounds"] if r["trigger"]]
    assert (trigger["step"], trigger["stage"]) == ("task", "input_sensitivity")
    assert "oracle (solve.sh)" in trigger["reason"] and "oracle_ignores_inputs" in trigger["reason"]
    assert "awk" in (task_dir / "solution" / "solve.sh").read_text()
    assert read_json(task_dir / "private" / "truth.json")["expected"]["census"] == ANSWER


def test_a_data_file_encoding_the_answer_is_blamed_on_its_writer(tmp_path):
    # Readable (base64 in a fixture the task step wrote): the leak scan of the fixture.
    task_dir, exc, _ = _generate(tmp_path, 43, "a tidy archivist")
    assert exc is None, exc
    [trigger] = [r["trigger"] for r in read_json(task_dir / "task.json")["provenance"]["rounds"] if r["trigger"]]
    assert (trigger["step"], trigger["stage"]) == ("task", "static")
    assert "environment/fixtures/state.b64" in trigger["reason"] and "base64" in trigger["reason"]
    # Unreadable (XOR, written by setup.sh): the oracle's answer does not move with the log.
    task_dir, exc, _ = _generate(tmp_path, 44, "a secretive dev")
    assert exc is None, exc
    assert _triggers(task_dir) == [("task", "input_sensitivity")]
    assert ".cache" not in (task_dir / "environment" / "setup.sh").read_text()


def test_a_final_test_accepting_a_format_only_fake_is_blamed_on_the_final_test(tmp_path):
    task_dir, exc, _ = _generate(tmp_path, 45, "a lenient grader")
    assert exc is None, exc
    [trigger] = [r["trigger"] for r in read_json(task_dir / "task.json")["provenance"]["rounds"] if r["trigger"]]
    assert (trigger["step"], trigger["stage"]) == ("final_test", "mutation")
    assert "format_only" in trigger["reason"]


def test_the_second_solution_blames_the_oracle_or_the_test(tmp_path):
    # The oracle counts every line while the instruction asks for ERROR lines; the test follows it.
    task_dir, exc, bodies = _generate(tmp_path, 46, "a sloppy coder")
    assert exc is None, exc
    [trigger] = [r["trigger"] for r in read_json(task_dir / "task.json")["provenance"]["rounds"] if r["trigger"]]
    assert (trigger["step"], trigger["stage"]) == ("task", "second_solution")
    assert "(solve.sh)" in trigger["log"] and "(independent)" in trigger["log"]
    # The solver saw the instruction and /app, never the oracle, the tests or the answer key.
    solver = [b for b in bodies if P.step_of(b["messages"]) == "second_solution"]
    assert solver and all("awk" not in m["content"] and "EXPECTED" not in m["content"] and "truth" not in m["content"]
                          for b in solver for m in b["messages"][1:2])
    # The published task keeps the independent solution, which validation re-runs.
    alt = task_dir / "solution" / "alternatives" / "independent.sh"
    assert "collections.Counter" in alt.read_text()
    v = validate_task(task_dir, BwrapRuntime(), tmp_path / "images", LIMITS)
    assert v.kept and "second_solution:independent.sh" in v.checks, (v.stage, v.reason)

    # A final test stricter than the instruction (an END line nobody asked for).
    task_dir, exc, _ = _generate(tmp_path, 47, "a pedantic tester")
    assert exc is None, exc
    [trigger] = [r["trigger"] for r in read_json(task_dir / "task.json")["provenance"]["rounds"] if r["trigger"]]
    assert (trigger["step"], trigger["stage"]) == ("final_test", "second_solution")


def test_with_no_repair_left_nothing_is_published(tmp_path):
    task_dir, exc, _ = _generate(tmp_path, 48, "a hurried admin", rounds=0)
    assert task_dir is None and exc is not None
    sig = _sig(48, "a hurried admin")
    record = read_json(failure_record_path(tmp_path / "tasks", sig["id"]))
    assert (record["step"], record["stage"]) == ("task", "input_sensitivity")
    assert not (tmp_path / "tasks" / sig["id"]).exists()
