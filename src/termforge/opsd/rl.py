"""Policy-gradient objectives for GRPO on the verifier's reward, as plain tensor functions.

The choices TMax publishes (training/open-instruct: `grpo_utils.py`, `data_loader.py`) are
available as knobs beside the usual ones:

- advantages: ``centered`` (TMax's default, r - mean of the group) or ``std`` (GRPO's
  (r - mean) / (std + 1e-8), with the population std as numpy computes it);
- loss: ``ppo_clip`` (PPO's clipped surrogate with separate lower and upper clip ranges, i.e.
  DAPO's clip-higher) or ``dppo`` (TMax: the unclipped surrogate -A * r, with tokens masked out
  where the binary total-variation divergence |mu - pi| between the sampling and the current
  probability of the sampled token exceeds a threshold AND the update would push further away:
  A > 0 with r > 1, or A < 0 with r < 1);
- normalisation: ``token`` (every scored token of the part weighs the same: TMax's
  loss_denominator "token", DAPO's argument that long episodes must not be down-weighted, which
  matters for multi-turn terminal episodes whose lengths vary tenfold) or ``sequence`` (each
  rollout's token-mean, then the mean over rollouts, as the original GRPO);
- KL to the reference policy: the k3 estimator exp(ref - new) - (ref - new) - 1 (open-instruct's
  kl_estimator 2), coefficient 0 by default as in TMax.

Groups whose rewards all agree carry no signal (every centred advantage is 0): they are filtered
out and counted, and the trainer may refill the batch with other groups (active sampling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

__all__ = [
    "ADVANTAGE_KINDS",
    "PG_LOSSES",
    "PG_REDUCTIONS",
    "GroupFilter",
    "PGStats",
    "binary_tv",
    "dppo_mask",
    "filter_zero_variance_groups",
    "group_advantages",
    "pg_token_weights",
    "policy_gradient_loss",
]

ADVANTAGE_KINDS = ("centered", "std")
PG_LOSSES = ("ppo_clip", "dppo")
PG_REDUCTIONS = ("token", "sequence")
STD_EPS = 1e-8


def group_advantages(rewards: Sequence[float], kind: str = "centered") -> list[float]:
    """Advantages of one group of rollouts of the same task (one scalar per rollout)."""
    if kind not in ADVANTAGE_KINDS:
        raise ValueError(f"advantage kind must be one of {', '.join(ADVANTAGE_KINDS)}; got {kind!r}")
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    centred = [r - mean for r in rewards]
    if kind == "centered":
        return centred
    std = math.sqrt(sum(c * c for c in centred) / len(rewards))  # ddof=0, as numpy's std
    return [c / (std + STD_EPS) for c in centred]


@dataclass(frozen=True)
class GroupFilter:
    kept: list[str]
    dropped_all_solved: list[str]
    dropped_all_failed: list[str]
    dropped_other: list[str]  # equal rewards that are neither 0 nor 1 (a graded reward in between)

    @property
    def counts(self) -> dict[str, int]:
        return {"groups_kept": len(self.kept), "groups_all_solved": len(self.dropped_all_solved),
                "groups_all_failed": len(self.dropped_all_failed),
                "groups_zero_variance_other": len(self.dropped_other)}


def filter_zero_variance_groups(groups: dict[str, Sequence[float]], min_size: int = 2) -> GroupFilter:
    """Split groups (key -> rewards) into those whose rewards differ and those that carry no
    signal; a group with fewer than min_size graded rollouts has no baseline and is dropped too
    (counted under 'other')."""
    kept, solved, failed, other = [], [], [], []
    for key, rewards in groups.items():
        rewards = list(rewards)
        if len(rewards) < min_size:
            other.append(key)
        elif max(rewards) != min(rewards):
            kept.append(key)
        elif rewards[0] >= 1.0:
            solved.append(key)
        elif rewards[0] <= 0.0:
            failed.append(key)
        else:
            other.append(key)
    return GroupFilter(kept, solved, failed, other)


def pg_token_weights(mask: torch.Tensor, reduction: str, num_sequences: int | None = None,
                     num_tokens: int | None = None) -> torch.Tensor:
    """Per-token weights [B, T] whose weighted sum is the part's normalised loss.

    token: 1 / (scored tokens of the whole part); sequence: 1 / (rollouts of the part * this
    rollout's scored tokens). num_sequences / num_tokens are the part's totals, which may span
    several micro-batches (default: this batch's)."""
    if reduction not in PG_REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(PG_REDUCTIONS)}; got {reduction!r}")
    valid = mask.bool()
    weights = torch.zeros(mask.shape, dtype=torch.float64, device=mask.device)
    if reduction == "token":
        total = num_tokens if num_tokens is not None else int(valid.sum())
        return weights.masked_fill(valid, 1.0 / max(total, 1))
    per_row = valid.sum(dim=-1, keepdim=True).clamp(min=1).to(torch.float64)
    rows = num_sequences if num_sequences is not None else int((valid.sum(dim=-1) > 0).sum())
    return torch.where(valid, 1.0 / (per_row * max(rows, 1)), weights)


def binary_tv(new_logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    """|mu - pi| of the sampled token: the total variation between the two Bernoulli
    distributions {sampled token, everything else} (DPPO's binary approximation)."""
    mu = old_logprobs.clamp(min=-30.0, max=0.0).exp()
    pi = new_logprobs.detach().clamp(min=-30.0, max=0.0).exp()
    return (mu - pi).abs()


def dppo_mask(new_logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """1 where the token's update is kept: outside the trust region (binary TV > threshold) only
    updates that would push the ratio further from 1 in the advantage's direction are dropped."""
    with torch.no_grad():
        ratio = (new_logprobs.detach() - old_logprobs).exp()
        outside = binary_tv(new_logprobs, old_logprobs) > threshold
        bad = ((advantages > 0) & (ratio > 1.0) & outside) | ((advantages < 0) & (ratio < 1.0) & outside)
        return (~bad & mask.bool()).to(new_logprobs.dtype)


@dataclass(frozen=True)
class PGStats:
    num_tokens: int
    clipped_fraction: float  # ppo_clip: tokens where the clipped branch was taken; dppo: masked tokens
    ratio_mean: float
    kl_ref_mean: float


def policy_gradient_loss(new_logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                         mask: torch.Tensor, weights: torch.Tensor, *, loss: str = "ppo_clip",
                         clip_low: float = 0.2, clip_high: float = 0.28, dppo_threshold: float = 0.1,
                         ref_logprobs: torch.Tensor | None = None, kl_coef: float = 0.0
                         ) -> tuple[torch.Tensor, PGStats]:
    """Token-level policy-gradient loss sum_t w_t * (pg_t + kl_coef * kl_t) over scored tokens.

    new_logprobs [B, T] carry the gradient (current policy, at the sampling temperature);
    old_logprobs [B, T] are the sampling policy's log-probs of the same tokens; advantages [B, T]
    (a rollout's advantage repeated over its tokens); weights from pg_token_weights.
    """
    if loss not in PG_LOSSES:
        raise ValueError(f"loss must be one of {', '.join(PG_LOSSES)}; got {loss!r}")
    shapes = {tuple(t.shape) for t in (new_logprobs, old_logprobs, advantages, mask, weights)}
    if len(shapes) != 1:
        raise ValueError(f"policy_gradient_loss: inputs must share one shape; got {sorted(shapes)}")
    valid = mask.bool()
    dtype = torch.float64 if new_logprobs.dtype == torch.float64 else torch.float32
    new = new_logprobs.to(dtype)
    old = old_logprobs.detach().to(dtype)
    adv = advantages.detach().to(dtype)
    w = weights.detach().to(dtype) * valid.to(dtype)
    log_ratio = (new - old).clamp(-40.0, 40.0)
    ratio = log_ratio.exp()
    unclipped = -adv * ratio
    if loss == "ppo_clip":
        clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
        per_token = torch.maximum(unclipped, clipped)
        took_clip = (clipped > unclipped) & valid
    else:
        keep = dppo_mask(new, old, adv, valid, dppo_threshold)
        per_token = unclipped * keep
        took_clip = (keep == 0) & valid
    kl = torch.zeros_like(per_token)
    if ref_logprobs is not None and kl_coef:
        diff = (ref_logprobs.detach().to(dtype) - new).clamp(-40.0, 40.0)
        kl = diff.exp() - diff - 1.0  # k3: unbiased, non-negative estimate of KL(pi || ref)
        per_token = per_token + kl_coef * kl
    total = (per_token * w).sum()
    n = int(valid.sum())
    stats = PGStats(num_tokens=n, clipped_fraction=float(took_clip.sum()) / max(n, 1),
                    ratio_mean=float(ratio.detach()[valid].mean()) if n else 1.0,
                    kl_ref_mean=float(kl.detach()[valid].mean()) if n else 0.0)
    return total, stats
