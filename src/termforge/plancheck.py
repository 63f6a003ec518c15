"""Plan-time checks of what each job will run with.

JSON Schema checks keys and types; the stages check more when their job starts (the trainer's
combinations, sampling ranges, which backend can load trained weights). Run only then, a bad
ablation is found hours into a run, after every job before it. `check_config` calls
`check_jobs` for the base config and for every ablation that runs, so `snakemake -n` and
`termforge check-config` stop on the first problem with one line naming the ablation and key.

Each check is the one the stage itself runs (the same function, not a copy), so a config that
plans is one whose jobs start.
"""

from __future__ import annotations

from typing import Any, Callable

from termforge.errors import ConfigError


def _train(cfg: dict, trained: bool) -> None:
    if trained:
        from termforge.opsd.config import OPSDConfig

        OPSDConfig.from_dict(cfg.get("train") or {}, where="train")


def _sampling(cfg: dict, path: tuple[str, ...], seeded: bool) -> None:
    from termforge.models.base import SamplingParams

    node: Any = cfg
    for part in path:
        node = node[part]
    values = {**node, "seed": cfg["seed"]} if seeded else node
    SamplingParams.from_dict(values, where=".".join(path))


def _eval_weights(cfg: dict, trained: bool, benchmark: str) -> None:
    if not trained:
        return
    from termforge.evals.run import trained_policy_problem

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
