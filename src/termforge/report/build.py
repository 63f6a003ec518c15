"""The run report: one self-contained HTML page plus the same tables as CSV and the plots as PNG.

Every section reads one stage's outputs under the results directory. Only the axis sampler's
outputs are required; a stage that has not run yet shows a "not run" note naming the file it
would read, so the report can be built at any point of a run. The page embeds its CSS and its
PNGs (base64 data URIs): it opens from a mail attachment or a cluster's scratch space without the
code or a network. Nothing run-specific (time, host, absolute paths) is written, so the same
results give the same bytes.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from termforge.errors import InputError, TermforgeError
from termforge.generate.honour import AXES as HONOUR_AXES
from termforge.generate.honour import SHAPE_AXES
from termforge.io import atomic_write_bytes, atomic_write_text, read_input_text
from termforge.schemas import read, read_optional
from termforge.report import plots
from termforge.runtime.accounting import StepProfile, profile_table

# Every table and plot file the report may write; ones a section no longer produces are removed
# so a stale CSV from an earlier build never passes for a current one.
TABLE_NAMES = (
    "overview", "axis_balance", "corpus_composition", "family_mix", "honoured_axes", "survival", "drop_reasons",
    "decontam_summary", "decontam_hits", "decontam_near_duplicates", "passk_overall", "passk_by_bucket",
    "passk_bands", "hack_rate", "hint_coverage", "hint_uplift", "training_summary", "training_curves", "grpo_pool", "eval_comparison",
    "rule_cost", "validation_steps", "generation_checks", "review_outcomes", "review_scores", "review_drops", "images",
)
PLOT_NAMES = ("composition", "survival", "passk", "training", "eval", "cost")
MAX_HTML_ROWS = 60


@dataclass
class Table:
    name: str
    columns: list[str]
    rows: list[list[Any]]
    caption: str = ""

    def csv_text(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.columns)
        for row in self.rows:
            w.writerow(["" if v is None else _csv_value(v) for v in row])
        return buf.getvalue()


@dataclass
class Section:
    key: str
    title: str
    intro: str
    source: str
    ran: bool = True
    parts: list[str] = field(default_factory=list)


def _csv_value(v: Any) -> Any:
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(round(v, 6))
    if isinstance(v, (list, tuple)):
        return " ".join(map(str, v))
    return v


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        if v != 0 and abs(v) < 0.001:
            return f"{v:.2e}"
        return f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return str(v)


def _table_html(t: Table, html_id: str | None = None, numeric_from: int = 1) -> str:
    attrs = f' id="{html_id}"' if html_id else ""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in t.columns)
    body = []
    for row in t.rows[:MAX_HTML_ROWS]:
        cells = []
        for i, v in enumerate(row):
            cls = ' class="num"' if i >= numeric_from and isinstance(v, (int, float)) and not isinstance(v, bool) else ""
            cells.append(f"<td{cls}>{html.escape(_fmt(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = ""
    if len(t.rows) > MAX_HTML_ROWS:
        more = (f'<p class="note">First {MAX_HTML_ROWS} of {len(t.rows)} rows; all rows are in '
                f"<code>{html.escape(t.name)}.csv</code>.</p>")
    cap = f"<caption>{html.escape(t.caption)}</caption>" if t.caption else ""
    return (f'<table{attrs}>{cap}<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
            f'<p class="csv">CSV: <code>{html.escape(t.name)}.csv</code></p>{more}')


def _img_html(png: bytes, alt: str, name: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(alt)} (<code>{html.escape(name)}.png</code>)</figcaption></figure>")


class _Builder:
    def __init__(self, results: Path, gpu_rules: Mapping[str, float]):
        self.results = results
        self.gpu_rules = gpu_rules
        self.tables: dict[str, Table] = {}
        self.plots: dict[str, bytes] = {}
        self.sections: list[Section] = []
        self.facts: dict[str, Any] = {}
        self.uplift: dict[str, Any] | None = None  # results/hints/uplift.json once loaded (load)

    # -- helpers -------------------------------------------------------------------------------
    def add_table(self, sec: Section, t: Table, html_id: str | None = None, collapsed: str | None = None) -> None:
        self.tables[t.name] = t
        fragment = _table_html(t, html_id)
        if collapsed:
            fragment = f"<details><summary>{html.escape(collapsed)}</summary>{fragment}</details>"
        sec.parts.append(fragment)

    def add_plot(self, sec: Section, name: str, png: bytes, alt: str) -> None:
        self.plots[name] = png
        sec.parts.append(_img_html(png, alt, name))

    def rel(self, path: Path) -> str:
        return f"results/{path.relative_to(self.results).as_posix()}"

    def not_run(self, sec: Section, *paths: Path) -> Section:
        sec.ran = False
        names = " or ".join(f"<code>{html.escape(self.rel(p))}</code>" for p in paths)
        sec.parts.append(f'<p class="notrun">Not run: {names} was not found.</p>')
        return sec

    # -- inputs --------------------------------------------------------------------------------
    def load(self) -> None:
        r = self.results
        sig_path, stats_path = r / "axes" / "signatures.jsonl", r / "axes" / "stats.json"
        for p in (sig_path, stats_path):
            if not p.is_file():
                raise TermforgeError(f"report: {p} not found (the report needs at least the sample_axes outputs "
                                     f"under {r})")
        # The report describes a results tree as it is: the files each document names (task
        # directories) need not be there, so only the documents' own shapes are checked.
        self.signatures = read("signatures", sig_path)
        self.stats = read("axis_stats", stats_path)
        self.shards = [read("shard_manifest", p, check_refs=False)
                       for p in sorted((r / "tasks" / "manifests").glob("*.json"))]
        self.decontam = read_optional("decontam_report", r / "decontam" / "report.json")
        self.verdicts = [read("verdicts", p, check_refs=False) for p in sorted((r / "validate").glob("*.json"))]
        self.validate_profiles = [read("validate_profile", p)
                                  for p in sorted((r / "logs" / "validate").glob("*.profile.json"))]
        self.corpus = read_optional("corpus_manifest", r / "corpus" / "manifest.json")
        self.passk = read_optional("passk", r / "solve" / "passk.json")
        self.hints = read_optional("hint_coverage", r / "hints" / "coverage.json")
        uplift_path = r / "hints" / "uplift.json"
        self.uplift = json.loads(uplift_path.read_text()) if uplift_path.is_file() else None
        self.reviews = [read("reviews", p) for p in sorted((r / "review").glob("*.json"))]
        self.reviews += [read("reviews", p) for p in sorted((r / "solve" / "reviews").glob("*.json"))]
        self.eval_csv = r / "eval" / "results.csv"
        bench_dir = r / "benchmarks"
        self.benchmarks = [(f.relative_to(bench_dir), _read_benchmark(f))
                           for f in (sorted(bench_dir.rglob("*.tsv")) if bench_dir.is_dir() else [])]

    # -- sections ------------------------------------------------------------------------------
    def composition(self) -> Section:
        sec = Section("composition", "Corpus composition and balance",
                      "What the axis sampler asked for. Balance is the effective number of buckets "
                      "(exp of the entropy) divided by the buckets the axis offers: 1 means every bucket "
                      "is equally used, values near 0 mean a few buckets dominate.",
                      "results/axes/stats.json, results/tasks/manifests/*.json")
        axes = self.stats["axes"]
        balance_rows, comp_rows, plotted = [], [], {}
        for axis in sorted(axes):
            info = axes[axis]
            bal = info.get("balance", info.get("normalised_effective_number"))
            balance_rows.append([axis, info.get("observed"), info.get("possible"), bal])
            if isinstance(info.get("counts"), dict):
                total = sum(info["counts"].values()) or 1
                for bucket, n in sorted(info["counts"].items(), key=lambda kv: (-kv[1], kv[0])):
                    comp_rows.append([axis, bucket, n, n / total])
                plotted[axis] = dict(sorted(info["counts"].items(), key=lambda kv: (-kv[1], kv[0])))
            for dom, sub in sorted((info.get("by_domain") or {}).items()):
                total = sum(sub.get("counts", {}).values()) or 1
                for bucket, n in sorted(sub.get("counts", {}).items(), key=lambda kv: (-kv[1], kv[0])):
                    comp_rows.append([axis, f"{dom} / {bucket}", n, n / total])
        totals = self.stats.get("totals") or {}
        if totals:
            sec.parts.append(
                f"<p>{_fmt(totals.get('n', len(self.signatures)))} signatures over {_fmt(totals.get('axes'))} axes; "
                f"mean balance {_fmt(totals.get('mean_normalised_effective_number'))}, least balanced axis "
                f"<b>{html.escape(str(totals.get('least_balanced_axis', '–')))}</b> "
                f"({_fmt(totals.get('min_normalised_effective_number'))}); "
                f"{_fmt(totals.get('anchor_rate'))} of signatures name a real-software anchor.</p>")
        self.add_table(sec, Table("axis_balance", ["axis", "buckets used", "buckets offered", "balance"],
                                  balance_rows, "Balance per axis"))
        if plotted:
            self.add_plot(sec, "composition", plots.composition_plot(plotted), "Signatures per bucket, per axis")
        self.add_table(sec, Table("corpus_composition", ["axis", "bucket", "signatures", "share"], comp_rows,
                                  "Signatures per bucket (persona and skill type per domain)"),
                       collapsed=f"All {len(comp_rows)} buckets")
        if self.shards:
            fam: dict[tuple[str, str], list[int]] = {}
            mismatch_axes: dict[str, int] = {}
            for shard in self.shards:
                for t in shard.get("tasks", []):
                    cell = fam.setdefault((t.get("family", "?"), t.get("domain", "?")), [0, 0])
                    cell[0] += 1
                    cell[1] += bool(t.get("mismatch"))
                    for a in t.get("mismatch") or []:
                        mismatch_axes[a] = mismatch_axes.get(a, 0) + 1
            rows = [[f, d, n, m] for (f, d), (n, m) in sorted(fam.items(), key=lambda kv: (-kv[1][0], kv[0]))]
            sec.parts.append(
                "<p>Generated tasks by family. A <i>mismatch</i> is an axis the family could not honour exactly "
                "(it records the value it produced instead); per axis: "
                + (html.escape(", ".join(f"{a} {n}" for a, n in sorted(mismatch_axes.items()))) or "none")
                + ".</p>")
            self.add_table(sec, Table("family_mix", ["family", "domain", "tasks", "with a mismatch"], rows,
                                      "Generated tasks per task family"))
            self.honoured_table(sec)
        return sec

    def honoured_table(self, sec: Section) -> None:
        """Per axis, the share of generated tasks that really have the sampled value."""
        tasks = [t for shard in self.shards for t in shard.get("tasks", [])]
        if not tasks:
            return
        n = len(tasks)
        missed = [set(t.get("mismatch") or []) for t in tasks]
        rows = []
        for axis in HONOUR_AXES:
            ok = sum(1 for m in missed if axis not in m)
            rows.append([axis, n, ok, ok / n])
        shape = sum(1 for m in missed if not m & set(SHAPE_AXES))
        full = sum(1 for m in missed if not m)
        rows.append(["domain + verifier_kind + fixture_kind", n, shape, shape / n])
        rows.append(["every axis (fully honoured signature)", n, full, full / n])
        fallbacks = sum(1 for t in tasks if t.get("fallback"))
        sec.parts.append(
            f"<p>Honoured signatures: {_fmt(full / n)} of {n} tasks have every sampled axis; "
            f"{_fmt(shape / n)} have the sampled domain, verifier kind and fixture kind. "
            f"{fallbacks} tasks were built after a failed draw (retried seed or next-best family; "
            "see <code>generation</code> in task.json).</p>")
        self.add_table(sec, Table("honoured_axes", ["axis", "tasks", "honoured", "share"], rows,
                                  "Honoured per axis: tasks whose family really has the sampled value"))

    def survival(self) -> Section:
        sec = Section("survival", "Survival through the stages",
                      "How many tasks remain after each stage, and why the others were dropped. Sampled "
                      "signatures become task directories (generate), lose benchmark look-alikes and "
                      "near-duplicates (decontaminate), and must then pass every validation check (build, "
                      "initial state, oracle, no-op and reward-hack probes) to be kept.",
                      "results/tasks/manifests, results/decontam/report.json, results/validate, "
                      "results/corpus/manifest.json, results/solve/passk.json")
        sampled = [s["id"] for s in self.signatures]
        stages: list[tuple[str, int | None]] = [("sampled", len(sampled))]
        drops: list[tuple[str, str, str]] = []  # (stage, reason, task id)
        generated = [t["id"] for s in self.shards for t in s.get("tasks", [])]
        if self.shards:
            stages.append(("generated", len(generated)))
            gen = set(generated)
            failed = {f["id"]: f for s in self.shards for f in s.get("failed", [])}
            for tid in sampled:
                if tid in failed:
                    f = failed[tid]
                    drops.append((f"generate ({f.get('step')}: {f.get('stage')})", str(f.get("reason", ""))[:160], tid))
                elif tid not in gen:
                    drops.append(("generate", "no task directory (shard not generated or generation failed)", tid))
        current = len(generated) if self.shards else len(sampled)
        if self.decontam is not None:
            dropped = list(self.decontam.get("dropped", []))
            current -= len(dropped)
            stages.append(("after decontamination", current))
            if self.corpus is None and not self.verdicts:
                reasons = {f["task_id"]: ", ".join(f.get("reasons", [])) for f in self.decontam.get("flagged", [])}
                drops += [("decontamination", reasons.get(t, "dropped"), t) for t in dropped]
        if self.corpus is not None:
            stages.append(("validated and kept", len(self.corpus.get("kept", []))))
            drops += [(d["stage"], d["reason"], d["task_id"]) for d in self.corpus.get("dropped", [])]
        elif self.verdicts:
            vs = [v for shard in self.verdicts for v in shard.get("verdicts", [])]
            stages.append(("validated and kept", sum(1 for v in vs if v.get("kept"))))
            drops += [(v["stage"], v["reason"], v["task_id"]) for v in vs if not v.get("kept")]
        if self.passk is not None:
            solved = sum(1 for t in self.passk.get("per_task", []) if t.get("c", 0) > 0)
            stages.append((f"solved at least once in {self.passk.get('k_max', 'k')} attempts", solved))
        rows, prev = [], None
        for name, n in stages:
            # Solving filters nothing: its row shows coverage, not a loss.
            lost = None if prev is None or name.startswith("solved") else prev - n
            rows.append([name, n, lost, n / len(sampled) if sampled else None])
            prev = n
        kept = [n for name, n in stages if name == "validated and kept"]
        if kept:
            self.facts["kept"] = kept[0]
        self.tables["survival"] = Table("survival", ["stage", "tasks", "lost at this stage", "share of sampled"],
                                        rows, "Tasks remaining after each stage")
        self.survival_fragment = _table_html(self.tables["survival"], "main-table" if not self.has_eval else None)
        sec.parts.append(self.survival_fragment)
        if len(stages) > 1:
            self.add_plot(sec, "survival", plots.survival_plot(stages), "Tasks surviving each stage")
        grouped: dict[tuple[str, str], list[str]] = {}
        for stage, reason, tid in drops:
            grouped.setdefault((stage, reason), []).append(tid)
        reason_rows = [[s, r, len(ids), sorted(ids)[:3]]
                       for (s, r), ids in sorted(grouped.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
        self._generation_checks(sec)
        self._images(sec)
        if reason_rows:
            self.add_table(sec, Table("drop_reasons", ["stage", "reason", "tasks", "example task ids"], reason_rows,
                                      "Why tasks were dropped"))
        else:
            sec.parts.append("<p>No task was dropped.</p>")
        return sec

    def _images(self, sec: Section) -> None:
        """The environments the kept tasks were validated on (corpus manifest `images`): each base
        image by digest and lock, and how many kept tasks ran on it; a verdict holds for that image."""
        images = (self.corpus or {}).get("images") or {}
        if not images:
            if self.corpus is not None:
                sec.parts.append("<p>The corpus manifest records no task images (it predates image recording).</p>")
            return
        groups: dict[tuple, list[str]] = {}
        for tid, im in sorted(images.items()):
            key = (im.get("rootfs"), im.get("base"), " ".join(im.get("base_names") or []), im.get("base_digest"),
                   im.get("base_lock_digest"), " ".join(im.get("apt_packages") or []))
            groups.setdefault(key, []).append(tid)
        rows = [[("the host's /usr (runtime.rootfs: host)" if rootfs == "host" else base), names, digest, lock,
                 extra, len(ids), ids[:3]]
                for (rootfs, base, names, digest, lock, extra), ids in sorted(groups.items(), key=lambda kv: -len(kv[1]))]
        self.facts["base images"] = len(groups)
        self.add_table(sec, Table("images", ["base image", "image names", "base digest", "lock digest",
                                             "task apt packages", "kept tasks", "example task ids"], rows,
                                  "What the kept tasks were validated on (each task's image digest is in "
                                  "results/corpus/manifest.json)"))

    def _generation_checks(self, sec: Section) -> None:
        """llm backend: what generation's own checks rejected and repaired, and what it cost."""
        summaries = [s["summary"] for s in self.shards if isinstance(s.get("summary"), dict)]
        if not summaries:
            return
        rejected: dict[str, int] = {}
        totals = {"candidates": 0, "repaired": 0, "truncated_replies": 0}
        usage = {"requests": 0, "retries": 0, "prompt_tokens": 0, "completion_tokens": 0, "cache_hits": 0}
        for summ in summaries:
            for stage, n in summ.get("rejected_by_check", {}).items():
                rejected[stage] = rejected.get(stage, 0) + n
            for key in totals:
                totals[key] += summ.get(key, 0)
            for key in usage:
                usage[key] += (summ.get("requests") or {}).get(key, 0) or 0
        rows = [[f"candidates rejected at {stage}", n] for stage, n in sorted(rejected.items())]
        rows += [["tasks published after a repair", totals["repaired"]],
                 ["replies cut at the token limit (discarded)", totals["truncated_replies"]]]
        rows += [[key.replace("_", " "), n] for key, n in usage.items()]
        planned = [summ["cost"]["planned"] for summ in summaries if (summ.get("cost") or {}).get("planned")]
        if planned:
            rows += [["input tokens planned by termforge plan", sum(p["input_tokens"] for p in planned)],
                     ["output tokens planned by termforge plan", sum(p["output_tokens"] for p in planned)]]
            costs = [summ["cost"]["actual"]["cost_usd"] for summ in summaries if summ.get("cost")]
            plan_costs = [p["cost_usd"] for p in planned]
            if all(c is not None for c in costs + plan_costs):
                rows += [["cost (USD)", round(sum(costs), 4)], ["cost planned (USD)", round(sum(plan_costs), 4)]]
        self.add_table(sec, Table("generation_checks", ["llm generation", "count"], rows,
                                  "LLM generation: candidates rejected by each check, repairs and model usage"))

    def decontamination(self) -> Section:
        sec = Section("decontam", "Decontamination",
                      "Each task's text is compared with benchmark reference sets by shared word n-grams "
                      "(a hit is a task sharing enough n-grams with one reference item) and with the rest of "
                      "the corpus by MinHash similarity (near-duplicates).",
                      "results/decontam/report.json")
        rep = self.decontam
        if rep is None:
            return self.not_run(sec, self.results / "decontam" / "report.json")
        s, params = rep.get("summary", {}), rep.get("params", {})
        rows = [["tasks checked", s.get("tasks")], ["reference documents", s.get("references")],
                ["contamination hits", s.get("contamination_hits")],
                ["contaminated tasks", s.get("contaminated_tasks")],
                ["near-duplicate tasks", s.get("near_duplicate_tasks")], ["flagged", s.get("flagged")],
                ["dropped", s.get("dropped")], ["kept", s.get("kept")],
                ["n-gram length", params.get("n")], ["policy", params.get("policy")],
                ["near-duplicate threshold", params.get("near_dup_threshold")]]
        for src, n in sorted((s.get("contaminated_tasks_by_source") or {}).items()):
            rows.append([f"contaminated tasks from {src}", n])
        self.add_table(sec, Table("decontam_summary", ["quantity", "value"], rows, "Decontamination summary"))
        hits = [[h.get("task_id"), h.get("source"), h.get("ref_id"), h.get("shared_ngrams"), h.get("example_ngram")]
                for h in rep.get("contamination", [])]
        if hits:
            self.add_table(sec, Table("decontam_hits", ["task id", "source", "reference item", "shared n-grams",
                                                        "example shared n-gram"], hits,
                                      "Contamination hits against reference sets"))
        else:
            sec.parts.append("<p>No task shares an n-gram run with a reference set.</p>")
        clusters = [[c.get("kept"), c.get("size"), ", ".join((c.get("duplicates") or [])[:5])
                     + (" ..." if len(c.get("duplicates") or []) > 5 else "")]
                    for c in sorted(rep.get("near_duplicate_clusters", []), key=lambda c: (-c.get("size", 0),
                                                                                         c.get("kept", "")))]
        if clusters:
            self.add_table(sec, Table("decontam_near_duplicates", ["kept task", "cluster size", "duplicates"],
                                      clusters, "Near-duplicate clusters inside the corpus (largest first)"))
        elif not params.get("near_dups", True):
            sec.parts.append("<p>The near-duplicate pass was switched off (<code>decontam.near_dups</code>).</p>")
        else:
            sec.parts.append("<p>No near-duplicates inside the corpus.</p>")
        return sec

    def passk_section(self) -> Section:
        sec = Section("passk", "pass@k of the policy on the kept tasks",
                      "Each kept task is attempted k times by the policy; pass@j is the unbiased estimate "
                      "of the chance that at least one of j attempts succeeds, averaged over tasks. Rollouts "
                      "that failed for infrastructure reasons are retried and never counted as failures.",
                      "results/solve/passk.json")
        pk = self.passk
        if pk is None:
            return self.not_run(sec, self.results / "solve" / "passk.json")
        overall = pk.get("overall", {})
        metrics = sorted(overall, key=lambda m: int(m.split("@")[1]) if "@" in m and m.split("@")[1].isdigit() else 0)
        rows = [[m, overall[m]] for m in metrics]
        rows += [["tasks", pk.get("tasks")], ["tasks never solved", len(pk.get("zero_pass", []))],
                 ["rollouts lost to infrastructure", pk.get("infra_failed_rollouts")]]
        self.facts["pass@1"] = overall.get("pass@1")
        self.add_table(sec, Table("passk_overall", ["metric", "value"], rows, "Overall"))
        by = pk.get("by", {})
        brows = []
        for grouping in sorted(by):
            for bucket, v in sorted(by[grouping].items()):
                brows.append([grouping, bucket, v.get("tasks")] + [v.get(m) for m in metrics])
        if brows:
            self.add_table(sec, Table("passk_by_bucket", ["grouping", "bucket", "tasks"] + metrics, brows,
                                      "pass@k by domain, task complexity and verifier kind"))
            if "pass@1" in metrics:
                self.add_plot(sec, "passk", plots.passk_plot(by, "pass@1"), "pass@1 by bucket")
        bands = pk.get("bands") or {}
        if bands:
            self.add_table(sec, Table("passk_bands", ["difficulty band", "tasks"],
                                      [[b, n] for b, n in sorted(bands.items())], "Tasks per difficulty band"))
        fam: dict[str, list[int]] = {}
        for t in pk.get("per_task", []):
            counts = fam.setdefault(t.get("family") or "(not recorded)", [0, 0])
            counts[0] += t.get("n", 0)
            counts[1] += t.get("hacked_rollouts", 0)
        if fam:
            # Hacked = the grader recorded integrity findings (docs/grading.md); never a success.
            self.add_table(sec, Table("hack_rate", ["family", "graded rollouts", "hacked", "hack rate"],
                                      [[f, n, h, round(h / n, 4) if n else None] for f, (n, h) in sorted(fam.items())],
                                      "Hacked rollouts per family (counted as failures, kept out of the SFT set)"))
        return sec

    def review_section(self) -> Section:
        from termforge.quality.review import STATUSES

        sec = Section("review", "Rubric review",
                      "A judge model scores each kept task (instruction clear, tests match the instruction, "
                      "solution legitimate, no shortcut) and each successful solve trace, 1-5 with reasons; "
                      "below the bar a task leaves the corpus and a trace stops counting as a success. With "
                      "no judge configured everything is recorded as not reviewed.",
                      "results/review/*.json, results/solve/reviews/*.json")
        if not self.reviews:
            return self.not_run(sec, self.results / "review")
        rows = []
        for kind in ("tasks", "traces"):
            docs = [d for d in self.reviews if d["kind"] == kind]
            if docs:
                counts = {st: sum(1 for d in docs for r in d["reviews"] if r["status"] == st) for st in STATUSES}
                judge = next((d["stats"].get("judge") for d in docs if d.get("stats", {}).get("judge")), None)
                calls = sum(d.get("stats", {}).get("calls", 0) for d in docs)
                cached = sum((d.get("stats", {}).get("model") or {}).get("cache_hits", 0) for d in docs)
                rows.append([kind, judge or "none", *(counts[st] for st in STATUSES), calls, cached])
        self.add_table(sec, Table("review_outcomes", ["what", "judge", *STATUSES, "judge calls", "cache hits"],
                                  rows, "Outcomes (not_reviewed: no judge configured)"))
        dist: dict[tuple[str, str], dict[str, int]] = {}
        for d in self.reviews:
            for crit, scores in (d.get("distribution") or {}).items():
                row = dist.setdefault((d["kind"], crit), {str(i): 0 for i in range(1, 6)})
                for score, n in scores.items():
                    row[score] = row.get(score, 0) + n
        if any(sum(v.values()) for v in dist.values()):
            self.add_table(sec, Table("review_scores", ["what", "criterion", "1", "2", "3", "4", "5"],
                                      [[k, c, *(v[str(i)] for i in range(1, 6))] for (k, c), v in sorted(dist.items())],
                                      "Distribution of rubric scores"))
        drops = [[d["kind"], r["task_id"] + (f"#{r['rollout']}" if "rollout" in r else ""), r["status"], r["reason"]]
                 for d in self.reviews for r in d["reviews"] if r["status"] in ("dropped", "unparsed")]
        if drops:
            self.add_table(sec, Table("review_drops", ["what", "task", "status", "reason"], drops,
                                      "Dropped by the review, with the judge's reason"))
        return sec

    def hints_section(self) -> Section:
        sec = Section("hints", "Hint coverage",
                      "Method-level hints written for kept tasks. A hint that still leaks the answer after "
                      "its repair rounds is dropped; a model reply that declines the job is a refusal.",
                      "results/hints/coverage.json")
        cov = self.hints
        if cov is None:
            return self.not_run(sec, self.results / "hints" / "coverage.json")
        statuses = ["hinted", "dropped_leak", "refused", "not_attempted"]
        overall = cov.get("counts") or cov.get("overall") or {}
        statuses += sorted(k for k in overall if k not in statuses)

        def row(name: str, counts: Mapping[str, int]) -> list:
            total = sum(counts.get(s, 0) for s in statuses)
            return [name] + [counts.get(s, 0) for s in statuses] + [total, counts.get("hinted", 0) / total if total else None]

        rows = [row("all domains", overall)]
        rows += [row(d, c) for d, c in sorted((cov.get("by_domain") or {}).items())]
        self.facts["hint coverage"] = rows[0][-1]
        extra = []
        if cov.get("backend"):
            extra.append(f"backend {cov['backend']}" + (f" ({cov['model']})" if cov.get("model") else ""))
        if cov.get("repaired") is not None:
            extra.append(f"{cov['repaired']} hints passed only after a repair round")
        if cov.get("cleaned"):
            extra.append(f"{cov['cleaned']} replies had chatter cut off")
        for name, stats in sorted((cov.get("checks") or {}).items()):
            if stats:
                extra.append(f"LLM {name}: {stats['calls']} calls ({stats['cached']} cached), {stats['flagged']} flagged")
        for name, score in sorted((cov.get("checks_corpus") or {}).items()):
            if isinstance(score, dict):
                extra.append(f"{name} on the leak corpus: recall {score['recall']:.2f}, "
                             f"false positives {score['false_positive_rate']:.2f}")
        if extra:
            sec.parts.append(f"<p>{html.escape('; '.join(extra))}.</p>")
        self.add_table(sec, Table("hint_coverage", ["domain"] + statuses + ["tasks", "coverage"], rows,
                                  "Hint outcomes per domain"))
        self._uplift(sec)
        return sec

    def _uplift(self, sec: Section) -> None:
        """Hint uplift (results/hints/uplift.json): the policy's pass rate with the hint in context
        vs without, on the same seeds, per family and overall; hints without uplift are flagged."""
        up = self.uplift
        if up is None:
            sec.parts.append("<p>Hint uplift: not measured (results/hints/uplift.json was not found).</p>")
            return
        cols = ["family", "tasks", "measured", "pass_without", "pass_with", "uplift", "no_uplift"]
        rows = [[name, *(fam.get(c) for c in cols[1:])] for name, fam in (up.get("families") or {}).items()]
        overall = up.get("overall") or {}
        rows.append(["all families", *(overall.get(c) for c in cols[1:])])
        self.facts["hint uplift"] = overall.get("uplift")
        flagged = up.get("no_uplift") or []
        sec.parts.append(f"<p>Hint uplift, k={up.get('k')} episodes per task and arm on the same seeds: "
                         f"{len(flagged)} of {overall.get('tasks', 0)} hints have none (uplift &le; "
                         f"{up.get('min_uplift', 0)}); <code>train.drop_hints_without_uplift</code> leaves them "
                         "out of OPSD.</p>")
        self.add_table(sec, Table("hint_uplift", cols, rows, "Pass rate with the hint in the policy's context vs "
                                                           "without, per family"))

    def training(self) -> Section:
        sec = Section("training", "Training (OPSD) per ablation",
                      "Loss and the mean teacher–student divergence at each optimizer step, per ablation "
                      "(forward KL, generalised JSD or reverse KL, as the ablation's beta selects). The KL "
                      "probe measures the forward KL on held-out prompts before and after training. For terminal "
                      "runs with a reward probe, the held-out reward is the mean verifier reward of the policy's "
                      "own episodes on tasks kept out of training, before and after training with the same "
                      "sampling seeds (docs/opsd.md).",
                      "results/runs/<ablation>/train/metrics.jsonl, kl_probe.json, reward_probe.json")
        runs = sorted(p for p in (self.results / "runs").glob("*/train/metrics.jsonl"))
        if not runs:
            return self.not_run(sec, self.results / "runs" / "<ablation>" / "train" / "metrics.jsonl")
        curves: dict[str, list[dict]] = {}
        summary, long_rows = [], []
        cols = ["loss", "divergence_mean", "clipped_fraction", "completion_len_mean", "tokens_per_s", "peak_memory_mb",
                # terminal runs (objective opsd | grpo | mixed): the verifier's reward and each part's loss
                "objective", "reward_mean", "opsd_loss", "grpo_loss", "groups_kept"]
        for path in runs:
            name = path.parent.parent.name
            rows = sorted((r for r in read("train_metrics", path) if "step" in r), key=lambda r: r["step"])
            for r in rows:  # older metrics files name these kl_mean, completion_len and peak_mem_mb
                r.setdefault("divergence_mean", r.get("kl_mean"))
                r.setdefault("completion_len_mean", r.get("completion_len"))
                r.setdefault("peak_memory_mb", r.get("peak_mem_mb"))
            curves[name] = rows
            long_rows += [[name, r["step"]] + [r.get(c) for c in cols] for r in rows]
            probe = read_optional("kl_probe", path.parent / "kl_probe.json") or {}
            reward = read_optional("reward_probe", path.parent / "reward_probe.json") or {}
            held_out = (f"{len(reward.get('rows') or [])} x {reward.get('episodes_per_task')}"
                        if reward.get("rows") else None)

            def mean(c: str) -> float | None:
                vals = [r[c] for r in rows if isinstance(r.get(c), (int, float))]
                return sum(vals) / len(vals) if vals else None

            peaks = [r["peak_memory_mb"] for r in rows if isinstance(r.get("peak_memory_mb"), (int, float))]
            summary.append([name, len(rows), rows[0].get("loss") if rows else None,
                            rows[-1].get("loss") if rows else None, rows[-1].get("divergence_mean") if rows else None,
                            mean("clipped_fraction"), mean("completion_len_mean"), mean("tokens_per_s"),
                            max(peaks) if peaks else None, _kl_value(probe.get("before")),
                            _kl_value(probe.get("after")), held_out, _num(reward.get("before")),
                            _num(reward.get("after")), _num(reward.get("delta"))])
        self.add_table(sec, Table("training_summary",
                                  ["ablation", "steps", "first loss", "last loss", "last divergence", "mean clipped fraction",
                                   "mean completion length", "mean tokens/s", "peak memory (MB)", "probe KL before",
                                   "probe KL after", "held-out tasks x episodes", "held-out reward before",
                                   "held-out reward after", "held-out reward change"], summary,
                                  "Training summary per ablation"))
        pools = []
        for path in runs:  # terminal runs: the calibrated GRPO pool, per difficulty band of solve
            pool = (read_optional("train_summary", path.parent / "summary.json") or {}).get("rl_pool") or {}
            if pool:
                pools.append([path.parent.parent.name, pool.get("rule"), pool.get("pool"),
                              ", ".join(f"{b}: {n}" for b, n in (pool.get("pool_by_band") or {}).items()),
                              ", ".join(f"{b}: {n}" for b, n in (pool.get("candidates_by_band") or {}).items()),
                              pool.get("fallback") or ""])
        if pools:
            self.add_table(sec, Table("grpo_pool", ["ablation", "band", "pool tasks", "pool by band",
                                                    "kept tasks by band", "fallback"], pools,
                                      "GRPO task pool per ablation, by solve difficulty band"))
        self.add_plot(sec, "training", plots.training_plot(curves),
                      "Loss (per objective part for terminal runs), mean divergence and episode reward per step, per ablation")
        self.tables["training_curves"] = Table("training_curves", ["ablation", "step"] + cols, long_rows)
        sec.parts.append('<p class="csv">Per-step values: <code>training_curves.csv</code></p>')
        return sec

    def evaluation(self) -> Section:
        sec = Section("eval", "Evaluation: base policy vs each ablation",
                      "Every benchmark metric for the untrained policy (base) and each trained ablation, "
                      "with its standard error (binomial, over problems or tasks) and the difference from "
                      "base. A difference within about two standard errors is not evidence of a change.",
                      "results/eval/results.csv")
        if not self.eval_csv.is_file():
            return self.not_run(sec, self.eval_csv)
        with open(self.eval_csv, newline="", encoding="utf-8") as fh:
            tidy = list(csv.DictReader(fh))
        need = {"model", "benchmark", "metric", "value"}
        if tidy and not need <= set(tidy[0]):
            raise TermforgeError(f"report: {self.eval_csv} lacks columns {sorted(need - set(tidy[0]))}")
        # Control rows (control:oracle, control:noop) go last and get no difference from base.
        models = sorted({r["model"] for r in tidy}, key=lambda m: (m.startswith("control:"), m != "base", m))

        def vs_base(m: str) -> bool:
            return m != "base" and "base" in models and not m.startswith("control:")

        cells: dict[tuple[str, str], dict[str, tuple[float | None, float | None, str]]] = {}
        for r in tidy:
            cells.setdefault((r["benchmark"], r["metric"]), {})[r["model"]] = (
                _num(r["value"]), _num(r.get("stderr")), r.get("n", ""))
        columns = ["benchmark", "metric", "n"]
        for m in models:
            columns += [m, f"{m} stderr"] + ([f"{m} − base"] if vs_base(m) else [])
        wide, shown, panels = [], [], {}
        for (bench, metric), by_model in sorted(cells.items()):
            ns = sorted({v[2] for v in by_model.values() if v[2] not in ("", None)})
            row: list[Any] = [bench, metric, _num(ns[0]) if len(ns) == 1 else "/".join(ns)]
            hrow: list[Any] = [bench, metric, row[2]]
            base = by_model.get("base", (None, None, ""))[0]
            for m in models:
                value, err, _ = by_model.get(m, (None, None, ""))
                row += [value, err]
                hrow.append(None if value is None else (f"{_fmt(value)} ± {_fmt(err)}" if err is not None
                                                        else _fmt(value)))
                if vs_base(m):
                    delta = None if value is None or base is None else value - base
                    row.append(delta)
                    hrow.append(None if delta is None else f"{delta:+.3f}")
            wide.append(row)
            shown.append(hrow)
            values = [v[0] for v in by_model.values() if v[0] is not None]
            if not metric.startswith("n_") and values and all(0 <= v <= 1 for v in values):
                panels[f"{bench} / {metric}"] = {m: (v[0], v[1]) for m, v in by_model.items() if v[0] is not None}
        self.facts["models evaluated"] = sum(1 for m in models if not m.startswith("control:"))
        self.tables["eval_comparison"] = Table("eval_comparison", columns, wide)
        hcols = ["benchmark", "metric", "n"]
        for m in models:
            hcols += [f"{m} (± stderr)"] + ([f"{m} − base"] if vs_base(m) else [])
        sec.parts.append(_table_html(Table("eval_comparison", hcols, shown,
                                           "Metric values (± standard error) and differences from base"),
                                     "main-table", numeric_from=2))
        if panels:
            self.add_plot(sec, "eval", plots.eval_plot(panels, models), "Base policy vs ablations (± stderr)")
        return sec

    def cost(self) -> Section:
        sec = Section("cost", "Run cost per rule",
                      "From Snakemake's benchmark files: wall time and CPU time of every job, summed per rule. "
                      "GPU hours are wall hours times the GPUs of the rules marked as GPU rules; max RSS is "
                      "the largest resident memory of any job of the rule.",
                      "results/benchmarks/**/*.tsv")
        if not self.benchmarks:
            if self.validate_profiles:
                return self._validation_steps(sec)
            return self.not_run(sec, self.results / "benchmarks" / "<rule>.tsv")
        per_rule: dict[str, dict[str, float]] = {}
        for rel, rows in self.benchmarks:
            rule = rel.parts[0] if len(rel.parts) > 1 else rel.stem
            if not rows:
                continue
            acc = per_rule.setdefault(rule, {"jobs": 0, "wall": 0.0, "wall_max": 0.0, "cpu": 0.0, "rss": 0.0,
                                             "io_in": 0.0, "io_out": 0.0})
            # A benchmark file holds one row per repeat of the same job: average, do not add.
            def avg(col: str) -> float:
                vals = [r[col] for r in rows if r.get(col) is not None]
                return sum(vals) / len(vals) if vals else 0.0

            wall = avg("s")
            acc["jobs"] += 1
            acc["wall"] += wall
            acc["wall_max"] = max(acc["wall_max"], wall)
            acc["cpu"] += avg("cpu_time")
            acc["rss"] = max(acc["rss"], max((r.get("max_rss") or 0.0) for r in rows))
            acc["io_in"] += avg("io_in")
            acc["io_out"] += avg("io_out")
        rows, totals = [], [0, 0.0, 0.0, 0.0, 0.0]
        for rule, a in sorted(per_rule.items(), key=lambda kv: (-kv[1]["wall"], kv[0])):
            gpus = float(self.gpu_rules.get(rule, 0))
            gpu_h = a["wall"] / 3600 * gpus if gpus else None
            rows.append([rule, int(a["jobs"]), a["wall"], a["wall_max"], a["cpu"] / 3600, gpu_h, a["rss"],
                         a["io_in"], a["io_out"]])
            totals[0] += int(a["jobs"])
            totals[1] += a["wall"]
            totals[2] += a["cpu"] / 3600
            totals[3] += gpu_h or 0.0
            totals[4] = max(totals[4], a["rss"])
        rows.append(["all rules", totals[0], totals[1], None, totals[2], totals[3] if self.gpu_rules else None,
                     totals[4], None, None])
        self.facts["wall time (s)"] = totals[1]
        self.facts["CPU hours"] = totals[2]
        self.add_table(sec, Table("rule_cost", ["rule", "jobs", "wall s (sum)", "wall s (slowest job)", "CPU hours",
                                                "GPU hours", "max RSS (MB)", "read (MB)", "written (MB)"], rows,
                                  "Cost per rule"))
        self.add_plot(sec, "cost", plots.cost_plot([(r[0], r[2]) for r in rows[:-1]]), "Wall time per rule")
        return self._validation_steps(sec)

    def _validation_steps(self, sec: Section) -> Section:
        """Where validation's time went, per step, summed over the shards' profiles
        (results/logs/validate/*.profile.json, written by the validate stage)."""
        if not self.validate_profiles:
            return sec
        profile = StepProfile()
        tasks = 0
        for p in self.validate_profiles:
            profile.merge(p["steps"])
            tasks += p.get("tasks", 0)
        rows = [[r["step"], r["count"], r["wall_s"], r["cpu_s"], r["host_cpu_s"], r["cpu_share"], r["sandboxes"]]
                for r in profile_table(profile.to_dict())]
        total_cpu = rows[-1][3]
        if tasks and total_cpu:
            self.facts["validation tasks per core-hour"] = tasks * 3600 / total_cpu
        self.add_table(sec, Table("validation_steps", ["validation step", "count", "wall s", "CPU s", "of it host CPU s",
                                                       "CPU share", "sandboxes"], rows,
                                  f"Validation cost per step ({tasks} tasks validated; CPU includes the sandboxes', "
                                  f"from results/logs/validate/*.profile.json)"))
        return sec

    def overview(self, sections: list[Section]) -> Section:
        sec = Section("overview", "At a glance", "The run's headline numbers; each links to its section below.", "")
        rows = [["signatures sampled", len(self.signatures)]]
        if "kept" in self.facts:
            rows.append(["tasks kept", self.facts["kept"]])
        for key in ("base images", "pass@1", "hint coverage", "models evaluated", "wall time (s)", "CPU hours"):
            if key in self.facts:
                rows.append([key, self.facts[key]])
        rows.append(["sections not run", ", ".join(s.title for s in sections if not s.ran) or "none"])
        self.add_table(sec, Table("overview", ["quantity", "value"], rows, "Headline numbers"))
        return sec

    def build(self) -> list[Section]:
        self.load()
        self.has_eval = self.eval_csv.is_file()
        body = [self.composition(), self.survival(), self.decontamination(), self.review_section(),
                self.passk_section(), self.hints_section(), self.training(), self.evaluation(), self.cost()]
        return [self.overview(body)] + body


def _kl_value(v: Any) -> float | None:
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, dict) and isinstance(v.get("kl_mean"), (int, float)):
        return float(v["kl_mean"])
    return None


def _num(s: Any) -> float | None:
    if s in (None, "", "NA", "-"):
        return None
    try:
        x = float(s)
    except (TypeError, ValueError):
        return None
    return int(x) if x.is_integer() and isinstance(s, str) and "." not in s and "e" not in s.lower() else x


def _read_benchmark(path: Path) -> list[dict[str, float | None]]:
    """Rows of a Snakemake benchmark TSV (columns s, h:m:s, max_rss, ..., cpu_time); NA -> None."""
    import io

    reader = csv.DictReader(io.StringIO(read_input_text(path), newline=""), delimiter="\t")
    if reader.fieldnames is None or "s" not in reader.fieldnames:
        raise TermforgeError(f"report: {path} is not a Snakemake benchmark file (no 's' column)")
    out = []
    for row in reader:
        out.append({k: (None if k == "h:m:s" else _num(v)) for k, v in row.items() if k is not None})
    return out


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;max-width:1180px;margin:0 auto;
padding:1.5rem 2rem 4rem;color:#1d2430;line-height:1.45;background:#fff}
h1{font-size:1.7rem;margin-bottom:.2rem}h2{font-size:1.3rem;margin-top:2.4rem;border-bottom:2px solid #dde3ea;
padding-bottom:.25rem}nav ol{columns:2;font-size:.95rem}p.lead{color:#4a5565;margin-top:0}
p.source{font-size:.8rem;color:#6a7585;margin:.2rem 0 .8rem}
table{border-collapse:collapse;margin:.8rem 0 .2rem;font-size:.86rem;min-width:40%}
caption{text-align:left;font-weight:600;padding:.3rem 0;color:#334}
th,td{border:1px solid #d5dbe3;padding:.28rem .55rem;text-align:left;vertical-align:top}
th{background:#f1f4f8}td.num{text-align:right;font-variant-numeric:tabular-nums}
tbody tr:nth-child(even){background:#fafbfd}#main-table{border:2px solid #0072B2}
p.csv{font-size:.75rem;color:#6a7585;margin:.1rem 0 .8rem}p.note{font-size:.8rem;color:#6a7585}
p.notrun{background:#fff7e6;border-left:4px solid #E69F00;padding:.5rem .8rem}
figure{margin:1rem 0}figure img{max-width:100%;height:auto;border:1px solid #e3e7ee}
figcaption{font-size:.8rem;color:#6a7585}code{background:#f3f5f8;padding:0 .2rem;border-radius:3px}
details summary{cursor:pointer;color:#0072B2;margin:.4rem 0}
"""


def _render(title: str, sections: list[Section]) -> str:
    nav = "".join(f'<li><a href="#{s.key}">{html.escape(s.title)}</a>{"" if s.ran else " (not run)"}</li>'
                  for s in sections)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<header><h1>{html.escape(title)}</h1>",
        '<p class="lead">termforge turns sampled task signatures into validated terminal tasks, solves them '
        "with the policy (pass@k), writes method-level hints, trains the policy with on-policy "
        "self-distillation and evaluates it. This page summarises one run from its results directory. "
        "Every table below is also written as a CSV file, and every figure as a PNG file, in the "
        "report's tables directory (file names under each table and figure).</p>",
        f"<nav><h2>Contents</h2><ol>{nav}</ol></nav></header><main>",
    ]
    for s in sections:
        src = f'<p class="source">Source: <code>{html.escape(s.source)}</code></p>' if s.source else ""
        out.append(f'<section id="{s.key}"><h2>{html.escape(s.title)}</h2><p>{html.escape(s.intro)}</p>{src}'
                   + "".join(s.parts) + "</section>")
    out.append("</main></body></html>\n")
    return "\n".join(out)


def build_report(results_dir: str | Path, out_html: str | Path, out_dir_tables: str | Path,
                 gpu_rules: Iterable[str] | Mapping[str, float] = frozenset(),
                 title: str = "termforge run report") -> dict:
    """Write the self-contained HTML report of a results directory, its tables (CSV) and plots (PNG).

    gpu_rules: names of rules that hold GPUs (a set: one GPU per job, or a mapping rule -> GPUs per
    job); their wall hours times GPUs give the GPU hours of the cost table.
    Returns what was written: {"html", "main_table", "sections": {key: "ok" | "not run"},
    "tables": {name: path}, "plots": {name: path}}.
    """
    results = Path(results_dir)
    if not results.is_dir():
        raise InputError(results, "does not exist (expected the results folder)" if not results.exists()
                         else "is not a folder (expected the results folder)")
    gpus = dict(gpu_rules) if isinstance(gpu_rules, Mapping) else {r: 1.0 for r in gpu_rules}
    builder = _Builder(results, gpus)
    sections = builder.build()
    out_tables = Path(out_dir_tables)
    out_tables.mkdir(parents=True, exist_ok=True)
    written_tables, written_plots = {}, {}
    for name in TABLE_NAMES:
        path = out_tables / f"{name}.csv"
        if name in builder.tables:
            atomic_write_text(path, builder.tables[name].csv_text())
            written_tables[name] = str(path)
        elif path.exists():
            path.unlink()
    for name in PLOT_NAMES:
        path = out_tables / f"{name}.png"
        if name in builder.plots:
            atomic_write_bytes(path, builder.plots[name])
            written_plots[name] = str(path)
        elif path.exists():
            path.unlink()
    atomic_write_text(out_html, _render(title, sections))
    # Atomic writes create private files; a report is meant to be read by others (and served).
    for path in [out_html, *written_tables.values(), *written_plots.values()]:
        Path(path).chmod(0o644)
    return {"html": str(out_html), "main_table": "eval_comparison" if builder.has_eval else "survival",
            "sections": {s.key: "ok" if s.ran else "not run" for s in sections},
            "tables": written_tables, "plots": written_plots}
