"""prime-rl's OPSD form (loss_type ref_kl, teacher_context_role leading_system) against a
transcription of prime-rl's own computation, on fixed tensors and on the tiny model.

The transcriptions below were written from reading PrimeIntellect-ai/prime-rl at commit
559b44772e471d1538537b8805cc77f3824a5e64 (21 August 2026):
- the loss: src/prime_rl/trainer/rl/loss.py, `ref_kl_loss_fn` (per sample: summed per-token loss)
  and `compute_loss` (each component's sum over the micro-batch's samples divided by that
  component's global token count `ref_kl_scale`, counted in src/prime_rl/trainer/rl/train.py);
- the teacher: src/prime_rl/orchestrator/algo/opsd.py, `OPSDAlgorithm.score_episode` (the
  demonstration, formatted by `template`, rendered alone as a system message without a generation
  prompt, prefixed to the sample's token ids; the prefill log-probs of the sample's positions are
  `full[len(hint_block):]`), scored by `prefill_logprobs` in src/prime_rl/utils/client.py
  (temperature 1.0, top_p 1.0);
- the routing: src/prime_rl/orchestrator/algo/routing.py `stamp_loss_routing` (weight 1.0 on every
  sampled token, none elsewhere) and `assign_reference_logprobs` (reference log-probs of sampled
  tokens only).
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from conftest import save_tiny_llama, smollm2_tokenizer  # noqa: E402
from termforge.errors import ConfigError  # noqa: E402
from termforge.opsd.config import OPSDConfig  # noqa: E402
from termforge.opsd.loss import ref_kl_token_loss, token_logprobs  # noqa: E402
from termforge.opsd.rollout import Trajectory, collate  # noqa: E402


def prime_rl_ref_kl_sample(trainer_lp, inference_lp, ref_lp, loss_mask, weights):
    """prime-rl's per-sample ref_kl loss, transcribed (see the module docstring)."""
    log_ratio = trainer_lp - inference_lp
    ratio = torch.exp(log_ratio)
    masked = (torch.exp(trainer_lp) - torch.exp(inference_lp)) < -0.2
    keep = loss_mask & ~masked
    signal = ref_lp - trainer_lp
    pg = keep * signal.detach() * ratio
    drift = loss_mask * log_ratio ** 2
    return ((-pg + 1e-3 * drift) * weights).sum()


def prime_rl_step_loss(samples):
    """compute_loss for the ref_kl component alone: sum of the per-sample losses over the global
    count of tokens with a nonzero ref_kl weight."""
    scale = max(sum(int((w != 0).sum()) for *_, w in samples), 1)
    total = 0.0
    for trainer_lp, inference_lp, ref_lp, weights in samples:
        mask = weights != 0
        total = total + prime_rl_ref_kl_sample(trainer_lp, inference_lp, ref_lp, mask, weights)
    return total / scale


def _fixed_samples():
    """Three sequences of different lengths (as prime-rl packs them): prompt tokens (weight 0),
    sampled tokens (weight 1) of which some moved past the trust region and some gained
    probability, and observation tokens inside the sequence (weight 0)."""
    generator = torch.Generator().manual_seed(7)
    out = []
    for length, sampled in ((6, [0, 0, 1, 1, 1, 1]), (9, [0, 0, 0, 1, 1, 0, 0, 1, 1]), (4, [0, 1, 1, 1])):
        inference = -torch.rand(length, generator=generator, dtype=torch.float64) * 2.0
        trainer = inference + torch.randn(length, generator=generator, dtype=torch.float64) * 0.4
        trainer = trainer.clamp(max=-1e-3)
        ref = -torch.rand(length, generator=generator, dtype=torch.float64) * 3.0
        out.append((trainer, inference, ref, torch.tensor(sampled, dtype=torch.float64)))
    # One token far outside the trust region: sampled at p 0.9, now at p 0.3.
    out[0][0][3], out[0][1][3] = torch.log(torch.tensor(0.3)), torch.log(torch.tensor(0.9))
    return out


def test_ref_kl_loss_and_gradient_equal_prime_rl_on_fixed_tensors():
    samples = _fixed_samples()
    theirs_inputs = [(t.clone().requires_grad_(True), i, r, w) for t, i, r, w in samples]
    theirs = prime_rl_step_loss(theirs_inputs)
    theirs.backward()

    # termforge's layout: one [B, T] batch of scored slots per micro-batch, padded with zeros.
    width = max(int(w.sum()) for *_, w in samples)
    mine_lp = torch.zeros(len(samples), width, dtype=torch.float64)
    sampler = torch.zeros_like(mine_lp)
    teacher = torch.zeros_like(mine_lp)
    mask = torch.zeros(len(samples), width, dtype=torch.bool)
    for b, (t, i, r, w) in enumerate(samples):
        keep = w != 0
        n = int(keep.sum())
        mine_lp[b, :n], sampler[b, :n], teacher[b, :n], mask[b, :n] = t[keep], i[keep], r[keep], True
    mine_lp.requires_grad_(True)
    loss_sum, stats = ref_kl_token_loss(mine_lp, sampler, teacher, mask, reduction="sum")
    mine = loss_sum / int(mask.sum())
    mine.backward()

    torch.testing.assert_close(mine, theirs.detach(), rtol=1e-12, atol=1e-14)
    for b, (t, *_, w) in enumerate(samples):
        keep = w != 0
        torch.testing.assert_close(mine_lp.grad[b, : int(keep.sum())], theirs_inputs[b][0].grad[keep],
                                   rtol=1e-12, atol=1e-14)
        assert torch.all(theirs_inputs[b][0].grad[~keep] == 0)
    assert torch.all(mine_lp.grad[~mask] == 0)
    assert stats.num_tokens == int(mask.sum()) == 11
    assert stats.clipped_fraction == pytest.approx(1 / 11)  # the one token past the trust region
    # Its drift term still pulls it (the squared log-ratio is on every scored token).
    assert theirs_inputs[0][0].grad[3] != 0


def test_ref_kl_differs_from_the_other_sampled_token_form():
    """The plain sampled-token loss has neither the ratio, the trust region nor the drift term: once
    the student moved away from the sampler the two disagree, so a mode that silently fell back to
    it would fail the transcription above."""
    from termforge.opsd.loss import sampled_token_loss

    trainer, inference, ref, w = _fixed_samples()[0]
    mask = (w != 0).unsqueeze(0)
    ours, _ = ref_kl_token_loss(trainer.unsqueeze(0), inference.unsqueeze(0), ref.unsqueeze(0), mask)
    plain, _ = sampled_token_loss(trainer.unsqueeze(0), ref.unsqueeze(0), mask)
    assert abs(float(ours) - float(plain)) > 1e-3


def test_prime_rl_modes_need_terminal_data():
    with pytest.raises(ConfigError, match=r"train\.loss_type: ref_kl .* needs data_kind terminal"):
        OPSDConfig.from_dict({"loss_type": "ref_kl"})
    with pytest.raises(ConfigError, match=r"train\.teacher_context_role: leading_system .* needs data_kind terminal"):
        OPSDConfig.from_dict({"teacher_context_role": "leading_system"})
    with pytest.raises(ConfigError, match=r"train\.teacher_template: leading_system"):
        OPSDConfig.from_dict({"data_kind": "terminal", "teacher_context_role": "leading_system",
                              "teacher_template": "{problem} {hint}"})


# -- on the tiny model: placement and the trainer's wiring ----------------------------------------

@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama-prime-rl"), smollm2_tokenizer())


class _Spec:
    def __init__(self, task_id):
        self.task_id, self.rollout, self.part = task_id, 0, "opsd"


class _Episode:
    """The fields of a finished terminal episode that opsd_trajectory reads."""

    def __init__(self, task_id, ids, mask, prompt_len, logprobs):
        self.spec = _Spec(task_id)
        self.ids, self.mask, self.prompt_len, self.logprobs = ids, mask, prompt_len, logprobs
        self.messages = [{"role": "assistant", "content": "ls"}]
        self.end_reason, self.reward = "submitted", 0.0


def _run_and_trainer(tiny_model_dir, tmp_path, **overrides):
    from termforge.models.transformers_backend import load_causal_lm
    from termforge.opsd.data import PromptRow
    from termforge.opsd.terminal_train import TerminalRun
    from termforge.opsd.trainer import OPSDTrainer

    values = dict(model=tiny_model_dir, device="cpu", num_threads=1, data_kind="terminal", objective="opsd",
                  images_dir=str(tmp_path), tasks_dir=str(tmp_path), lora_r=4, lora_alpha=8.0,
                  lora_target_modules=["q_proj", "v_proj"], temperature=0.8, top_k=0, top_p=1.0, seed=3)
    values.update(overrides)
    cfg = OPSDConfig.from_dict(values)
    row = PromptRow("task-a", ({"role": "user", "content": "Count the lines of data.txt."},),
                    "Read the file before you count; wc -l counts newlines.", "terminal",
                    "Count the lines of data.txt.")
    model, tokenizer = load_causal_lm(tiny_model_dir)
    trainer = OPSDTrainer(cfg, model, tokenizer)
    return TerminalRun(cfg, [row], tmp_path), trainer, row


def _episode(trainer, row):
    from termforge.opsd.rollout import prompt_token_ids

    prompt = prompt_token_ids(trainer.tokenizer, row.messages(), None)
    reply = trainer.tokenizer("```bash\nwc -l data.txt\n```", add_special_tokens=False)["input_ids"]
    observation = trainer.tokenizer("<|im_end|>\n<|im_start|>user\n3 data.txt<|im_end|>\n<|im_start|>assistant\n",
                                    add_special_tokens=False)["input_ids"]
    second = trainer.tokenizer("done", add_special_tokens=False)["input_ids"]
    ids = prompt + reply + observation + second
    mask = [0] * len(prompt) + [1] * len(reply) + [0] * len(observation) + [1] * len(second)
    generator = torch.Generator().manual_seed(11)
    logprobs = [float(-torch.rand(1, generator=generator)) * 2 for _ in ids]
    return _Episode(row.id, ids, mask, len(prompt), logprobs)


def test_leading_system_places_the_hint_block_before_the_verbatim_stream(tiny_model_dir, tmp_path):
    run, trainer, row = _run_and_trainer(tiny_model_dir, tmp_path, teacher_context_role="leading_system")
    episode = _episode(trainer, row)
    traj = run.opsd_trajectory(trainer, episode)
    # prime-rl: render_ids([{"role": "system", "content": hint}], add_generation_prompt=False) + token_ids
    hint = run.cfg.terminal_context_template.format(context=row.privileged_context).strip()
    block = list(trainer.tokenizer.apply_chat_template([{"role": "system", "content": hint}], tokenize=False,
                                                       add_generation_prompt=False))
    block_ids = trainer.tokenizer("".join(block), add_special_tokens=False)["input_ids"]
    assert traj.teacher_ids == block_ids + episode.ids
    assert traj.teacher_mask == [0] * len(block_ids) + episode.mask
    assert traj.student_ids == episode.ids  # the student's side is untouched
    # The student's own prompt (with the template's default system turn) follows the block whole:
    # the user placement would instead rewrite the user message and drop nothing before it.
    user_run, _, _ = _run_and_trainer(tiny_model_dir, tmp_path, teacher_context_role="user")
    assert user_run.opsd_trajectory(trainer, episode).teacher_ids != traj.teacher_ids
    assert traj.meta["old_logprobs"] == [lp for lp, m in zip(episode.logprobs, episode.mask) if m]


def test_ref_kl_step_loss_equals_prime_rl_on_the_tiny_model(tiny_model_dir, tmp_path):
    """The whole OPSD part (teacher prefill at temperature 1 over block + stream, student at the
    sampling temperature, ratio to the sampler's log-probs, normalised by the part's tokens)
    against the transcription fed with the same model's log-probs."""
    run, trainer, row = _run_and_trainer(tiny_model_dir, tmp_path, teacher_context_role="leading_system",
                                         loss_type="ref_kl")
    assert trainer.cfg.teacher_mode == "live"
    with torch.no_grad():  # a trained adapter: the teacher (live) and the base differ
        generator = torch.Generator().manual_seed(2)
        for name, p in trainer.trainable:
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    episodes = [_episode(trainer, row), _episode(trainer, row)]
    episodes[1].ids, episodes[1].mask, episodes[1].logprobs = (episodes[1].ids[:-1], episodes[1].mask[:-1],
                                                               episodes[1].logprobs[:-1])
    trajs = [run.opsd_trajectory(trainer, e) for e in episodes]
    tokens = sum(t.num_scored for t in trajs)
    out = run._opsd_part(trainer, trajs, tokens=tokens, sequences=len(trajs))
    mine_grads = {n: p.grad.detach().clone() for n, p in trainer.trainable if p.grad is not None}
    trainer.optimizer.zero_grad(set_to_none=True)

    # prime-rl's side: full-sequence log-probs, one sample per trajectory.
    model = trainer.unwrapped
    samples = []
    for traj, episode in zip(trajs, episodes):
        ids = torch.tensor([traj.student_ids])
        logits = model(input_ids=ids).logits[0, :-1]
        trainer_lp = torch.cat([torch.zeros(1), torch.log_softmax(logits / 0.8, -1).gather(
            -1, ids[0, 1:, None]).squeeze(-1)])
        with torch.no_grad():
            full = torch.tensor([traj.teacher_ids])
            t_logits = model(input_ids=full).logits[0, :-1]
            full_lp = torch.cat([torch.zeros(1), torch.log_softmax(t_logits, -1).gather(
                -1, full[0, 1:, None]).squeeze(-1)])
        block = len(traj.teacher_ids) - len(traj.student_ids)
        ref = full_lp[block:]
        weights = torch.tensor(episode.mask, dtype=torch.float32)
        samples.append((trainer_lp, torch.tensor(episode.logprobs), ref, weights))
    model.eval()  # both sides' forwards in eval mode (no dropout configured anyway)
    theirs = prime_rl_step_loss(samples)
    theirs.backward()
    theirs_grads = {n: p.grad for n, p in trainer.trainable if p.grad is not None}
    model.train()
    assert out["loss"] == pytest.approx(float(theirs.detach()), rel=1e-4, abs=1e-6)
    assert set(mine_grads) == set(theirs_grads)
    for name, grad in mine_grads.items():
        torch.testing.assert_close(grad, theirs_grads[name], rtol=1e-3, atol=1e-6)


def test_default_terminal_teacher_is_the_updated_policy(tiny_model_dir, tmp_path):
    """teacher_mode's default for terminal data is the live policy: after an optimizer step the
    teacher's logits are those of the updated weights (and no longer the base model's)."""
    run, trainer, row = _run_and_trainer(tiny_model_dir, tmp_path)
    assert OPSDConfig.from_dict({"data_kind": "terminal"}).teacher_mode == "live"
    assert OPSDConfig.from_dict({}).teacher_mode == "fixed"  # math keeps the reference recipe's
    assert trainer.cfg.teacher_mode == "live"
    base = copy.deepcopy(trainer.unwrapped)
    traj = run.opsd_trajectory(trainer, _episode(trainer, row))
    student_side, teacher_side = collate([traj], trainer.pad_id)
    before = trainer.teacher_logits(teacher_side).clone()
    for group in trainer.optimizer.param_groups:
        group["lr"] = 0.05
    for _ in range(2):  # an update of the adapter, the way a training step makes one
        loss = trainer.student_logits(student_side).float().logsumexp(-1).mean()
        loss.backward()
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.update_teacher()
    after = trainer.teacher_logits(teacher_side)
    assert torch.equal(after, trainer.student_logits(teacher_side, grad=False))
    assert not torch.allclose(after, before, atol=1e-4)
    with torch.no_grad(), base.disable_adapter():
        base_logits = base(**teacher_side.model_inputs()).logits
    assert not torch.allclose(after, base_logits, atol=1e-4)
