"""Planted bugs, shared by the debugging families.

Both are built from a program template with *bug sites*: each site has the correct code and one or
more buggy variants. A task plants buggy variants at some sites (as many as the family's
planted_bugs knob says for the level); the oracle patches exactly those sites back; the tests
exercise behaviour through subprocess only, on inputs that trigger every site's bug (whether
planted or not, so the tests reveal nothing) plus random ones (Python) or fixed scenarios (shell)."""

from __future__ import annotations

import random
import textwrap
from dataclasses import dataclass
from typing import Callable, NamedTuple

from termforge.generate.base import bash_script

EVERY_SITE = "every site"
"""A planted_bugs knob's value for a level that plants a bug at every site the program has."""


@dataclass(frozen=True)
class BugSite:
    key: str
    fixed: str
    buggy: tuple[str, ...]
    effect: str
    """What goes wrong (private: truth and method note, never the instruction)."""
    report: str
    """How a user would describe the symptom (may be quoted in the instruction)."""


def plant(template: str, sites: list[BugSite], planted: dict[str, str]) -> str:
    """Render a template: planted sites get their chosen buggy code, the rest the fixed code.
    Every buggy snippet must occur exactly once, or the oracle's patch would be ambiguous."""
    out = template
    for site in sites:
        out = out.replace(f"@@{site.key}@@", planted.get(site.key, site.fixed))
    if "@@" in out:
        raise ValueError(f"unfilled bug site in template: {out[out.index('@@'):][:40]!r}")
    for key, buggy in planted.items():
        if out.count(buggy) != 1:
            raise ValueError(f"buggy code for site {key!r} is not unique in the rendered program")
    return out


class PlantedProgram(NamedTuple):
    program: dict
    """What the program's builder returned: file, template, sites, spec, parameters P and the
    family's own grading material."""
    sites: list[BugSite]
    planted: dict[str, str]
    source: str
    """The program as the task ships it, with the planted bugs in."""
    path: str


def draw_planted_program(rng: random.Random, programs: dict[str, Callable[[random.Random], dict]],
                         bugs: int | str) -> PlantedProgram:
    """Draw one program of a family's registry (name -> builder) and plant `bugs` bugs in it (a
    family's planted_bugs knob: a number, or EVERY_SITE)."""
    program = programs[rng.choice(sorted(programs))](rng)
    sites = program["sites"]
    planted = choose_bugs(rng, sites, bugs)
    source = plant(program["template"], sites, planted)
    return PlantedProgram(program, sites, planted, source, f"/app/{program['file']}")


def program_and_symptoms(rng: random.Random, drawn: PlantedProgram, level: int, what: str) -> str:
    """The instruction's opening: the program (a `what`: tool, script), its specification, and the
    users' reports of its planted bugs. Easier tasks quote every planted bug's report, harder ones
    only one and say there are more, which must be found."""
    by_key = {s.key: s for s in drawn.sites}
    reports = [by_key[k].report for k in sorted(drawn.planted)]
    rng.shuffle(reports)
    shown = reports if level <= 1 else reports[:1]
    more = "" if level <= 1 else "There are more problems than the one reported."
    quoted = "\n".join(f"> {r}" for r in shown)
    spec = textwrap.dedent(drawn.program["spec"]).strip()
    return (f"`{drawn.path}` is a small {what} our team relies on. It is supposed to behave like this:\n\n"
            f"{spec}\n\nUsers have reported problems:\n\n{quoted}\n\n{more}")


def choose_bugs(rng: random.Random, sites: list[BugSite], bugs: int | str) -> dict[str, str]:
    n = len(sites) if bugs == EVERY_SITE else min(len(sites), bugs)
    chosen = rng.sample(sites, n)
    return {s.key: rng.choice(s.buggy) for s in sorted(chosen, key=lambda s: s.key)}


def patch_oracle(path: str, planted: dict[str, str], sites: list[BugSite]) -> str:
    fixed = {s.key: s.fixed for s in sites}
    patches = [(planted[k], fixed[k]) for k in sorted(planted)]
    return bash_script(f"""
        python3 - <<'PY'
        PATCHES = {patches!r}
        with open("{path}", encoding="utf-8") as fh:
            src = fh.read()
        # Locate every faulty snippet in the original first, then splice: a fix never gets re-patched.
        spots = []
        for bad, good in PATCHES:
            assert src.count(bad) == 1, bad
            spots.append((src.index(bad), bad, good))
        for start, bad, good in sorted(spots, reverse=True):
            src = src[:start] + good + src[start + len(bad):]
        with open("{path}", "w", encoding="utf-8") as fh:
            fh.write(src)
        PY
    """)


def planted_truth(planted: dict[str, str], sites: list[BugSite], given: dict) -> dict:
    by_key = {s.key: s for s in sites}
    return {"given": given,
            "planted_bugs": {k: {"buggy": v, "fixed": by_key[k].fixed, "effect": by_key[k].effect}
                             for k, v in sorted(planted.items())}}
