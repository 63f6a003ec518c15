"""The task contract: what a procedural family returns and how a task directory is laid out.

A task directory (README, "What you get")::

    task.json                id, signature, instruction, family, mismatch record, provenance
    instruction.md           what the agent sees, and nothing else
    environment/setup.sh     run inside the sandbox with cwd /app; fixtures at /tmp/env/fixtures
    environment/fixtures/    the task's input files (made before the verifier is written)
    environment/container.def, environment/Dockerfile   the same environment for Apptainer/Docker
    tests/test_initial_state.py, tests/test_final_state.py, tests/test.sh
    solution/solve.sh        the oracle (runs with cwd /app)
    solution/alternatives/   second solutions, each required to score 1 too (optional)
    private/truth.json       the answer key: host side only
    private/method.md        the method note, rendered from the public view (a record of it)

Inside the sandbox the task layer is /app (writable), tests are bound read-only at /tests only
when the verifier runs, and the verifier writes /logs/verifier/reward.txt.
"""

from __future__ import annotations

import random
import textwrap
from dataclasses import dataclass, field, fields
from types import SimpleNamespace
from typing import Callable, ClassVar, Union

from termforge.generate.public_view import PublicTaskView

from termforge.images.declarations import DEFAULT_BASE, declared_packages

APP = "/app"
FIXTURES_IN_SANDBOX = "/tmp/env/fixtures"
# What every task may take for granted: the packages the default base image declares (python3 and
# pytest for the grader, numpy, Pillow, binutils, file; termforge/images/bases/). A task lists
# only what it needs beyond them in `apt_packages` (a derived base image installs those).
# (bash and coreutils are Essential: in every Debian image, listed for the prompts' sake.)
ESSENTIAL_PACKAGES = ("bash", "coreutils")
BASE_APT_PACKAGES = tuple(sorted(set(declared_packages(DEFAULT_BASE)) | set(ESSENTIAL_PACKAGES)))


@dataclass
class TaskSpec:
    """Everything a family decides for one task. The writer turns it into a task directory."""

    instruction: str
    """Markdown shown to the agent: persona voice, skills, exact paths and output formats."""
    setup_sh: str
    """Bash run once at build time inside the sandbox, cwd /app, fixtures at /tmp/env/fixtures."""
    test_initial: str
    """pytest source: passes on the untouched environment."""
    test_final: str
    """pytest source: passes only when the task is solved (expected values baked in)."""
    solve_sh: str
    """The oracle: bash run with cwd /app that solves the task."""
    truth: dict
    """The answer key. Never reaches the instruction, the image or a policy-facing export."""
    verifier_kind: str
    fixture_kind: str
    method_note: str = ""
    """How to discover the answer (not the answer): the seed for hints. A procedural family never
    sets it: the generator renders it from the task's public view (TaskFamily.method_note), so it
    cannot carry what only the family knew while building. An LLM-written task carries its author's."""
    fixtures: dict[str, bytes] = field(default_factory=dict)
    """Relative path under environment/fixtures/ -> bytes."""
    output_paths: list[str] = field(default_factory=list)
    """Absolute paths the agent must create (checked to exist after the oracle)."""
    apt_packages: tuple[str, ...] = ()
    """Debian packages the task needs beyond BASE_APT_PACKAGES (gcc, sqlite3, ffmpeg...; any Debian package)."""
    allow_network: bool = False
    timeout_sec: int = 600
    test_data: dict[str, bytes] = field(default_factory=dict)
    """Data files beside the final test (name -> bytes, written to tests/NAME): what the test reads
    rather than making in every grade."""
    alternatives: dict[str, str] = field(default_factory=dict)
    """Second solutions (name -> bash script), written to solution/alternatives/<name>.sh: an
    independent implementation that validation requires to score 1 like the oracle."""


TASK_COMPLEXITIES = ("short", "moderate", "complex", "intricate")


@dataclass(frozen=True)
class FamilyAxes:
    """What a family's tasks really exercise, declared once per family (TaskFamily.axes). These
    decide which signature axes a task honours (termforge.generate.honour) and what its instruction
    may claim: skills and the anchor reach the instruction only when declared here."""

    name: str
    domains: tuple[str, ...]
    verifier_kinds: tuple[str, ...]
    fixture_kinds: tuple[str, ...]
    summary: str = ""
    skill_types: tuple[str, ...] = ()
    """Skill types (of the family's domain in the taxonomy) whose skills the task practises."""
    skills: tuple[str, ...] = ()
    """Primitive skills, verbatim from the taxonomy, that solving the task really needs."""
    languages: tuple[str, ...] = ("bash", "python")
    """Languages a solution naturally uses (the first is the family's main one)."""
    anchors: tuple[str, ...] = ()
    """Real software (taxonomy anchors) the task is set around; none for most families."""
    task_complexities: tuple[str, ...] = TASK_COMPLEXITIES
    """Levels that change the task's difficulty (fixture size, rules, noise, planted defects)."""
    command_complexities: tuple[str, ...] = ("bash_only", "bash_code")
    """bash_only: a shell pipeline can solve it; bash_code: it needs a program; services: a daemon."""
    episode_protocol: str = "explore"
    """How an episode of the family's tasks goes, which a hint must fit: explore (look at the
    inputs, act, check the result, over several turns) or one_command (the whole task is one
    command in the first reply; the calibration family, trained with a two-turn cap)."""
    opt_in: bool = False
    """An opt-in family (the calibration family) builds tasks only for signatures of its corpus kind
    (`calibration` in corpus.mix); the default mixes never draw it (families.families_for)."""
    output_files: bool = True
    """Whether the task's deliverables are files (output_paths); False when the final test inspects
    the tree itself. A verifier strategy that serves the deliverables needs them."""


class DifficultyKnobs:
    """A family's difficulty knobs, declared once (TaskFamily.knobs): each knob is named and holds
    one value per task complexity, in TASK_COMPLEXITIES order, so the family's scaling reads at a
    glance and build() takes its numbers by name (`self.knobs.at(level).NAME`) rather than from a
    tuple written inline. Rules a level switches on stay in build(), where they change the task."""

    def __init__(self, **per_level: tuple):
        for name, values in per_level.items():
            if not isinstance(values, tuple) or len(values) != len(TASK_COMPLEXITIES):
                raise ValueError(f"knob {name}: one value per task complexity {TASK_COMPLEXITIES}, got {values!r}")
        if not per_level:
            raise ValueError("a family declares at least one difficulty knob")
        self.per_level: dict[str, tuple] = dict(per_level)

    def at(self, level: int) -> SimpleNamespace:
        """Every knob's value at `level` (complexity_level), read as attributes."""
        return SimpleNamespace(**{name: values[level] for name, values in self.per_level.items()})

    def __repr__(self) -> str:
        return "DifficultyKnobs(" + ", ".join(f"{n}={v!r}" for n, v in self.per_level.items()) + ")"


class TaskFamily:
    """A small generator of one kind of task. A subclass declares `axes` (one FamilyAxes), `knobs`
    (one DifficultyKnobs) and build(); each axis is also readable as a class attribute (fam.name, fam.domains...), which is
    how the sampler, honour and validation read them."""

    axes: ClassVar[FamilyAxes]
    knobs: ClassVar[DifficultyKnobs]
    name: ClassVar[str]
    domains: ClassVar[tuple[str, ...]]
    verifier_kinds: ClassVar[tuple[str, ...]]
    fixture_kinds: ClassVar[tuple[str, ...]]
    summary: ClassVar[str]
    skill_types: ClassVar[tuple[str, ...]]
    skills: ClassVar[tuple[str, ...]]
    languages: ClassVar[tuple[str, ...]]
    anchors: ClassVar[tuple[str, ...]]
    task_complexities: ClassVar[tuple[str, ...]]
    command_complexities: ClassVar[tuple[str, ...]]
    episode_protocol: ClassVar[str]
    opt_in: ClassVar[bool]
    output_files: ClassVar[bool]

    method: ClassVar[tuple[tuple[str, "MethodCondition"], ...]] = ()
    """The family's method note as (sentence, condition) steps: how to discover the answer, never
    the answer. A condition is None (always), a regex the instruction must match, or a predicate
    over the public view; nothing else about the task can reach the note."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        loose = [axis.name for axis in fields(FamilyAxes) if axis.name in cls.__dict__]
        if loose and "axes" not in cls.__dict__:
            raise TypeError(f"family {cls.__name__}: declare its axes once, as `axes = FamilyAxes(...)`, "
                            f"not as class attributes ({', '.join(loose)})")
        if "axes" in cls.__dict__:
            for axis in fields(FamilyAxes):
                setattr(cls, axis.name, getattr(cls.axes, axis.name))

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:  # pragma: no cover - interface
        raise NotImplementedError

    def method_note(self, view: PublicTaskView) -> str:
        """The method note for the task `view` shows. It receives the public view and nothing else:
        a note rendered here cannot depend on the answer key, the oracle or the tests."""
        return " ".join(text for text, when in self.method if holds(when, view))

    def method_texts(self) -> tuple[str, ...]:
        """Every sentence the family's note may contain: its method vocabulary."""
        return tuple(text for text, _ in self.method)


MethodCondition = Union[None, str, Callable[[PublicTaskView], bool]]


def holds(when: MethodCondition, view: PublicTaskView) -> bool:
    if when is None:
        return True
    if isinstance(when, str):
        return view.states(when)
    return bool(when(view))


def complexity_level(sig: dict) -> int:
    """0..3 for short..intricate: how far a family scales fixtures, noise and rules (unknown: moderate)."""
    tc = sig.get("task_complexity")
    return TASK_COMPLEXITIES.index(tc) if tc in TASK_COMPLEXITIES else 1


def indent_block(text: str, n: int) -> str:
    """Indent every line after the first so a multi-line value survives textwrap.dedent."""
    return ("\n" + " " * n).join(text.split("\n"))


def instruction_frame(sig: dict, title: str, body: str, deliverables: list[str]) -> str:
    """The common instruction shape: the persona's voice, the task, deliverables, skills named."""
    persona = sig.get("persona") or "an engineer on the team"
    skills = ", ".join(sig.get("skills") or [])
    anchor = sig.get("anchor")
    lines = [f"# {title}", "", f"_From {persona}:_", "", textwrap.dedent(body).strip(), ""]
    lines += ["## Deliverables", ""]
    lines += [f"- {d}" for d in deliverables]
    lines += ["", f"Work in `{APP}`. There is no network access."]
    if skills:
        lines += ["", f"Skills exercised: {skills}."]
    if anchor:
        lines += [f"Context: this comes up when working with {anchor}."]
    return "\n".join(lines).rstrip() + "\n"


def pytest_module(body: str) -> str:
    """Dedent a pytest source and make sure it ends with one newline."""
    return textwrap.dedent(body).strip() + "\n"


def bash_script(body: str) -> str:
    return "#!/bin/bash\nset -euo pipefail\n" + textwrap.dedent(body).strip() + "\n"
