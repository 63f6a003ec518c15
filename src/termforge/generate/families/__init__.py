"""The procedural task families, collected from one module per domain, plus the opt-in calibration
family (calibration.py), which only the `calibration` corpus kind draws."""

from __future__ import annotations

import importlib

from termforge.generate.base import TaskFamily

DOMAIN_MODULES = (
    "security", "software_engineering", "file_operations", "data_querying", "data_science",
    "debugging", "scientific_computing", "data_processing", "system_administration",
)
OPT_IN_MODULES = ("calibration",)
CALIBRATION_KIND = "calibration"
"""The corpus kind whose signatures are built by the opt-in families, and only by them."""


def all_families() -> list[TaskFamily]:
    """Every registered family, in a fixed order (module order, then definition order); the
    opt-in families come last. Validation and family tests cover all of them."""
    families: list[TaskFamily] = []
    for mod_name in DOMAIN_MODULES + OPT_IN_MODULES:
        try:
            mod = importlib.import_module(f"termforge.generate.families.{mod_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"termforge.generate.families.{mod_name}":
                continue
            raise
        families.extend(cls() for cls in mod.FAMILIES)
    return families


def default_families() -> list[TaskFamily]:
    """The families of the default mixes: every family that is not opt-in."""
    return [f for f in all_families() if not f.opt_in]


def families_for(sig: dict) -> list[TaskFamily]:
    """The families a signature may be built by: the opt-in ones for a calibration signature, the
    default ones for every other corpus kind."""
    calibration = sig.get("corpus_kind") == CALIBRATION_KIND
    return [f for f in all_families() if f.opt_in == calibration]


def family_by_name(name: str) -> TaskFamily:
    for fam in all_families():
        if fam.name == name:
            return fam
    raise KeyError(name)


def intrinsic_verifier_kinds_by_domain(families: list[TaskFamily] | None = None) -> dict[str, tuple[str, ...]]:
    """Domain -> the verifier kinds some family there grades on its own deliverable (the kinds its
    own final test is, TaskFamily.verifier_kinds). The signature sampler asks a domain only for
    these (axes.sampler); a kind outside them would be met by a program added beside the task."""
    out: dict[str, list[str]] = {}
    for fam in default_families() if families is None else families:
        for domain in fam.domains:
            kinds = out.setdefault(domain, [])
            kinds += [k for k in fam.verifier_kinds if k not in kinds]
    return {d: tuple(k) for d, k in out.items()}
