"""The held-out KL probe and the loss-curve plot.

The probe measures what OPSD optimises, on prompts training never sees: the mean per-token
forward KL(teacher || student) at the loss temperature over *fixed* completions. The completions
are sampled once, by the untrained student, and stored; before and after training the same tokens
are scored, so the two numbers differ only because the weights changed (and, for ema/live
teachers, because the teacher moved with them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from termforge.io import atomic_write_bytes
from termforge.opsd.rollout import SideBatch, Trajectory, collate

__all__ = ["probe_kl", "write_loss_curve"]

LogitsFn = Callable[[SideBatch], Any]

DIVERGENCE_LABELS = {"forward_kl": "KL(teacher || student)", "reverse_kl": "KL(student || teacher)",
                     "jsd": "generalised JSD", "sampled_reverse_kl": "sampled reverse-KL estimate",
                     "kl": "KL"}


def probe_kl(student_logits: LogitsFn, teacher_logits: LogitsFn, trajectories: Sequence[Trajectory], *,
             pad_id: int, temperature: float, batch_size: int, device: Any, chunk_size: int | None = 256
             ) -> dict[str, Any]:
    """Mean per-token KL(teacher || student) over the trajectories' scored tokens (unclipped, at
    `temperature`), overall (token-weighted) and per row. The logits callables run the student
    and teacher as the trainer does (eval mode, no gradient)."""
    import torch

    from termforge.opsd.loss import generalized_jsd_token_loss

    rows: list[dict[str, Any]] = []
    total_kl, total_tokens = 0.0, 0
    for start in range(0, len(trajectories), batch_size):
        chunk = list(trajectories[start: start + batch_size])
        student_side, teacher_side = collate(chunk, pad_id, device)
        with torch.inference_mode():
            t_logits = teacher_logits(teacher_side)
            s_logits = student_logits(student_side)
            for b, trajectory in enumerate(chunk):
                _, stats = generalized_jsd_token_loss(
                    s_logits[b: b + 1], t_logits[b: b + 1], student_side.token_mask[b: b + 1], beta=0.0,
                    temperature=temperature, token_clip=None, chunk_size=chunk_size)
                # beta 0: divergence_mean is the forward KL, what the probe's keys say.
                rows.append({"id": trajectory.row_id, "tokens": stats.num_tokens, "kl": stats.divergence_mean})
                total_kl += stats.divergence_mean * stats.num_tokens
                total_tokens += stats.num_tokens
        del t_logits, s_logits
    return {"kl_mean": total_kl / max(total_tokens, 1), "num_tokens": total_tokens, "rows": rows}


def write_loss_curve(metrics: Sequence[dict[str, Any]], path: str | Path, title: str = "OPSD training") -> None:
    """Loss and the mean divergence (named by the metrics' `divergence`) per step, one PNG,
    written atomically. Metrics written before the divergence was named carry `kl_mean`."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [m["step"] for m in metrics]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    ax.plot(steps, [m["loss"] for m in metrics], marker="o", label="loss (clipped)")
    name = metrics[-1].get("divergence", "kl") if metrics else "kl"
    ax.plot(steps, [m.get("divergence_mean", m.get("kl_mean")) for m in metrics], marker="s",
            label=f"mean {DIVERGENCE_LABELS.get(name, name)} (unclipped)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("per-token value")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    # No software/date metadata: the same metrics give the same bytes.
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
