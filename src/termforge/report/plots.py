"""The report's figures, drawn with matplotlib's Agg canvas and returned as PNG bytes.

Figures are built on `matplotlib.figure.Figure` directly (no pyplot): no global figure state,
nothing leaks between calls, and no display is ever needed. PNG metadata is stripped so the same
numbers always give the same bytes.
"""

from __future__ import annotations

import io
from typing import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

DPI = 100
# A colour-blind-safe cycle (Okabe-Ito), so bars of base and ablations stay distinguishable.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def composition_plot(axes: dict[str, dict[str, int]]) -> bytes:
    """One small bar chart of bucket counts per axis (axis -> bucket -> count)."""
    names = list(axes)
    cols = 3
    rows = max(1, -(-len(names) // cols))
    fig = Figure(figsize=(12, 2.8 * rows))
    grid = fig.subplots(rows, cols, squeeze=False)
    for i, ax in enumerate(grid.flat):
        if i >= len(names):
            ax.set_axis_off()
            continue
        counts = axes[names[i]]
        buckets = list(counts)
        ax.barh(range(len(buckets)), [counts[b] for b in buckets], color=PALETTE[0])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_yticks(range(len(buckets)), [b if len(b) <= 28 else b[:26] + "…" for b in buckets], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(names[i], fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle("Corpus composition: signatures per bucket", fontsize=11)
    fig.tight_layout()
    return _png(fig)


def survival_plot(stages: Sequence[tuple[str, int]]) -> bytes:
    """Tasks remaining after each stage (a funnel as horizontal bars)."""
    fig = Figure(figsize=(8, 0.6 * len(stages) + 1.2))
    ax = fig.subplots()
    labels = [s for s, _ in stages]
    values = [v for _, v in stages]
    bars = ax.barh(range(len(stages)), values, color=PALETTE[0])
    ax.set_yticks(range(len(stages)), labels)
    ax.invert_yaxis()
    top = max(values) if values else 1
    for bar, v in zip(bars, values):
        ax.text(bar.get_width() + top * 0.01, bar.get_y() + bar.get_height() / 2, str(v), va="center", fontsize=9)
    ax.set_xlim(0, top * 1.12 + 1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("tasks")
    ax.set_title("Tasks surviving each stage")
    fig.tight_layout()
    return _png(fig)


def passk_plot(by: dict[str, dict[str, dict[str, float]]], metric: str) -> bytes:
    """pass@k per bucket, one panel per grouping axis (axis -> bucket -> {metric: value})."""
    names = list(by)
    fig = Figure(figsize=(4.2 * max(1, len(names)), 3.8))
    grid = fig.subplots(1, max(1, len(names)), squeeze=False)
    for i, ax in enumerate(grid.flat):
        if i >= len(names):
            ax.set_axis_off()
            continue
        buckets = list(by[names[i]])
        values = [by[names[i]][b].get(metric) or 0.0 for b in buckets]
        ax.bar(range(len(buckets)), values, color=PALETTE[i % len(PALETTE)])
        ax.set_xticks(range(len(buckets)), buckets, rotation=45, ha="right", fontsize=7)
        ax.set_ylim(0, 1.05)
        ax.set_title(names[i], fontsize=9)
        ax.set_ylabel(metric)
    fig.suptitle(f"{metric} by bucket", fontsize=11)
    fig.tight_layout()
    return _png(fig)


def training_plot(curves: dict[str, list[dict]]) -> bytes:
    """Loss and mean KL per step, one line per ablation (ablation -> metrics rows); terminal runs
    add their objective parts' losses (dashed: OPSD, dotted: GRPO) and the verifier's mean
    episode reward."""
    fig = Figure(figsize=(15, 3.8))
    ax_loss, ax_kl, ax_reward = fig.subplots(1, 3)
    for i, (name, rows) in enumerate(curves.items()):
        colour = PALETTE[i % len(PALETTE)]
        objective = next((r["objective"] for r in rows if r.get("objective")), None)
        label = f"{name} ({objective})" if objective else name
        loss = [(r["step"], r["loss"]) for r in rows if r.get("loss") is not None]
        # divergence_mean: the step's divergence (forward KL, JSD or reverse KL, per the run's
        # beta); kl_mean in metrics written before it was named.
        kl = [(r["step"], r.get("divergence_mean", r.get("kl_mean"))) for r in rows
              if r.get("divergence_mean", r.get("kl_mean")) is not None]
        if loss:
            ax_loss.plot(*zip(*loss), marker="o", markersize=3, color=colour, label=label)
        if objective == "mixed":
            for key, style in (("opsd_loss", "--"), ("grpo_loss", ":")):
                part = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
                if part:
                    ax_loss.plot(*zip(*part), linestyle=style, color=colour, label=f"{name} {key}")
        if kl:
            ax_kl.plot(*zip(*kl), marker="s", markersize=3, color=colour, label=label)
        reward = [(r["step"], r["reward_mean"]) for r in rows if r.get("reward_mean") is not None]
        if reward:
            ax_reward.plot(*zip(*reward), marker="^", markersize=3, color=colour, label=label)
    ax_loss.set_title("training loss")
    ax_kl.set_title("mean teacher-student divergence (KL or JSD, per beta)")
    ax_reward.set_title("verifier reward (terminal episodes)")
    ax_reward.set_ylim(-0.05, 1.05)
    for ax in (ax_loss, ax_kl, ax_reward):
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


def eval_plot(panels: dict[str, dict[str, tuple[float, float | None]]], models: list[str]) -> bytes:
    """Grouped bars: one group per (benchmark, metric), one bar per model, stderr as error bars.

    panels: "benchmark / metric" -> model -> (value, stderr)."""
    groups = list(panels)
    fig = Figure(figsize=(max(6.0, 1.1 * len(groups) * max(1, len(models)) * 0.6 + 2), 4.2))
    ax = fig.subplots()
    width = 0.8 / max(1, len(models))
    for j, model in enumerate(models):
        xs, ys, errs = [], [], []
        for g, group in enumerate(groups):
            if model in panels[group]:
                value, err = panels[group][model]
                xs.append(g - 0.4 + width * (j + 0.5))
                ys.append(value)
                errs.append(err or 0.0)
        ax.bar(xs, ys, width=width, yerr=errs, capsize=3, color=PALETTE[j % len(PALETTE)], label=model)
    ax.set_xticks(range(len(groups)), groups, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("value (± stderr)")
    ax.set_title("Evaluation: base policy vs ablations")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def cost_plot(rules: Sequence[tuple[str, float]]) -> bytes:
    """Total wall time per rule (seconds, log-free horizontal bars)."""
    fig = Figure(figsize=(8, 0.45 * len(rules) + 1.2))
    ax = fig.subplots()
    ax.barh(range(len(rules)), [s for _, s in rules], color=PALETTE[5])
    ax.set_yticks(range(len(rules)), [r for r, _ in rules], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("wall time, summed over jobs (s)")
    ax.set_title("Run cost per rule")
    fig.tight_layout()
    return _png(fig)
