"""`termforge hint-uplift`: measure the policy's hint uplift on a corpus (termforge.opsd.uplift)
with the terminal trainer's own policy and sessions. Apart from uplift.py, whose report and reading
the trainer itself imports (train.drop_hints_without_uplift)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from termforge.opsd.uplift import DEFAULT_K, measure_hint_uplift, uplift_summary_lines


def run_uplift_cli(train_options: Mapping[str, Any] | None, out: str | Path, *, demos: str, tasks_dir: str,
                   images_dir: str, corpus: str | None = None, k: int = DEFAULT_K,
                   min_uplift: float = 0.0, max_tasks: int = 0) -> dict[str, Any]:
    """What `termforge hint-uplift` does: the train config's policy, sandbox and harness settings
    (terminal data), every hinted kept task (or max_tasks of them), k episodes per arm; the report
    written to `out`."""
    import random
    import tempfile

    import torch

    from termforge.cpu_budget import allotted_cpus
    from termforge.io import atomic_write_json, seed_from
    from termforge.models.transformers_backend import load_causal_lm
    from termforge.opsd.config import OPSDConfig
    from termforge.opsd.terminal_train import TerminalRun, load_terminal_tasks
    from termforge.opsd.trainer import OPSDTrainer, _weight_dtype, make_accelerator

    options = {**dict(train_options or {}), "data_kind": "terminal", "objective": "opsd", "demos": str(demos),
               "tasks_dir": str(tasks_dir), "images_dir": str(images_dir), "drop_hints_without_uplift": False,
               "hint_uplift": None, "probe_size": 0, "reward_probe_size": 0, "reward_probe_tasks": None}
    if corpus:
        options["corpus"] = str(corpus)
    cfg = OPSDConfig.from_dict(options, where="train")
    torch.set_num_threads(cfg.num_threads or allotted_cpus())
    random.seed(seed_from("hint-uplift", cfg.seed))
    torch.manual_seed(seed_from("hint-uplift", cfg.seed) % (2**63))
    rows = load_terminal_tasks(cfg, where="train")
    accelerator = make_accelerator(cfg)
    model, tokenizer = load_causal_lm(cfg.model, device=str(accelerator.device),
                                      dtype=_weight_dtype(cfg, accelerator.device.type == "cuda"))
    trainer = OPSDTrainer(cfg, model, tokenizer, accelerator)  # a fresh adapter: the untrained policy
    with tempfile.TemporaryDirectory(prefix="hint-uplift-") as tmp:
        run = TerminalRun(cfg, rows, Path(tmp))
        report = measure_hint_uplift(run, trainer, [r.id for r in run.hinted], k=k,
                                     seed=seed_from("hint-uplift-episodes", cfg.seed), min_uplift=min_uplift,
                                     max_tasks=max_tasks)
    report["model"] = cfg.model
    atomic_write_json(Path(out), report)
    overall = report["overall"]
    print(f"hint-uplift: {overall['tasks']} hinted tasks, k={k}: pass rate without {overall['pass_without']}, with "
          f"{overall['pass_with']}, uplift {overall['uplift']}; {len(report['no_uplift'])} hints without uplift "
          f"-> {out}")
    print("hint uplift per family (the hint's pass rate in the policy's context vs without, same seeds):")
    print("\n".join(uplift_summary_lines(report)))
    return report
