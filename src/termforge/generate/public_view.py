"""What the agent is given, and nothing else: the only thing a procedural hint writer may read.

A family's method note (the seed of its hints) is rendered from a `PublicTaskView`, both when the
task is built (private/method.md records it) and when its hint is written. The view holds the
instruction, the names and bytes of the files the agent finds under /app, and the family's method
vocabulary; it has no field for the answer key, the oracle, the verifier or anything under
private/, and `view_of_task_dir` opens only instruction.md, environment/fixtures/ and the family
name in task.json. So a hint cannot depend on the answer: change the answer key, the expected
outputs or the test constants and every hint stays byte-identical (tests/test_hints.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from termforge.errors import TermforgeError

# The parts of a task directory a view is made from; everything else (private/, solution/, tests/,
# setup.sh) is never opened.
PUBLIC_PARTS = ("instruction.md", "environment/fixtures", "task.json#family")

_WORD = re.compile(r"[A-Za-z]+|\d+(?:\.\d+)?")


@dataclass(frozen=True)
class PublicTaskView:
    family: str
    """The family's name (which method text applies)."""
    instruction: str
    """instruction.md: what the agent sees."""
    files: tuple[tuple[str, bytes], ...]
    """The agent's input files: path relative to environment/fixtures -> bytes, sorted by path."""
    vocabulary: tuple[str, ...] = ()
    """The family's method vocabulary (lower-case words of its method text), for the leak gate."""

    def file_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.files)

    def text_files(self) -> tuple[tuple[str, str], ...]:
        """The files that decode as UTF-8 text, with their text."""
        out = []
        for name, data in self.files:
            try:
                out.append((name, data.decode("utf-8")))
            except UnicodeDecodeError:
                continue
        return tuple(out)

    def states(self, pattern: str) -> bool:
        """Whether the instruction says something (a case-insensitive regex)."""
        return re.search(pattern, self.instruction, re.I) is not None


def method_vocabulary(text: str) -> tuple[str, ...]:
    """The lower-case tokens of a family's method text (words, letters, numbers, and each
    whitespace-separated chunk whole: `%.4f`, `-c`, `4-connected`): what a hint may use freely."""
    out = {w.lower() for w in _WORD.findall(text)}
    out |= {c.strip("`'\".,;:()[]{}").lower() for c in text.split()}
    return tuple(sorted(w for w in out if w))


def make_view(family: str, instruction: str, fixtures: Mapping[str, bytes], vocabulary: tuple[str, ...] = ()
              ) -> PublicTaskView:
    return PublicTaskView(family=family, instruction=instruction,
                          files=tuple(sorted((str(k), bytes(v)) for k, v in fixtures.items())),
                          vocabulary=tuple(vocabulary))


def view_of_task_dir(task_dir: str | Path, vocabulary: tuple[str, ...] = ()) -> PublicTaskView:
    """The public view of a task directory, read from its public parts only (PUBLIC_PARTS);
    `vocabulary` is its family's method vocabulary, which the caller knows (hints.specifics)."""
    task_dir = Path(task_dir)
    try:
        instruction = (task_dir / "instruction.md").read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TermforgeError(f"{task_dir / 'instruction.md'}: missing (every task directory needs it)") from None
    try:
        meta = json.loads((task_dir / "task.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        meta = {}
    family = str(meta.get("family") or "") if isinstance(meta, dict) else ""
    root = task_dir / "environment" / "fixtures"
    fixtures: dict[str, bytes] = {}
    if root.is_dir():
        for p in sorted(root.rglob("*")):
            if p.is_file() and p.name != ".keep":
                fixtures[str(p.relative_to(root))] = p.read_bytes()
    return make_view(family, instruction, fixtures, vocabulary)


def render_method(family: object, view: PublicTaskView) -> str:
    """The method note of `family` for the task `view` shows: the family's text over the view, plus
    what a composed task (its inputs packed in a container or with an anchor, an extra deliverable)
    adds, read from the instruction's own sections."""
    note = family.method_note(view).strip()  # type: ignore[attr-defined]
    if view.states(r"^## How the inputs arrive"):
        note += ("\n\nThe inputs arrive packed: read how the instruction says they arrive, decode the container "
                 "to the bundle, restore the files under /app from it, then solve the task as usual.")
    packed = re.search(r"^## Inputs packed with (.+)$", view.instruction, re.M)
    if packed:
        note += (f"\n\nThe inputs arrive packed with {packed.group(1)}: read how the instruction describes the "
                 "packed form, restore the files under /app from it with that tool, check they are all there, "
                 "then solve the task as usual.")
    also = re.search(r"^## Also deliver\s*\n+- `([^`]+)`", view.instruction, re.M)
    if also:
        note += (f"\n\nThe extra deliverable {also.group(1)} is graded on its own: build it to its description and "
                 "try it on inputs of your own.")
    return note
