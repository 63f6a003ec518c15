"""The OPSD losses against an independent float64 reference written with plain Python loops."""

import math

import pytest
import torch

from termforge.opsd.loss import (
    generalized_jsd_token_loss,
    sampled_token_loss,
    token_logprobs,
    trim_to_longest,
)

BETAS = [0.0, 0.3, 0.5, 1.0]  # 0.3: the mixture is asymmetric there, so a swapped convention shows
CLIP = 0.05


# ---------------------------------------------------------------- the reference, loops and floats


def _log_softmax(row, temperature):
    scaled = [x / temperature for x in row]
    top = max(scaled)
    log_norm = top + math.log(sum(math.exp(x - top) for x in scaled))
    return [x - log_norm for x in scaled]


def _term(log_p_t, log_p_s, beta):
    """One vocabulary entry's contribution, straight from the definitions."""
    p_t, p_s = math.exp(log_p_t), math.exp(log_p_s)
    if beta == 0.0:
        return p_t * (log_p_t - log_p_s)
    if beta == 1.0:
        return p_s * (log_p_s - log_p_t)
    m = beta * p_t + (1 - beta) * p_s
    return beta * p_t * (log_p_t - math.log(m)) + (1 - beta) * p_s * (log_p_s - math.log(m))


def naive_loss(student, teacher, mask, beta, temperature=1.0, clip=None):
    """(loss, unclipped mean divergence, clipped fraction, smallest |term - clip|) from nested lists."""
    total, total_unclipped, clipped, count, closest = 0.0, 0.0, 0, 0, math.inf
    for b in range(len(mask)):
        for t in range(len(mask[b])):
            if not mask[b][t]:
                continue
            count += 1
            log_s = _log_softmax(student[b][t], temperature)
            log_t = _log_softmax(teacher[b][t], temperature)
            for v in range(len(log_s)):
                term = _term(log_t[v], log_s[v], beta)
                total_unclipped += term
                if clip is not None:
                    closest = min(closest, abs(term - clip))
                    if term > clip:
                        clipped += 1
                        term = clip
                total += term
    vocab = len(student[0][0])
    return (total / max(count, 1), total_unclipped / max(count, 1),
            clipped / max(count * vocab, 1), closest)


def naive_gradient(student, teacher, mask, beta, temperature=1.0, clip=None, eps=1e-6):
    """Central finite differences of naive_loss with respect to every student logit."""
    grad = [[[0.0] * len(student[0][0]) for _ in row] for row in student]
    for b in range(len(student)):
        for t in range(len(student[b])):
            for v in range(len(student[b][t])):
                original = student[b][t][v]
                student[b][t][v] = original + eps
                up = naive_loss(student, teacher, mask, beta, temperature, clip)[0]
                student[b][t][v] = original - eps
                down = naive_loss(student, teacher, mask, beta, temperature, clip)[0]
                student[b][t][v] = original
                grad[b][t][v] = (up - down) / (2 * eps)
    return grad


def make_batch(batch=2, tokens=5, vocab=7, seed=0, dtype=torch.float32, scale=2.0):
    gen = torch.Generator().manual_seed(seed)
    student = torch.randn(batch, tokens, vocab, generator=gen, dtype=torch.float64) * scale
    teacher = torch.randn(batch, tokens, vocab, generator=gen, dtype=torch.float64) * scale
    lengths = torch.randint(1, tokens + 1, (batch,), generator=gen)
    lengths[0] = tokens  # one full row, so the longest completion spans the batch
    mask = torch.arange(tokens)[None, :] < lengths[:, None]
    return student.to(dtype), teacher.to(dtype), mask


def loss_and_grad(student, teacher, mask, **kwargs):
    leaf = student.detach().clone().requires_grad_(True)
    loss, stats = generalized_jsd_token_loss(leaf, teacher, mask, **kwargs)
    loss.backward()
    return loss.detach(), leaf.grad, stats


# ---------------------------------------------------------------- values and gradients


@pytest.mark.parametrize("chunk_size", [None, 1, 3, 100])
@pytest.mark.parametrize("clip", [None, CLIP])
@pytest.mark.parametrize("beta", BETAS)
def test_loss_and_stats_match_the_loop_reference(beta, clip, chunk_size):
    student, teacher, mask = make_batch(seed=1)
    temperature = 1.1
    expected, expected_kl, expected_fraction, _ = naive_loss(
        student.double().tolist(), teacher.double().tolist(), mask.tolist(), beta, temperature, clip)
    loss, _, stats = loss_and_grad(student, teacher, mask, beta=beta, temperature=temperature,
                                   token_clip=clip, chunk_size=chunk_size)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(expected, abs=1e-5, rel=1e-5)
    assert stats.kl_mean == pytest.approx(expected_kl, abs=1e-5, rel=1e-5)
    assert stats.clipped_fraction == pytest.approx(expected_fraction)
    assert stats.num_tokens == int(mask.sum())
    if clip is not None:
        assert 0.0 < stats.clipped_fraction < 1.0, "the data must exercise the clip both ways"
        assert loss.item() < stats.kl_mean


@pytest.mark.parametrize("chunk_size", [None, 2])
@pytest.mark.parametrize("clip", [None, CLIP])
@pytest.mark.parametrize("beta", BETAS)
def test_gradient_matches_finite_differences_of_the_reference(beta, clip, chunk_size):
    student, teacher, mask = make_batch(batch=2, tokens=3, vocab=5, seed=2, dtype=torch.float64)
    s_list, t_list, m_list = student.tolist(), teacher.tolist(), mask.tolist()
    *_, closest = naive_loss(s_list, t_list, m_list, beta, 1.1, clip)
    assert closest > 1e-4, "a term sits on the clip edge; finite differences would straddle it"
    expected = torch.tensor(naive_gradient(s_list, t_list, m_list, beta, 1.1, clip), dtype=torch.float64)
    _, grad, _ = loss_and_grad(student, teacher, mask, beta=beta, temperature=1.1, token_clip=clip,
                               chunk_size=chunk_size)
    assert grad.dtype == torch.float64
    torch.testing.assert_close(grad, expected, atol=1e-7, rtol=1e-6)
    assert torch.all(grad[~mask] == 0)


@pytest.mark.parametrize("beta", BETAS)
def test_unchunked_path_passes_gradcheck(beta):
    student, teacher, mask = make_batch(batch=2, tokens=3, vocab=5, seed=3, dtype=torch.float64)
    student.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda s: generalized_jsd_token_loss(s, teacher, mask, beta=beta, temperature=0.9)[0],
        (student,))


def test_clip_applies_to_each_vocabulary_entry_not_the_token_sum():
    p_teacher, p_student = [0.6, 0.3, 0.1], [0.2, 0.4, 0.4]
    teacher = torch.tensor([[[math.log(p) for p in p_teacher]]])
    student = torch.tensor([[[math.log(p) for p in p_student]]])
    mask = torch.ones(1, 1, dtype=torch.bool)
    terms = [pt * math.log(pt / ps) for pt, ps in zip(p_teacher, p_student)]
    per_entry = sum(min(term, CLIP) for term in terms)  # 0.05 - 0.086 - 0.139
    per_token_sum = min(sum(terms), CLIP)  # the sum (0.434) would clamp to 0.05
    assert abs(per_entry - per_token_sum) > 0.2
    for chunk_size in (None, 1):
        loss, grad, stats = loss_and_grad(student, teacher, mask, token_clip=CLIP, chunk_size=chunk_size)
        assert loss.item() == pytest.approx(per_entry, abs=1e-6)
        assert stats.kl_mean == pytest.approx(sum(terms), abs=1e-6)
        assert stats.clipped_fraction == pytest.approx(1 / 3)
        # The clamped entry contributes no gradient: what remains is the gradient of the other
        # two terms, -p_T(v) + p_S(v) * (p_T(1) + p_T(2)) for the logit of entry v.
        kept_mass = p_teacher[1] + p_teacher[2]
        expected = [-(0 if v == 0 else p_teacher[v]) + p_student[v] * kept_mass for v in range(3)]
        torch.testing.assert_close(grad[0, 0], torch.tensor(expected), atol=1e-6, rtol=0)


def test_chunked_equals_unchunked_on_a_larger_batch():
    student, teacher, mask = make_batch(batch=3, tokens=17, vocab=50, seed=4, scale=3.0)
    reference_loss, reference_grad, reference_stats = loss_and_grad(
        student, teacher, mask, temperature=1.1, token_clip=CLIP)
    for chunk_size in (1, 4, 7, 16, 1000):
        loss, grad, stats = loss_and_grad(student, teacher, mask, temperature=1.1, token_clip=CLIP,
                                          chunk_size=chunk_size)
        torch.testing.assert_close(loss, reference_loss, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(grad, reference_grad, rtol=1e-6, atol=1e-9)
        assert stats.clipped_fraction == reference_stats.clipped_fraction
        assert stats.kl_mean == pytest.approx(reference_stats.kl_mean, rel=1e-6)


def test_chunked_gradient_is_scaled_by_the_upstream_gradient_and_given_once():
    student, teacher, mask = make_batch(seed=5)
    _, unit_grad, _ = loss_and_grad(student, teacher, mask, chunk_size=2)
    leaf = student.clone().requires_grad_(True)
    loss, _ = generalized_jsd_token_loss(leaf, teacher, mask, chunk_size=2)
    (2.5 * loss).backward(retain_graph=True)
    torch.testing.assert_close(leaf.grad, 2.5 * unit_grad)
    with pytest.raises(RuntimeError, match="backward a single time"):
        loss.backward()


def test_no_grad_and_frozen_student_give_the_same_loss():
    student, teacher, mask = make_batch(seed=6)
    expected, _, _ = loss_and_grad(student, teacher, mask, beta=0.5, chunk_size=3)
    with torch.no_grad():
        under_no_grad, _ = generalized_jsd_token_loss(student.requires_grad_(True), teacher, mask,
                                                      beta=0.5, chunk_size=3)
    frozen, _ = generalized_jsd_token_loss(student.detach(), teacher, mask, beta=0.5, chunk_size=3)
    assert under_no_grad.item() == expected.item() == frozen.item()
    assert not frozen.requires_grad


def test_teacher_never_receives_a_gradient():
    student, teacher, mask = make_batch(seed=7)
    teacher.requires_grad_(True)
    for chunk_size in (None, 2):
        leaf = student.clone().requires_grad_(True)
        generalized_jsd_token_loss(leaf, teacher, mask, chunk_size=chunk_size)[0].backward()
        assert teacher.grad is None and leaf.grad is not None


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_padding_positions_change_nothing(chunk_size):
    student, teacher, mask = make_batch(batch=3, tokens=6, seed=8)
    assert not mask.all()
    clean_loss, clean_grad, clean_stats = loss_and_grad(student, teacher, mask, token_clip=CLIP,
                                                        chunk_size=chunk_size)
    noisy_student, noisy_teacher = student.clone(), teacher.clone()
    noisy_student[~mask] = float("nan")
    noisy_teacher[~mask] = 1e30
    loss, grad, stats = loss_and_grad(noisy_student, noisy_teacher, mask, token_clip=CLIP,
                                      chunk_size=chunk_size)
    assert loss.item() == clean_loss.item()
    assert stats == clean_stats
    assert torch.equal(grad, clean_grad)
    assert torch.all(grad[~mask] == 0)


@pytest.mark.parametrize("chunk_size", [None, 3])
def test_trimmed_and_padded_batches_give_the_same_loss(chunk_size):
    student, teacher, mask = make_batch(batch=3, tokens=5, seed=9)
    extra = 4  # columns of right padding beyond the longest completion

    def pad(x, value):
        return torch.cat([x, torch.full((x.shape[0], extra, *x.shape[2:]), value, dtype=x.dtype)], 1)

    padded_student, padded_teacher = pad(student, 1e4), pad(teacher, -1e4)
    padded_mask = pad(mask, False)
    input_ids = pad(torch.randint(5, 100, mask.shape) * mask, 0)
    _, trimmed_mask, trimmed_completion, trimmed_student, trimmed_teacher = trim_to_longest(
        input_ids, padded_mask, padded_mask, padded_student, padded_teacher)
    assert trimmed_student.shape == student.shape and torch.equal(trimmed_mask, mask)

    expected = naive_loss(student.double().tolist(), teacher.double().tolist(), mask.tolist(), 0.0,
                          clip=CLIP)[0]
    padded_loss, padded_grad, _ = loss_and_grad(padded_student, padded_teacher, padded_mask,
                                                token_clip=CLIP, chunk_size=chunk_size)
    trimmed_loss, trimmed_grad, _ = loss_and_grad(trimmed_student, trimmed_teacher, trimmed_completion,
                                                  token_clip=CLIP, chunk_size=chunk_size)
    assert padded_loss.item() == trimmed_loss.item() == pytest.approx(expected, abs=1e-5)
    assert torch.equal(padded_grad[:, : student.shape[1]], trimmed_grad)
    assert torch.all(padded_grad[:, student.shape[1]:] == 0)


def test_non_contiguous_and_bfloat16_logits():
    student, teacher, mask = make_batch(batch=2, tokens=8, vocab=16, seed=10)
    wide_student = torch.randn(2, 10, 16).to(torch.bfloat16)
    wide_student[:, 1:9] = student.to(torch.bfloat16)
    student_view = wide_student[:, 1:9]  # the usual logits[:, prompt_len - 1 : -1] slice
    assert not student_view.is_contiguous()
    teacher_bf16 = teacher.to(torch.bfloat16)
    expected = naive_loss(student_view.double().tolist(), teacher_bf16.double().tolist(),
                          mask.tolist(), 0.0, clip=CLIP)[0]
    results = []
    for chunk_size in (None, 3):
        leaf = wide_student.clone().requires_grad_(True)
        loss, _ = generalized_jsd_token_loss(leaf[:, 1:9], teacher_bf16, mask, token_clip=CLIP,
                                             chunk_size=chunk_size)
        loss.backward()
        assert loss.dtype == torch.float32 and leaf.grad.dtype == torch.bfloat16
        assert loss.item() == pytest.approx(expected, abs=1e-5)
        assert torch.all(leaf.grad[:, [0, 9]] == 0)
        results.append(leaf.grad)
    torch.testing.assert_close(results[0], results[1])


@pytest.mark.parametrize("beta", BETAS)
def test_minus_infinity_logits_give_finite_losses_and_gradients(beta):
    # A masked-out vocabulary entry (logit -inf) has probability 0 and contributes nothing.
    student = torch.tensor([[[0.3, -1.2, 0.5, float("-inf")]]], dtype=torch.float64)
    teacher = torch.tensor([[[1.0, 0.2, float("-inf"), float("-inf")]]], dtype=torch.float64)
    one = torch.ones(1, 1, dtype=torch.bool)
    log_s = _log_softmax(student[0, 0, :3].tolist(), 1.0) + [-math.inf]
    log_t = _log_softmax(teacher[0, 0, :2].tolist(), 1.0) + [-math.inf, -math.inf]
    expected = 0.0
    for v in range(4):
        p_t, p_s = math.exp(log_t[v]), math.exp(log_s[v])
        if beta == 0.0:
            expected += p_t * (log_t[v] - log_s[v]) if p_t else 0.0
        elif beta == 1.0:
            expected += p_s * (log_s[v] - log_t[v]) if p_s else 0.0
        elif p_t or p_s:
            m = beta * p_t + (1 - beta) * p_s
            expected += (beta * p_t * (log_t[v] - math.log(m)) if p_t else 0.0) + (
                (1 - beta) * p_s * (log_s[v] - math.log(m)) if p_s else 0.0)
    if beta == 1.0:
        # The student puts mass where the teacher has none: reverse KL is infinite, or huge.
        assert expected == math.inf
        return
    grads = []
    for chunk_size in (None, 1):
        loss, grad, _ = loss_and_grad(student, teacher, one, beta=beta, chunk_size=chunk_size)
        assert loss.item() == pytest.approx(expected, rel=1e-12)
        assert torch.isfinite(grad).all()
        grads.append(grad)
    torch.testing.assert_close(grads[0], grads[1])


def test_an_empty_mask_gives_zero_loss_and_zero_gradient():
    student, teacher, mask = make_batch(seed=11)
    for chunk_size in (None, 2):
        loss, grad, stats = loss_and_grad(student, teacher, torch.zeros_like(mask), chunk_size=chunk_size)
        assert loss.item() == 0.0 and stats.num_tokens == 0 and stats.kl_mean == 0.0
        assert torch.all(grad == 0)


def test_half_mixture_jsd_is_symmetric_and_sum_reduction_is_unnormalised():
    student, teacher, mask = make_batch(seed=12)
    forward, _ = generalized_jsd_token_loss(student, teacher, mask, beta=0.5)
    swapped, _ = generalized_jsd_token_loss(teacher, student, mask, beta=0.5)
    assert forward.item() == pytest.approx(swapped.item(), rel=1e-6)
    assert 0 < forward.item() <= math.log(2)  # JSD with beta=0.5 is bounded by ln 2 per token
    summed, stats = generalized_jsd_token_loss(student, teacher, mask, beta=0.5, chunk_size=2,
                                               reduction="sum")
    assert summed.item() == pytest.approx(forward.item() * stats.num_tokens, rel=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({"beta": 1.5}, "beta"), ({"temperature": 0.0}, "temperature"), ({"token_clip": 0.0}, "token_clip"),
    ({"chunk_size": 0}, "chunk_size"), ({"reduction": "batchmean"}, "reduction"),
])
def test_bad_arguments_are_named(kwargs, message):
    student, teacher, mask = make_batch(seed=13)
    with pytest.raises(ValueError, match=message):
        generalized_jsd_token_loss(student, teacher, mask, **kwargs)
    with pytest.raises(ValueError, match="mask shape"):
        generalized_jsd_token_loss(student, teacher, mask[:, :-1])
    with pytest.raises(ValueError, match="teacher_logits shape"):
        generalized_jsd_token_loss(student, teacher[:, :-1], mask)


# ---------------------------------------------------------------- sampled-token variant


def test_token_logprobs_match_the_loop_reference():
    student, _, _ = make_batch(seed=14)
    ids = torch.randint(0, student.shape[-1], student.shape[:2], generator=torch.Generator().manual_seed(0))
    result = token_logprobs(student, ids, temperature=1.1)
    for b in range(ids.shape[0]):
        for t in range(ids.shape[1]):
            row = _log_softmax(student[b, t].double().tolist(), 1.1)
            assert result[b, t].item() == pytest.approx(row[ids[b, t]], abs=1e-6)


@pytest.mark.parametrize("top_k,top_p", [(5, 1.0), (0, 0.7), (6, 0.8), (50, 0.95)])
def test_truncated_token_logprobs_are_the_warped_distribution(top_k, top_p):
    """With top-k / top-p, token_logprobs is log softmax over what transformers' own warpers keep
    (temperature, then top-k, then top-p: the order generate and vLLM apply them), for every
    token the warpers keep; a token they drop keeps a finite value in its own position's support."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    gen = torch.Generator().manual_seed(21)
    logits = torch.randn(2, 5, 40, generator=gen) * 3
    warpers = LogitsProcessorList([TemperatureLogitsWarper(0.7)] + ([TopKLogitsWarper(top_k)] if top_k else [])
                                  + ([TopPLogitsWarper(top_p)] if top_p < 1 else []))
    warped = torch.log_softmax(warpers(None, logits.reshape(-1, 40).clone()), dim=-1).reshape(2, 5, 40)
    for token in range(40):
        ids = torch.full((2, 5), token)
        result = token_logprobs(logits, ids, temperature=0.7, top_k=top_k, top_p=top_p)
        expected = warped[..., token]
        kept = torch.isfinite(expected)
        assert torch.allclose(result[kept], expected[kept], atol=1e-5)
        assert torch.isfinite(result).all()
        # A dropped token: its own probability joins the kept mass, nothing else does.
        full = torch.log_softmax(logits / 0.7, dim=-1)[..., token]
        kept_mass = torch.logsumexp(torch.where(torch.isfinite(warped), logits / 0.7, float("-inf")), dim=-1)
        own = (logits / 0.7)[..., token]
        assert torch.allclose(result[~kept], (own - torch.logaddexp(kept_mass, own))[~kept], atol=1e-5)
        assert (result[~kept] > full[~kept] - 1e-6).all()
    assert torch.equal(token_logprobs(logits, ids, temperature=0.7),
                       token_logprobs(logits, ids, temperature=0.7, top_k=0, top_p=1.0))


def test_sampled_token_loss_value_gradient_and_mask():
    gen = torch.Generator().manual_seed(15)
    student = -torch.rand(3, 4, generator=gen, dtype=torch.float64) * 3
    teacher = -torch.rand(3, 4, generator=gen, dtype=torch.float64) * 3
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    valid = [(b, t) for b in range(3) for t in range(4) if mask[b, t]]
    advantages = {bt: teacher[bt].item() - student[bt].item() for bt in valid}
    expected = -sum(advantages[bt] * student[bt].item() for bt in valid) / len(valid)

    noisy_student, noisy_teacher = student.clone(), teacher.clone()
    noisy_student[~mask], noisy_teacher[~mask] = float("nan"), float("inf")
    leaf = noisy_student.requires_grad_(True)
    teacher_leaf = noisy_teacher.requires_grad_(True)
    loss, stats = sampled_token_loss(leaf, teacher_leaf, mask)
    loss.backward()
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    assert stats.num_tokens == len(valid)
    assert stats.kl_mean == pytest.approx(-sum(advantages.values()) / len(valid))
    for b in range(3):
        for t in range(4):
            want = -advantages[(b, t)] / len(valid) if mask[b, t] else 0.0
            assert leaf.grad[b, t].item() == pytest.approx(want, abs=1e-12)
    assert teacher_leaf.grad is None


def test_sampled_token_gradient_is_reverse_kl_gradient_in_expectation():
    # Averaging the sampled-token gradient over every possible sampled token, weighted by the
    # student's probability, gives exactly the gradient of reverse KL (the beta=1 full loss).
    student, teacher, _ = make_batch(batch=1, tokens=1, vocab=6, seed=16, dtype=torch.float64)
    one = torch.ones(1, 1, dtype=torch.bool)
    student_probs = torch.softmax(student[0, 0], -1)
    expected_grad = torch.zeros_like(student)
    for token in range(6):
        leaf = student.clone().requires_grad_(True)
        ids = torch.tensor([[token]])
        loss, _ = sampled_token_loss(token_logprobs(leaf, ids), token_logprobs(teacher, ids), one)
        loss.backward()
        expected_grad += student_probs[token] * leaf.grad
    _, reverse_kl_grad, _ = loss_and_grad(student, teacher, one, beta=1.0)
    torch.testing.assert_close(expected_grad, reverse_kl_grad, atol=1e-12, rtol=1e-10)


# ---------------------------------------------------------------- trim_to_longest


def test_trim_to_longest_drops_only_columns_that_are_padding_everywhere():
    attention = torch.tensor([[0, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0]])
    completion = torch.tensor([[0, 0, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 0, 0]])
    input_ids = torch.arange(14).reshape(2, 7) * attention
    logits = torch.randn(2, 7, 3)
    ids, att, comp, trimmed_logits = trim_to_longest(input_ids, attention, completion, logits)
    assert ids.shape == (2, 5) and trimmed_logits.shape == (2, 5, 3)
    assert torch.equal(att, attention[:, :5]) and torch.equal(comp, completion[:, :5])
    assert trimmed_logits.data_ptr() == logits.data_ptr()  # a view: nothing copied
    # An already tight batch is returned whole; an all-padding batch becomes empty.
    assert trim_to_longest(ids, att, comp)[0].shape == (2, 5)
    zeros = torch.zeros(2, 4, dtype=torch.long)
    assert trim_to_longest(zeros, zeros, zeros)[0].shape == (2, 0)


def test_trim_to_longest_rejects_inconsistent_masks_and_shapes():
    attention = torch.tensor([[1, 1, 0]])
    with pytest.raises(ValueError, match="attention_mask hides"):
        trim_to_longest(attention, attention, torch.tensor([[0, 1, 1]]))
    with pytest.raises(ValueError, match="tensor 3"):
        trim_to_longest(attention, attention, attention, torch.zeros(1, 4))
