"""The run report: tables from a real run's outputs, the self-contained HTML, and a headless browser.

tests/data/report_run is the results directory of a real run of the pipeline (6 tasks in 2 shards,
the real SmolLM2 policy solving at k=2, a reference JSONL that contaminates one task; see its
README). Stages that had not run yet there (hints, training, evals) are added by
`add_planned_outputs` in their formats: evals through the real eval-table writer.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from termforge.errors import TermforgeError
from termforge.io import read_json, read_jsonl
from termforge.report import build_report

FIXTURE = Path(__file__).parent / "data" / "report_run"
PNG = b"\x89PNG\r\n\x1a\n"
ABLATIONS = ("opsd_lora", "opsd_full")


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


class Page(HTMLParser):
    """Ids, headings, image sources and external references of a page."""

    def __init__(self):
        super().__init__()
        self.ids: list[str] = []
        self.headings: list[str] = []
        self.img_src: list[str] = []
        self.tags: set[str] = set()
        self._in_h = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "img":
            self.img_src.append(a.get("src", ""))
        self._in_h = tag in ("h1", "h2")
        if self._in_h:
            self.headings.append("")

    def handle_endtag(self, tag):
        if tag in ("h1", "h2"):
            self._in_h = False

    def handle_data(self, data):
        if self._in_h:
            self.headings[-1] += data


def parse(html_text: str) -> Page:
    p = Page()
    p.feed(html_text)
    return p


def copy_run(dest: Path) -> Path:
    results = dest / "results"
    shutil.copytree(FIXTURE, results)
    return results


@pytest.fixture
def run_tree(tmp_path) -> Path:
    return copy_run(tmp_path)


def add_planned_outputs(results: Path) -> None:
    """Review, hints, training and eval outputs in the formats of their stages."""
    from termforge.evals.run import write_eval_record, write_eval_table
    from termforge.quality.review import run_review_shard, run_review_traces

    # The embedded run's rubric review: no judge configured, so everything is "not reviewed".
    for v in sorted((results / "validate").glob("*.json")):
        run_review_shard(v, results / "review" / v.name)
    for s in sorted((results / "solve").glob("[0-9]*.json")):
        run_review_traces(s, results / "solve" / "reviews" / s.name)

    records = []
    for i, model in enumerate(("base",) + ABLATIONS):
        rec = results / "runs" / model / "eval" / "aime.json"
        write_eval_record(rec, model, "math-heldout", "aime",
                          {"num_problems": 16, "avg@2": 0.125 + 0.0625 * i, "pass@2": 0.25 + 0.125 * i,
                           "maj@2": 0.125, "formatted_rate": 0.875})
        records.append(rec)
        rec = results / "runs" / model / "eval" / "tbench.json"
        write_eval_record(rec, model, "tb-mini", "tbench",
                          {"n_tasks": 6, "n_scored": 6, "mean_reward": i / 6, "pass_at_k": {"1": i / 6}, "n_errors": 0})
        records.append(rec)
    write_eval_table(records, results / "eval" / "results.csv")
    for j, name in enumerate(ABLATIONS):
        train = results / "runs" / name / "train"
        train.mkdir(parents=True, exist_ok=True)
        with open(train / "metrics.jsonl", "w") as fh:
            for step in range(1, 6):
                fh.write(json.dumps({"step": step, "loss": 2.0 / (step + j), "kl_mean": 0.5 / step, "clipped_fraction": 0.02,
                                     "completion_len": 30 + step, "tokens_per_s": 100.0 + j, "peak_mem_mb": 800 + step}) + "\n")
        (train / "kl_probe.json").write_text(json.dumps({"before": {"kl_mean": 0.4, "num_tokens": 96},
                                                         "after": {"kl_mean": 0.3 - 0.1 * j, "num_tokens": 96}}))
    (results / "hints").mkdir()
    (results / "hints" / "coverage.json").write_text(json.dumps({
        "backend": "procedural", "model": None, "total": 5, "repaired": 1,
        "counts": {"hinted": 4, "dropped_leak": 1, "refused": 0, "not_attempted": 0},
        "by_domain": {"security": {"hinted": 0, "dropped_leak": 1, "refused": 0, "not_attempted": 0},
                      "data_querying": {"hinted": 1, "dropped_leak": 0, "refused": 0, "not_attempted": 0}}}))


def build(results: Path, out: Path, **kw) -> tuple[dict, str]:
    info = build_report(results, out / "report.html", out / "tables", **kw)
    return info, (out / "report.html").read_text(encoding="utf-8")


# Each build draws its plots (a few seconds on a busy CI core): build once per module, read many times.
@pytest.fixture(scope="module")
def partial(tmp_path_factory):
    root = tmp_path_factory.mktemp("partial")
    results = copy_run(root)
    info, text = build(results, root / "out", gpu_rules={"solve": 2})
    return results, root / "out", info, text


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    root = tmp_path_factory.mktemp("full")
    results = copy_run(root)
    add_planned_outputs(results)
    info, text = build(results, root / "out", gpu_rules={"solve"})
    return results, root / "out", info, text


# -- a run that reached pass@k: later stages are "not run" -------------------------------------------

def test_partial_run_marks_missing_stages_and_falls_back_to_survival(partial):
    _, out, info, text = partial
    assert info["sections"]["hints"] == info["sections"]["training"] == info["sections"]["eval"] == "not run"
    assert all(info["sections"][k] == "ok" for k in ("composition", "survival", "decontam", "passk", "cost"))
    assert info["main_table"] == "survival"
    page = parse(text)
    assert page.ids.count("main-table") == 1
    main = re.search(r'<section id="survival">.*?</section>', text, re.S).group(0)
    assert 'id="main-table"' in main
    assert "Not run: <code>results/hints/coverage.json</code>" in text
    assert "Not run: <code>results/eval/results.csv</code>" in text
    assert not (out / "tables" / "eval_comparison.csv").exists()


def test_survival_and_drop_reasons_follow_the_run(partial):
    _, out, _, _ = partial
    rows = {r["stage"]: r for r in read_csv(out / "tables" / "survival.csv")}
    n_sampled = len(read_jsonl(FIXTURE / "axes" / "signatures.jsonl"))
    n_generated = sum(len(read_json(p)["tasks"]) for p in (FIXTURE / "tasks" / "manifests").glob("*.json"))
    decontam = read_json(FIXTURE / "decontam" / "report.json")
    corpus = read_json(FIXTURE / "corpus" / "manifest.json")
    assert int(rows["sampled"]["tasks"]) == n_sampled == 6
    assert int(rows["generated"]["tasks"]) == n_generated
    assert int(rows["after decontamination"]["tasks"]) == n_generated - len(decontam["dropped"]) == 5
    assert int(rows["after decontamination"]["lost at this stage"]) == 1
    assert int(rows["validated and kept"]["tasks"]) == len(corpus["kept"])
    assert float(rows["validated and kept"]["share of sampled"]) == pytest.approx(len(corpus["kept"]) / n_sampled, abs=1e-6)
    solved = [r for s, r in rows.items() if s.startswith("solved")]
    assert len(solved) == 1 and solved[0]["lost at this stage"] == ""
    drops = read_csv(out / "tables" / "drop_reasons.csv")
    assert drops == [{"stage": "decontamination", "reason": corpus["dropped"][0]["reason"], "tasks": "1",
                      "example task ids": corpus["dropped"][0]["task_id"]}]
    # The image the kept tasks were validated on, by base digest and lock (corpus manifest `images`).
    images = read_csv(out / "tables" / "images.csv")
    assert len(images) == 1 and images[0]["kept tasks"] == str(len(corpus["kept"]))
    first = corpus["images"][corpus["kept"][0]]
    assert (images[0]["base image"], images[0]["base digest"], images[0]["lock digest"]) == (
        first["base"], first["base_digest"], first["base_lock_digest"])


def test_composition_balance_and_family_tables(partial):
    _, out, _, _ = partial
    stats = read_json(FIXTURE / "axes" / "stats.json")["axes"]
    balance = {r["axis"]: r for r in read_csv(out / "tables" / "axis_balance.csv")}
    assert set(balance) == set(stats)
    for axis, info in stats.items():
        assert float(balance[axis]["balance"]) == pytest.approx(info["normalised_effective_number"], abs=1e-6)
    comp = [r for r in read_csv(out / "tables" / "corpus_composition.csv") if r["axis"] == "domain"]
    assert {r["bucket"]: int(r["signatures"]) for r in comp} == stats["domain"]["counts"]
    assert sum(float(r["share"]) for r in comp) == pytest.approx(1.0, abs=1e-5)
    fam = read_csv(out / "tables" / "family_mix.csv")
    tasks = [t for p in (FIXTURE / "tasks" / "manifests").glob("*.json") for t in read_json(p)["tasks"]]
    assert sum(int(r["tasks"]) for r in fam) == len(tasks)
    assert sum(int(r["with a mismatch"]) for r in fam) == sum(1 for t in tasks if t["mismatch"])
    honoured = {r["axis"]: r for r in read_csv(out / "tables" / "honoured_axes.csv")}
    for axis in ("domain", "skills", "anchor", "verifier_kind", "fixture_kind"):
        assert int(honoured[axis]["honoured"]) == sum(1 for t in tasks if axis not in t["mismatch"]), axis
    full = honoured["every axis (fully honoured signature)"]
    assert int(full["honoured"]) == sum(1 for t in tasks if not t["mismatch"]) and int(full["tasks"]) == len(tasks)


def test_decontamination_hit_is_reported_with_its_ngram(partial):
    _, out, _, text = partial
    hit = read_json(FIXTURE / "decontam" / "report.json")["contamination"][0]
    rows = read_csv(out / "tables" / "decontam_hits.csv")
    assert rows == [{"task id": hit["task_id"], "source": hit["source"], "reference item": hit["ref_id"],
                     "shared n-grams": str(hit["shared_ngrams"]), "example shared n-gram": hit["example_ngram"]}]
    assert hit["example_ngram"] in text
    assert "No near-duplicates inside the corpus" in text


def test_passk_tables_match_the_passk_stage(partial):
    _, out, _, _ = partial
    pk = read_json(FIXTURE / "solve" / "passk.json")
    rows = read_csv(out / "tables" / "passk_by_bucket.csv")
    assert len(rows) == sum(len(b) for b in pk["by"].values())
    for r in rows:
        src = pk["by"][r["grouping"]][r["bucket"]]
        assert int(r["tasks"]) == src["tasks"]
        assert float(r["pass@1"]) == pytest.approx(src["pass@1"]) and float(r["pass@2"]) == pytest.approx(src["pass@2"])
    overall = {r["metric"]: r["value"] for r in read_csv(out / "tables" / "passk_overall.csv")}
    assert float(overall["pass@1"]) == pk["overall"]["pass@1"]
    assert int(overall["tasks never solved"]) == len(pk["zero_pass"])
    # Hacked rollouts (integrity findings from the grader) per family, beside their graded rollouts.
    hack = read_csv(out / "tables" / "hack_rate.csv")
    assert sum(int(r["graded rollouts"]) for r in hack) == sum(t["n"] for t in pk["per_task"])
    assert sum(int(r["hacked"]) for r in hack) == sum(t["hacked_rollouts"] for t in pk["per_task"])


def test_cost_per_rule_from_benchmark_files(partial):
    _, out, _, _ = partial
    rows = {r["rule"]: r for r in read_csv(out / "tables" / "rule_cost.csv")}
    bench = [read_csv_tsv(p) for p in sorted((FIXTURE / "benchmarks" / "solve").glob("*.tsv"))]
    wall = sum(float(b["s"]) for b in bench)
    assert int(rows["solve"]["jobs"]) == 2
    assert float(rows["solve"]["wall s (sum)"]) == pytest.approx(wall, abs=1e-4)
    assert float(rows["solve"]["CPU hours"]) == pytest.approx(sum(float(b["cpu_time"]) for b in bench) / 3600, abs=1e-6)
    assert float(rows["solve"]["GPU hours"]) == pytest.approx(2 * wall / 3600, abs=1e-6)
    assert rows["validate"]["GPU hours"] == ""
    assert float(rows["solve"]["max RSS (MB)"]) == max(float(b["max_rss"]) for b in bench)
    n_files = len(list((FIXTURE / "benchmarks").rglob("*.tsv")))
    assert int(rows["all rules"]["jobs"]) == n_files
    assert set(rows) - {"all rules"} == {"sample_axes", "generate", "build_images", "decontaminate", "validate",
                                         "corpus_manifest", "solve", "passk"}


def test_validation_cost_per_step_from_the_validate_profiles(partial):
    _, out, _, text = partial
    rows = {r["validation step"]: r for r in read_csv(out / "tables" / "validation_steps.csv")}
    profile = json.loads((FIXTURE / "logs" / "validate" / "00000.profile.json").read_text())["steps"]
    assert set(rows) == set(profile) | {"total"}
    total_cpu = sum(s["cpu_s"] for s in profile.values())
    for name, step in profile.items():
        assert int(rows[name]["count"]) == step["count"]
        assert float(rows[name]["CPU s"]) == pytest.approx(step["cpu_s"])
        assert float(rows[name]["CPU share"]) == pytest.approx(step["cpu_s"] / total_cpu, abs=1e-5)
    assert float(rows["total"]["CPU s"]) == pytest.approx(total_cpu)
    # Largest CPU first: where to look for the next speed-up.
    assert list(rows)[0] == "reward_hack_probe" and list(rows)[-1] == "total"
    assert "Validation cost per step" in text


def read_csv_tsv(path: Path) -> dict:
    with open(path, newline="") as fh:
        return next(csv.DictReader(fh, delimiter="\t"))


# -- a complete run ----------------------------------------------------------------------------------

def test_full_report_compares_base_with_each_ablation(full):
    full_tree, out, info, text = full
    assert set(info["sections"].values()) == {"ok"}
    # The review ran without a judge: recorded as such, never as a pass.
    outcomes = {r["what"]: r for r in read_csv(out / "tables" / "review_outcomes.csv")}
    assert outcomes["tasks"]["judge"] == "none" and int(outcomes["tasks"]["not_reviewed"]) > 0
    assert int(outcomes["tasks"]["reviewed"]) == 0
    assert info["main_table"] == "eval_comparison"
    wide = read_csv(out / "tables" / "eval_comparison.csv")
    tidy = read_csv(full_tree / "eval" / "results.csv")
    assert len(wide) == len({(r["benchmark"], r["metric"]) for r in tidy})
    value = {(r["model"], r["benchmark"], r["metric"]): r for r in tidy}
    for row in wide:
        base = float(value[("base", row["benchmark"], row["metric"])]["value"])
        for m in ABLATIONS:
            v = float(value[(m, row["benchmark"], row["metric"])]["value"])
            assert float(row[m]) == pytest.approx(v, abs=1e-6)
            assert float(row[f"{m} − base"]) == pytest.approx(v - base, abs=1e-6)
            se = value[(m, row["benchmark"], row["metric"])]["stderr"]
            if se == "":
                assert row[f"{m} stderr"] == ""
            else:
                assert float(row[f"{m} stderr"]) == pytest.approx(float(se), abs=1e-6)
    main = re.search(r'<section id="eval">.*?</section>', text, re.S).group(0)
    assert 'id="main-table"' in main and "±" in main
    page = parse(text)
    assert page.ids.count("main-table") == 1
    training = {r["ablation"]: r for r in read_csv(out / "tables" / "training_summary.csv")}
    assert set(training) == set(ABLATIONS)
    assert float(training["opsd_full"]["probe KL after"]) == pytest.approx(0.2)
    assert float(training["opsd_lora"]["last loss"]) == pytest.approx(2.0 / 5)
    assert int(training["opsd_lora"]["peak memory (MB)"]) == 805
    assert len(read_csv(out / "tables" / "training_curves.csv")) == 10
    hints = {r["domain"]: r for r in read_csv(out / "tables" / "hint_coverage.csv")}
    assert float(hints["all domains"]["coverage"]) == pytest.approx(0.8)
    assert int(hints["security"]["dropped_leak"]) == 1


def test_page_is_self_contained_and_plots_are_embedded(full):
    _, _, info, text = full
    page = parse(text)
    assert not page.tags & {"script", "link", "iframe", "object", "embed"}
    without_images = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", text)
    assert not re.search(r"(https?:)?//|url\(|@import", without_images)
    assert page.img_src and all(s.startswith("data:image/png;base64,") for s in page.img_src)
    assert len(page.img_src) == len(info["plots"]) == 6
    for name, path in info["plots"].items():
        data = Path(path).read_bytes()
        assert data.startswith(PNG), name
    import base64
    embedded = {base64.b64decode(s.split(",", 1)[1]) for s in page.img_src}
    assert embedded == {Path(p).read_bytes() for p in info["plots"].values()}
    for title in ("Corpus composition and balance", "Survival through the stages", "Decontamination",
                  "pass@k of the policy on the kept tasks", "Hint coverage", "Training (OPSD) per ablation",
                  "Evaluation: base policy vs each ablation", "Run cost per rule"):
        assert title in page.headings


def test_same_results_give_the_same_bytes(full, tmp_path):
    full_tree, _, a, text_a = full
    b, text_b = build(full_tree, tmp_path / "b", gpu_rules={"solve"})
    assert text_a == text_b
    for name in a["tables"]:
        assert Path(a["tables"][name]).read_bytes() == Path(b["tables"][name]).read_bytes()
    for name in a["plots"]:
        assert Path(a["plots"][name]).read_bytes() == Path(b["plots"][name]).read_bytes()


def test_stale_tables_of_an_earlier_build_are_removed(full, tmp_path):
    _, full_out, _, _ = full
    out = tmp_path / "out"
    shutil.copytree(full_out, out)
    assert (out / "tables" / "eval_comparison.csv").exists() and (out / "tables" / "eval.png").exists()
    info, _ = build(copy_run(tmp_path), out)
    assert info["main_table"] == "survival"
    assert not (out / "tables" / "eval_comparison.csv").exists() and not (out / "tables" / "eval.png").exists()


def test_missing_sampler_output_is_a_clear_error(run_tree, tmp_path):
    (run_tree / "axes" / "stats.json").unlink()
    with pytest.raises(TermforgeError, match=r"axes/stats\.json not found"):
        build(run_tree, tmp_path / "out")


def test_broken_benchmark_file_names_the_file(run_tree, tmp_path):
    (run_tree / "benchmarks" / "passk.tsv").write_text("not a benchmark\n")
    with pytest.raises(TermforgeError, match=r"passk\.tsv is not a Snakemake benchmark file"):
        build(run_tree, tmp_path / "out")


# -- a real browser --------------------------------------------------------------------------------

def _chromium() -> str | None:
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (setup.sh installs it); "
                                                "the report's browser check needs a headless chromium")
def test_report_renders_in_headless_chromium(full):
    _, out, _, _ = full
    url = (out / "report.html").resolve().as_uri()
    base = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run(base + [f"--user-data-dir={out / 'profile-dom'}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = parse(dom.stdout)
    assert "main-table" in page.ids
    assert "Evaluation: base policy vs each ablation" in page.headings
    assert "Run cost per rule" in page.headings
    shot = out / "report-screenshot.png"
    snap = subprocess.run(base + [f"--user-data-dir={out / 'profile-shot'}", f"--screenshot={shot}",
                                  "--window-size=1280,2000", url], capture_output=True, text=True, timeout=120)
    assert snap.returncode == 0, snap.stderr[-2000:]
    console = dom.stderr + snap.stderr
    for marker in ("Uncaught", "Failed to load resource", "net::ERR_"):
        assert marker not in console, console[-3000:]
    data = shot.read_bytes()
    assert data.startswith(PNG) and len(data) > 20_000  # a blank page compresses to a few KB
    print(f"report screenshot: {shot}")


def test_llm_generation_checks_and_costs_are_reported(tmp_path):
    results = copy_run(tmp_path)
    path = sorted((results / "tasks" / "manifests").glob("*.json"))[0]
    manifest = read_json(path)
    manifest["summary"] = {"candidates": 3, "rejected_by_check": {"final_fails_untouched": 2, "truncated": 1},
                           "repaired": 2, "truncated_replies": 1,
                           "requests": {"requests": 14, "retries": 3, "prompt_tokens": 9000, "completion_tokens": 4000}}
    path.write_text(json.dumps(manifest))
    build(results, tmp_path / "out")
    rows = {r["llm generation"]: r["count"] for r in read_csv(tmp_path / "out" / "tables" / "generation_checks.csv")}
    assert rows["candidates rejected at final_fails_untouched"] == "2"
    assert rows["candidates rejected at truncated"] == "1"
    assert rows["tasks published after a repair"] == "2" and rows["requests"] == "14" and rows["retries"] == "3"


def test_terminal_run_shows_reward_curve_and_grpo_pool(tmp_path):
    """A terminal ablation (objective mixed): per-step reward and per-part losses reach the curves
    table, and the calibrated GRPO pool is shown per difficulty band."""
    results = copy_run(tmp_path)
    add_planned_outputs(results)
    train = results / "runs" / "terminal" / "train"
    train.mkdir(parents=True)
    with open(train / "metrics.jsonl", "w") as fh:
        for step in (1, 2):
            fh.write(json.dumps({"step": step, "objective": "mixed", "loss": 0.5 / step, "kl_mean": 0.1 / step,
                                 "reward_mean": 0.25 * step, "opsd_loss": 0.3 / step, "grpo_loss": 0.2 / step,
                                 "groups_kept": step - 1}) + "\n")
    (train / "summary.json").write_text(json.dumps({"weights": str(train / "final"), "rl_pool": {
        "rule": "0.0 < solve pass rate < 1.0", "pool": 2, "pool_by_band": {"hard": 1, "medium": 1},
        "candidates_by_band": {"hard": 1, "medium": 1, "unsolved": 3}, "fallback": None}}))
    build(results, tmp_path / "out")
    curves = [r for r in read_csv(tmp_path / "out" / "tables" / "training_curves.csv") if r["ablation"] == "terminal"]
    assert [float(r["reward_mean"]) for r in curves] == [0.25, 0.5]
    assert [r["objective"] for r in curves] == ["mixed", "mixed"] and float(curves[1]["grpo_loss"]) == 0.1
    (pool,) = read_csv(tmp_path / "out" / "tables" / "grpo_pool.csv")
    assert pool["ablation"] == "terminal" and pool["pool tasks"] == "2"
    assert pool["pool by band"] == "hard: 1, medium: 1" and "unsolved: 3" in pool["kept tasks by band"]


def test_terminal_run_shows_held_out_reward_before_and_after(tmp_path):
    """The training table carries each terminal ablation's held-out reward (reward_probe.json)
    beside the KL probe; an ablation without a reward probe leaves the cells empty."""
    results = copy_run(tmp_path)
    add_planned_outputs(results)
    train = results / "runs" / "terminal" / "train"
    train.mkdir(parents=True)
    (train / "metrics.jsonl").write_text(json.dumps({"step": 1, "objective": "grpo", "loss": 0.1,
                                                     "reward_mean": 0.25}) + "\n")
    (train / "reward_probe.json").write_text(json.dumps({
        "before": 0.125, "after": 0.5, "delta": 0.375, "episodes_per_task": 4, "tasks": ["a", "b"],
        "rows": [{"id": "a", "before": 0.25, "after": 0.75, "delta": 0.5},
                 {"id": "b", "before": 0.0, "after": 0.25, "delta": 0.25}]}))
    build(results, tmp_path / "out")
    rows = {r["ablation"]: r for r in read_csv(tmp_path / "out" / "tables" / "training_summary.csv")}
    row = rows["terminal"]
    assert row["held-out tasks x episodes"] == "2 x 4"
    assert (float(row["held-out reward before"]), float(row["held-out reward after"]),
            float(row["held-out reward change"])) == (0.125, 0.5, 0.375)
    others = [r for name, r in rows.items() if name != "terminal"]
    assert others and all(r["held-out reward before"] == "" for r in others)


def test_hint_uplift_per_family_reaches_the_report(tmp_path):
    """results/hints/uplift.json (termforge hint-uplift) becomes the hint_uplift table: per family
    and overall, with the count of hints that have no uplift."""
    from termforge.opsd.uplift import uplift_report

    results = copy_run(tmp_path)
    add_planned_outputs(results)
    report = uplift_report({"a": [1.0] * 4 + [0.0] * 4, "b": [0.0] * 8, "c": [1.0] * 8},
                           {"a": [0.0] * 8, "b": [0.0] * 8, "c": [1.0] * 8},
                           {"a": "one_step_file_task", "b": "one_step_file_task", "c": "log_level_filter"}, k=8)
    (results / "hints" / "uplift.json").write_text(json.dumps(report))
    _, text = build(results, tmp_path / "out")
    rows = {r["family"]: r for r in read_csv(tmp_path / "out" / "tables" / "hint_uplift.csv")}
    assert float(rows["one_step_file_task"]["uplift"]) == 0.25 and rows["one_step_file_task"]["no_uplift"] == "1"
    assert float(rows["log_level_filter"]["uplift"]) == 0.0 and rows["log_level_filter"]["no_uplift"] == "1"
    assert rows["all families"]["tasks"] == "3" and rows["all families"]["no_uplift"] == "2"
    assert "2 of 3 hints have none" in text
