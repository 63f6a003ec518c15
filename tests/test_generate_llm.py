"""The llm generation backend against a real OpenAI-protocol server with a scripted author.

The scripted author answers each chain step by reading the prompt, as a model would: the initial
test checks the sha256 values the prompt lists, the final test bakes in the census computed from
the image facts the prompt reports. Its first environment writes outside /app, so the real bwrap
build fails and one repair round is needed; the published task then passes full validation.
"""

import io
import json
import struct
import subprocess
import wave

import numpy as np
import pytest
from PIL import Image

from conftest import make_signature, needs_bwrap
from fake_openai_server import FakeOpenAIServer
from termforge.generate import llm_prompts as P
from termforge.generate.llm import (
    LLMGenerationError,
    StepError,
    failure_record_path,
    generate_task_llm,
    materialise_fixtures,
    parse_environment_reply,
    parse_task_reply,
    run_generate_shard_llm,
    sanitize_log,
)
from termforge.io import read_json
from termforge.models.cache import CachedChatModel
from termforge.models.openai_backend import OpenAIChatModel
from termforge.quality.validate import validate_task
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime

LIMITS = Limits(wall_sec=60, cpu_sec=60, memory_mb=4096)

SOLVE_SH = r"""#!/bin/bash
set -euo pipefail
mkdir -p /app/out
python3 - "$1" <<'PY'
import sys
from PIL import Image
root = sys.argv[1]
names = {}
for line in open(f"/app/{root}/palette.txt"):
    name, code = line.split()
    names[tuple(int(code[i:i + 2], 16) for i in (1, 3, 5))] = name
img = Image.open(f"/app/{root}/scan.png").convert("RGB")
w, h = img.size
px = img.load()
seen, counts = set(), {}
for y in range(h):
    for x in range(w):
        c = px[x, y]
        if c not in names or (x, y) in seen:
            continue
        counts[names[c]] = counts.get(names[c], 0) + 1
        seen.add((x, y))
        stack = [(x, y)]
        while stack:
            cx, cy = stack.pop()
            for nx, ny in ((cx + 1, cy), (cx - 1, cy), (cx, cy + 1), (cx, cy - 1)):
                if 0 <= nx < w and 0 <= ny < h and (nx, ny) not in seen and px[nx, ny] == c:
                    seen.add((nx, ny))
                    stack.append((nx, ny))
with open("/app/out/census.txt", "w") as fh:
    for name in sorted(counts):
        fh.write(f"{name} {counts[name]}\n")
PY
"""

PALETTE_TXT = ("blue #1f77b4\nbrown #8c564b\ncyan #17becf\ngreen #2ca02c\norange #ff7f0e\npink #e377c2\n"
               "purple #9467bd\nred #d62728\n")

# Which scenario a conversation belongs to, told apart by the persona (task step) or by the
# directory the fixtures are installed in (later steps, which never see the persona).
SCENARIOS = {
    "a lab technician": "input",        # environment fails once (writes /etc), then builds
    "a night-shift archivist": "archive",  # environment never builds
    "a hurried analyst": "scans",       # first task reply is malformed JSON
}


def _blocks_of(prompt: str) -> dict[str, str]:
    return {b.name: b.body for b in P.fenced_blocks(prompt) if b.name}


def task_reply(root: str, broken: bool = False) -> str:
    task = {
        "title": "Census of coloured marks",
        "body": (f"The scanner left `/app/{root}/scan.png`, a sheet with filled rectangles in several colours; "
                 f"`/app/{root}/palette.txt` maps colour names to hex codes. Count the rectangles of each "
                 "colour (a rectangle is a connected region of one palette colour)."),
        "deliverables": ["`/app/out/census.txt`: one line `<colour> <count>` per colour present, sorted by "
                         "colour name"],
        "output_paths": ["/app/out/census.txt"],
        "fixtures": [
            {"path": "scan.png", "install_to": f"/app/{root}/scan.png", "kind": "image",
             "params": {"width": 64, "height": 48, "shapes": 7}},
            {"path": "palette.txt", "install_to": f"/app/{root}/palette.txt", "kind": "text",
             "content": PALETTE_TXT},
        ],
        "truth": {"given": {"output": "/app/out/census.txt"},
                  "rule": "count 4-connected components of each palette colour"},
        "method_note": "Decode the image, label 4-connected regions of each palette colour, count per colour.",
    }
    text = json.dumps(task, indent=1)
    if broken:
        text = text[:-3]  # cut off: the closing brackets are missing
    return ("Here is the task.\n\n```json task\n" + text + "\n```\n\n"
            "```bash solve.sh\n" + SOLVE_SH.replace('"$1"', root) + "```\n")


def initial_reply(prompt: str) -> str:
    fixtures = json.loads(_blocks_of(prompt)["fixtures"])
    checks = "\n".join(f"    check({f['install_to']!r}, {f['bytes']}, {f['sha256']!r})" for f in fixtures)
    return f"""```python test_initial_state.py
import hashlib
import os


def check(path, size, digest):
    assert os.path.isfile(path), f"{{path}} is missing"
    data = open(path, "rb").read()
    assert len(data) == size and hashlib.sha256(data).hexdigest() == digest, f"{{path}} is not the fixture"


def test_fixtures_installed():
{checks}


def test_no_output_yet():
    assert not os.path.exists("/app/out/census.txt")
```"""


def final_reply(prompt: str) -> str:
    fixtures = json.loads(_blocks_of(prompt)["fixtures"])
    image = next(f for f in fixtures if f["kind"] == "image")
    per_colour = image["facts"]["per_colour"]
    census = "".join(f"{name} {per_colour[name]['count']}\n" for name in sorted(per_colour))
    return f"""```python test_final_state.py
import os

EXPECTED = {census!r}


def test_census_exists():
    assert os.path.isfile("/app/out/census.txt"), "/app/out/census.txt was not written"


def test_census_matches():
    got = open("/app/out/census.txt").read()
    assert got.rstrip("\\n") == EXPECTED.rstrip("\\n"), "the census is wrong"
```

```json expected
{json.dumps({"census": census})}
```"""


def environment_reply(prompt: str, writes_outside: bool) -> str:
    fixtures = json.loads(_blocks_of(prompt)["fixtures"])
    root = fixtures[0]["install_to"].split("/")[2]
    bad = 'echo "scanner ready" > /etc/motd\n' if writes_outside else ""
    return (f"```bash setup.sh\n#!/bin/bash\nset -euo pipefail\nmkdir -p /app/{root}\n"
            f"cp /tmp/env/fixtures/scan.png /app/{root}/scan.png\n"
            f"cp /tmp/env/fixtures/palette.txt /app/{root}/palette.txt\n{bad}```\n\n"
            '```json environment\n{"apt_packages": ["python3-pil"]}\n```\n')


def second_reply(prompt: str) -> str:
    """An independent solution, as the solver step asks: from the instruction and /app's listing
    (another algorithm than the oracle's: a union-find over the pixels)."""
    files = json.loads(_blocks_of(prompt)["files"])
    root = next(f["path"] for f in files if f["path"].endswith("/scan.png")).split("/")[2]
    return f"""```bash solve.sh
#!/bin/bash
set -euo pipefail
mkdir -p /app/out
python3 - <<'PY'
from PIL import Image
names = {{}}
for line in open("/app/{root}/palette.txt"):
    name, code = line.split()
    names[tuple(int(code[i:i + 2], 16) for i in (1, 3, 5))] = name
img = Image.open("/app/{root}/scan.png").convert("RGB")
w, h = img.size
px = img.load()
parent = {{}}
def find(a):
    while parent[a] != a:
        parent[a] = parent[parent[a]]
        a = parent[a]
    return a
for y in range(h):
    for x in range(w):
        if px[x, y] in names:
            parent[(x, y)] = (x, y)
            for q in ((x - 1, y), (x, y - 1)):
                if q in parent and px[q] == px[x, y]:
                    parent[find(q)] = find((x, y))
counts = {{}}
for p in {{find(p) for p in parent}}:
    counts[names[px[p]]] = counts.get(names[px[p]], 0) + 1
open("/app/out/census.txt", "w").write("".join(f"{{n}} {{counts[n]}}\\n" for n in sorted(counts)))
PY
```"""


def scripted_author(messages: list[dict]) -> str:
    """Answers each step by reading its prompt; deterministic in the messages (so cacheable)."""
    step = P.step_of(messages)
    prompt = messages[1]["content"]
    repair = len(messages) > 2
    if step == "task":
        root = next(r for persona, r in SCENARIOS.items() if persona in prompt)
        return task_reply(root, broken=(root == "scans" and not repair))
    if step == "initial_test":
        return initial_reply(prompt)
    if step == "final_test":
        return final_reply(prompt)
    if step == "environment":
        root = json.loads(_blocks_of(prompt)["fixtures"])[0]["install_to"].split("/")[2]
        return environment_reply(prompt, writes_outside=(root == "archive" or (root == "input" and not repair)))
    if step == "second_solution":
        return second_reply(prompt)
    raise AssertionError(f"unexpected conversation: {messages[-1]['content'][:200]}")


def _sig(index: int, persona: str) -> dict:
    return make_signature(index, "data_science", "exact_text", "image", persona=persona,
                          skills=["image decoding", "connected components", "careful output formatting"])


def _model(server, cache_dir):
    return CachedChatModel(OpenAIChatModel("fake-author", base_url=server.base_url, max_retries=0), cache_dir)


def _tree(root):
    return {p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mode & 0o777)
            for p in sorted(root.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------------------------------
# The chain, end to end


@needs_bwrap
def test_one_repair_round_then_valid_task_and_cached_rerun_is_free_and_identical(tmp_path):
    sig = _sig(0, "a lab technician")
    with FakeOpenAIServer(replies=scripted_author) as server:
        task_dir = generate_task_llm(sig, tmp_path / "run1", _model(server, tmp_path / "cache"),
                                     max_repair_rounds=2, images_dir=tmp_path / "images", limits=LIMITS)
        first_requests = server.request_count()
        final_prompt = next(b["messages"][1]["content"] for b in server.chat_bodies()
                            if P.step_of(b["messages"]) == "final_test")

    # Six calls: task, initial test, final test, environment, the environment's repair, and the
    # independent solution written from the instruction and /app alone.
    assert first_requests == 6
    prov = read_json(task_dir / "task.json")["provenance"]
    assert prov["backend"] == "llm" and prov["model"] == "openai:fake-author"
    assert prov["repair_rounds"] == 1 and len(prov["rounds"]) == 2
    trigger = prov["rounds"][1]["trigger"]
    assert trigger["step"] == "environment" and trigger["stage"] == "build"
    assert "outside the task layer" in trigger["reason"] and "/etc/motd" in trigger["reason"]
    assert prov["rounds"][1]["regenerated"] == ["environment"]
    env_calls = [c for c in prov["calls"] if c["step"] == "environment"]
    assert [c["round"] for c in env_calls] == [0, 1]
    assert "/etc/motd" in env_calls[0]["reply"] and "/etc/motd" not in env_calls[1]["reply"]
    # The repair continues the environment's own conversation, error included.
    assert env_calls[1]["messages"][:2] == env_calls[0]["messages"]
    assert env_calls[1]["messages"][2] == {"role": "assistant", "content": env_calls[0]["reply"]}
    assert "/etc/motd" in env_calls[1]["messages"][3]["content"]
    # Generation checked the candidate exactly as validation does, probes included.
    assert prov["checks"][:4] == ["static", "build", "initial_state", "final_fails_untouched"]
    assert {"oracle_x2", "noop", "proof_of_run"} <= set(prov["checks"]) and prov["checks"][-1] == "second_solution"
    assert any(c.startswith("input_sensitivity:sensitive") for c in prov["checks"])
    assert any(c.startswith("probe:") for c in prov["checks"])

    # The fixture was materialised before the verifier was asked for, and its facts were shown.
    image = next(f for f in prov["fixtures"] if f["kind"] == "image")
    assert json.dumps(image["facts"]["per_colour"], indent=2, sort_keys=True).splitlines()[1].strip() in final_prompt
    truth = read_json(task_dir / "private" / "truth.json")
    assert truth["expected"]["census"].count("\n") == len(image["facts"]["per_colour"])
    # python3-pil, which the reply declared, is in the base image: nothing extra to install.
    assert read_json(task_dir / "task.json")["environment"] == {
        "allow_network": False, "apt_packages": [], "base": "termforge/base:bookworm", "timeout_sec": 600}

    verdict = validate_task(task_dir, BwrapRuntime(), tmp_path / "images", LIMITS)
    assert verdict.kept, (verdict.stage, verdict.reason, verdict.evidence)

    # Same cache, fresh model object and server: zero new requests, the same bytes.
    with FakeOpenAIServer(replies=scripted_author) as server2:
        model2 = _model(server2, tmp_path / "cache")
        again = generate_task_llm(sig, tmp_path / "run2", model2, max_repair_rounds=2, limits=LIMITS)
        assert server2.request_count() == 0
    assert model2.hits == 6 and model2.misses == 0
    assert _tree(again) == _tree(task_dir)
    # Finished tasks are skipped outright.
    assert generate_task_llm(sig, tmp_path / "run2", model2) == again and model2.hits == 6
    assert [p.name for p in (tmp_path / "run2").iterdir()] == [sig["id"]]


@needs_bwrap
def test_shard_records_failures_and_repairs_malformed_replies(tmp_path):
    good, never = _sig(1, "a hurried analyst"), _sig(2, "a night-shift archivist")
    sigs_path = tmp_path / "signatures.jsonl"
    sigs_path.write_text("".join(json.dumps(s) + "\n" for s in (good, never)))
    tasks_dir, manifest_path = tmp_path / "tasks", tmp_path / "manifest.json"
    with FakeOpenAIServer(replies=scripted_author) as server:
        model = _model(server, tmp_path / "cache")
        manifest = run_generate_shard_llm(sigs_path, 0, 2, tasks_dir, manifest_path, model, max_repair_rounds=2,
                                          limits=LIMITS)
        # good: malformed task, repaired task, initial, final, environment, second solution = 6;
        # never: task, initial, final, environment x 3 = 6.
        assert server.request_count() == 12

        assert [t["id"] for t in manifest["tasks"]] == [good["id"]]
        assert manifest["tasks"][0]["family"] == "llm" and manifest["tasks"][0]["mismatch"] == []
        assert read_json(manifest_path) == manifest
        prov = read_json(tasks_dir / good["id"] / "task.json")["provenance"]
        trigger = prov["rounds"][1]["trigger"]
        assert trigger["step"] == "task" and trigger["stage"] == "format" and "not valid JSON" in trigger["reason"]
        assert prov["rounds"][1]["regenerated"] == ["task", "initial_test", "final_test", "environment"]

        # The never-buildable task: no directory, a failure record after exactly N rounds.
        [failed] = manifest["failed"]
        assert failed["id"] == never["id"] and failed["stage"] == "build" and failed["rounds"] == 2
        assert not (tasks_dir / never["id"]).exists()
        record = read_json(failure_record_path(tasks_dir, never["id"]))
        assert record["ok"] is False and "outside the task layer" in record["reason"]
        env_calls = [c for c in record["provenance"]["calls"] if c["step"] == "environment"]
        assert [c["round"] for c in env_calls] == [0, 1, 2]
        assert not [p for p in tasks_dir.iterdir() if p.name.endswith(".partial")]

        # Called directly, the same failure is an error naming the task, the step and the record;
        # with the cache it costs nothing.
        with pytest.raises(LLMGenerationError) as exc:
            generate_task_llm(never, tasks_dir, model, max_repair_rounds=2, limits=LIMITS)
        assert never["id"] in str(exc.value) and "after 2 repair rounds" in str(exc.value)
        assert "environment failed at build" in str(exc.value)
        assert server.request_count() == 12


# --------------------------------------------------------------------------------------------------
# Pieces


def test_reply_parsing_accepts_common_shapes_and_names_what_is_missing():
    task = json.loads(task_reply("input").split("```json task\n")[1].split("```")[0])
    # Name on the line above the fence, tilde fences, trailing commas, chatter around blocks.
    text = ("Sure!\n\n**task**\n~~~json\n" + json.dumps(task)[:-1] + ",}\n~~~\n\nsolve.sh:\n"
            "```bash\necho hi > /app/out.txt\n```\nHope this helps.")
    parsed = parse_task_reply(text)
    assert parsed["title"] == task["title"]
    assert parsed["solve_sh"].startswith("#!/bin/bash\nset -euo pipefail\n") and "echo hi" in parsed["solve_sh"]
    # A code block containing a fence survives inside a longer fence.
    env = parse_environment_reply("````bash setup.sh\ncat <<'EOF'\n```\nEOF\n````\n"
                                  '```json environment\n{"apt_packages": ["sqlite3", "python3-numpy", "bash"]}\n```')
    # What the base image already has is not a task's extra package.
    assert "```" in env["setup_sh"] and env["apt_packages"] == ["sqlite3"]
    with pytest.raises(StepError) as exc:
        parse_environment_reply("```bash setup.sh\ntrue\n```")
    assert exc.value.step == "environment" and "'environment'" in exc.value.reason
    with pytest.raises(StepError) as exc:
        parse_task_reply("I cannot help with that.")
    assert "no fenced code blocks" in exc.value.reason
    with pytest.raises(StepError) as exc:
        parse_environment_reply('```bash setup.sh\ntrue\n```\n```json environment\n{"apt_packages": ["Bad Name"]}\n```')
    assert "apt_packages" in exc.value.reason


def test_fixture_makers_are_deterministic_and_report_the_real_contents():
    decls = [
        {"path": "scan.png", "install_to": "/app/scan.png", "kind": "image", "params": {"width": 80, "height": 60}},
        {"path": "rec.wav", "install_to": "/app/rec.wav", "kind": "audio",
         "params": {"rate": 8000, "duration_s": 1, "tones": 2, "noise": 0.02}},
        {"path": "clip.y4m", "install_to": "/app/clip.y4m", "kind": "video", "params": {"frames": 5}},
        {"path": "pkg/a.py", "install_to": "/app/vendor/pkg/a.py", "kind": "text", "content": "X = 1\n"},
    ]
    made = materialise_fixtures("tf-test", "image", decls)
    assert [f["data"] for f in made] == [f["data"] for f in materialise_fixtures("tf-test", "image", decls)]
    assert made[0]["data"] != materialise_fixtures("tf-other", "image", decls)[0]["data"]
    image, audio, video, _text = made

    pixels = np.asarray(Image.open(io.BytesIO(image["data"])).convert("RGB"))
    for name, entry in image["facts"]["per_colour"].items():
        hex_code = next(s["hex"] for s in image["facts"]["shapes"] if s["colour"] == name)
        rgb = [int(hex_code[i:i + 2], 16) for i in (1, 3, 5)]
        assert int((pixels == rgb).all(axis=2).sum()) == entry["area"]

    with wave.open(io.BytesIO(audio["data"])) as w:
        assert (w.getframerate(), w.getnframes()) == (8000, audio["facts"]["frames"])
        samples = np.array(struct.unpack(f"<{w.getnframes()}h", w.readframes(w.getnframes())), dtype=float)
    spectrum = np.abs(np.fft.rfft(samples))
    peaks = np.fft.rfftfreq(len(samples), 1 / 8000)[np.argsort(spectrum)[-2:]]
    assert sorted(round(p) for p in peaks) == sorted(round(t["freq_hz"]) for t in audio["facts"]["tones"])

    facts = video["facts"]
    header, rest = video["data"].split(b"\n", 1)
    assert header.startswith(b"YUV4MPEG2 W32 H24 ")
    frame_len = len(b"FRAME\n") + 3 * facts["width"] * facts["height"]
    assert len(rest) == facts["frames"] * frame_len
    x, y = facts["positions"][3]
    luma = rest[3 * frame_len + 6:3 * frame_len + 6 + facts["width"] * facts["height"]]
    assert luma[y * facts["width"] + x] == facts["square_luma"]
    assert luma[(y + facts["square_size"]) % facts["height"] * facts["width"] + x] in (facts["background_luma"],
                                                                                    facts["square_luma"])

    with pytest.raises(StepError) as exc:
        materialise_fixtures("tf-test", "audio", decls[3:])
    assert "declare at least one fixture of kind 'audio'" in exc.value.reason
    with pytest.raises(StepError) as exc:
        materialise_fixtures("tf-test", "text_only", decls[:1])
    assert "text_only" in exc.value.reason
    with pytest.raises(StepError) as exc:
        materialise_fixtures("tf-test", "image", [{**decls[0], "params": {"width": 4000}}])
    assert "params.width" in exc.value.reason and exc.value.step == "task"
    with pytest.raises(StepError) as exc:
        materialise_fixtures("tf-test", "text_only", [{**decls[3], "install_to": "/etc/passwd"}])
    assert "install_to" in exc.value.reason


@pytest.mark.skipif(subprocess.run(["which", "gcc"], capture_output=True).returncode != 0, reason="no gcc")
def test_c_binary_fixture_is_a_stripped_deterministic_executable(tmp_path):
    source = '#include <stdio.h>\nint main(void) { puts("vault open"); return 0; }\n'
    decl = [{"path": "bin/vault", "install_to": "/app/bin/vault", "kind": "c_binary", "source": source}]
    [binary] = materialise_fixtures("tf-test", "stripped_binary", decl)
    assert binary["data"] == materialise_fixtures("tf-test", "stripped_binary", decl)[0]["data"]
    assert binary["data"][:4] == b"\x7fELF" and binary["executable"] is True
    path = tmp_path / "vault"
    path.write_bytes(binary["data"])
    path.chmod(0o755)
    assert subprocess.run([str(path)], capture_output=True, text=True).stdout == "vault open\n"
    assert b"main" not in subprocess.run(["nm", str(path)], capture_output=True).stdout
    with pytest.raises(StepError) as exc:
        materialise_fixtures("tf-test", "stripped_binary", [{**decl[0], "source": "int main( {"}])
    assert "does not compile" in exc.value.reason and exc.value.log


def test_logs_sent_back_to_the_model_are_the_same_bytes_on_every_run():
    def run_log(seconds: str, token: str) -> str:
        return (f"$ bash /tmp/env/setup.sh  (exit 1, {seconds}s)\n" + "x = 1\n" * 900 +
                f"E   AssertionError: /app/a.txt is missing\n1 failed in {seconds}s\n"
                f"TERMFORGE-PROOF {token} collected=2 passed=1 failed=1\n")

    a = sanitize_log(run_log("0.05", "ab" * 12)[-4000:])
    b = sanitize_log(run_log("12.5", "cd" * 12)[-4000:])
    assert a == b and "1 failed in <t>s" in a and "TERMFORGE" not in a and len(a) <= 3000


@needs_bwrap
@pytest.mark.slow
def test_an_llm_task_may_need_a_debian_package_the_host_lacks(tmp_path):
    """The prompts offer the base image's packages and any Debian package; a generated task whose
    setup needs one the host lacks builds on a derived base, and validates."""
    import shutil

    from termforge.images import ensure_task_base

    pkg = next((p for p in ("datamash", "dc", "pv", "units") if shutil.which(p) is None), None)
    if pkg is None:
        pytest.skip("this host has every candidate package")

    def author(messages: list[dict]) -> str:
        if P.step_of(messages) != "environment":
            return scripted_author(messages)
        reply = environment_reply(messages[1]["content"], writes_outside=False)
        return (reply.replace("set -euo pipefail\n", f"set -euo pipefail\ncommand -v {pkg} > /dev/null\n")
                .replace('["python3-pil"]', f'["python3-pil", "{pkg}"]'))

    with FakeOpenAIServer(replies=author) as server:
        task_dir = generate_task_llm(_sig(1, "a hurried analyst"), tmp_path / "run", _model(server, tmp_path / "cache"),
                                     max_repair_rounds=2, images_dir=tmp_path / "images", limits=LIMITS)
        system = server.chat_bodies()[0]["messages"][0]["content"]
    assert "python3-numpy" in system and "installed into the image at build time" in system
    env = read_json(task_dir / "task.json")["environment"]
    assert env["apt_packages"] == [pkg] and env["base"] == "termforge/base:bookworm"
    verdict = validate_task(task_dir, BwrapRuntime(), tmp_path / "images", LIMITS)
    assert verdict.kept, (verdict.stage, verdict.reason)
    assert pkg in ensure_task_base(env["base"], env["apt_packages"]).installed()
