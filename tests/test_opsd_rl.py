"""GRPO objectives (opsd/rl.py) against hand-computed examples: advantages, zero-variance
filtering, ppo_clip with clip-higher, TMax's dppo mask, token- vs sequence-mean, KL to reference."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from termforge.opsd.rl import (  # noqa: E402
    binary_tv,
    dppo_mask,
    filter_zero_variance_groups,
    group_advantages,
    pg_token_weights,
    policy_gradient_loss,
)


def test_group_advantages_centered_and_std():
    assert group_advantages([1, 0, 0, 1], "centered") == [0.5, -0.5, -0.5, 0.5]
    assert group_advantages([1, 0, 0, 0], "centered") == [0.75, -0.25, -0.25, -0.25]
    # population std of [1,0,0,0] is sqrt(3)/4
    std = math.sqrt(3) / 4
    got = group_advantages([1, 0, 0, 0], "std")
    assert got == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std])
    # zero variance: every advantage is 0 under both rules (no division blow-up)
    assert group_advantages([1, 1, 1], "std") == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="advantage kind"):
        group_advantages([1, 0], "whiten")


def test_zero_variance_groups_are_filtered_and_counted():
    f = filter_zero_variance_groups({"a": [1, 0], "b": [1, 1], "c": [0, 0], "d": [0.5, 0.5], "e": [1]})
    assert f.kept == ["a"] and f.dropped_all_solved == ["b"] and f.dropped_all_failed == ["c"]
    assert f.dropped_other == ["d", "e"]
    assert f.counts == {"groups_kept": 1, "groups_all_solved": 1, "groups_all_failed": 1,
                        "groups_zero_variance_other": 2}


def _lp(*probs):
    return torch.tensor([[math.log(p) for p in probs]], dtype=torch.float64)


def test_ppo_clip_with_clip_higher_by_hand():
    old = _lp(0.5, 0.5, 0.5)
    new = _lp(0.8, 0.8, 0.3).requires_grad_(True)  # ratios 1.6, 1.6, 0.6
    adv = torch.tensor([[1.0, -1.0, 1.0]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    w = pg_token_weights(mask, "token")
    loss, stats = policy_gradient_loss(new, old, adv, mask, w, loss="ppo_clip", clip_low=0.2, clip_high=0.28)
    # token 1: max(-1.6, -1.28) = -1.28 (clipped); token 2: max(1.6, 1.28) = 1.6;
    # token 3: max(-0.6, -0.8) = -0.6 (unclipped: the low clip only binds below 0.8)
    assert float(loss.detach()) == pytest.approx((-1.28 + 1.6 - 0.6) / 3)
    assert stats.clipped_fraction == pytest.approx(1 / 3)
    loss.backward()
    # d/d new_lp of -A * r = -A * r; zero where the clipped branch was taken.
    assert new.grad.tolist()[0] == pytest.approx([0.0, 1.6 / 3, -0.6 / 3])
    # symmetric clip (clip_high = clip_low) changes token 1's clipped value only
    loss_sym, _ = policy_gradient_loss(new, old, adv, mask, w, loss="ppo_clip", clip_low=0.2, clip_high=0.2)
    assert float(loss_sym.detach()) == pytest.approx((-1.2 + 1.6 - 0.6) / 3)


def test_dppo_binary_tv_mask_by_hand():
    old = _lp(0.5, 0.5, 0.5, 0.5, 0.5)
    new = _lp(0.8, 0.8, 0.55, 0.3, 0.3).requires_grad_(True)
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0, 1.0]], dtype=torch.float64)
    mask = torch.ones(1, 5, dtype=torch.bool)
    assert binary_tv(new, old).tolist()[0] == pytest.approx([0.3, 0.3, 0.05, 0.2, 0.2])
    # masked: (A>0, r>1, tv>0.1) token 0 and (A<0, r<1, tv>0.1) token 3; the rest move back
    # towards the sampling policy or stay inside the region.
    assert dppo_mask(new, old, adv, mask, 0.1).tolist()[0] == [0.0, 1.0, 1.0, 0.0, 1.0]
    w = pg_token_weights(mask, "token")
    loss, stats = policy_gradient_loss(new, old, adv, mask, w, loss="dppo", dppo_threshold=0.1)
    assert float(loss.detach()) == pytest.approx((0 + 1.6 - 1.1 + 0 - 0.6) / 5)
    assert stats.clipped_fraction == pytest.approx(2 / 5)
    loss.backward()
    assert new.grad.tolist()[0] == pytest.approx([0.0, 1.6 / 5, -1.1 / 5, 0.0, -0.6 / 5])
    # a looser trust region keeps token 3 (tv 0.2 <= 0.25) but still drops token 0 (0.3)
    assert dppo_mask(new, old, adv, mask, 0.25).tolist()[0] == [0.0, 1.0, 1.0, 1.0, 1.0]


def test_token_mean_versus_sequence_mean():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
    tok = pg_token_weights(mask, "token")
    seq = pg_token_weights(mask, "sequence")
    assert tok.tolist() == [[0.25, 0.25, 0.25, 0.0], [0.25, 0.0, 0.0, 0.0]]
    assert seq.flatten().tolist() == pytest.approx([1 / 6, 1 / 6, 1 / 6, 0.0, 0.5, 0.0, 0.0, 0.0])
    # part totals spanning several micro-batches
    assert pg_token_weights(mask, "token", num_tokens=8).tolist()[1][0] == 0.125
    assert pg_token_weights(mask, "sequence", num_sequences=4).tolist()[1][0] == 0.25
    # On-policy (ratio 1) the loss is -sum w*A: per-token A of +1 on the long row, -1 on the short
    old = torch.zeros(2, 4, dtype=torch.float64) - 1.0
    new = old.clone().requires_grad_(True)
    adv = torch.tensor([[1.0] * 4, [-1.0] * 4], dtype=torch.float64)
    lt, _ = policy_gradient_loss(new, old, adv, mask, tok)
    ls, _ = policy_gradient_loss(new, old, adv, mask, seq)
    assert float(lt.detach()) == pytest.approx(-(3 - 1) / 4)
    assert float(ls.detach()) == pytest.approx(-(1 - 1) / 2)


def test_kl_to_reference_k3():
    old = _lp(0.5)
    new = _lp(0.5).requires_grad_(True)
    ref = _lp(0.25)
    mask = torch.ones(1, 1, dtype=torch.bool)
    w = pg_token_weights(mask, "token")
    adv = torch.zeros(1, 1, dtype=torch.float64)
    loss, stats = policy_gradient_loss(new, old, adv, mask, w, ref_logprobs=ref, kl_coef=0.5)
    d = math.log(0.25) - math.log(0.5)
    assert stats.kl_ref_mean == pytest.approx(math.exp(d) - d - 1)
    assert float(loss.detach()) == pytest.approx(0.5 * (math.exp(d) - d - 1))
    # coefficient 0 (TMax's beta 0): the reference does not enter the loss
    loss0, stats0 = policy_gradient_loss(new, old, adv, mask, w, ref_logprobs=ref, kl_coef=0.0)
    assert float(loss0.detach()) == 0.0 and stats0.kl_ref_mean == 0.0
