"""Planning: the token and cost projection of a config, and merging corpus manifests."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path

import pytest

from termforge.config import load_config
from termforge.errors import ConfigError, TermforgeError
from termforge.io import atomic_write_json, read_json
from termforge.planning import DEFAULT_ASSUMPTIONS, combine, estimate, format_estimate

REPO = Path(__file__).resolve().parents[1]
A = DEFAULT_ASSUMPTIONS


@pytest.fixture(scope="module")
def embedded() -> dict:
    return load_config([REPO / "config.yaml"])


def phase(est: dict, name: str) -> dict:
    (p,) = [p for p in est["phases"] if p["phase"] == name]
    return p


def api_config(embedded: dict, **solve) -> dict:
    cfg = copy.deepcopy(embedded)
    cfg["models"]["api"] = {"backend": "openai", "model": "gpt-test"}
    cfg["solve"].update({"model": "api", **solve})
    cfg["prices"] = {"gpt-test": {"input_per_mtok": 0.5, "output_per_mtok": 2.0}}
    return cfg


# -- estimate ---------------------------------------------------------------------------------------

def test_embedded_config_solve_tokens_by_hand(embedded):
    est = estimate(embedded, root=REPO)
    s = phase(est, "solve")
    n, k, cap = embedded["corpus"]["n_tasks"], embedded["solve"]["k"], embedded["solve"]["turn_cap"]
    new = embedded["solve"]["sampling"]["max_new_tokens"]
    # Worst case: every task kept, every turn used, every reply and observation at its cap; turn t
    # re-sends the first prompt and the t-1 earlier exchanges.
    per_rollout = sum(A["agent_prompt_tokens"] + t * (new + A["observation_tokens_max"]) for t in range(cap))
    assert s["max_calls"] == n * k * cap
    assert s["max_input_tokens"] == round(n * k * per_rollout)
    assert s["max_output_tokens"] == n * k * cap * new
    expected_rollouts = n * A["kept_fraction"] * k
    assert s["calls"] == round(expected_rollouts * max(1, cap * A["turn_fraction"]))
    # Local SmolLM2 has no API price: cost is unknown, not zero.
    assert s["cost_usd"] is None and "local model" in s["note"]
    assert est["totals"]["cost_usd"] is None
    assert {"generate: procedural backend, no model calls"} <= set(est["notes"])


def test_eval_phases_count_problems_tasks_and_models(embedded):
    cfg = copy.deepcopy(embedded)
    cfg["ablations"] = {"lora": {}, "full": {"train": {"finetune": "full"}}}
    est = estimate(cfg, root=REPO)
    aime = phase(est, "eval aime")
    assert aime["calls"] == cfg["eval"]["aime"]["max_problems"] * cfg["eval"]["aime"]["n"] * 3
    tb = phase(est, "eval tbench")
    n_tasks = sum(1 for p in (REPO / cfg["eval"]["tbench"]["tasks_dir"]).iterdir() if p.is_dir())
    assert tb["max_calls"] == n_tasks * 3 * cfg["eval"]["tbench"]["k"] * cfg["eval"]["tbench"]["turn_cap"]


def test_priced_model_costs_follow_the_prices(embedded):
    est = estimate(api_config(embedded))
    s = phase(est, "solve")
    assert s["model"] == "gpt-test"
    assert s["cost_usd"] == pytest.approx((s["input_tokens"] * 0.5 + s["output_tokens"] * 2.0) / 1e6, abs=1e-4)
    assert s["max_cost_usd"] == pytest.approx((s["max_input_tokens"] * 0.5 + s["max_output_tokens"] * 2.0) / 1e6,
                                              abs=1e-4)
    assert est["totals"]["cost_usd"] == pytest.approx(s["cost_usd"])
    assert "eval aime" in est["totals"]["unpriced_phases"]


def test_prompt_growth_makes_long_rollouts_superlinear(embedded):
    short = phase(estimate(api_config(embedded, turn_cap=8)), "solve")
    long = phase(estimate(api_config(embedded, turn_cap=16)), "solve")
    assert long["max_output_tokens"] == 2 * short["max_output_tokens"]
    assert long["max_input_tokens"] > 3 * short["max_input_tokens"]


def test_llm_generation_counts_chain_steps_and_repair_rounds(embedded):
    cfg = copy.deepcopy(embedded)
    cfg["generate"].update({"backend": "llm", "model": "policy", "max_repair_rounds": 3})
    g = phase(estimate(cfg), "generate")
    n = cfg["corpus"]["n_tasks"]
    assert g["max_calls"] == n * 5 * (1 + 3)
    # Four chain steps and the independent solver's call (generate.second_solution, on by default).
    assert g["calls"] == round(n * (5 + A["generate_repair_rounds"] * A["generate_steps_per_repair"]))
    assert g["calls"] < g["max_calls"] and g["output_tokens"] < g["max_output_tokens"]


def test_hints_and_training_phases(embedded):
    cfg = copy.deepcopy(embedded)
    cfg["hints"] = {"backend": "llm", "model": "policy", "max_rounds": 2, "max_words": 100}
    cfg["train"] = {"max_steps": 10, "prompts_per_step": 4, "rollouts_per_prompt": 2, "max_new_tokens": 64}
    cfg["ablations"] = {"a": {}, "b": {"train": {"max_steps": 20}}}
    est = estimate(cfg)
    h = phase(est, "hints")
    assert h["max_calls"] == cfg["corpus"]["n_tasks"] * 3
    assert phase(est, "train a")["max_output_tokens"] == 10 * 4 * 2 * 64
    assert phase(est, "train b")["max_output_tokens"] == 20 * 4 * 2 * 64
    assert "local" in phase(est, "train a")["note"]


def test_assumptions_override_and_unknown_keys(embedded):
    cfg = api_config(embedded)
    base = phase(estimate(cfg), "solve")
    more = phase(estimate(cfg, assumptions={"kept_fraction": 0.4}), "solve")
    assert more["calls"] == pytest.approx(base["calls"] / 2, abs=1)
    cfg["planning"] = {"assumptions": {"kept_fraction": 0.4}}
    assert phase(estimate(cfg), "solve")["calls"] == more["calls"]
    with pytest.raises(ConfigError, match=r"assumptions\.kept_fractoin: unknown assumption"):
        estimate(cfg, assumptions={"kept_fractoin": 0.5})
    cfg["prices"]["gpt-test"] = {"input_per_mtok": "cheap"}
    with pytest.raises(ConfigError, match=r"prices\.gpt-test"):
        estimate(cfg)


def test_format_estimate_is_a_readable_table(embedded):
    est = estimate(api_config(embedded))
    text = format_estimate(est)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["phase", "model", "calls"]
    assert any(line.startswith("solve") and "$" in line for line in lines)
    assert any(line.startswith("total") for line in lines)
    assert "costs exclude unpriced phases: eval aime, eval tbench" in text


# -- combine ----------------------------------------------------------------------------------------

def make_run(root: Path, signatures: list[dict], kept: list[str], dropped: list[dict]) -> Path:
    """A run directory as the pipeline leaves it: results/tasks/<id>/task.json and the corpus manifest."""
    for sig in signatures:
        atomic_write_json(root / "results" / "tasks" / sig["id"] / "task.json",
                          {"id": sig["id"], "family": "f", "signature": sig, "actual": {"domain": sig["domain"]}})
    manifest = root / "results" / "corpus" / "manifest.json"
    atomic_write_json(manifest, {"tasks_dir": "results/tasks", "kept": kept, "dropped": dropped,
                                 "counts": {"kept": len(kept), "dropped": len(dropped),
                                            "total": len(kept) + len(dropped), "dropped_by_stage": {}}})
    return manifest


@pytest.fixture
def two_runs(tmp_path):
    from termforge.axes.sampler import sample_signatures
    from termforge.axes.taxonomy import load_taxonomy

    tax = load_taxonomy(None)
    sigs_a = sample_signatures(12, 1, {"legacy": 1.0}, tax, domains=["security", "debugging", "data_science"])
    sigs_b = sample_signatures(9, 2, {"legacy": 1.0}, tax, domains=["security", "debugging"])
    ids_a, ids_b = [s["id"] for s in sigs_a], [s["id"] for s in sigs_b]
    # Run A keeps 10 and drops 2; run B keeps 8, drops 1 and also kept one of A's dropped tasks and
    # one of A's kept ones (a shared task must appear once).
    man_a = make_run(tmp_path / "a", sigs_a, ids_a[:10],
                     [{"task_id": t, "stage": "oracle", "reason": "oracle failed"} for t in ids_a[10:]])
    man_b = make_run(tmp_path / "b", sigs_b + [sigs_a[0], sigs_a[11]], ids_b[:8] + [ids_a[0], ids_a[11]],
                     [{"task_id": ids_b[8], "stage": "build", "reason": "setup failed"}])
    return tmp_path, man_a, man_b, sigs_a, sigs_b


def test_union_deduplicates_and_keeps_each_task_where_it_lives(two_runs):
    root, man_a, man_b, sigs_a, sigs_b = two_runs
    out = root / "union.json"
    m = combine([man_a, man_b], "union", out)
    assert read_json(out) == m
    ids_a, ids_b = [s["id"] for s in sigs_a], [s["id"] for s in sigs_b]
    assert m["kept"] == ids_a[:10] + ids_b[:8] + [ids_a[11]]
    assert len(set(m["kept"])) == len(m["kept"])
    assert m["combine"]["duplicates"] == 1
    assert Path(m["task_dirs"][ids_a[0]]) == (root / "a" / "results" / "tasks" / ids_a[0]).resolve()
    assert Path(m["task_dirs"][ids_b[0]]) == (root / "b" / "results" / "tasks" / ids_b[0]).resolve()
    # A task dropped by run A but kept by run B is kept, not listed as dropped.
    assert [d["task_id"] for d in m["dropped"]] == sorted([ids_a[10], ids_b[8]])
    assert m["counts"] == {"kept": 19, "dropped": 2, "total": 21, "dropped_by_stage": {"build": 1, "oracle": 1}}
    assert m["tasks_dir"] is None  # two runs, two task directories


def test_balanced_gives_every_bucket_the_smallest_share(two_runs):
    root, man_a, man_b, _, _ = two_runs
    union = combine([man_a, man_b], "union", root / "u.json")
    domains = {t: read_json(Path(d) / "task.json")["actual"]["domain"] for t, d in union["task_dirs"].items()}
    available = Counter(domains[t] for t in union["kept"])
    m = combine([man_a, man_b], "balanced", root / "bal.json", axis="domain", seed=3)
    per = min(available.values())
    assert m["combine"]["per_bucket"] == per
    assert Counter(domains[t] for t in m["kept"]) == {d: per for d in available}
    assert set(m["kept"]) <= set(union["kept"])
    assert m["combine"]["buckets"] == {d: {"available": n, "kept": per} for d, n in sorted(available.items())}
    # Same inputs and seed: same bytes; other seeds choose other tasks from the larger buckets.
    combine([man_a, man_b], "balanced", root / "bal2.json", axis="domain", seed=3)
    assert (root / "bal.json").read_bytes() == (root / "bal2.json").read_bytes()
    picks = {tuple(combine([man_a, man_b], "balanced", root / f"s{s}.json", seed=s)["kept"]) for s in range(6)}
    assert len(picks) > 1


def test_balanced_by_another_axis_reads_the_signature(two_runs):
    root, man_a, _, sigs_a, _ = two_runs
    m = combine([man_a], "balanced", root / "lang.json", axis="language")
    langs = Counter(next(s["language"] for s in sigs_a if s["id"] == t) for t in m["kept"])
    assert len(set(langs.values())) == 1 and m["combine"]["axis"] == "language"


def test_combine_errors_name_the_culprit(two_runs):
    root, man_a, _, sigs_a, _ = two_runs
    with pytest.raises(ConfigError, match="mode must be 'union' or 'balanced'"):
        combine([man_a], "stratified", root / "x.json")
    with pytest.raises(TermforgeError, match="missing.json does not exist"):
        combine([root / "missing.json"], "union", root / "x.json")
    (root / "a" / "results" / "tasks" / sigs_a[3]["id"] / "task.json").unlink()
    with pytest.raises(TermforgeError, match=f"task {sigs_a[3]['id']}: .*task.json not found"):
        combine([man_a], "balanced", root / "x.json")
    (root / "a" / "results" / "tasks" / sigs_a[3]["id"] / "task.json").write_text(json.dumps({"id": sigs_a[3]["id"]}))
    with pytest.raises(TermforgeError, match="no axis 'colour'"):
        combine([man_a], "balanced", root / "x.json", axis="colour")


def _every_role_on_its_own_model(embedded: dict) -> tuple[dict, dict[str, str]]:
    """A config in which every config key that names a model (MODEL_ROLES, review.judge) is in
    use and names a priced API model of its own."""
    from termforge.models.base import MODEL_ROLES

    cfg = copy.deepcopy(embedded)
    cfg["prices"] = {}
    roles = {}
    for role, cond_key, cond_value in [*MODEL_ROLES, ("review.judge", None, None)]:
        name = "m-" + role.replace(".", "-")
        section, key = role.split(".")
        cfg.setdefault(section, {})[key] = name
        if cond_key:
            cond_section, cond_name = cond_key.split(".")
            cfg[cond_section][cond_name] = cond_value
        cfg["models"][name] = {"backend": "openai", "model": f"gpt-{name}"}
        cfg["prices"][f"gpt-{name}"] = {"input_per_mtok": 1.0, "output_per_mtok": 4.0}
        roles[role] = f"gpt-{name}"
    return cfg, roles


def test_every_model_the_run_calls_is_priced(embedded):
    """A role added to MODEL_ROLES without a phase here fails this test: the plan would hide its cost."""
    cfg, roles = _every_role_on_its_own_model(embedded)
    est = estimate(cfg)
    priced = {p["model"] for p in est["phases"] if p["cost_usd"] is not None and p["max_cost_usd"]}
    assert {role: model for role, model in roles.items() if model not in priced} == {}


def test_the_example_overlays_price_the_hint_judge_and_probe(embedded):
    for example in ("openai.yaml", "anthropic.yaml"):
        cfg = load_config([REPO / "config.yaml", REPO / "configs" / "examples" / example])
        est = estimate(cfg)
        for role in ("judge", "probe"):
            p = phase(est, f"hints {role}")
            assert p["model"] == cfg["models"][cfg["hints"][role]]["model"] and p["cost_usd"] > 0, (example, p)
            # at least one call per hint draft, and never more than the hint model's worst case
            assert p["calls"] >= phase(est, "hints")["calls"]
        assert phase(est, "hints probe")["calls"] > phase(est, "hints judge")["calls"]  # its baselines
        assert est["totals"]["cost_usd"] == pytest.approx(sum(p["cost_usd"] or 0 for p in est["phases"]), abs=1e-3)
