"""Plan-time checks of what each job will run with.

JSON Schema checks keys and types; the stages check more when their job starts (the trainer's
combinations, sampling ranges, which backend can load trained weights). Run only then, a bad
ablation is found hours into a run, after every job before it. `planned_config` (the Snakefile's
and every termforge command's config check) runs termforge.config's schema check, then
`check_jobs` for the base config and for every ablation that runs, so `snakemake -n` and
`termforge check-config` stop on the first problem with one line naming the ablation and key.

Each check is the one the stage itself runs (the same function, not a copy), so a config that
plans is one whose jobs start.
"""

from __future__ import annotations

from typing import Any, Callable

from termforge.config import ablation_config, check_config, load_config, load_overlays, run_ablations
from termforge.errors import ConfigError
from termforge.evals.run import trained_policy_problem
from termforge.models.base import SamplingParams, model_spec_problem
from termforge.opsd.config import OPSDConfig


def _train(cfg: dict, trained: bool) -> None:
    if trained:
        OPSDConfig.from_dict(cfg.get("train") or {}, where="train")


def _sampling(cfg: dict, path: tuple[str, ...], seeded: bool) -> None:
    node: Any = cfg
    for part in path:
        node = node[part]
    values = {**node, "seed": cfg["seed"]} if seeded else node
    SamplingParams.from_dict(values, where=".".join(path))


def _eval_weights(cfg: dict, trained: bool, benchmark: str) -> None:
    if not trained:
        return
    problem = trained_policy_problem(cfg)
    if problem:
        raise ConfigError(f"{problem} (eval_{benchmark} of the trained weights)")


def _eval_aime(cfg: dict, trained: bool) -> None:
    if not cfg["eval"]["aime"]["enabled"]:
        return
    _sampling(cfg, ("eval", "aime", "sampling"), seeded=True)
    _eval_weights(cfg, trained, "aime")


def _eval_tbench(cfg: dict, trained: bool) -> None:
    tbench = cfg["eval"]["tbench"]
    if not tbench["enabled"] or tbench["runner"] != "native":
        return
    _sampling(cfg, ("eval", "tbench", "sampling"), seeded=True)
    _eval_weights(cfg, trained, "tbench")


def _solve(cfg: dict, trained: bool) -> None:
    if not trained:  # one solve stage, shared by every ablation
        _sampling(cfg, ("solve", "sampling"), seeded=False)


# stage -> check(config of the job, whether the job's policy is a trained ablation)
JOB_CHECKS: dict[str, Callable[[dict, bool], None]] = {
    "solve": _solve,
    "train": _train,
    "eval_aime": _eval_aime,
    "eval_tbench": _eval_tbench,
}


def check_jobs(cfg: dict, ablation: str | None = None) -> None:
    """Run every stage's start-up check on a validated config: the base config's shared and
    base-policy jobs (ablation None) or one ablation's train and eval jobs. A failure is one
    ConfigError: `ablations.<name>: <key>: <problem>` for an ablation, `<key>: <problem>` otherwise."""
    for check in JOB_CHECKS.values():
        try:
            check(cfg, ablation is not None)
        except ConfigError as exc:
            if ablation is None:
                raise
            raise ConfigError(f"ablations.{ablation}: {exc}") from None


def _check_models(cfg: dict) -> None:
    if problem := model_spec_problem(cfg):
        raise ConfigError(problem)


def check_planned_jobs(cfg: dict) -> None:
    """Plan-time validation of a schema-checked config: its model specs and the shared and
    base-policy jobs, then every ablation that runs, each under its merged config (its model specs
    and base-policy checks, then its train and eval jobs). Ablations left out by `ablations_only`
    are not planned, so they are not checked."""
    _check_models(cfg)
    check_jobs(cfg)
    for name in run_ablations(cfg):
        merged = ablation_config(cfg, name)
        try:
            _check_models(merged)
            check_jobs(merged)
        except ConfigError as exc:
            raise ConfigError(f"ablations.{name}: {exc}") from None
        check_jobs(merged, ablation=name)


def planned_config(config: dict) -> dict:
    """termforge.config.check_config (schema, defaults, rules across keys), then the plan-time
    checks: the validated config a run starts from."""
    cfg = check_config(config)
    check_planned_jobs(cfg)
    return cfg


def load_planned(paths: list) -> dict:
    """termforge.config.load_config, then the plan-time checks."""
    cfg = load_config(paths)
    check_planned_jobs(cfg)
    return cfg


def load_planned_overlays(overlays: list | None) -> dict:
    """termforge.config.load_overlays (./config.yaml, then a command's --configfile overlays), then
    the plan-time checks."""
    cfg = load_overlays(overlays)
    check_planned_jobs(cfg)
    return cfg
