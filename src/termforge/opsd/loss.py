"""Distillation losses for on-policy self-distillation (OPSD), as plain tensor functions.

The student scores its own rollout; the teacher (the same model, given privileged context) scores
the same completion tokens. Everything here takes logits already aligned to the completion tokens
([B, T, V]) and a mask [B, T] of the tokens that count, and returns a token-mean loss.

Precision: log-softmax and every per-vocabulary term run in float32 (float64 if the logits are
float64, so tests can check gradients by finite differences); the gradient handed back to the
student has the student logits' dtype.

Memory: with ``chunk_size`` the valid token rows are gathered ``chunk_size`` at a time, each chunk's
loss and its gradient (in closed form, computed in place) are produced together, and only the
gradient is kept for backward. Peak memory is then one student-sized gradient plus about five
[chunk_size, V] float32 temporaries, where the plain autograd path (``chunk_size=None``) keeps
several full [N, V] float32 tensors alive. The two paths compute the same expressions; the tests
hold both to a float64 reference.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

__all__ = [
    "LossStats",
    "divergence_name",
    "generalized_jsd_token_loss",
    "ref_kl_token_loss",
    "sampled_token_loss",
    "sampling_threshold",
    "token_logprobs",
    "trim_to_longest",
]


@dataclass(frozen=True)
class LossStats:
    """What a training step logs about the distillation loss.

    divergence_mean: mean over valid tokens of the per-token divergence *before* clipping: the
        divergence selected by beta (forward KL at beta=0, reverse KL at beta=1, the generalised
        JSD in between; divergence_name says which); for the sampled-token loss, the mean of
        log p_S - log p_T on the sampled tokens, a one-sample estimate of reverse KL.
    clipped_fraction: fraction of (token, vocabulary entry) terms that hit token_clip (0 if no clip);
        for the ref_kl loss, the fraction of tokens its trust region dropped from the signal.
    num_tokens: number of valid tokens the loss averaged over.
    """

    divergence_mean: float
    clipped_fraction: float
    num_tokens: int

    @property
    def kl_mean(self) -> float:
        """The former name of divergence_mean (a KL only at beta 0 or 1)."""
        return self.divergence_mean

    def as_dict(self) -> dict:
        return asdict(self)


def divergence_name(loss_type: str, beta: float) -> str:
    """What the per-token divergence of a loss is, for metric names: forward_kl (beta 0),
    reverse_kl (beta 1), jsd (the generalised JSD, 0 < beta < 1), or sampled_reverse_kl (the
    sampled-token loss's one-sample estimate of reverse KL)."""
    if loss_type in ("sampled_token", "ref_kl"):
        return "sampled_reverse_kl"
    if beta == 0.0:
        return "forward_kl"
    if beta == 1.0:
        return "reverse_kl"
    return "jsd"


def _check_inputs(student_logits: torch.Tensor, teacher_logits: torch.Tensor, mask: torch.Tensor,
                  beta: float, temperature: float, token_clip: float | None,
                  chunk_size: int | None, reduction: str) -> None:
    if student_logits.dim() != 3:
        raise ValueError(f"student_logits must be [batch, tokens, vocab]; got shape {tuple(student_logits.shape)}")
    if teacher_logits.shape != student_logits.shape:
        raise ValueError(f"teacher_logits shape {tuple(teacher_logits.shape)} differs from "
                         f"student_logits shape {tuple(student_logits.shape)}")
    if mask.shape != student_logits.shape[:2]:
        raise ValueError(f"mask shape {tuple(mask.shape)} must be the logits' [batch, tokens] "
                         f"{tuple(student_logits.shape[:2])}")
    if not student_logits.is_floating_point() or not teacher_logits.is_floating_point():
        raise ValueError("logits must be floating point")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must lie in [0, 1]; got {beta}")
    if not temperature > 0.0:
        raise ValueError(f"temperature must be > 0; got {temperature}")
    if token_clip is not None and not token_clip > 0.0:
        raise ValueError(f"token_clip must be > 0 or None; got {token_clip}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive int or None; got {chunk_size!r}")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum'; got {reduction!r}")


def _compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    dtype = torch.float32
    for tensor in tensors:
        dtype = torch.promote_types(dtype, tensor.dtype)
    return dtype


# Log-probabilities are floored before any product, so an entry of probability 0 (a -inf logit)
# gives 0 * finite = 0 instead of 0 * inf = NaN, in values and in gradients alike; no finite logit
# produces a log-probability anywhere near the floor.
_LOG_PROB_FLOOR = -1e30


def _p_log_ratio(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """Elementwise p * (log p - log q), from floored log-probabilities."""
    return log_p.exp() * (log_p - log_q)


def _pointwise_divergence(student_log_probs: torch.Tensor, teacher_log_probs: torch.Tensor,
                          beta: float) -> torch.Tensor:
    """The per-(token, vocabulary entry) terms whose sum over the vocabulary is the divergence."""
    if beta == 0.0:
        return _p_log_ratio(teacher_log_probs, student_log_probs)
    if beta == 1.0:
        return _p_log_ratio(student_log_probs, teacher_log_probs)
    mixture_log_probs = torch.logaddexp(teacher_log_probs + math.log(beta),
                                        student_log_probs + math.log1p(-beta))
    return (beta * _p_log_ratio(teacher_log_probs, mixture_log_probs)
            + (1.0 - beta) * _p_log_ratio(student_log_probs, mixture_log_probs))


def _rows_divergence(student_rows: torch.Tensor, teacher_rows: torch.Tensor, *, beta: float,
                     temperature: float, token_clip: float | None, compute_dtype: torch.dtype
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row loss (clipped), per-row divergence (unclipped, detached), count of clipped terms."""
    student_log_probs = F.log_softmax(student_rows.to(compute_dtype) / temperature, dim=-1)
    student_log_probs = student_log_probs.clamp(min=_LOG_PROB_FLOOR)
    with torch.no_grad():
        teacher_log_probs = F.log_softmax(teacher_rows.to(compute_dtype) / temperature, dim=-1)
        teacher_log_probs.clamp_(min=_LOG_PROB_FLOOR)
    terms = _pointwise_divergence(student_log_probs, teacher_log_probs, beta)
    unclipped = terms.detach().sum(dim=-1)
    if token_clip is None:
        return terms.sum(dim=-1), unclipped, terms.new_zeros((), dtype=torch.int64)
    clipped_count = (terms.detach() > token_clip).sum()
    return terms.clamp(max=token_clip).sum(dim=-1), unclipped, clipped_count


def _scaled_log_softmax(gathered_rows: torch.Tensor, temperature: float,
                        compute_dtype: torch.dtype) -> torch.Tensor:
    scaled = gathered_rows.to(compute_dtype)  # a copy made by the gather: ours to divide in place
    scaled /= temperature
    return F.log_softmax(scaled, dim=-1).clamp_(min=_LOG_PROB_FLOOR)


def _rows_loss_and_grad(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                        rows: tuple[torch.Tensor, torch.Tensor], *, beta: float, temperature: float,
                        token_clip: float | None, compute_dtype: torch.dtype,
                        grad_scale: float | None):
    """The chunked path's per-row loss, with the student gradient written out by hand.

    Same values as _rows_divergence (the same expressions, evaluated in place to keep at most
    about five [rows, V] tensors alive). With w_v = d(clipped term_v) / d(log p_S,v), which is 0
    where the clip binds and otherwise
        beta = 0:      -p_T,v
        beta = 1:      p_S,v (log p_S,v - log p_T,v + 1)
        0 < beta < 1:  (1 - beta) p_S,v (log p_S,v - log M_v)   (the p_T and M terms cancel),
    the gradient with respect to the logits is (w - p_S * sum_v w) / temperature, times grad_scale.
    Returns (per-row loss, per-row unclipped divergence, clipped count, gradient or None).
    """
    # Gathered here, not by the caller, so each gathered copy dies as soon as its log-softmax exists.
    teacher_lp = _scaled_log_softmax(teacher_logits[rows], temperature, compute_dtype)
    student_lp = _scaled_log_softmax(student_logits[rows], temperature, compute_dtype)
    if beta == 0.0:
        weight = teacher_lp.exp()
        terms = teacher_lp.sub_(student_lp).mul_(weight)  # p_T (log p_T - log p_S)
        weight.neg_()
        student_probs = student_lp.exp_()
    elif beta == 1.0:
        student_probs = student_lp.exp()
        terms = student_lp.sub_(teacher_lp).mul_(student_probs)  # p_S (log p_S - log p_T)
        del teacher_lp
        weight = terms + student_probs
    else:
        mixture_lp = torch.add(teacher_lp, math.log(beta))
        torch.logaddexp(mixture_lp, student_lp + math.log1p(-beta), out=mixture_lp)
        terms = teacher_lp.exp().mul_(teacher_lp.sub_(mixture_lp)).mul_(beta)
        del teacher_lp
        student_probs = student_lp.exp()
        weight = student_probs * mixture_lp.neg_().add_(student_lp)  # p_S (log p_S - log M)
        del mixture_lp, student_lp
        weight.mul_(1.0 - beta)
        terms.add_(weight)
    unclipped = terms.sum(dim=-1)
    if token_clip is None:
        clipped, clipped_count = None, terms.new_zeros((), dtype=torch.int64)
        rows_loss = unclipped.clone()
    else:
        clipped = terms > token_clip
        clipped_count = clipped.sum()
        rows_loss = terms.clamp_(max=token_clip).sum(dim=-1)
    del terms
    if grad_scale is None:
        return rows_loss, unclipped, clipped_count, None
    if clipped is not None:
        weight.masked_fill_(clipped, 0.0)
    grad = student_probs.mul_(-weight.sum(dim=-1, keepdim=True)).add_(weight)
    return rows_loss, unclipped, clipped_count, grad.mul_(grad_scale / temperature)


class _ChunkedDivergence(torch.autograd.Function):
    """Loss over gathered rows, chunk by chunk; the student gradient is computed in forward.

    Computing each chunk's gradient at once means no chunk's intermediates outlive the chunk and
    backward only scales a ready gradient: peak memory stays one student-sized gradient plus one
    chunk's temporaries in both passes, and no forward work is redone. The price: backward may run
    once per forward (the gradient buffer is handed over, not copied).
    """

    @staticmethod
    def forward(ctx, student_logits, teacher_logits, batch_index, token_index, options, stats_out):
        loss, grad = _chunked_rows(student_logits, teacher_logits, batch_index, token_index,
                                   with_grad=True, stats_out=stats_out, **options)
        ctx.grad_buffer = grad
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss):
        grad = ctx.grad_buffer
        if grad is None:
            raise RuntimeError("the chunked OPSD loss hands its precomputed gradient back once; "
                               "call backward a single time (retain_graph is not supported)")
        ctx.grad_buffer = None
        grad.mul_(grad_loss.to(grad.dtype))
        return grad, None, None, None, None, None


def _chunked_rows(student_logits, teacher_logits, batch_index, token_index, *, beta, temperature,
                  token_clip, chunk_size, reduction, with_grad, stats_out):
    compute_dtype = _compute_dtype(student_logits, teacher_logits)
    num_tokens = batch_index.numel()
    normaliser = max(num_tokens, 1) if reduction == "mean" else 1
    per_token_loss = torch.empty(num_tokens, dtype=compute_dtype, device=student_logits.device)
    per_token_kl = torch.empty_like(per_token_loss)
    clipped_count = torch.zeros((), dtype=torch.int64, device=student_logits.device)
    grad = (torch.zeros_like(student_logits, memory_format=torch.contiguous_format)
            if with_grad else None)
    with torch.no_grad():
        for start in range(0, num_tokens, chunk_size):
            rows_b = batch_index[start:start + chunk_size]
            rows_t = token_index[start:start + chunk_size]
            rows_loss, rows_kl, rows_clipped, rows_grad = _rows_loss_and_grad(
                student_logits, teacher_logits, (rows_b, rows_t), beta=beta,
                temperature=temperature, token_clip=token_clip, compute_dtype=compute_dtype,
                grad_scale=1.0 / normaliser if with_grad else None)
            if with_grad:
                grad[rows_b, rows_t] = rows_grad.to(grad.dtype)
                del rows_grad
            per_token_loss[start:start + chunk_size] = rows_loss
            per_token_kl[start:start + chunk_size] = rows_kl
            clipped_count += rows_clipped
    stats_out.update(per_token_kl=per_token_kl, clipped_count=clipped_count)
    return per_token_loss.sum() / normaliser, grad


def generalized_jsd_token_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                               mask: torch.Tensor, *, beta: float = 0.0, temperature: float = 1.0,
                               token_clip: float | None = None, chunk_size: int | None = None,
                               reduction: str = "mean") -> tuple[torch.Tensor, LossStats]:
    """Full-vocabulary distillation loss of the student towards the teacher, per completion token.

    Args:
        student_logits: [B, T, V], carries the gradient.
        teacher_logits: [B, T, V], a fixed target: it is never differentiated (stop-gradient).
        mask: [B, T], true/1 on the completion tokens that count; other positions (padding,
            prompt) never enter the computation, whatever their logits hold.
        beta: which divergence, with p_T = softmax(teacher / temperature) and
            p_S = softmax(student / temperature):
              beta = 0: forward KL(p_T || p_S) = sum_v p_T (log p_T - log p_S)  (the OPSD default);
              beta = 1: reverse KL(p_S || p_T) = sum_v p_S (log p_S - log p_T);
              0 < beta < 1: generalised JSD with mixture M = beta p_T + (1 - beta) p_S,
                  beta KL(p_T || M) + (1 - beta) KL(p_S || M).
            This is TRL's GKD convention; note the JSD tends to 0, not to either KL, as beta
            approaches 0 or 1, so the end points are special cases, not limits.
        temperature: both logits are divided by it before the log-softmax (OPSD uses the
            sampling temperature).
        token_clip: if set, each per-(token, vocabulary entry) term of the sum above is clamped
            at max token_clip *before* summing over the vocabulary; clamped entries give no
            gradient. Terms can be negative, so this differs from clamping the per-token sum.
        chunk_size: if set, process this many valid tokens at a time: bounded memory, the same
            result, the gradient computed during the forward call and handed to a single backward
            (no retain_graph, no double backward). None computes all valid tokens at once with
            plain autograd: simplest, most memory. Training wants chunk_size (e.g. 128-512).
        reduction: "mean" divides by the number of valid tokens in the batch (0 tokens give a
            loss of 0); "sum" leaves the division to a caller that normalises over several
            micro-batches.

    Returns:
        (loss, stats): a 0-dim loss in float32 (float64 for float64 logits), and LossStats.
    """
    _check_inputs(student_logits, teacher_logits, mask, beta, temperature, token_clip, chunk_size,
                  reduction)
    batch_index, token_index = mask.to(device=student_logits.device).bool().nonzero(as_tuple=True)
    teacher_logits = teacher_logits.detach()
    num_tokens = batch_index.numel()

    if chunk_size is None:
        compute_dtype = _compute_dtype(student_logits, teacher_logits)
        per_token_loss, per_token_kl, clipped_count = _rows_divergence(
            student_logits[batch_index, token_index], teacher_logits[batch_index, token_index],
            beta=beta, temperature=temperature, token_clip=token_clip, compute_dtype=compute_dtype)
        normaliser = max(num_tokens, 1) if reduction == "mean" else 1
        loss = per_token_loss.sum() / normaliser
    else:
        options = dict(beta=beta, temperature=temperature, token_clip=token_clip,
                       chunk_size=chunk_size, reduction=reduction)
        stats_out: dict = {}
        if student_logits.requires_grad and torch.is_grad_enabled():
            loss = _ChunkedDivergence.apply(student_logits, teacher_logits, batch_index,
                                            token_index, options, stats_out)
        else:
            loss, _ = _chunked_rows(student_logits, teacher_logits, batch_index, token_index,
                                    with_grad=False, stats_out=stats_out, **options)
        per_token_kl, clipped_count = stats_out["per_token_kl"], stats_out["clipped_count"]

    vocab_size = student_logits.shape[-1]
    stats = LossStats(
        divergence_mean=float(per_token_kl.sum()) / max(num_tokens, 1),
        clipped_fraction=int(clipped_count) / max(num_tokens * vocab_size, 1),
        num_tokens=num_tokens,
    )
    return loss, stats


def sampled_token_loss(student_logprobs_of_sampled: torch.Tensor,
                       teacher_logprobs_of_sampled: torch.Tensor, mask: torch.Tensor, *,
                       reduction: str = "mean") -> tuple[torch.Tensor, LossStats]:
    """Policy-gradient form of reverse KL on the sampled tokens only.

    advantage = log p_T(y_t) - log p_S(y_t), stop-gradient; loss = -mean(advantage * log p_S(y_t))
    over valid tokens. Its gradient is that of reverse KL(p_S || p_T) estimated from the student's
    own samples. Inputs are [B, T] log-probabilities of the sampled tokens (see token_logprobs);
    only the student's carry a gradient.
    """
    if student_logprobs_of_sampled.shape != teacher_logprobs_of_sampled.shape:
        raise ValueError(f"student log-probs shape {tuple(student_logprobs_of_sampled.shape)} differs "
                         f"from teacher log-probs shape {tuple(teacher_logprobs_of_sampled.shape)}")
    if mask.shape != student_logprobs_of_sampled.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} must match the log-probs' shape "
                         f"{tuple(student_logprobs_of_sampled.shape)}")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum'; got {reduction!r}")
    valid = mask.to(device=student_logprobs_of_sampled.device).bool()
    compute_dtype = _compute_dtype(student_logprobs_of_sampled, teacher_logprobs_of_sampled)
    student = student_logprobs_of_sampled[valid].to(compute_dtype)
    teacher = teacher_logprobs_of_sampled[valid].detach().to(compute_dtype)
    advantage = (teacher - student).detach()
    num_tokens = student.numel()
    normaliser = max(num_tokens, 1) if reduction == "mean" else 1
    loss = -(advantage * student).sum() / normaliser
    stats = LossStats(divergence_mean=float(-advantage.sum()) / max(num_tokens, 1), clipped_fraction=0.0,
                      num_tokens=num_tokens)
    return loss, stats


# prime-rl's ref_kl loss (used by its opsd and opd algorithms), whose constants are fixed in its
# code, not configurable: a token whose probability under the trainer fell more than this below
# the sampler's leaves the signal, and the squared log-ratio to the sampler is added at this weight.
PRIME_RL_TRUST_REGION = 0.2
PRIME_RL_DRIFT_COEF = 1e-3
# Its teacher prefill-scores with temperature 1.0 and no truncation, whatever the sampling settings.
PRIME_RL_TEACHER_TEMPERATURE = 1.0


def ref_kl_token_loss(student_logprobs: torch.Tensor, sampling_logprobs: torch.Tensor,
                      teacher_logprobs: torch.Tensor, mask: torch.Tensor, *,
                      reduction: str = "mean") -> tuple[torch.Tensor, LossStats]:
    """prime-rl's OPSD signal on the sampled tokens (docs/opsd.md, "Which mode is which reference").

    Per scored token, with r = exp(log p_S - log mu) the importance ratio to the sampler mu and
    a = log p_T - log p_S (stop-gradient, the one-sample reverse-KL advantage):
        loss_t = -keep_t * a * r + PRIME_RL_DRIFT_COEF * (log p_S - log mu)^2,
    keep_t false where p_S - mu < -PRIME_RL_TRUST_REGION (the token's probability fell too far
    since it was sampled). Summed over tokens ("sum", the caller divides by the step's scored
    tokens, as prime-rl divides by its global ref_kl token count) or averaged ("mean").
    Inputs are [B, T]; only student_logprobs carries a gradient.
    """
    shapes = {tuple(t.shape) for t in (student_logprobs, sampling_logprobs, teacher_logprobs, mask)}
    if len(shapes) != 1:
        raise ValueError(f"student, sampling and teacher log-probs and the mask must share one shape; got "
                         f"{[tuple(t.shape) for t in (student_logprobs, sampling_logprobs, teacher_logprobs, mask)]}")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum'; got {reduction!r}")
    valid = mask.to(device=student_logprobs.device).bool()
    compute_dtype = _compute_dtype(student_logprobs, teacher_logprobs)
    student = student_logprobs[valid].to(compute_dtype)
    sampler = sampling_logprobs.to(student_logprobs.device)[valid].detach().to(compute_dtype)
    teacher = teacher_logprobs[valid].detach().to(compute_dtype)
    log_ratio = student - sampler
    dropped = (student.exp() - sampler.exp()) < -PRIME_RL_TRUST_REGION
    advantage = (teacher - student).detach()
    per_token = -(~dropped).to(compute_dtype) * advantage * log_ratio.exp() + PRIME_RL_DRIFT_COEF * log_ratio.square()
    num_tokens = student.numel()
    normaliser = max(num_tokens, 1) if reduction == "mean" else 1
    loss = per_token.sum() / normaliser
    stats = LossStats(divergence_mean=float(-advantage.sum()) / max(num_tokens, 1),
                      clipped_fraction=float(dropped.sum()) / max(num_tokens, 1), num_tokens=num_tokens)
    return loss, stats


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, *,
                   temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Log-probabilities of token_ids under the sampling distribution: [B, T, V] x [B, T] -> [B, T],
    in float32+.

    With top_k 0 and top_p 1 (the defaults) that is log softmax(logits / temperature). With
    truncation it is the distribution a sampler draws from after temperature, top-k, then top-p
    (vLLM's `logprobs_mode="processed_logprobs"`, transformers' warpers, in the same order):
    log softmax over the kept entries only, so an importance ratio against a sampler's processed
    log-probs starts at 1. A token the truncation would drop (a boundary tie, or rounding between
    two implementations) stays in the support of its own position, so its log-probability is
    finite."""
    if logits.shape[:-1] != token_ids.shape:
        raise ValueError(f"token_ids shape {tuple(token_ids.shape)} must match the logits' leading "
                         f"dims {tuple(logits.shape[:-1])}")
    if not temperature > 0.0:
        raise ValueError(f"temperature must be > 0; got {temperature}")
    if top_k < 0 or not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_k must be >= 0 and top_p in (0, 1]; got {top_k}, {top_p}")
    scaled = logits.to(_compute_dtype(logits)) / temperature
    picked = scaled.gather(-1, token_ids.unsqueeze(-1).long()).squeeze(-1)
    threshold = sampling_threshold(scaled, top_k, top_p)
    if threshold is None:
        return picked - torch.logsumexp(scaled, dim=-1)
    threshold = threshold.unsqueeze(-1)
    kept = torch.logsumexp(scaled.masked_fill(scaled < threshold, float("-inf")), dim=-1)
    dropped = picked < threshold.squeeze(-1)
    return picked - torch.logaddexp(kept, picked.masked_fill(~dropped, float("-inf")))


@torch.no_grad()
def sampling_threshold(scaled: torch.Tensor, top_k: int = 0, top_p: float = 1.0,
                       chunk_rows: int = 256) -> torch.Tensor | None:
    """The smallest kept value per row of temperature-scaled logits [..., V] after top-k then
    top-p, or None when neither truncates. The kept set is every entry at or above it.

    Top-p follows vLLM's `apply_top_k_top_p` (and transformers' TopPLogitsWarper): sort the
    surviving entries ascending, drop those whose cumulative probability is <= 1 - top_p, always
    keep the largest. After top-k only its k values can survive, so only they are sorted; top-p
    alone sorts whole rows, `chunk_rows` at a time."""
    vocab = scaled.shape[-1]
    use_k = 0 < top_k < vocab
    if not use_k and top_p >= 1.0:
        return None
    rows = scaled.reshape(-1, vocab)
    out = torch.empty(rows.shape[0], dtype=scaled.dtype, device=scaled.device)
    for start in range(0, rows.shape[0], chunk_rows):
        chunk = rows[start: start + chunk_rows]
        values = chunk.topk(top_k, dim=-1).values.flip(-1) if use_k else chunk.sort(dim=-1).values
        if top_p < 1.0:
            cumulative = values.softmax(dim=-1).cumsum(dim=-1)
            drop = cumulative <= 1.0 - top_p
            drop[:, -1] = False
            first_kept = drop.sum(dim=-1, keepdim=True)  # dropped entries are a prefix of the ascending sort
            out[start: start + chunk_rows] = values.gather(-1, first_kept).squeeze(-1)
        else:
            out[start: start + chunk_rows] = values[:, 0]
    return out.reshape(scaled.shape[:-1])


def trim_to_longest(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    completion_mask: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Drop the right-hand columns that are padding in every row of the batch.

    All tensors share [B, L] as leading dims (``others`` may add trailing dims, e.g. logits or
    per-token log-probs). Columns after the last one that any row attends to hold nothing but
    padding; with causal attention no kept position can see them, so cutting them changes no
    kept logit: the result is exact. Returns views (no copies), in the order given.
    """
    tensors = (input_ids, attention_mask, completion_mask, *others)
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, length]; got shape {tuple(input_ids.shape)}")
    for position, tensor in enumerate(tensors[1:], start=1):
        if tensor.shape[:2] != input_ids.shape:
            raise ValueError(f"tensor {position} has leading shape {tuple(tensor.shape[:2])}, "
                             f"expected input_ids' {tuple(input_ids.shape)}")
    attended = attention_mask.bool()
    if bool((completion_mask.bool() & ~attended).any()):
        raise ValueError("completion_mask marks tokens that attention_mask hides; a completion "
                         "token must be attended")
    attended_columns = attended.any(dim=0).nonzero()
    keep = int(attended_columns[-1]) + 1 if attended_columns.numel() else 0
    return tuple(tensor[:, :keep] for tensor in tensors)
