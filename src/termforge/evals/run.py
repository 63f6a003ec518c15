"""Eval stage glue: load the base or a trained policy, run AIME and Terminal-Bench, and gather
every summary into one tidy table (model, benchmark, metric, value, n, stderr)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from termforge.errors import TermforgeError
from termforge.harness import HarnessConfig, run_episode
from termforge.io import StagedOutputs, atomic_write_json, atomic_write_text
from termforge.models.base import ChatModel

TABLE_COLUMNS = ("model", "benchmark", "metric", "value", "n", "stderr")


# Backends that can evaluate trained weights (a PEFT adapter or a full model directory).
TRAINED_WEIGHT_BACKENDS = ("transformers", "vllm")


def trained_weights_problem(spec: dict, where: str = "models.policy") -> str | None:
    """Why the model spec cannot evaluate trained weights, or None. load_policy applies the
    weights through transformers or vLLM (LoRA); the plan-time check (termforge.plancheck) asks the same."""
    if spec.get("backend") not in TRAINED_WEIGHT_BACKENDS:
        return (f"{where}.backend: evaluating trained weights needs the transformers or the vllm backend "
                f"(one of {', '.join(TRAINED_WEIGHT_BACKENDS)}), got {spec.get('backend')!r}")
    return None


def trained_policy_problem(cfg: dict) -> str | None:
    """Why the weights cfg's training writes could not be evaluated by its eval model, or None.

    An ablation's evals load its trained adapter on the eval model's base weights, so the model
    the trainer adapted (train.model) and the eval model must be the same, and the eval model's
    backend must be one that loads trained weights."""
    evals = cfg.get("eval") or {}
    if not any((evals.get(b) or {}).get("enabled") for b in ("aime", "tbench")):
        return None
    name = evals.get("model")
    spec = (cfg.get("models") or {}).get(name)
    if spec is None:
        return f"eval.model: {name!r} is not defined under models"
    if problem := trained_weights_problem(spec, f"models.{name}"):
        return problem
    trained = (cfg.get("train") or {}).get("model")
    if trained != spec.get("model"):
        return (f"train.model: {trained!r} is not models.{name}.model ({spec.get('model')!r}); the trained adapters "
                f"are evaluated on the eval model's weights, so both must name the same model")
    return None
    return None


def load_policy(spec: dict, weights_dir: Path | None, where: str = "models.policy") -> ChatModel:
    """The base policy from its model spec, or the same model with trained weights applied.

    `weights_dir` is a training output: a PEFT adapter (adapter_config.json) is applied on the base
    weights and merged; a full model directory (config.json) replaces the base weights."""
    # The backends' SDKs (seconds to import) load only when a policy is: the plan-time checks
    # above are imported by every config check.
    from termforge.models.registry import make_model

    if weights_dir is None:
        return make_model(spec, where=where)
    weights_dir = Path(weights_dir)
    problem = trained_weights_problem(spec, where)
    if problem:
        raise TermforgeError(f"{problem} ({weights_dir})")
    if spec.get("backend") == "vllm":
        return _vllm_policy(spec, weights_dir, where)
    from termforge.models.transformers_backend import TransformersChatModel, load_causal_lm

    options = {k: spec[k] for k in ("device", "dtype", "batch_size", "num_threads") if k in spec}
    load_opts = {k: options[k] for k in ("device", "dtype") if k in options}
    if (weights_dir / "adapter_config.json").exists():
        from peft import PeftModel

        base, tokenizer = load_causal_lm(spec["model"], **load_opts)
        model = PeftModel.from_pretrained(base, str(weights_dir)).merge_and_unload()
    elif (weights_dir / "config.json").exists():
        model, tokenizer = load_causal_lm(str(weights_dir), **load_opts)
    else:
        raise TermforgeError(f"trained weights not found in {weights_dir} (no adapter_config.json or config.json)")
    model.eval()
    return TransformersChatModel(f"{spec['model']}+{weights_dir.parent.parent.name}", loaded=(model, tokenizer),
                                 **{k: v for k, v in options.items() if k in ("batch_size", "num_threads")})


def _vllm_policy(spec: dict, weights_dir: Path, where: str) -> ChatModel:
    """The trained policy on vLLM: an adapter is served by the engine's LoRA support on the base
    weights (not merged); a full model directory is loaded in place of the base model."""
    from termforge.models.registry import make_model

    if (weights_dir / "adapter_config.json").exists():
        import json

        rank = int(json.loads((weights_dir / "adapter_config.json").read_text()).get("r") or 16)
        return make_model({**spec, "lora": {"path": str(weights_dir), "rank": rank,
                                            "name": weights_dir.parent.parent.name}}, where=where)
    if (weights_dir / "config.json").exists():
        return make_model({**spec, "model": str(weights_dir)}, where=where)
    raise TermforgeError(f"trained weights not found in {weights_dir} (no adapter_config.json or config.json)")


def harness_agent(model: ChatModel, cfg: HarnessConfig, name: str):
    """A Terminal-Bench agent (for evals.tbench.run_native) that is the policy in our harness."""
    from termforge.evals.tbench import AgentInfraError

    def agent(session, task) -> dict:
        shell = session.open_shell()
        try:
            episode = run_episode(model, shell, task.instruction, cfg)
        except TermforgeError as exc:  # the model endpoint failed after its retries
            raise AgentInfraError(f"model failed: {exc}") from exc
        finally:
            shell.close()
        return {"name": name, "model_name": model.model_id, "n_input_tokens": episode.prompt_tokens,
                "n_output_tokens": episode.completion_tokens, "end_reason": episode.end_reason,
                "turns": len(episode.turns)}

    agent.agent_name = name
    return agent


def _stderr_binary(p: float | None, n: int) -> float | None:
    if p is None or n <= 1:
        return None
    return math.sqrt(max(p * (1 - p), 0.0) / n)


def aime_rows(model_name: str, benchmark: str, summary: dict) -> list[dict]:
    n_problems = summary.get("num_problems", 0)
    rows = []
    for key, value in sorted(summary.items()):
        if "@" in key or key == "formatted_rate":
            rows.append({"model": model_name, "benchmark": benchmark, "metric": key, "value": value,
                         "n": n_problems, "stderr": _stderr_binary(value, n_problems)})
    return rows


def tbench_rows(model_name: str, benchmark: str, summary: dict) -> list[dict]:
    n_tasks = summary.get("n_tasks", 0)
    rows = [{"model": model_name, "benchmark": benchmark, "metric": "mean_reward", "value": summary["mean_reward"],
             "n": summary.get("n_scored", n_tasks), "stderr": _stderr_binary(summary["mean_reward"],
                                                                              summary.get("n_scored", n_tasks))}]
    for j, value in sorted(summary.get("pass_at_k", {}).items(), key=lambda kv: int(kv[0])):
        n = summary.get("n_tasks_pass_at_k", {}).get(j, n_tasks)
        rows.append({"model": model_name, "benchmark": benchmark, "metric": f"pass@{j}", "value": value,
                     "n": n, "stderr": _stderr_binary(value, n)})
    for key in ("n_errors", "n_environment_errors"):
        if key in summary:
            rows.append({"model": model_name, "benchmark": benchmark, "metric": key, "value": summary[key],
                         "n": n_tasks, "stderr": None})
    by_key = summary.get("mean_by_key") or {}
    if len(by_key) > 1:  # several named rewards (reward.json): each key's mean, as Harbor reports them
        for key, value in sorted(by_key.items()):
            rows.append({"model": model_name, "benchmark": benchmark, "metric": f"mean:{key}", "value": value,
                         "n": summary.get("n_scored", n_tasks), "stderr": None})
    if summary.get("unloadable_tasks"):
        rows.append({"model": model_name, "benchmark": benchmark, "metric": "n_unloadable_tasks",
                     "value": len(summary["unloadable_tasks"]), "n": n_tasks, "stderr": None})
    return rows


CONTROL_PREFIX = "control:"


def write_eval_table(summary_paths: list[Path], out_csv: Path) -> list[dict]:
    """Merge eval summaries (each a JSON with model, benchmark, kind and summary) into the tidy table.

    A Terminal-Bench record carries the oracle and no-op control runs of the same runner; they
    become the models `control:oracle` and `control:noop` of that benchmark (once per benchmark),
    so a reader can tell a weak policy (0.0) from a broken harness (oracle below 1)."""
    rows: list[dict] = []
    controlled: set[str] = set()
    for path in summary_paths:
        from termforge.schemas import read

        record = read("eval_record", path)
        to_rows = aime_rows if record["kind"] == "aime" else tbench_rows
        rows += to_rows(record["model"], record["benchmark"], record["summary"])
        if record["kind"] == "tbench" and record.get("controls") and record["benchmark"] not in controlled:
            controlled.add(record["benchmark"])
            for name, summary in sorted(record["controls"].items()):
                rows += tbench_rows(CONTROL_PREFIX + name, record["benchmark"], summary)
    rows.sort(key=lambda r: (r["benchmark"], r["metric"], r["model"].startswith(CONTROL_PREFIX),
                             r["model"] != "base", r["model"]))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=TABLE_COLUMNS)
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r[k] is None else r[k]) for k in TABLE_COLUMNS})
    # The same numbers nested for `dvc metrics show/diff`: model -> benchmark -> metric -> value.
    nested: dict = {}
    for r in rows:
        nested.setdefault(r["model"], {}).setdefault(r["benchmark"], {})[r["metric"]] = r["value"]
    with StagedOutputs() as staged:  # the table and its metrics, both or neither
        atomic_write_text(staged.file(out_csv), buf.getvalue())
        atomic_write_json(staged.file(Path(out_csv).with_name("metrics.json")), nested)
        staged.publish()
    return rows


def write_eval_record(out: Path, model: str, benchmark: str, kind: str, summary: dict,
                      controls: dict | None = None) -> None:
    record = {"model": model, "benchmark": benchmark, "kind": kind, "summary": summary}
    if controls is not None:
        record["controls"] = controls
    atomic_write_json(out, record)
