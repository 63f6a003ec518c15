"""The llm backend: signature -> a chat model writes the task, step by step, repaired from real errors.

Chain (prompts in llm_prompts.py): task (instruction, fixture spec, truth, method note, oracle) ->
fixtures materialised here, deterministically from the task id -> initial-state test -> final-state
test (written against the fixtures' real contents) -> environment (setup.sh and apt packages). The
candidate task directory is then checked the way validation will check it: leaks (the instruction,
setup.sh and every text fixture are scanned), then every validation stage. A failure is fed back to the step that
caused it (the step's own conversation continues with the error), that step and the steps built on
it are regenerated, and the check runs again, for at most `max_repair_rounds` rounds.

The check is validation itself (quality/validate.py): final test fails untouched, oracle scores 1
twice, no-op and reward-hack probes score 0. A reply cut at the token limit is never kept (even
when it parses), and a non-retryable request error fails only its own task.

The output is the procedural backend's task directory layout (writer.py), so build, validation,
solving and export treat both backends alike. task.json's provenance holds every prompt and raw
reply of every step and round; nothing in it depends on clocks, temp paths or whether a reply came
from the response cache, so a cached rerun publishes byte-identical directories.
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import subprocess
import re
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tqdm import tqdm

from termforge.errors import TermforgeError
from termforge.generate import llm_prompts as P
from termforge.generate.base import BASE_APT_PACKAGES, TaskSpec, bash_script, instruction_frame
from termforge.generate.families.data_science.png_shape_census import PALETTE, png_rgb
from termforge.generate.families.scientific_computing.tone_inventory import _spaced_values, _wav_bytes
from termforge.generate.families.security.binary_passphrase_recovery import compile_c
from termforge.generate.stage import check_kept_task_dirs, shard_signatures
from termforge.generate.writer import task_files, write_task_dir
from termforge.io import atomic_write_json, clean_stale_staging, read_json, seed_from, stable_hash
from termforge.models.base import ChatModel, SamplingParams
from termforge.models.openai_backend import ModelRequestError
from termforge.quality.independence import repeats_oracle
from termforge.quality.leaks import SecretSet, against_inputs, find_leaks
from termforge.quality.validate import TaskVerdict, validate_task
from termforge.runtime.base import Limits, Runtime
from termforge.schemas import read

BACKEND = "llm"
FAMILY = "llm"
FAILURES_DIRNAME = ".llm-failures"
STEP_MAX_TOKENS = {"task": 4096, "initial_test": 2048, "final_test": 4096, "environment": 2048,
                   "second_solution": 4096}
# What the independent solver is shown of /app (environment_listing).
LISTING_FILES = 100
LISTING_LINES = 40
LISTING_CHARS = 16000
# The second solver may fix its own script once after it fails to run, as an agent would.
SECOND_SOLUTION_ATTEMPTS = 2
# Regenerating a step invalidates the steps written from its output.
DEPENDENTS = {"task": ("initial_test", "final_test", "environment"), "initial_test": ("environment",),
              "final_test": (), "environment": (), P.SECOND_SOLUTION: ()}
# Faults of the solver's own reply: the second-solution step is asked again, the task is not at fault.
SOLVER_FAULTS = ("format", "truncated", "not_independent")
MAX_FIXTURES = 64
MAX_FIXTURE_BYTES = 16 * 1024 * 1024
LOG_CHARS = 3000
TEXT_FACTS_WHOLE_CHARS = 4000
TEXT_FACTS_EDGE_LINES = 20
# A reply cut at the token limit is retried with a larger budget: x2, then x4.
MAX_BUDGET_DOUBLINGS = 2
# Packages a task author may reasonably want; under bwrap only the installed ones are offered.
OFFERABLE_PACKAGES = ("python3-numpy", "python3-pil", "python3-scipy", "python3-pandas", "python3-yaml",
                      "sqlite3", "gcc", "libc6-dev", "make", "binutils", "file", "jq", "bc", "xxd", "gawk",
                      "zip", "unzip", "git", "sox", "ffmpeg", "imagemagick")
_SAFE_REL = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*$")
_APT_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


class LLMGenerationError(TermforgeError):
    """No sound task after every repair round; `record` is the failure record that was written."""

    def __init__(self, message: str, record: dict, record_path: Path):
        super().__init__(message)
        self.record = record
        self.record_path = record_path


@dataclass
class StepError(Exception):
    """A failure blamed on one chain step: repairable by regenerating that step."""

    step: str
    stage: str
    reason: str
    log: str = ""

    def __str__(self) -> str:
        return f"step {self.step} ({self.stage}): {self.reason}"

    def to_dict(self) -> dict:
        return {"step": self.step, "stage": self.stage, "reason": self.reason, "log": self.log}


# --------------------------------------------------------------------------------------------------
# Fixture makers: (declaration, rng) -> (bytes, facts). Facts are what the verifier prompt is told.


def _param(params: dict, key: str, lo: float, hi: float, default, where: str, integer: bool = True,
           choices: tuple | None = None):
    value = params.get(key, default)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and integer:
        ok = float(value).is_integer()
        value = int(value) if ok else value
    if choices is not None:
        if value not in choices:
            raise StepError("task", "fixtures", f"{where}.params.{key}: expected one of {list(choices)}, got {value!r}")
        return value
    if not ok or not lo <= value <= hi:
        kind = "an integer" if integer else "a number"
        raise StepError("task", "fixtures", f"{where}.params.{key}: expected {kind} in [{lo}, {hi}], got {value!r}")
    return value


def text_facts(content: str) -> dict:
    """What the final-test author is told about a text file: the whole file when it is small, else
    exact statistics (which it can rely on) with the first and last lines."""
    lines = content.splitlines()
    facts = {"lines": len(lines), "bytes": len(content.encode()), "ends_with_newline": content.endswith("\n")}
    if len(content) <= TEXT_FACTS_WHOLE_CHARS:
        facts["content"] = content
        return facts
    facts.update({"words": len(content.split()), "distinct_lines": len(set(lines)),
                  "empty_lines": sum(1 for line in lines if not line.strip()),
                  "first_lines": lines[:TEXT_FACTS_EDGE_LINES], "last_lines": lines[-TEXT_FACTS_EDGE_LINES:]})
    return facts


def make_text(decl: dict, rng: random.Random, where: str) -> tuple[bytes, dict]:
    content = decl.get("content")
    if not isinstance(content, str):
        raise StepError("task", "fixtures", f"{where}.content: a text fixture needs its whole file as a string")
    return content.encode(), text_facts(content)


def make_image(decl: dict, rng: random.Random, where: str) -> tuple[bytes, dict]:
    params = decl.get("params") or {}
    width = _param(params, "width", 32, 512, 96, where)
    height = _param(params, "height", 32, 512, 72, where)
    n_shapes = _param(params, "shapes", 1, 40, 6, where)
    colours = sorted(PALETTE.items())
    boxes: list[tuple[int, int, int, int]] = []
    shapes = []
    for _ in range(n_shapes):
        for _attempt in range(400):
            w = rng.randint(3, max(3, width // 5))
            h = rng.randint(3, max(3, height // 5))
            x = rng.randint(1, width - w - 1)
            y = rng.randint(1, height - h - 1)
            # A one-pixel gap keeps every rectangle its own connected component.
            if all(x + w + 1 <= bx or bx + bw + 1 <= x or y + h + 1 <= by or by + bh + 1 <= y
                   for bx, by, bw, bh in boxes):
                break
        else:
            raise StepError("task", "fixtures", f"{where}: {n_shapes} shapes do not fit in {width}x{height}; "
                                                "declare fewer shapes or a larger image")
        hex_code, name = colours[rng.randrange(len(colours))]
        boxes.append((x, y, w, h))
        shapes.append({"colour": name, "hex": hex_code, "x": x, "y": y, "width": w, "height": h, "area": w * h})
    pixels = [[(255, 255, 255)] * width for _ in range(height)]
    for s in shapes:
        rgb = tuple(int(s["hex"][i:i + 2], 16) for i in (1, 3, 5))
        for yy in range(s["y"], s["y"] + s["height"]):
            row = pixels[yy]
            for xx in range(s["x"], s["x"] + s["width"]):
                row[xx] = rgb
    filters = [rng.randrange(5) for _ in range(height)]
    per_colour: dict[str, dict] = {}
    for s in shapes:
        entry = per_colour.setdefault(s["colour"], {"count": 0, "area": 0})
        entry["count"] += 1
        entry["area"] += s["area"]
    shapes.sort(key=lambda s: (s["y"], s["x"]))
    facts = {"format": "PNG, 8-bit RGB", "width": width, "height": height, "background": "#ffffff",
             "shapes": shapes, "per_colour": per_colour,
             "background_pixels": width * height - sum(s["area"] for s in shapes)}
    return png_rgb(width, height, pixels, filters), facts


def make_audio(decl: dict, rng: random.Random, where: str) -> tuple[bytes, dict]:
    params = decl.get("params") or {}
    rate = _param(params, "rate", 0, 0, 8000, where, choices=(8000, 11025, 16000, 22050))
    duration = _param(params, "duration_s", 0.5, 5.0, 1.0, where, integer=False)
    n_tones = _param(params, "tones", 1, 6, 2, where)
    noise = _param(params, "noise", 0.0, 0.5, 0.05, where, integer=False)
    frames = int(rate * duration)
    freqs = _spaced_values(rng, n_tones, 100.0, min(3500.0, rate / 2 - 300.0), 40.0)
    amps = [1.0] + [round(rng.uniform(0.3, 1.0), 3) for _ in freqs[1:]]
    rng.shuffle(amps)
    phases = [rng.uniform(0, 2 * math.pi) for _ in freqs]
    scale = 0.9 * 32767 / (sum(amps) + 4 * noise)
    samples = []
    for i in range(frames):
        t = i / rate
        v = sum(a * math.sin(2 * math.pi * f * t + ph) for f, a, ph in zip(freqs, amps, phases))
        if noise:
            v += rng.gauss(0.0, noise)
        samples.append(max(-32768, min(32767, round(v * scale))))
    tones = sorted(({"freq_hz": f, "amplitude_rel": a} for f, a in zip(freqs, amps)), key=lambda t: t["freq_hz"])
    facts = {"format": "WAV, PCM 16-bit, mono", "rate": rate, "frames": frames, "duration_s": frames / rate,
             "tones": tones, "noise_rel": noise}
    return _wav_bytes(samples, rate), facts


def make_video(decl: dict, rng: random.Random, where: str) -> tuple[bytes, dict]:
    params = decl.get("params") or {}
    width = _param(params, "width", 16, 128, 32, where)
    height = _param(params, "height", 16, 128, 24, where)
    n_frames = _param(params, "frames", 2, 120, 12, where)
    fps = _param(params, "fps", 1, 60, 10, where)
    size = rng.randint(max(2, min(width, height) // 8), max(3, min(width, height) // 3))
    bg, fg = rng.randint(16, 40), rng.randint(200, 235)
    x, y = rng.randint(0, width - size), rng.randint(0, height - size)
    vx, vy = rng.choice((-3, -2, -1, 1, 2, 3)), rng.choice((-3, -2, -1, 1, 2, 3))
    out = bytearray(f"YUV4MPEG2 W{width} H{height} F{fps}:1 Ip A1:1 C444\n".encode())
    chroma = bytes([128]) * (width * height)
    positions = []
    for _ in range(n_frames):
        positions.append([x, y])
        luma = bytearray([bg]) * (width * height)
        for yy in range(y, y + size):
            luma[yy * width + x: yy * width + x + size] = bytes([fg]) * size
        out += b"FRAME\n" + luma + chroma + chroma
        # Bounce off the edges so the square never leaves the frame.
        if not 0 <= x + vx <= width - size:
            vx = -vx
        if not 0 <= y + vy <= height - size:
            vy = -vy
        x, y = x + vx, y + vy
    facts = {"format": "YUV4MPEG2, C444 (Y then U then V planes per frame), U=V=128", "width": width,
             "height": height, "fps": fps, "frames": n_frames, "square_size": size, "background_luma": bg,
             "square_luma": fg, "positions": positions}
    return bytes(out), facts


def make_c_binary(decl: dict, rng: random.Random, where: str) -> tuple[bytes, dict]:
    source = decl.get("source")
    if not isinstance(source, str) or not source.strip():
        raise StepError("task", "fixtures", f"{where}.source: a c_binary fixture needs its C99 source as a string")
    try:
        data = compile_c(source, Path(decl["path"]).name, FAMILY)
    except TermforgeError as exc:
        raise StepError("task", "fixtures", f"{where}: the C source does not compile", str(exc)[-LOG_CHARS:]) from None
    # The test author may know what the binary does; the agent only ever gets the stripped bytes.
    return data, {"format": "ELF executable, stripped (gcc -O1 -s -std=c99)", "source": source}


FIXTURE_MAKERS: dict[str, Callable[[dict, random.Random, str], tuple[bytes, dict]]] = {
    "text": make_text, "image": make_image, "audio": make_audio, "video": make_video, "c_binary": make_c_binary,
}
# What a signature's fixture kind demands of the declared fixtures.
REQUIRED_MAKER = {"image": "image", "audio": "audio", "video": "video", "stripped_binary": "c_binary"}


def materialise_fixtures(task_id: str, fixture_kind: str, decls: Any) -> list[dict]:
    """Check the declared fixtures and make their bytes. Each fixture's RNG is seeded from the task
    id and its path alone, so repairing an unrelated part of the task never changes it."""
    if not isinstance(decls, list):
        raise StepError("task", "format", "task.fixtures: expected a list of fixture declarations")
    if len(decls) > MAX_FIXTURES:
        raise StepError("task", "fixtures", f"task.fixtures: at most {MAX_FIXTURES} fixtures, got {len(decls)}")
    out: list[dict] = []
    seen_paths: set[str] = set()
    seen_targets: set[str] = set()
    total = 0
    for i, decl in enumerate(decls):
        where = f"task.fixtures[{i}]"
        if not isinstance(decl, dict):
            raise StepError("task", "format", f"{where}: expected an object")
        path, target, kind = decl.get("path"), decl.get("install_to"), decl.get("kind")
        if not isinstance(path, str) or not _SAFE_REL.match(path) or path == ".keep":
            raise StepError("task", "fixtures", f"{where}.path: expected a relative path of plain names "
                                                f"(letters, digits, . _ + -), got {path!r}")
        if not isinstance(target, str) or not target.startswith("/app/") or not _SAFE_REL.match(target[5:]):
            raise StepError("task", "fixtures", f"{where}.install_to: expected an absolute path under /app/, "
                                                f"got {target!r}")
        if kind not in FIXTURE_MAKERS:
            raise StepError("task", "fixtures", f"{where}.kind: expected one of {sorted(FIXTURE_MAKERS)}, got {kind!r}")
        if path in seen_paths or target in seen_targets:
            raise StepError("task", "fixtures", f"{where}: path {path!r} or install_to {target!r} is declared twice")
        seen_paths.add(path)
        seen_targets.add(target)
        seed = seed_from("llm-fixture", task_id, path)
        data, facts = FIXTURE_MAKERS[kind](decl, random.Random(seed), where)
        total += len(data)
        if total > MAX_FIXTURE_BYTES:
            raise StepError("task", "fixtures", f"task.fixtures: more than {MAX_FIXTURE_BYTES} bytes in all; "
                                                "declare smaller fixtures")
        executable = bool(decl.get("executable", kind == "c_binary"))
        record = {"path": path, "install_to": target, "kind": kind, "bytes": len(data),
                  "sha256": stable_hash(data, 64), "executable": executable, "facts": facts, "seed": seed,
                  "declaration": {k: v for k, v in decl.items() if k not in ("content", "source")}}
        out.append({**record, "data": data})
    nested = sorted(a for a in seen_paths for b in seen_paths if b.startswith(a + "/"))
    if nested:
        raise StepError("task", "fixtures", f"task.fixtures: {nested[0]!r} is declared as a file and as a directory "
                                            "of another fixture")
    kinds = {f["kind"] for f in out}
    need = REQUIRED_MAKER.get(fixture_kind)
    if need and need not in kinds:
        raise StepError("task", "fixtures", f"the signature's fixture kind is {fixture_kind}: declare at least one "
                                            f"fixture of kind {need!r}")
    if fixture_kind == "text_only" and kinds - {"text"}:
        raise StepError("task", "fixtures", "the signature's fixture kind is text_only: every fixture must be of "
                                            "kind 'text'")
    if fixture_kind == "vendored_package":
        tops = [f["path"].split("/")[0] for f in out if f["kind"] == "text" and "/" in f["path"]]
        if not any(tops.count(t) >= 2 for t in tops):
            raise StepError("task", "fixtures", "the signature's fixture kind is vendored_package: declare the "
                                                "package as at least two text fixtures under one directory")
    if fixture_kind == "multi_service_compose" and not any(
            Path(f["path"]).name in ("compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml")
            for f in out):
        raise StepError("task", "fixtures", "the signature's fixture kind is multi_service_compose: declare a "
                                            "compose.yaml text fixture describing the services")
    return out


@functools.lru_cache(maxsize=1)
def _host_installed(packages: tuple[str, ...]) -> tuple[str, ...]:
    res = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Status}\n", *packages], capture_output=True,
                         text=True)
    ok = {line.split()[0] for line in res.stdout.splitlines() if line.endswith("install ok installed")}
    return tuple(p for p in packages if p in ok)


def runtime_packages(runtime: Runtime) -> tuple[str, ...] | None:
    """The extra Debian packages a task may declare in this runtime: None (any Debian package,
    installed into a derived base image at build time), except over the host's root
    (`runtime.rootfs: host`), where only what the host has installed can be offered."""
    if getattr(runtime, "name", "") != "bwrap" or getattr(runtime, "rootfs_mode", "image") != "host":
        return None
    return _host_installed(OFFERABLE_PACKAGES)


# --------------------------------------------------------------------------------------------------
# Step outputs


def _str_field(obj: dict, key: str, step: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise StepError(step, "format", f"{step}.{key}: expected a non-empty string")
    return value


def _abs_app_paths(values: Any, where: str) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) and v.startswith("/app/") and
                                               _SAFE_REL.match(v[5:].rstrip("/")) for v in values):
        raise StepError("task", "format", f"{where}: expected a list of absolute paths under /app/")
    return list(values)


def _script(text: str) -> str:
    text = text.strip("\n") + "\n"
    # A script without a shebang gets the strict header, so a failing command fails the run.
    return text if text.startswith("#!") else bash_script(text)


def parse_task_reply(text: str) -> dict:
    blocks = _parse(lambda: P.reply_blocks(text, [("task", ("json",)), ("solve.sh", ("bash", "sh", "shell"))]),
                    "task")
    data = _parse(lambda: P.parse_json_block(blocks["task"], "task"), "task")
    deliverables = data.get("deliverables")
    if not isinstance(deliverables, list) or not deliverables or not all(isinstance(d, str) for d in deliverables):
        raise StepError("task", "format", "task.deliverables: expected a non-empty list of strings")
    truth = data.get("truth")
    if not isinstance(truth, dict) or not truth:
        raise StepError("task", "format", "task.truth: expected a non-empty JSON object (the answer key)")
    if "given" in truth and not isinstance(truth["given"], dict):
        raise StepError("task", "format", "task.truth.given: expected an object")
    return {
        "title": _str_field(data, "title", "task").strip(),
        "body": _str_field(data, "body", "task"),
        "deliverables": deliverables,
        "output_paths": _abs_app_paths(data.get("output_paths", []), "task.output_paths"),
        "fixture_decls": data.get("fixtures", []),
        "truth": truth,
        "method_note": _str_field(data, "method_note", "task"),
        "solve_sh": _script(blocks["solve.sh"]),
    }


def parse_initial_reply(text: str) -> dict:
    blocks = _parse(lambda: P.reply_blocks(text, [("test_initial_state.py", ("python", "py"))]), "initial_test")
    return {"test_initial": _python_source(blocks["test_initial_state.py"], "initial_test")}


def parse_final_reply(text: str) -> dict:
    blocks = _parse(lambda: P.reply_blocks(text, [("test_final_state.py", ("python", "py")),
                                                  ("expected", ("json",))]), "final_test")
    expected = _parse(lambda: P.parse_json_block(blocks["expected"], "expected"), "final_test")
    return {"test_final": _python_source(blocks["test_final_state.py"], "final_test"), "expected": expected}


def parse_environment_reply(text: str) -> dict:
    blocks = _parse(lambda: P.reply_blocks(text, [("setup.sh", ("bash", "sh", "shell")),
                                                  ("environment", ("json",))]), "environment")
    env = _parse(lambda: P.parse_json_block(blocks["environment"], "environment"), "environment")
    packages = env.get("apt_packages", [])
    if not isinstance(packages, list) or not all(isinstance(p, str) and _APT_NAME.match(p) for p in packages):
        raise StepError("environment", "format", "environment.apt_packages: expected a list of Debian package names")
    return {"setup_sh": _script(blocks["setup.sh"]),
            "apt_packages": sorted(set(packages) - set(BASE_APT_PACKAGES))}


def _parse(fn: Callable, step: str):
    try:
        return fn()
    except P.ReplyFormatError as exc:
        raise StepError(step, "format", str(exc)) from None


def _python_source(text: str, step: str) -> str:
    source = text.strip("\n") + "\n"
    try:
        compile(source, f"<{step}>", "exec")
    except SyntaxError as exc:
        raise StepError(step, "format", f"the test does not parse: {exc.msg} at line {exc.lineno}") from None
    if not re.search(r"^def test_\w*\(", source, re.M):
        raise StepError(step, "format", "the test module defines no top-level test_* function")
    return source


PARSERS = {"initial_test": parse_initial_reply, "final_test": parse_final_reply,
           "environment": parse_environment_reply}


# --------------------------------------------------------------------------------------------------
# Logs that go back into prompts: stripped of everything that changes from run to run (durations,
# the verifier's per-run proof token), so a repair prompt is the same bytes on every rerun.

_DURATIONS = (
    (re.compile(r"\(exit (-?\d+), \d+(?:\.\d+)?s\)"), r"(exit \1)"),
    (re.compile(r" in \d+(?:\.\d+)?s(?: \(\d+:\d\d:\d\d\))?"), " in <t>s"),
)


def sanitize_log(text: str, limit: int = LOG_CHARS) -> str:
    lines = [line for line in text.splitlines() if "TERMFORGE-PROOF" not in line]
    out = "\n".join(lines)
    for pattern, repl in _DURATIONS:
        out = pattern.sub(repl, out)
    if len(out) > limit:
        # Cut on a line boundary: the head of a tail-truncated log is the part that can shift.
        out = out[-limit:]
        out = out[out.find("\n") + 1:] if "\n" in out else out
    return out.strip("\n")


_COLLECTION_TROUBLE = re.compile(r"ERROR collecting|SyntaxError|IndentationError|no tests ran|"
                                 r"fixture '\w+' not found|errors? during collection")


# --------------------------------------------------------------------------------------------------
# The chain


def declared_text(spec: TaskSpec, fixtures: list[dict], sig: dict | None = None) -> str:
    """What the task declares without any answer: the signature, the paths of its inputs and
    deliverables, and the parameters its author put under truth.given (a threshold, a format)."""
    parts = [json.dumps(P._signature_view(sig), sort_keys=True)] if sig else []
    parts += list(spec.output_paths) + [f.get("install_to", "") for f in fixtures]
    parts.append(json.dumps(spec.truth.get("given", {}), sort_keys=True))
    return "\n".join(parts)


def input_text(spec: TaskSpec, fixtures: list[dict]) -> str:
    """The task's input data as the agent can read it: the text fixtures."""
    return "\n".join(f["data"].decode("utf-8", "replace") for f in fixtures if f["kind"] == "text")


def visible_leak(spec: TaskSpec, fixtures: list[dict], sig: dict | None = None) -> tuple[str, str, str] | None:
    """The first answer found, in any disguise (termforge.quality.leaks), in what the agent or the
    image can see: (the step that wrote that text, the file, what leaked, described without
    quoting it).

    Givens come from inputs, never from outputs: a value is given only when the signature, the
    declared paths and parameters (truth.given) or the input data hold it. The instruction is
    scanned like every other file, so an expected output it states (as an "example", restated in
    prose) is a leak blamed on the task step; input data may be named in it freely."""
    declared = declared_text(spec, fixtures, sig)
    hidden = {k: v for k, v in spec.truth.items() if k not in ("given", "expected")}
    expected = {"expected": spec.truth.get("expected", {})}
    inputs = input_text(spec, fixtures)
    in_instruction = against_inputs(hidden, "task", declared, inputs).merge(
        against_inputs(expected, "final_test", declared, inputs))
    in_files = SecretSet.from_values(hidden, "task", given=declared).merge(
        SecretSet.from_values(expected, "final_test", given=declared))
    leaks = find_leaks(spec.instruction, in_instruction)
    if leaks:
        return "task", "instruction.md", leaks[0].describe()
    visible = [("environment", "environment/setup.sh", spec.setup_sh)]
    visible += [("task", f"environment/fixtures/{f['path']}", f["data"].decode("utf-8", "replace"))
                for f in fixtures if f["kind"] == "text"]
    for step, rel, text in visible:
        leaks = find_leaks(text, in_files, input_data=True)
        if leaks:
            return step, rel, leaks[0].describe()
    return None


def _leaves(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _leaves(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _leaves(v)]
    return [] if obj is None or isinstance(obj, bool) else [str(obj)]


def split_declared(expected: dict, declared: set[str]) -> tuple[dict, dict]:
    """The final test's expected values split into those the task declared up front (every leaf one
    of `declared`: its paths and truth.given parameters) and the outputs (the rest, secret)."""
    told, hidden = {}, {}
    for key, value in expected.items():
        leaves = _leaves(value)
        (told if leaves and all(leaf in declared for leaf in leaves) else hidden)[key] = value
    return told, hidden


def task_json_llm(sig: dict, spec: TaskSpec, fixtures: list[dict], provenance: dict) -> dict:
    return {
        "id": sig["id"],
        "signature": sig,
        "instruction": spec.instruction,
        "family": FAMILY,
        "actual": {"domain": sig["domain"], "verifier_kind": spec.verifier_kind, "fixture_kind": spec.fixture_kind},
        "mismatch": [],
        "output_paths": spec.output_paths,
        "environment": {"apt_packages": sorted(spec.apt_packages), "allow_network": spec.allow_network,
                        "timeout_sec": spec.timeout_sec},
        "fixtures": [{k: f[k] for k in ("path", "install_to", "kind", "bytes", "sha256", "executable")}
                     for f in fixtures],
        "provenance": provenance,
    }


def environment_listing(session) -> list[dict]:
    """What an agent sees in /app: every file's path and size, and small text files' first lines."""
    root = session._host_path("/app")
    out, budget = [], LISTING_CHARS
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if len(out) >= LISTING_FILES or p.is_symlink() or not p.is_file():
                continue
            data = p.read_bytes()
            row = {"path": "/app/" + str(p.relative_to(root)), "bytes": len(data),
                   "executable": bool(p.stat().st_mode & 0o111)}
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            if text is not None and "\x00" not in text and budget > 0:
                lines = text.splitlines()
                shown = "\n".join(lines[:LISTING_LINES])[:min(budget, 3000)]
                row["text" if len(lines) <= LISTING_LINES and len(shown) == len(text.rstrip("\n")) else "head"] = shown
                budget -= len(shown)
            out.append(row)
    return out


def _outputs_of(session, paths: list[str]) -> dict[str, bytes | None]:
    got = {}
    for p in paths:
        try:
            host = session._host_path(p)
            got[p] = host.read_bytes() if host.is_file() and not host.is_symlink() else None
        except TermforgeError:
            got[p] = None
    return got


def _normalised(outputs: dict[str, bytes | None]) -> dict[str, list[str]]:
    return {p: [" ".join(ln.split()) for ln in (d or b"").decode("utf-8", "replace").splitlines() if ln.strip()]
            for p, d in outputs.items()}


def outputs_diff(want: dict[str, bytes | None], got: dict[str, bytes | None], limit: int = 60) -> str:
    """A unified diff per deliverable, oracle first (for the author of the task, host side)."""
    import difflib

    out = []
    for p in sorted(want):
        a = (want[p] or b"").decode("utf-8", "replace").splitlines()
        b = (got.get(p) or b"").decode("utf-8", "replace").splitlines()
        if got.get(p) is None:
            out.append(f"{p}: the independent solution did not write it")
        elif a != b:
            out += list(difflib.unified_diff(a, b, f"{p} (solve.sh)", f"{p} (independent)", lineterm="", n=1))[:limit]
    return "\n".join(out)


def parse_second_solution_reply(text: str) -> str:
    blocks = _parse(lambda: P.reply_blocks(text, [("solve.sh", ("bash", "sh", "shell"))]), P.SECOND_SOLUTION)
    return _script(blocks["solve.sh"])


class _Chain:
    def __init__(self, sig: dict, model: ChatModel, sampling: SamplingParams, runtime: Runtime,
                 images_dir: Path, work: Path, limits: Limits, base_image: str, max_repair_rounds: int,
                 second_solution: bool = True):
        self.sig = sig
        self.task_id = sig["id"]
        self.model = model
        self.sampling = sampling
        self.runtime = runtime
        self.images_dir = images_dir
        self.work = work
        self.limits = limits
        self.base_image = base_image
        self.max_repair_rounds = max_repair_rounds
        self.outputs: dict[str, dict] = {}
        self.fixtures: list[dict] = []
        self.conversations: dict[str, tuple[list[dict], str]] = {}
        self.calls: list[dict] = []
        self.rounds: list[dict] = []
        self.truncations: dict[str, int] = {}
        self.check_log: list[dict] = []
        self._finish_reason = ""
        self.packages = runtime_packages(runtime)
        self.second_solution = second_solution
        self.alternative: str | None = None
        self._asking = ""
        self._validated: tuple[str, TaskVerdict] | None = None
        self._solver_repair: StepError | None = None  # the solver's last fault, sent back to it

    # -- model calls -----------------------------------------------------------------------------

    def _ask(self, step: str, prompt: str, repair: StepError | None, round_no: int) -> str:
        self._asking = step
        system = P.solver_system_prompt(self.packages) if step == P.SECOND_SOLUTION else P.system_prompt(self.packages)
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        previous = self.conversations.get(step)
        if repair is not None and previous is not None and previous[0] == messages:
            # The step's own conversation goes on: the model sees what it wrote and why it failed.
            # Only the latest attempt is kept, so a repair prompt does not grow round after round.
            messages = messages + [{"role": "assistant", "content": previous[1]},
                                   {"role": "user", "content": P.repair_prompt(step, repair.stage, repair.reason,
                                                                               repair.log)}]
        seed = seed_from("llm-generate", self.task_id, step, round_no) % 2**31
        budget = STEP_MAX_TOKENS[step] * 2 ** min(self.truncations.get(step, 0), MAX_BUDGET_DOUBLINGS)
        sampling = self.sampling.replace(seed=seed, max_new_tokens=max(self.sampling.max_new_tokens, budget))
        completion = self.model.chat(messages, n=1, sampling=sampling)[0]
        self.calls.append({"round": round_no, "step": step, "seed": seed, "sampling": sampling.to_dict(),
                           "messages": messages, "reply": completion.text,
                           "finish_reason": completion.finish_reason, "prompt_tokens": completion.prompt_tokens,
                           "completion_tokens": completion.completion_tokens})
        self.conversations[step] = (messages[:2], completion.text)
        self._finish_reason = completion.finish_reason
        return completion.text

    def _run_step(self, step: str, repair: StepError | None, round_no: int) -> None:
        prompt = self._prompt(step)
        reply = self._ask(step, prompt, repair, round_no)
        if self._finish_reason == "length":
            # Nothing of a cut reply is kept, even when what arrived happens to parse: a test cut
            # after `assert got` still compiles and accepts wrong answers.
            self.truncations[step] = self.truncations.get(step, 0) + 1
            raise StepError(step, "truncated", "the reply was cut off at the token limit (finish_reason: length) "
                                               "and was discarded; reply again in full, more concisely")
        if step == "task":
            self.fixtures = []
            parsed = parse_task_reply(reply)
            self.fixtures = materialise_fixtures(self.task_id, self.sig["fixture_kind"], parsed["fixture_decls"])
        else:
            parsed = PARSERS[step](reply)
        self.outputs[step] = parsed

    def _current_step(self) -> str:
        if self._asking == P.SECOND_SOLUTION:
            return P.SECOND_SOLUTION
        return next((step for step in P.STEPS if step not in self.outputs), P.STEPS[-1])

    def _prompt(self, step: str) -> str:
        if step == "task":
            return P.task_prompt(self.sig)
        task = self.outputs["task"]
        instruction = self._instruction()
        if step == "initial_test":
            return P.initial_test_prompt(instruction, self.fixtures, task["output_paths"])
        if step == "final_test":
            return P.final_test_prompt(self.sig, instruction, self.fixtures, task["truth"], task["solve_sh"],
                                       task["output_paths"])
        return P.environment_prompt(instruction, self.fixtures, self.outputs["initial_test"]["test_initial"],
                                    task["output_paths"])

    def _instruction(self) -> str:
        task = self.outputs["task"]
        return instruction_frame(self.sig, task["title"], task["body"], task["deliverables"])

    # -- the task ---------------------------------------------------------------------------------

    def spec(self) -> TaskSpec:
        task, env = self.outputs["task"], self.outputs["environment"]
        truth = dict(task["truth"])
        # Givens come from inputs, never from outputs: an expected value is given only when it is
        # one the task declared before any answer existed (a deliverable's path, an input's path, a
        # parameter under the task's truth.given), never because the instruction happens to state it.
        declared = {*task["output_paths"], *(f["install_to"] for f in self.fixtures),
                    *_leaves(truth.get("given", {}))}
        told, hidden = split_declared(self.outputs["final_test"]["expected"], declared)
        truth["expected"] = hidden
        if told:
            truth["given"] = {**truth.get("given", {}), "expected": told}
        return TaskSpec(
            instruction=self._instruction(), setup_sh=env["setup_sh"],
            test_initial=self.outputs["initial_test"]["test_initial"],
            test_final=self.outputs["final_test"]["test_final"], solve_sh=task["solve_sh"], truth=truth,
            method_note=task["method_note"], verifier_kind=self.sig["verifier_kind"],
            fixture_kind=self.sig["fixture_kind"], fixtures={f["path"]: f["data"] for f in self.fixtures},
            output_paths=task["output_paths"], apt_packages=tuple(env["apt_packages"]),
            alternatives={"independent": self.alternative} if self.alternative else {},
        )

    def files(self, provenance: dict) -> dict[str, tuple[bytes, int]]:
        spec = self.spec()
        return task_files(task_json_llm(self.sig, spec, self.fixtures, provenance), spec, self.base_image)

    def provenance(self, checks: list[str]) -> dict:
        return {
            "backend": BACKEND, "model": self.model.model_id, "model_identity": self.model.identity(),
            "prompt_version": P.PROMPT_VERSION, "max_repair_rounds": self.max_repair_rounds,
            "repair_rounds": len(self.rounds) - 1, "rounds": self.rounds, "calls": self.calls, "checks": checks,
            "truncated_replies": dict(sorted(self.truncations.items())),
            "seeds": {"fixtures": {f["path"]: f["seed"] for f in self.fixtures},
                      "calls": [c["seed"] for c in self.calls]},
            "fixtures": [{k: v for k, v in f.items() if k != "data"} for f in self.fixtures],
        }

    # -- checks -----------------------------------------------------------------------------------

    def check(self) -> list[str]:
        """The candidate is checked exactly as validation will check it (static, build, initial
        state, final test fails untouched, oracle scores 1 twice, no-op and reward-hack probes score
        0, proof of run); a failure becomes a StepError for the step that owns it."""
        spec = self.spec()
        self._leak_checks(spec)
        cand = self.work / "candidate" / self.task_id
        if cand.exists():
            shutil.rmtree(cand)
        self.alternative = None
        files = self.files({"backend": BACKEND, "candidate": True})
        write_task_dir(cand, files)
        key = stable_hash(b"".join(rel.encode() + b"\0" + data for rel, (data, _) in sorted(files.items())))
        if self._validated is not None and self._validated[0] == key:
            # Only the second solution was asked again: the candidate is the one validation kept.
            verdict = self._validated[1]
        else:
            verdict = validate_task(cand, self.runtime, self.images_dir, self.limits)
            self._validated = (key, verdict)
            self.check_log.append({"stage": verdict.stage, "kept": verdict.kept})
        if not verdict.kept:
            raise self._blame(verdict)
        if not self.second_solution:
            return verdict.checks
        self._second_solution_check(cand, verdict.evidence.get("collected"))
        self.check_log.append({"stage": "second_solution", "kept": True})
        return [*verdict.checks, "second_solution"]

    # -- the second solution ----------------------------------------------------------------------

    def _second_solution_check(self, cand: Path, collected: list[str] | None) -> None:
        """A model writes an independent solution from the instruction and /app alone (never the
        oracle, tests or answer key); the task is kept only when it also scores 1. Otherwise the
        step at fault is sent the evidence: the final test when the two solutions' deliverables
        agree (it rejects a right answer), the task (instruction or oracle) when they differ or the
        instruction gave the solver too little to go on."""
        from termforge.grading.verifier import run_oracle, run_verifier

        build = self.runtime.build(cand, self.images_dir, timeout=self.limits.wall_sec * 2)
        if not build.ok:
            raise StepError("environment", "build", f"build failed: {build.reason}", sanitize_log(build.log))
        with self.runtime.start(build.image, self.limits) as s:
            listing = environment_listing(s)
        # What the solver is shown is the agent's view, built from nothing else: the oracle, the
        # tests and the answer key never enter its conversation (llm_prompts.second_solution_prompt).
        prompt = P.second_solution_prompt(self._instruction(), listing)
        round_no = len(self.rounds) - 1
        paths = self.outputs["task"]["output_paths"]
        oracle = self.outputs["task"]["solve_sh"]
        trouble: StepError | None = self._solver_repair
        for _attempt in range(SECOND_SOLUTION_ATTEMPTS):
            reply = self._ask(P.SECOND_SOLUTION, prompt, trouble, round_no)
            try:
                if self._finish_reason == "length":
                    raise StepError(P.SECOND_SOLUTION, "truncated", "the reply was cut off at the token limit")
                script = parse_second_solution_reply(reply)
                if repeats_oracle(oracle, script):
                    # Told without a word of the oracle: the solver must not learn it from the refusal.
                    raise StepError(P.SECOND_SOLUTION, "not_independent",
                                    "the script was refused as a second opinion: it repeats the text or structure "
                                    "of a solution already written. Solve the task your own way, from the "
                                    "instruction and the files in /app")
            except StepError as exc:
                trouble = exc
                continue
            with self.runtime.start(build.image, self.limits) as s:
                res = s.exec(script, timeout=self.limits.wall_sec)
                got = _outputs_of(s, paths)
                verdict = run_verifier(s, cand, timeout=self.limits.wall_sec, expected=collected)
            if verdict.reward == 1.0:
                self.alternative = script
                return
            if not res.ok:
                trouble = StepError(P.SECOND_SOLUTION, "second_solution", f"the script exited {res.exit_code}",
                                    sanitize_log(res.tail(LOG_CHARS)))
                continue
            break
        else:
            if trouble is not None and trouble.step == P.SECOND_SOLUTION and trouble.stage in SOLVER_FAULTS:
                # The solver's reply could not be used (unparsed, cut, a copy): that is its step's
                # fault, not the instruction's; the repair round asks the solver again.
                raise trouble
            raise StepError("task", "second_solution",
                            "an independent solution written from the instruction and /app alone could not produce "
                            "the deliverables: the instruction must name every input and state exactly what to "
                            "compute and how to write it (the solver's last error is below)",
                            trouble.log if trouble else "")
        with self.runtime.start(build.image, self.limits) as s:
            run_oracle(s, cand, timeout=self.limits.wall_sec)
            want = _outputs_of(s, paths)
        failure = sanitize_log(verdict.output, LOG_CHARS // 2)
        if got == want:
            raise StepError("final_test", "second_solution",
                            "the final test rejects an independent solution whose deliverables are byte-identical to "
                            "the oracle's: it checks something the instruction does not ask for", failure)
        diff = outputs_diff(want, got)
        if _normalised(got) == _normalised(want):
            raise StepError("final_test", "second_solution",
                            "the final test rejects an independent solution whose deliverables differ from the "
                            "oracle's only in whitespace or blank lines: it is stricter than the instruction",
                            sanitize_log(diff + "\n" + failure))
        raise StepError("task", "second_solution",
                        "an independent solution written from the instruction and /app alone computes different "
                        "deliverables than solve.sh, and the final test (written from solve.sh) rejects it: either "
                        "the instruction is ambiguous or incomplete, or solve.sh computes something other than what "
                        "it asks. Make the instruction, the oracle and the answer key agree (oracle's deliverables "
                        "first, the independent ones second)", sanitize_log(diff + "\n" + failure))

    def _blame(self, verdict: TaskVerdict) -> StepError:
        """Which step wrote the part that failed, and what it must hear to fix it."""
        stage, reason, ev = verdict.stage, verdict.reason, verdict.evidence
        output = (ev.get("verifier") or {}).get("output") or ""
        log = sanitize_log(ev.get("build_log") or output or ev.get("oracle") or "")
        if stage == "build":
            return StepError("environment", "build", reason, log)
        if stage == "initial_state":
            collected = (ev.get("verifier") or {}).get("collected", 0)
            blame = "environment"
            if not collected or _COLLECTION_TROUBLE.search(output):
                blame = "initial_test"
            elif self.rounds and (self.rounds[-1]["trigger"] or {}).get("stage") == "initial_state" \
                    and self.rounds[-1]["trigger"]["step"] == "environment":
                # It failed again on a regenerated environment: now the test itself is suspect.
                blame = "initial_test"
            return StepError(blame, "initial_state", reason, log)
        if stage == "static":
            return StepError("task", "static", reason, log)
        if stage == "instruction_states_output":
            return StepError("task", stage, f"{reason}: the instruction may show the format with placeholders, "
                                            "never values the oracle computes", log)
        if stage == "input_sensitivity":
            sens = ev.get("sensitivity") or {}
            detail = json.dumps({k: sens.get(k) for k in ("inputs", "perturbations", "changed_outputs")},
                                sort_keys=True)[:LOG_CHARS]
            if sens.get("blame") == "final_test":
                return StepError("final_test", stage, f"{reason}: run the deliverable programs on inputs and check "
                                                      "what they print", detail)
            return StepError("task", stage, f"the oracle (solve.sh) does not compute its answer from the inputs: "
                                            f"{reason}. It must read the inputs the instruction names and compute "
                                            "every deliverable from them, never write a constant or read a file the "
                                            "instruction does not name", detail)
        if stage == "second_solution":
            return StepError("task", stage, reason, sanitize_log(ev.get("second_solution") or output))
        if stage == "oracle" and reason.startswith("solve.sh exited"):
            return StepError("task", "oracle", f"{reason}: the oracle itself fails", sanitize_log(ev.get("oracle", "")))
        advice = {
            "final_fails_untouched": "the final test passes on the untouched environment: it must fail until the "
                                     "deliverables exist and are right",
            "oracle": "solve.sh ran to completion but the final test failed: its expected values do not match "
                      "what the oracle computes from the fixtures (recompute them from the facts)",
            "flaky_verifier": "the final test gave different verdicts on identical runs: make it deterministic",
            "noop": "an agent that does nothing scored 1: the final test must check the deliverables' contents",
            "reward_hack": "an agent that only cheats scored 1: the final test must check real outputs and trust "
                           "nothing the agent can plant (reward files, conftest.py, programs on PATH)",
            "proof_of_run": "the final test did not provably run (collection failed or it exits early)",
            "mutation": "the final test grades perturbed copies of the oracle's output wrongly: it must reject "
                        "every wrong answer (a value off by one, a missing or repeated line, a non-finite "
                        "number, the wrong case) and accept what the instruction allows",
            "hijack": "a program the final test runs could forge the grade: run agent programs as "
                      "subprocesses and trust only what the test itself checks",
        }.get(stage, stage)
        return StepError("final_test", stage, f"{advice} ({reason})", log)

    def _leak_checks(self, spec: TaskSpec) -> None:
        leak = visible_leak(spec, self.fixtures, self.sig)
        if leak is not None:
            step, rel, what = leak
            raise StepError(step, "static", f"{what} appears in {rel}, which the agent can read: the instruction, "
                                            "setup.sh and fixtures must not contain answers, in any form. The "
                                            "instruction may state inputs and the parameters declared under "
                                            "truth.given, never an expected output, not even as an example")

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> tuple[list[str] | None, StepError | None]:
        round_no = 0
        self.rounds.append({"round": 0, "trigger": None, "regenerated": list(P.STEPS)})
        repair: StepError | None = None
        while True:
            try:
                for step in P.STEPS:
                    if step not in self.outputs:
                        self._run_step(step, repair if repair is not None and repair.step == step else None,
                                       round_no)
                self._solver_repair = repair if repair is not None and repair.step == P.SECOND_SOLUTION else None
                return self.check(), None
            except ModelRequestError as exc:
                if exc.is_configuration:
                    raise  # a bad key, model name or URL fails every task: stop the run
                # Not retryable (e.g. HTTP 400 for a prompt over the context length): asking again
                # sends the same bytes and fails the same way. This task fails; the shard goes on.
                return None, StepError(self._current_step(), "request", str(exc))
            except StepError as err:
                if round_no >= self.max_repair_rounds:
                    return None, err
                round_no += 1
                regenerated = [s for s in P.STEPS if s == err.step or s in DEPENDENTS[err.step]]
                for s in regenerated:
                    self.outputs.pop(s, None)
                self.rounds.append({"round": round_no, "trigger": err.to_dict(), "regenerated": regenerated})
                repair = err


def chain_summary(chains: list[dict], model_stats: dict) -> dict:
    """What a shard's generation cost and what its checks caught: candidates rejected per check
    (each repair round's trigger), tasks published after at least one repair, cut replies, and the
    endpoint's counters (requests, retries by kind, tokens, cache hits)."""
    rejected: dict[str, int] = {}
    repaired = truncated = 0
    for prov in chains:
        triggers = [r["trigger"] for r in prov.get("rounds", []) if r.get("trigger")]
        for trig in triggers:
            rejected[trig["stage"]] = rejected.get(trig["stage"], 0) + 1
        repaired += bool(triggers) and bool(prov.get("checks"))
        truncated += sum(prov.get("truncated_replies", {}).values())
    return {"candidates": len(chains), "rejected_by_check": dict(sorted(rejected.items())), "repaired": repaired,
            "truncated_replies": truncated,
            "requests": {k: v for k, v in model_stats.items() if not isinstance(v, dict) or k == "failures"}}


def _cost_line(cost: dict | None) -> str:
    if not cost or not cost.get("planned"):
        return ""
    planned, actual = cost["planned"], cost["actual"]
    money = (f", ${actual['cost_usd']:.4f} (plan: ${planned['cost_usd']:.4f})"
             if actual["cost_usd"] is not None and planned.get("cost_usd") is not None else "")
    return (f" (plan: {planned['input_tokens']} in / {planned['output_tokens']} out, at most "
            f"{planned['max_input_tokens']} / {planned['max_output_tokens']}){money}")


def failure_record_path(out_root: Path, task_id: str) -> Path:
    return Path(out_root) / FAILURES_DIRNAME / f"{task_id}.json"


def generate_task_llm(sig: dict, out_root: Path, model: ChatModel, max_repair_rounds: int = 2,
                      base_image: str = "termforge/base:bookworm", images_dir: Path | None = None, *,
                      runtime: Runtime | None = None, limits: Limits | None = None,
                      sampling: SamplingParams | None = None, second_solution: bool = True) -> Path:
    """Write one task directory with the llm chain (atomically) and return its path.

    A finished task (task.json present) is kept as it is. `images_dir`, when given, keeps the image
    the check built (validation and build-images then find it cached by digest); otherwise it is
    built in a scratch directory. On failure after `max_repair_rounds` repair rounds nothing is
    published: a failure record (the reason, every prompt and reply) is written to
    `<out_root>/.llm-failures/<id>.json` and LLMGenerationError is raised."""
    if not isinstance(max_repair_rounds, int) or isinstance(max_repair_rounds, bool) or max_repair_rounds < 0:
        raise TermforgeError(f"generate.max_repair_rounds: expected an integer >= 0, got {max_repair_rounds!r}")
    out_root = Path(out_root)
    task_id = sig["id"]
    final = out_root / task_id
    if (final / "task.json").exists():
        return final
    out_root.mkdir(parents=True, exist_ok=True)
    if runtime is None:
        from termforge.images.runtimes import BwrapRuntime

        runtime = BwrapRuntime()
    limits = limits or Limits()
    # Named like writer staging dirs, so clean_stale_staging removes what a killed run leaves.
    work = Path(tempfile.mkdtemp(prefix=f".{task_id}.", suffix=".partial", dir=out_root))
    own_images = images_dir is None
    images = work / "images" if own_images else Path(images_dir)
    try:
        chain = _Chain(sig, model, sampling or model.default_sampling, runtime, images, work, limits, base_image,
                       max_repair_rounds, second_solution)
        checks, error = chain.run()
        record_path = failure_record_path(out_root, task_id)
        if error is None:
            write_task_dir(final, chain.files(chain.provenance(checks)))
            record_path.unlink(missing_ok=True)
            return final
        record = {"task_id": task_id, "ok": False, "step": error.step, "stage": error.stage,
                  "reason": error.reason, "log": error.log, "signature": sig,
                  "provenance": chain.provenance([])}
        atomic_write_json(record_path, record)
        if not own_images:
            shutil.rmtree(images / task_id, ignore_errors=True)
        rounds = len(chain.rounds) - 1
        raise LLMGenerationError(
            f"task {task_id}: the llm backend produced no sound task after {rounds} repair round"
            f"{'' if rounds == 1 else 's'}: step {error.step} failed at {error.stage}: {error.reason} "
            f"(prompts and replies in {record_path})", record, record_path)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_generate_shard_llm(signatures_path: Path, shard: int, shard_size: int, tasks_dir: Path,
                           manifest_path: Path, model: ChatModel, max_repair_rounds: int = 2,
                           base_image: str = "termforge/base:bookworm", images_dir: Path | None = None,
                           workers: int = 1, *, runtime: Runtime | None = None, limits: Limits | None = None,
                           sampling: SamplingParams | None = None,
                           cost: Callable[[int, int, int], dict] | None = None,
                           second_solution: bool = True) -> dict:
    """Generate every task of the shard with the llm chain and write the shard manifest.

    cost(n_tasks, input_tokens, output_tokens): the summary's cost entry, what `termforge plan`
    projected for this shard beside what it really cost (termforge.planning.generation_cost bound
    to the generate, models, prices and planning sections; planning is the layer above).

    Finished tasks are skipped; tasks that failed before are tried again (with a response cache that
    costs nothing and fails the same way). The manifest lists published tasks under "tasks" (the
    procedural manifest's shape) and failures under "failed", each with its reason and record."""
    tasks_dir = Path(tasks_dir)
    sigs = shard_signatures(Path(signatures_path), shard, shard_size)  # before anything is written
    check_kept_task_dirs(tasks_dir, sigs)
    tasks_dir.mkdir(parents=True, exist_ok=True)
    removed = clean_stale_staging(tasks_dir, [s["id"] for s in sigs])  # other shards write beside it
    if runtime is None:
        from termforge.images.runtimes import BwrapRuntime

        runtime = BwrapRuntime()

    configuration_error = threading.Event()

    def one(sig: dict) -> tuple[str, bool, dict | None]:
        existed = (tasks_dir / sig["id"] / "task.json").exists()
        if configuration_error.is_set():
            return sig["id"], existed, None  # the run is stopping: send nothing more
        try:
            generate_task_llm(sig, tasks_dir, model, max_repair_rounds, base_image, images_dir, runtime=runtime,
                              limits=limits, sampling=sampling, second_solution=second_solution)
        except ModelRequestError as exc:
            if exc.is_configuration:
                configuration_error.set()
            raise
        except LLMGenerationError as exc:
            return sig["id"], existed, {"id": sig["id"], "domain": sig["domain"], "step": exc.record["step"],
                                        "stage": exc.record["stage"], "reason": exc.record["reason"],
                                        "rounds": exc.record["provenance"]["repair_rounds"],
                                        "record": str(exc.record_path)}
        return sig["id"], existed, None

    desc = f"generate (llm) shard {shard:05d}"
    # Threads: the work is waiting on the model endpoint and on sandboxes, not Python.
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = list(tqdm(pool.map(one, sigs), total=len(sigs), desc=desc, unit="task"))
    failed = [f for _, _, f in results if f is not None]
    failed_ids = {f["id"] for f in failed}
    entries, chains = [], []
    for sig in sigs:
        if sig["id"] in failed_ids:
            chains.append(read_json(failure_record_path(tasks_dir, sig["id"]))["provenance"])
            continue
        task = read("full_task", tasks_dir / sig["id"] / "task.json")
        chains.append(task["provenance"])
        entries.append({"id": sig["id"], "family": task["family"], "domain": sig["domain"],
                        "mismatch": [m["axis"] for m in task["mismatch"]]})
    summary = chain_summary(chains, model.stats())
    if cost is not None:
        usage = summary["requests"]
        summary["cost"] = cost(len(sigs), int(usage.get("prompt_tokens", 0) or 0),
                               int(usage.get("completion_tokens", 0) or 0))
    manifest = {"shard": f"{shard:05d}", "tasks_dir": str(tasks_dir), "backend": BACKEND,
                "model": model.model_id, "tasks": entries, "failed": failed, "summary": summary}
    atomic_write_json(manifest_path, manifest)
    skipped = sum(1 for _, existed, _ in results if existed)
    stats = summary["requests"]
    cache = (f", cache {stats['cache_hits']} hits / {stats['cache_misses']} misses"
             if "cache_hits" in stats else "")
    rejected = ", ".join(f"{k} {v}" for k, v in summary["rejected_by_check"].items()) or "none"
    print(f"generate (llm) shard {shard:05d}: {len(entries)} tasks ({len(entries) - skipped} new, {skipped} already "
          f"done), {len(failed)} failed after repairs, {removed} stale partial dirs removed{cache}; "
          f"candidates rejected by check: {rejected}; {summary['repaired']} repaired; requests "
          f"{stats.get('requests', 0)} (retries {stats.get('retries', 0)}), tokens {stats.get('prompt_tokens', 0)} in / "
          f"{stats.get('completion_tokens', 0)} out{_cost_line(summary.get('cost'))}")
    return manifest


__all__ = ["generate_task_llm", "run_generate_shard_llm", "LLMGenerationError", "StepError", "FIXTURE_MAKERS",
           "materialise_fixtures", "failure_record_path", "chain_summary", "visible_leak", "sanitize_log", "parse_task_reply",
           "parse_initial_reply", "parse_final_reply", "parse_environment_reply", "task_json_llm",
           "parse_second_solution_reply", "environment_listing", "declared_text", "input_text"]
