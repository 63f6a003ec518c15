"""Prompts for the llm generation backend, and the parsers for the replies they ask for.

The chain is four steps, each one chat call (docs/generation.md):

    task          instruction (title, body, deliverables), fixture spec, truth, method note, solve.sh
    initial_test  tests/test_initial_state.py: the untouched environment is as the task describes
    final_test    tests/test_final_state.py and the expected values it checks (merged into truth)
    environment   environment/setup.sh and the Debian packages the task needs

Replies are fenced blocks whose info string names them (```json task```, ```bash solve.sh```): a
name survives models that add chatter around their blocks, and code inside its own fence needs no
JSON escaping. Parsing is lenient about what models commonly get wrong (a name given on the line
above the fence, a missing name when only one block could be meant, trailing commas in JSON) and
strict about content; whatever it cannot accept raises ReplyFormatError, whose message is written to
be sent back to the model verbatim in a repair round.

Every prompt is a pure function of its inputs (sorted JSON, no clocks, no paths of this machine), so
the same task always sends the same bytes and the response cache answers reruns.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from termforge.errors import TermforgeError
from termforge.generate.base import BASE_APT_PACKAGES
from termforge.io import pretty_json

PROMPT_VERSION = "llm-chain-3"

STEPS = ("task", "initial_test", "final_test", "environment")
# Asked after the candidate passed validation, never part of the repair chain's outputs.
SECOND_SOLUTION = "second_solution"
STEP_MARKER = "[termforge step: {step}]"


class ReplyFormatError(TermforgeError):
    """A reply that does not follow the requested format; repairable by asking again."""


# --------------------------------------------------------------------------------------------------
# What every prompt states about the sandbox (kept in step with runtime/bwrap.py and grading/verifier.py)

_SYSTEM_TEMPLATE = """\
You are a task author for termforge, which builds executable tasks that evaluate terminal agents.
A task is a directory: an instruction the agent reads, an environment (fixture files plus a setup
script), a pytest verifier, an oracle solution and a private answer key. Everything you write will be
executed, exactly as written, in this sandbox:

- The agent works in /app, which is writable. The rest of the filesystem is read-only, except the
  private scratch directories /tmp and /home/user. There is no network and no root; nothing can be
  installed at run time.
- The userland is a Debian bookworm image: bash, coreutils, grep, sed, awk, and the image's own
  packages: {base_packages} (python3 is 3.11, with its standard library). {packages}
- environment/setup.sh runs once at build time with bash, as uid 1000, cwd /app; the fixture files
  are readable at /tmp/env/fixtures/<path> only while it runs. It may write only under /app.
- The oracle solution/solve.sh runs like the agent would: bash, cwd /app, after the build.
- The tests run after the agent has stopped, from a read-only copy at /tests, under
  `python3 -I -m pytest`, with a fresh environment. They see /app as the agent left it. They cannot
  see /tmp/env/fixtures, the answer key, or anything outside /app and /tests.
- private/truth.json (the answer key) never reaches the agent, the instruction or the environment.

Answer in exactly the reply format each request gives: fenced code blocks whose info string is a
language and a name (for example ```bash solve.sh). Text outside the blocks is ignored."""

ANY_PACKAGE = ("Any other Debian bookworm package (sqlite3, gcc, jq, ffmpeg, r-base-core, "
               "default-jdk-headless, ...) is installed into the image at build time when the environment "
               "step declares it.")


def system_prompt(packages: tuple[str, ...] | None = None) -> str:
    """What every step is told about the sandbox. The image's own packages (the default base's
    declaration, termforge/images/bases/) are always there; `packages`: the only extra Debian
    packages the runtime can provide (`runtime.rootfs: host` runs over the host's root, so only
    what the host has installed); None where any package is installed at build time (images)."""
    if packages is None:
        offer = ANY_PACKAGE
    else:
        offer = ("Only these other Debian packages can be declared by the environment step (nothing else "
                 "can be installed in this runtime): " + (", ".join(packages) or "none") + ".")
    return _SYSTEM_TEMPLATE.format(packages=offer, base_packages=", ".join(BASE_APT_PACKAGES))


SYSTEM_PROMPT = system_prompt(None)

_SOLVER_TEMPLATE = """\
You solve tasks in a Linux sandbox, as a terminal agent would, by writing one bash script. The
script runs in /app (writable), as uid 1000, with no network and no root; nothing can be installed.
The userland is Debian bookworm: bash, coreutils, grep, sed, awk, python3 (3.11) with the standard
library. {packages} You see only the instruction and the files in /app: compute every deliverable
from those files, exactly as the instruction asks.

Answer in exactly the reply format the request gives: fenced code blocks whose info string is a
language and a name (```bash solve.sh). Text outside the blocks is ignored."""


def solver_system_prompt(packages: tuple[str, ...] | None = None) -> str:
    """What the independent solver is told about the sandbox (the agent's view, no authoring)."""
    offer = ("Other packages the task declared may be installed." if packages is None else
             "Packages the task declared from these may be installed: " + (", ".join(packages) or "none") + ".")
    return _SOLVER_TEMPLATE.format(packages=offer)


VERIFIER_KIND_GUIDE = {
    "exact_text": "The final test compares the agent's output file(s) with the exact expected text "
                  "(ignoring only a trailing newline). The instruction fixes the format completely.",
    "metric_threshold": "The final test computes a numeric score of the agent's output against the expected "
                        "values (an error, a distance, an accuracy) and passes at a threshold; the "
                        "instruction names the metric and the threshold.",
    "adversarial_corpus": "The agent builds a tool (a filter, parser or validator). The final test runs it on a "
                          "hidden corpus of tricky cases embedded in the test (edge cases, near misses, "
                          "hostile inputs) that the agent never sees.",
    "fuzz_equivalence": "The agent writes a program. The final test generates inputs from a fixed seed and "
                        "compares the program's outputs with a reference implementation embedded in the "
                        "test.",
    "multi_protocol": "The result must be available and consistent through several interfaces or formats "
                      "(for example a CLI, a JSON file and an exit code, or a local service and a report); "
                      "the final test checks each and that they agree.",
}

FIXTURE_KIND_GUIDE = {
    "text_only": "Input files are text you write in full (fixture kind \"text\").",
    "image": "At least one input is a generated image (fixture kind \"image\"); you choose its parameters, "
             "termforge draws it deterministically and tells the test authors exactly what it contains.",
    "audio": "At least one input is a generated recording (fixture kind \"audio\"); termforge synthesises "
             "it and tells the test authors its exact contents.",
    "video": "At least one input is a generated video (fixture kind \"video\", uncompressed YUV4MPEG2 since "
             "no codecs are installed); termforge renders it and tells the test authors its contents.",
    "stripped_binary": "At least one input is a stripped executable (fixture kind \"c_binary\"): you write the "
                       "C source, termforge compiles it with gcc -O1 -s, and the agent gets only the binary. "
                       "The source never enters the environment.",
    "vendored_package": "The inputs include a small source package you write in full, as several \"text\" "
                        "fixtures under one directory (for example vendor/<name>/...), that the agent must "
                        "work with or repair.",
    "multi_service_compose": "The inputs describe several cooperating services: a compose.yaml plus each "
                             "service's scripts and configs as \"text\" fixtures. Containers cannot run, so "
                             "the services run as local processes on 127.0.0.1.",
}

FIXTURE_MAKERS_GUIDE = """\
Fixture kinds you can declare (each entry: "path" relative to environment/fixtures/, "install_to"
the absolute /app path where setup.sh will place it, "kind", and the kind's fields):
- "text": {"content": "<the whole file>"}; "executable": true makes it mode 755.
- "image": {"params": {"width": 32-512, "height": 32-512, "shapes": 1-40}}: an RGB PNG, white
  background, non-overlapping filled rectangles in named colours (red, blue, green, orange, purple,
  pink, cyan, brown). Reported back: every rectangle's colour and box, counts and areas per colour.
- "audio": {"params": {"rate": 8000|11025|16000|22050, "duration_s": 0.5-5, "tones": 1-6,
  "noise": 0-0.5}}: a mono 16-bit PCM WAV of steady sine tones plus Gaussian noise. Reported back:
  every tone's frequency and relative amplitude.
- "video": {"params": {"width": 16-128, "height": 16-128, "frames": 2-120, "fps": 1-60}}: a
  YUV4MPEG2 (C444) video of a bright square moving over a dark background. Reported back: the
  square's size, luma values and its top-left position in every frame.
- "c_binary": {"source": "<C99 source>"}: compiled and stripped. Reported back: size and sha256.
A fixture's bytes are fixed by the task and its path, so the same declaration always gives the
same file."""

COMPLEXITY_GUIDE = {
    "short": "a few commands (about 3-8)",
    "moderate": "a focused session (about 8-20 commands)",
    "complex": "a substantial session (about 20-30 commands) with several interacting parts",
    "intricate": "a long session (about 30-60 commands): several stages, traps that punish shortcuts, "
                 "and a result that can only be reached by careful investigation",
}

COMMAND_COMPLEXITY_GUIDE = {
    "bash_only": "solvable with shell tools alone",
    "bash_code": "needs shell work plus writing a short program",
    "bash_code_services": "needs shell work, a program, and starting or querying a local service or "
                          "long-running process",
}


def _marker(step: str) -> str:
    return STEP_MARKER.format(step=step)


def _signature_view(sig: dict) -> dict:
    keys = ("domain", "skill_type", "skills", "persona", "language", "anchor", "task_complexity",
            "command_complexity", "verifier_kind", "fixture_kind")
    return {k: sig.get(k) for k in keys}


def _block(lang: str, name: str, body: str) -> str:
    fence = "````" if "```" in body else "```"
    return f"{fence}{lang} {name}\n{body.rstrip()}\n{fence}"


# --------------------------------------------------------------------------------------------------
# Step prompts


def task_prompt(sig: dict) -> str:
    view = _signature_view(sig)
    return f"""\
{_marker("task")}
Design one task for this signature:

{_block("json", "signature", pretty_json(view))}

What the signature asks for:
- Domain {view['domain']}, skill type {view['skill_type']}; the task exercises these skills: \
{", ".join(view['skills'] or [])}.
- The instruction is written in the voice of {view['persona']}, as a real request from their work.
- The agent is expected to work mainly in {view['language']}.{_anchor_line(view['anchor'])}
- Size: {COMPLEXITY_GUIDE.get(view['task_complexity'], view['task_complexity'])}; \
{COMMAND_COMPLEXITY_GUIDE.get(view['command_complexity'], view['command_complexity'])}.
- Verifier ({view['verifier_kind']}): {VERIFIER_KIND_GUIDE.get(view['verifier_kind'], '')}
- Fixtures ({view['fixture_kind']}): {FIXTURE_KIND_GUIDE.get(view['fixture_kind'], '')}

{FIXTURE_MAKERS_GUIDE}

Rules:
- The instruction states every output path (absolute, under /app, in backticks) and its exact
  format, and names every input by its /app path. It never states or hints at the answer: no
  expected output, not even as an "example" of the format (show the format with placeholders).
- truth is the answer key: what you already know about the correct result, and the rules the
  verifier will apply. Parameters the agent is told (paths, formats, thresholds) go under
  truth.given; they must never be outputs. Everything else in truth, and every value the final
  test expects, is secret: it must not appear in the instruction or in any environment file.
- solve.sh is the oracle: a bash script run in /app that produces the correct result by actually
  computing it from the files in /app (it may use only what the environment provides).
- method_note explains how to discover the answer (the method, the traps), not the answer itself.
- output_paths lists the absolute paths solve.sh creates.

Reply with exactly these two blocks:

```json task
{{"title": "...", "body": "markdown: the situation and the exact requirements",
 "deliverables": ["`/app/...`: what it must contain"], "output_paths": ["/app/..."],
 "fixtures": [{{"path": "...", "install_to": "/app/...", "kind": "...", ...}}],
 "truth": {{"given": {{}}, "...": "..."}}, "method_note": "..."}}
```

```bash solve.sh
#!/bin/bash
...
```"""


def _anchor_line(anchor) -> str:
    return f"\n- Ground the task in real work with {anchor}." if anchor else ""


def initial_test_prompt(instruction: str, fixtures: list[dict], output_paths: list[str]) -> str:
    return f"""\
{_marker("initial_test")}
Write tests/test_initial_state.py for this task. It runs on the untouched environment, right after the
build, and must pass there: it proves the environment is what the instruction promises.

The instruction the agent reads:

{_block("markdown", "instruction.md", instruction)}

The fixture files (installed by setup.sh at install_to; sha256 of their exact bytes):

{_block("json", "fixtures", pretty_json([_fixture_row(f, facts=False) for f in fixtures]))}

Deliverables the agent must create (they must not exist yet): {", ".join(output_paths) or "(none)"}

Rules: plain pytest functions using only the Python standard library; absolute paths; check every
fixture is present at its install_to with the right size and sha256 (and executable where it
should be); check the deliverables do not exist yet; no network; no writes anywhere.

Reply with exactly one block:

```python test_initial_state.py
...
```"""


def final_test_prompt(sig: dict, instruction: str, fixtures: list[dict], truth: dict, solve_sh: str,
                      output_paths: list[str]) -> str:
    kind = sig.get("verifier_kind", "")
    return f"""\
{_marker("final_test")}
Write tests/test_final_state.py, the verifier, for this task. Verifier kind {kind}:
{VERIFIER_KIND_GUIDE.get(kind, "")}

The instruction the agent reads:

{_block("markdown", "instruction.md", instruction)}

The fixture files as materialised. Their facts are the real contents: small text files whole,
larger ones as exact statistics with their first and last lines; compute every expected value from
them. The tests cannot read the fixtures directory, only what setup.sh installed at install_to:

{_block("json", "fixtures", _facts_json([_fixture_row(f, facts=True) for f in fixtures]))}

The answer key so far:

{_block("json", "truth", pretty_json(truth))}

The oracle, which must score 1:

{_block("bash", "solve.sh", solve_sh)}

Deliverables: {", ".join(output_paths) or "(none)"}

Rules:
- Every test passes after solve.sh ran; at least one fails on the untouched environment.
- Expected values are written into the test as literals, computed from the facts above; the test
  cannot read the answer key or the fixtures directory at run time.
- Deterministic: fixed seeds, no clocks, no network; run agent programs through subprocess with a
  timeout; never import code from /app into the test process.
- Standard library only, unless the environment will provide a package the task already needs.
- Clear assertion messages that say what was wrong without printing the expected answer.

Reply with exactly two blocks: the test, and the expected values it checks (merged into the answer
key under "expected"; these are outputs, secret from the agent; parameters the instruction states
stay in truth.given):

```python test_final_state.py
...
```

```json expected
{{...}}
```"""


def environment_prompt(instruction: str, fixtures: list[dict], test_initial: str,
                       declared_output_paths: list[str]) -> str:
    return f"""\
{_marker("environment")}
Write environment/setup.sh for this task, and declare the Debian packages it needs. The instruction
the agent will read:

{_block("markdown", "instruction.md", instruction)}

setup.sh runs once at build time: bash, uid 1000, cwd /app, no network. The fixture files are
readable at /tmp/env/fixtures/<path> while it runs. It must write only under /app (a write to /tmp,
/home, /etc or anywhere else fails the build). It installs every fixture at its install_to (creating
directories, setting modes) and creates any other starting state the task needs, so that this test
passes on the result:

{_block("python", "test_initial_state.py", test_initial)}

The fixtures:

{_block("json", "fixtures", pretty_json([_fixture_row(f, facts=False) for f in fixtures]))}

It must not create the deliverables ({", ".join(declared_output_paths) or "none"}) and must not
contain any part of the answer.

Packages: the image already has {", ".join(BASE_APT_PACKAGES)}, bash and coreutils. List every
other Debian package that the agent, the oracle or the tests need (for example sqlite3, gcc, jq,
python3-scipy), by its exact Debian bookworm name: it is installed into the image at build time.

Reply with exactly two blocks:

```bash setup.sh
#!/bin/bash
set -euo pipefail
...
```

```json environment
{{"apt_packages": []}}
```"""


_NUMBER_LIST_RE = re.compile(r"\[\s*(-?[\d.]+(?:,\s*-?[\d.]+)*)\s*\]")


def _facts_json(rows: list[dict]) -> str:
    """Pretty JSON with lists of numbers kept on one line (a video's positions stay readable)."""
    return _NUMBER_LIST_RE.sub(lambda m: "[" + re.sub(r",\s*", ", ", m.group(1)) + "]", pretty_json(rows))


def _fixture_row(f: dict, facts: bool) -> dict:
    row = {"path": f["path"], "install_to": f["install_to"], "kind": f["kind"], "bytes": f["bytes"],
           "sha256": f["sha256"], "executable": f["executable"]}
    if facts:
        row["facts"] = f["facts"]
    return row


def second_solution_prompt(instruction: str, listing: list[dict]) -> str:
    """An independent solver: it sees what an agent sees (the instruction and the files under
    /app), never the oracle, the tests, the answer key or the fixture facts."""
    return f"""\
{_marker("second_solution")}
Solve this task yourself, as the agent would: from the instruction and the files in /app alone.
Write a bash script that runs in /app (bash, uid 1000, no network, nothing can be installed) and
leaves every deliverable exactly as the instruction asks, computed from the input files. Do not
guess: read the inputs in the script.

The instruction:

{_block("markdown", "instruction.md", instruction)}

The files under /app right after setup (small text files shown whole or by their first lines):

{_block("json", "files", pretty_json(listing))}

Reply with exactly one block:

```bash solve.sh
#!/bin/bash
set -euo pipefail
...
```"""


def repair_prompt(step: str, stage: str, reason: str, log: str) -> str:
    log_part = f"\n\nThe log:\n\n{_block('text', 'log', log)}" if log.strip() else ""
    return f"""\
{_marker(step)} (repair)
Your reply for this step did not work. Stage: {stage}.
Reason: {reason}{log_part}

Reply again, in full and in exactly the same format as before (every block), with the problem fixed."""


def step_of(messages: list[dict]) -> str | None:
    """Which chain step a conversation is for, from the marker of its first user message."""
    first = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    m = re.match(r"\[termforge step: (\w+)\]", first)
    return m.group(1) if m else None


# --------------------------------------------------------------------------------------------------
# Reply parsing


@dataclass(frozen=True)
class Block:
    lang: str
    name: str
    body: str
    heading: str  # the non-empty line just above the fence (some models name blocks there)
    closed: bool = True  # False: the reply ended inside this block (cut off)


_FENCE_RE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced code block of a Markdown reply, with its language and name if the info string
    gives them (```bash solve.sh, ```python name=test.py, ```json:task are all understood)."""
    lines = text.replace("\r\n", "\n").split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE_RE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group("fence"), m.group("info").strip()
        heading = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        body: list[str] = []
        j = i + 1
        closed = False
        while j < len(lines):
            stripped = lines[j].strip()
            if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
                closed = True
                break
            body.append(lines[j])
            j += 1
        lang, name = _split_info(info)
        # An unclosed last block is a reply cut off mid-file: it is recorded (so the error names the
        # real problem rather than "no block"), and reply_blocks refuses to use it.
        blocks.append(Block(lang, name, "\n".join(body), heading, closed))
        i = j + 1 if closed else j
    return blocks


def _split_info(info: str) -> tuple[str, str]:
    info = re.sub(r"\b(?:name|file|filename|title)\s*=\s*", " ", info)
    parts = [p for p in re.split(r"[\s:]+", info.strip().strip("{}")) if p]
    if not parts:
        return "", ""
    if len(parts) == 1:
        # ```solve.sh or ```task: a lone word with a dot (or a known step name) is a name.
        return ("", parts[0].strip("\"'")) if "." in parts[0] else (parts[0].lower(), "")
    return parts[0].lower(), parts[1].strip("\"'`")


def find_block(blocks: list[Block], name: str, langs: tuple[str, ...], claimed: set[int] | None = None) -> str:
    """The body of the block called `name`; failing a name, the one unnamed block in one of `langs`.
    A block the reply never closed is refused: a file cut off mid-way may still parse (a test cut
    after `assert got` compiles) and must never be kept."""
    claimed = claimed if claimed is not None else set()
    block = blocks[_find_block(blocks, name, langs, claimed)]
    if not block.closed:
        raise ReplyFormatError(f"block {name!r} is not closed: the reply ends inside it (cut off?); send the "
                               "whole block, closing fence included")
    return block.body


def _find_block(blocks: list[Block], name: str, langs: tuple[str, ...], claimed: set[int]) -> int:
    low = name.lower()
    for i, b in enumerate(blocks):
        if i not in claimed and (b.name.lower() == low or (not b.name and b.lang == low)):
            claimed.add(i)
            return i
    for i, b in enumerate(blocks):
        if i not in claimed and not b.name and re.search(rf"(^|[\s`*#/]){re.escape(low)}([\s`*:]|$)",
                                                         b.heading.lower()):
            claimed.add(i)
            return i
    candidates = [i for i, b in enumerate(blocks) if i not in claimed and not b.name and b.lang in langs]
    if len(candidates) == 1:
        claimed.add(candidates[0])
        return candidates[0]
    found = ", ".join(f"```{b.lang} {b.name}".rstrip() for b in blocks) or "none"
    raise ReplyFormatError(f"the reply has no fenced block named {name!r} (expected a block opening with "
                           f"```{langs[0]} {name}); blocks found: {found}")


_TRAILING_COMMA_RE = re.compile(r",(\s*[}\]])")


def parse_json_block(body: str, name: str) -> dict:
    """A JSON object from a block body, forgiving trailing commas and a stray prefix or suffix."""
    text = body.strip()
    attempts = [text, _TRAILING_COMMA_RE.sub(r"\1", text)]
    first_error: json.JSONDecodeError | None = None
    for candidate in attempts:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
            start = candidate.find("{")
            if start < 0:
                continue
            try:
                value, _ = json.JSONDecoder().raw_decode(candidate[start:])
            except json.JSONDecodeError:
                continue
        if not isinstance(value, dict):
            raise ReplyFormatError(f"block {name!r} must hold a JSON object, got {type(value).__name__}")
        return value
    assert first_error is not None
    line = text.splitlines()[first_error.lineno - 1] if text else ""
    raise ReplyFormatError(f"block {name!r} is not valid JSON: {first_error.msg} (line {first_error.lineno}, "
                           f"column {first_error.colno}: {line.strip()[:120]!r})")


def reply_blocks(text: str, wanted: list[tuple[str, tuple[str, ...]]]) -> dict[str, str]:
    """The named blocks a step asks for, by name, or a ReplyFormatError naming what is missing."""
    blocks = fenced_blocks(text)
    if not blocks:
        raise ReplyFormatError("the reply has no fenced code blocks; answer with the blocks the request names "
                               "(for example ```json task ... ```)")
    claimed: set[int] = set()
    return {name: find_block(blocks, name, langs, claimed) for name, langs in wanted}


__all__ = [
    "PROMPT_VERSION", "STEPS", "SYSTEM_PROMPT", "ReplyFormatError", "Block", "fenced_blocks", "find_block",
    "parse_json_block", "reply_blocks", "system_prompt", "task_prompt", "initial_test_prompt", "final_test_prompt",
    "environment_prompt", "repair_prompt", "step_of", "second_solution_prompt", "solver_system_prompt",
]
