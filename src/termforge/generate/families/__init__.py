"""The procedural task families: one module per family, grouped by domain
(<domain>/<family>.py, each ending `FAMILY = <its class>`), plus the opt-in calibration family
(calibration/one_step_file_task.py), which only the `calibration` corpus kind draws. A family is
drawn only once it is listed here; tests/test_family_modules.py fails on a family module that is
not."""

from __future__ import annotations

import importlib

from termforge.generate.base import TaskFamily

# The order is part of every draw: procedural.rank_families breaks ties by a seeded pick over this
# list, so moving an entry changes which family builds some tasks. A new family goes at the end.
FAMILY_MODULES = (
    "security.binary_passphrase_recovery", "security.upload_path_guard", "security.ssh_bruteforce_logins",
    "software_engineering.vendored_semver_fix", "software_engineering.legacy_awk_port",
    "software_engineering.monorepo_release_plan",
    "file_operations.log_level_filter", "file_operations.duplicate_file_pruner",
    "data_querying.sqlite_shop_questions", "data_querying.csv_groupby_tool",
    "data_science.heldout_regression", "data_science.png_shape_census", "data_science.classifier_report",
    "debugging.python_edge_case_fix", "debugging.shell_script_fix",
    "scientific_computing.tone_inventory", "scientific_computing.decay_half_life_fit",
    "scientific_computing.calibrated_measurement_reduction",
    "data_processing.regional_revenue_report", "data_processing.stream_transform_program",
    "system_administration.account_audit", "system_administration.permission_policy",
)
OPT_IN_MODULES = ("calibration.one_step_file_task",)
CALIBRATION_KIND = "calibration"
"""The corpus kind whose signatures are built by the opt-in families, and only by them."""


def all_families() -> list[TaskFamily]:
    """Every registered family, in FAMILY_MODULES order; the opt-in families come last. Validation
    and family tests cover all of them."""
    return [importlib.import_module(f"{__name__}.{module}").FAMILY() for module in FAMILY_MODULES + OPT_IN_MODULES]


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
