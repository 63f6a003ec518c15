"""The procedural task families, collected from one module per domain."""

from __future__ import annotations

import importlib

from termforge.generate.base import TaskFamily

DOMAIN_MODULES = (
    "security", "software_engineering", "file_operations", "data_querying", "data_science",
    "debugging", "scientific_computing", "data_processing", "system_administration",
)


def all_families() -> list[TaskFamily]:
    """Every registered family, in a fixed order (module order, then definition order)."""
    families: list[TaskFamily] = []
    for mod_name in DOMAIN_MODULES:
        try:
            mod = importlib.import_module(f"termforge.generate.families.{mod_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"termforge.generate.families.{mod_name}":
                continue
            raise
        families.extend(cls() for cls in mod.FAMILIES)
    return families


def family_by_name(name: str) -> TaskFamily:
    for fam in all_families():
        if fam.name == name:
            return fam
    raise KeyError(name)
