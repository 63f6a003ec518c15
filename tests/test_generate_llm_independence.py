"""Unsound LLM-written tasks that every check but these passed (issue 40), with a scripted author on a
real OpenAI-protocol server and real bwrap sandboxes:

- the oracle reads only one of the two logs the instruction names, the final test is written from
  it, and the second solution repeats the oracle (its text under other names): input sensitivity,
  now per named input, drops it naming the log it ignores; the copy is refused as a second opinion;
- the final test checks only aggregates (the set of services, the total, the order): a census
  with two services' counts swapped scores 1 until the exchange mutants grade it;
- a solver reply that cannot be parsed is blamed on the second-solution step, not on the
  instruction (the task is not regenerated for it).
"""

import json
import re
from pathlib import Path

from conftest import make_signature, needs_bwrap
from fake_openai_server import FakeOpenAIServer
from test_generate_llm_data import initial_reply  # the same two-input log task's initial test
from termforge.generate import llm_prompts as P
from termforge.generate.llm import generate_task_llm
from termforge.io import read_json
from termforge.models.cache import CachedChatModel
from termforge.models.openai_backend import OpenAIChatModel
from termforge.quality.independence import repeats_oracle
from termforge.quality.validate import validate_task
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime

pytestmark = needs_bwrap
LIMITS = Limits(wall_sec=60, cpu_sec=60, memory_mb=4096)

SERVICES = ("auth", "billing", "cache", "db", "search")


def _log(offset: int, n: int) -> str:
    return "".join(f"2024-05-0{1 + i % 9} 1{i % 10}:0{i % 6}:0{i % 7} {SERVICES[(i * 7 + offset) % 5]} "
                   f"{('ERROR', 'INFO', 'ERROR', 'WARN')[(i + offset) % 4]} request {1000 + 37 * i}\n"
                   for i in range(n))


LOG, LOG1 = _log(0, 36), _log(3, 30)


def census(*logs: str) -> str:
    counts: dict[str, int] = {}
    for line in "".join(logs).splitlines():
        _, _, service, level, *_ = line.split()
        if level == "ERROR":
            counts[service] = counts.get(service, 0) + 1
    return "".join(f"{s} {counts[s]}\n" for s in sorted(counts))


CASES = {
    "a forgetful admin": "onelog",     # the oracle reads app.log only; the solver repeats it
    "a frugal grader": "aggregates",   # the final test checks the set of services, the total, the order
    "a careful surveyor": "copycat",   # sound task; the solver's first script is the oracle renamed
    "a garbled solver": "garbled",     # sound task; the solver's first two replies hold no script
}
BODY = ("The service log `/app/{root}/app.log` and its rotated predecessor `/app/{root}/app.log.1` have one request "
        "per line: date, time, service, level, the word request and a request id, separated by single spaces. "
        "Count the `ERROR` lines of each service over both files.")
ONE_LOG_SH = ("#!/bin/bash\nset -euo pipefail\nmkdir -p /app/out\npython3 - <<'PY'\ncounts = {{}}\n"
              "for line in open('/app/{root}/app.log'):\n    fields = line.split()\n"
              "    if fields[3] == 'ERROR':\n        counts[fields[2]] = counts.get(fields[2], 0) + 1\n"
              "with open('/app/out/errors.txt', 'w') as fh:\n    for name in sorted(counts):\n"
              "        fh.write(f'{{name}} {{counts[name]}}\\n')\nPY\n")
BOTH_LOGS_SH = ("#!/bin/bash\nset -euo pipefail\nmkdir -p /app/out\n"
                "cat /app/{root}/app.log /app/{root}/app.log.1 | awk '$4 == \"ERROR\" {{n[$3]++}} "
                "END {{for (s in n) print s, n[s]}}' | sort > /app/out/errors.txt\n")
# The oracle again, every name changed and the layout with it: a copy, not a second opinion.
COPY_SH = ("#!/bin/bash\n# independent census\nset -euo pipefail\nmkdir -p /app/out\npython3 - <<'PY'\ntally = {{}}\n"
           "for row in open('/app/{root}/app.log'):\n    cols = row.split()  # split on spaces\n"
           "    if cols[3] == \"ERROR\":\n        tally[cols[2]] = tally.get(cols[2], 0) + 1\n"
           "with open(\"/app/out/errors.txt\", \"w\") as out:\n    for svc in sorted(tally):\n"
           "        out.write(f\"{{svc}} {{tally[svc]}}\\n\")\nPY\n")
INDEPENDENT_SH = ("#!/bin/bash\nset -euo pipefail\nmkdir -p /app/out\npython3 - <<'PY'\nimport collections, glob\n"
                  "c = collections.Counter()\nfor path in glob.glob('/app/{root}/app.log*'):\n"
                  "    c.update(l.split()[2] for l in open(path) if l.split()[3] == 'ERROR')\n"
                  "open('/app/out/errors.txt', 'w').write(''.join(f'{{s}} {{c[s]}}\\n' for s in sorted(c)))\nPY\n")


def _root(text: str) -> str:
    return re.search(r"/app/(\w+)/app\.log", text).group(1)


def task_reply(root: str, repair: bool) -> str:
    solve = (ONE_LOG_SH if root == "onelog" and not repair else
             ONE_LOG_SH.replace("for line in open('/app/{root}/app.log'):",
                                "for line in open('/app/{root}/app.log').readlines() + "
                                "open('/app/{root}/app.log.1').readlines():") if root != "aggregates"
             else BOTH_LOGS_SH).format(root=root)
    task = {
        "title": "Errors per service",
        "body": BODY.format(root=root),
        "deliverables": ["`/app/out/errors.txt`: one line `<service> <count>` per service with at least one ERROR "
                         "line, sorted by service name, single spaces, nothing else"],
        "output_paths": ["/app/out/errors.txt"],
        "fixtures": [{"path": "app.log", "install_to": f"/app/{root}/app.log", "kind": "text", "content": LOG},
                     {"path": "app.log.1", "install_to": f"/app/{root}/app.log.1", "kind": "text", "content": LOG1}],
        "truth": {"given": {"output": "/app/out/errors.txt"}, "rule": "count ERROR lines per service"},
        "method_note": "Read both files, keep level ERROR, count per service, sort by name.",
    }
    return f"```json task\n{json.dumps(task, indent=1)}\n```\n\n```bash solve.sh\n{solve}```\n"


def final_reply(root: str, solve_sh: str, repair: bool) -> str:
    """Written from the oracle the prompt shows, as the prompt asks."""
    expected = census(LOG, LOG1) if "app.log.1" in solve_sh else census(LOG)
    if root == "aggregates" and not repair:
        rows = [ln.split() for ln in expected.splitlines()]
        test = (f"NAMES = {[r[0] for r in rows]!r}\nTOTAL = {sum(int(r[1]) for r in rows)}\n\n\n"
                "def test_errors():\n    rows = [ln.split() for ln in open('/app/out/errors.txt').read().splitlines()]\n"
                "    assert all(len(r) == 2 for r in rows)\n"
                "    assert [r[0] for r in rows] == NAMES, 'wrong services'\n"
                "    assert sum(int(r[1]) for r in rows) == TOTAL, 'wrong total'\n")
    else:
        test = (f"EXPECTED = {expected!r}\n\n\ndef test_errors():\n"
                "    assert open('/app/out/errors.txt').read() == EXPECTED, 'wrong census'\n")
    return f"```python test_final_state.py\n{test}```\n\n```json expected\n{json.dumps({'census': expected})}\n```"


def environment_reply(root: str) -> str:
    return (f"```bash setup.sh\n#!/bin/bash\nset -euo pipefail\nmkdir -p /app/{root}\n"
            f"cp /tmp/env/fixtures/app.log /tmp/env/fixtures/app.log.1 /app/{root}/\n```\n\n"
            '```json environment\n{"apt_packages": []}\n```')


def make_author():
    solver_calls: dict[str, int] = {}

    def author(messages: list[dict]):
        step = P.step_of(messages)
        prompt = messages[1]["content"]
        repair = len(messages) > 2  # this step's own conversation goes on after a failure
        if step == "task":
            return task_reply(next(c for persona, c in CASES.items() if persona in prompt), repair)
        root = _root(prompt)
        if step == "initial_test":
            return initial_reply(prompt)
        if step == "final_test":
            solve = {b.name: b.body for b in P.fenced_blocks(prompt) if b.name}["solve.sh"]
            return final_reply(root, solve, repair)
        if step == "environment":
            return environment_reply(root)
        if step == "second_solution":
            n = solver_calls[root] = solver_calls.get(root, 0) + 1
            if root == "garbled" and n <= 2:
                return "I would count the ERROR lines per service with awk and sort the result."
            if root in ("onelog", "copycat") and not repair:
                return f"```bash solve.sh\n{COPY_SH.format(root=root)}```"
            return f"```bash solve.sh\n{INDEPENDENT_SH.format(root=root)}```"
        raise AssertionError(f"unexpected conversation: {messages[-1]['content'][:200]}")

    return author


def _generate(tmp_path: Path, index: int, persona: str, rounds: int = 2):
    with FakeOpenAIServer(replies=make_author()) as server:
        model = CachedChatModel(OpenAIChatModel("fake-author", base_url=server.base_url, max_retries=0),
                                tmp_path / "cache")
        sig = make_signature(index, "data_processing", "exact_text", "text_only", persona=persona,
                             skills=["log parsing", "text aggregation", "careful output formatting"])
        task_dir = generate_task_llm(sig, tmp_path / "tasks", model, max_repair_rounds=rounds,
                                     images_dir=tmp_path / "images", limits=LIMITS)
        return task_dir, server.chat_bodies()


def _triggers(task_dir) -> list[dict]:
    return [r["trigger"] for r in read_json(task_dir / "task.json")["provenance"]["rounds"] if r["trigger"]]


def test_an_oracle_that_ignores_one_named_input_is_dropped_naming_it(tmp_path):
    task_dir, bodies = _generate(tmp_path, 60, "a forgetful admin")
    [trigger] = _triggers(task_dir)
    assert (trigger["step"], trigger["stage"]) == ("task", "input_sensitivity"), trigger
    assert "/app/onelog/app.log.1" in trigger["reason"] and "oracle_ignores_inputs" in trigger["reason"]
    # The published oracle reads both logs, and so does its answer key.
    assert "app.log.1" in (task_dir / "solution" / "solve.sh").read_text()
    assert read_json(task_dir / "private" / "truth.json")["expected"]["census"] == census(LOG, LOG1)
    # The solver's script repeated the oracle's blind spot (app.log alone): the oracle again, refused as
    # a second opinion; the script the solver then wrote its own way reads both logs.
    assert repeats_oracle(ONE_LOG_SH.format(root="onelog"), COPY_SH.format(root="onelog"))
    calls = [c for c in read_json(task_dir / "task.json")["provenance"]["calls"] if c["step"] == "second_solution"]
    assert len(calls) == 2 and "refused as a second opinion" in calls[1]["messages"][-1]["content"]
    alt = (task_dir / "solution" / "alternatives" / "independent.sh").read_text()
    assert "glob" in alt and "app.log.1" not in COPY_SH


def test_a_final_test_of_aggregates_only_is_dropped_by_the_exchange_mutants(tmp_path):
    task_dir, _ = _generate(tmp_path, 61, "a frugal grader")
    [trigger] = _triggers(task_dir)
    assert (trigger["step"], trigger["stage"]) == ("final_test", "mutation"), trigger
    assert re.search(r"(values_swapped|values_rotated|fields_swapped)@/app/out/errors.txt", trigger["reason"])
    assert "EXPECTED" in (task_dir / "tests" / "test_final_state.py").read_text()
    v = validate_task(task_dir, BwrapRuntime(), tmp_path / "images", LIMITS)
    assert v.kept, (v.stage, v.reason)


def test_a_second_solution_that_is_the_oracle_again_is_refused(tmp_path):
    task_dir, bodies = _generate(tmp_path, 62, "a careful surveyor")
    assert not _triggers(task_dir)  # refused inside the check, answered by the solver's own repair
    calls = [c for c in read_json(task_dir / "task.json")["provenance"]["calls"] if c["step"] == "second_solution"]
    assert len(calls) == 2
    refusal = calls[1]["messages"][-1]["content"]
    assert "refused as a second opinion" in refusal
    oracle = (task_dir / "solution" / "solve.sh").read_text()
    # The solver never sees the oracle, the tests or the answer key: not in its prompt, not in the refusal.
    template = P.second_solution_prompt("", [])  # its reply format shows a script's first lines
    oracle_lines = [ln for ln in oracle.splitlines() if len(ln.strip()) > 12 and ln.strip() not in template]
    final_test = (task_dir / "tests" / "test_final_state.py").read_text()
    for body in (b for b in bodies if P.step_of(b["messages"]) == "second_solution"):
        for m in (m for m in body["messages"] if m["role"] != "assistant"):  # what it is told, not its replies
            assert not [ln for ln in oracle_lines if ln.strip() in m["content"]], m["content"][:300]
            assert "EXPECTED" not in m["content"] and final_test not in m["content"]
            assert '"truth"' not in m["content"] and "method_note" not in m["content"]
    alt = (task_dir / "solution" / "alternatives" / "independent.sh").read_text()
    assert "collections.Counter" in alt and repeats_oracle(oracle, alt) is None


def test_an_unparsable_solver_reply_is_blamed_on_the_second_solution_step(tmp_path):
    task_dir, bodies = _generate(tmp_path, 63, "a garbled solver")
    [trigger] = _triggers(task_dir)
    assert (trigger["step"], trigger["stage"]) == ("second_solution", "format"), trigger
    assert "instruction" not in trigger["reason"]
    # The instruction and the oracle were not regenerated for the solver's fault; validation did not rerun.
    assert len([b for b in bodies if P.step_of(b["messages"]) == "task"]) == 1
    prov = read_json(task_dir / "task.json")["provenance"]
    assert prov["rounds"][1]["regenerated"] == []
    assert (task_dir / "solution" / "alternatives" / "independent.sh").is_file()
