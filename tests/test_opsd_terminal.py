"""Terminal episodes for training (opsd/terminal.py) on real generated tasks in real bwrap
sandboxes: exact sampled ids, observation tokens unscored, one batched generate call per turn,
the verifier's reward equal to what solve records on the same transcript (and 0 for a policy that
forges the reward file), infra failures retried and never scored, the token budget."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from conftest import built_family_tasks, needs_bwrap, smollm2_tokenizer  # noqa: E402
from termforge.harness import SUBMIT_MARKER, HarnessConfig  # noqa: E402
from termforge.models.base import ChatModel, Completion, SamplingParams  # noqa: E402
from termforge.opsd.terminal import EpisodeSpec, Sample, run_terminal_episodes  # noqa: E402
from termforge.runtime.base import Limits  # noqa: E402
from termforge.images.runtimes import BwrapRuntime  # noqa: E402
from termforge.solve import SolveSettings, rollout_once  # noqa: E402

FAMILIES = ("log_level_filter", "account_audit")


@pytest.fixture(scope="module")
def tokenizer():
    return smollm2_tokenizer()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("terminal")
    tasks = built_family_tasks(root, FAMILIES)
    return root, tasks


def char_ids(tokenizer, text: str) -> list[int]:
    """Token ids of `text` one character at a time: a valid sampling of the text whose
    decode -> encode round trip is NOT the identity (the tokenizer would merge them)."""
    return [i for ch in text for i in tokenizer(ch, add_special_tokens=False)["input_ids"]]


class ScriptedEngine:
    """A rollout engine whose 'samples' are scripted replies, emitted as non-canonical ids."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script = tokenizer, script
        self.stop_ids = [tokenizer.eos_token_id]
        self.calls: list[int] = []

    def ids_for(self, prompt_text, turn):
        return char_ids(self.tokenizer, self.script(prompt_text, turn)) + [self.tokenizer.eos_token_id]

    def generate(self, prompts, max_new_tokens, seeds):
        self.calls.append(len(prompts))
        out = []
        for prompt, cap in zip(prompts, max_new_tokens):
            text = self.tokenizer.decode(prompt)
            ids = self.ids_for(text, text.count("<|im_start|>assistant") - 1)
            finish = "stop" if len(ids) <= cap else "length"
            out.append(Sample(ids[:cap], [-0.5] * min(cap, len(ids)), finish))
        return out


def look_then_submit(prompt_text, turn):
    if turn == 0:
        return "Look first.\n```bash\nls /app && echo hello-world\n```"
    return f"```bash\necho {SUBMIT_MARKER}\n```"


def _harness(turn_cap=4):
    return HarnessConfig(turn_cap=turn_cap, max_format_errors=2, command_timeout_sec=30, task_timeout_sec=120,
                         sampling=SamplingParams(max_new_tokens=400))


LIMITS = Limits(wall_sec=60, cpu_sec=60, memory_mb=4096)


def _run(engine, tokenizer, root, specs, runtime=None, **kw):
    options = dict(tasks_dir=root / "tasks", images_dir=root / "images", runtime=runtime or BwrapRuntime(),
                   harness=_harness(kw.pop("turn_cap", 4)), limits=LIMITS, seed=3, max_new_tokens=400)
    options.update(kw)
    return run_terminal_episodes(engine, tokenizer, specs, **options)


@needs_bwrap
def test_exact_ids_unscored_observations_and_one_generate_per_turn(tokenizer, corpus):
    root, tasks = corpus
    engine = ScriptedEngine(tokenizer, look_then_submit)
    specs = [EpisodeSpec(t.name, r, "grpo") for t in tasks for r in range(2)]
    episodes, stats = _run(engine, tokenizer, root, specs)
    assert [e.status for e in episodes] == ["graded"] * 4
    assert all(e.end_reason == "submitted" and e.turns == 2 for e in episodes)
    # Four episodes, two turns: two batched calls of four, not eight calls.
    assert engine.calls == [4, 4] and stats["generate_calls"] == 2
    for ep in episodes:
        sampled = [engine.ids_for("", 0), engine.ids_for("", 1)]
        scored = [t for t, m in zip(ep.ids, ep.mask) if m]
        assert scored == sampled[0] + sampled[1]  # the exact sampled ids, in order
        reply_ids = sampled[0][:-1]
        text = tokenizer.decode(reply_ids)
        assert tokenizer(text, add_special_tokens=False)["input_ids"] != reply_ids  # round trip is not identity
        unscored_text = tokenizer.decode([t for t, m in zip(ep.ids, ep.mask) if not m])
        assert "hello-world" in unscored_text and "[exit code: 0]" in unscored_text
        assert "hello-world" not in tokenizer.decode(scored).replace("echo hello-world", "")
        assert ep.logprobs == [(-0.5 if m else 0.0) for m in ep.mask]
        assert ep.mask[: ep.prompt_len] == [0] * ep.prompt_len and ep.prompt_len > 0
        assert ep.messages[2]["content"] == "Look first.\n```bash\nls /app && echo hello-world\n```"
        assert ep.reward == 0.0  # looking is not solving


class ReplayModel(ChatModel):
    backend = "replay"
    batched = False

    def __init__(self, script):
        super().__init__("replay")
        self.script = script

    def chat_many(self, conversations, n=1, sampling=None):
        out = []
        for messages in conversations:
            turn = sum(1 for m in messages if m["role"] == "assistant")
            out.append([Completion(self.script(messages[1]["content"], turn), 0, 0, "stop")] * n)
        return out


def _oracle_script(tasks):
    solutions = {(t / "instruction.md").read_text(): (t / "solution" / "solve.sh").read_text() for t in tasks}

    def script(prompt_text, turn):
        if turn:
            return f"```bash\necho {SUBMIT_MARKER}\n```"
        solution = next(s for instr, s in solutions.items() if instr in prompt_text)
        return f"```bash\nbash <<'TF_EOF'\n{solution}\nTF_EOF\n```"

    return script


def forge_script(prompt_text, turn):
    if turn == 0:
        return "```bash\nmkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt; echo 1 > /app/reward.txt\n```"
    return f"```bash\necho {SUBMIT_MARKER}\n```"


@needs_bwrap
def test_reward_equals_solve_on_the_same_transcript_and_forging_scores_zero(tokenizer, corpus, tmp_path):
    root, tasks = corpus
    settings = SolveSettings(k=1, seed=1, harness=_harness(), limits=LIMITS)
    for script, expected in ((_oracle_script(tasks), 1.0), (forge_script, 0.0)):
        episodes, _ = _run(ScriptedEngine(tokenizer, script), tokenizer, root,
                           [EpisodeSpec(t.name, 0, "grpo") for t in tasks], max_new_tokens=20_000)
        for ep, task in zip(episodes, tasks):
            solved = rollout_once(ReplayModel(script), BwrapRuntime(), root / "images", task, 0, settings, None)
            assert ep.reward == solved["reward"] == expected, (ep.verifier, solved["verifier"])
            assert ep.end_reason == solved["end_reason"] == "submitted"
            assert [m["content"] for m in ep.messages] == [m["content"] for m in solved["episode"]["messages"]]


class FlakyRuntime:
    """bwrap, except that the first `fail` sandbox starts raise (an infrastructure failure)."""

    def __init__(self, fail):
        self.inner, self.fail, self.starts = BwrapRuntime(), fail, 0

    def load(self, images_dir, task_id):
        return self.inner.load(images_dir, task_id)

    def start(self, image, limits=None):
        self.starts += 1
        if self.starts <= self.fail:
            raise OSError("sandbox failed to start")
        return self.inner.start(image, limits)


@needs_bwrap
def test_infra_failures_are_retried_counted_and_never_scored(tokenizer, corpus):
    root, tasks = corpus
    specs = [EpisodeSpec(tasks[0].name, 0, "grpo"), EpisodeSpec(tasks[1].name, 0, "grpo")]
    episodes, stats = _run(ScriptedEngine(tokenizer, look_then_submit), tokenizer, root, specs,
                           runtime=FlakyRuntime(fail=1), max_infra_retries=1)
    assert [e.status for e in episodes] == ["graded", "graded"]
    # sandboxes start on worker threads: which episode drew the failing start is not fixed
    assert stats["infra_retries"] == 1 and sorted(len(e.infra_attempts) for e in episodes) == [0, 1]
    failed = next(e for e in episodes if e.infra_attempts)
    assert "sandbox failed to start" in failed.infra_attempts[0]["error"] and failed.reward == 0.0
    episodes, stats = _run(ScriptedEngine(tokenizer, look_then_submit), tokenizer, root, specs,
                           runtime=FlakyRuntime(fail=100), max_infra_retries=1)
    assert [e.status for e in episodes] == ["infra_failed"] * 2
    assert [e.reward for e in episodes] == [None, None] and stats["infra_failed"] == 2


@needs_bwrap
def test_token_budget_ends_the_episode_and_is_counted(tokenizer, corpus):
    root, tasks = corpus
    engine = ScriptedEngine(tokenizer, look_then_submit)
    full, _ = _run(engine, tokenizer, root, [EpisodeSpec(tasks[0].name, 0, "opsd")])
    budget = full[0].prompt_len + 30  # room for part of the first reply only
    engine = ScriptedEngine(tokenizer, look_then_submit)
    cut, _ = _run(engine, tokenizer, root, [EpisodeSpec(tasks[0].name, 0, "opsd")], max_episode_tokens=budget)
    ep = cut[0]
    assert ep.status == "graded" and ep.end_reason == "token_budget"
    assert len(ep.ids) <= budget and ep.num_scored == 30 and ep.budget_cut_replies == 1
    assert ep.reward == 0.0


def test_vllm_engine_is_greedy_equivalent_to_transformers(tmp_path):
    """Where vLLM is importable (GPU nodes), both engines give the same greedy continuation and
    nearly the same sampling log-probs. vllm is not installed on the CPU test machines: skipped."""
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("vllm needs a GPU")
    from termforge.models.transformers_backend import load_causal_lm
    from termforge.opsd.rollout import stop_token_ids
    from termforge.opsd.terminal import TransformersEngine, VLLMEngine

    model_name = "smollm2-135m-instruct"
    model, tok = load_causal_lm(model_name, device="cuda", dtype="float32")
    stops = stop_token_ids(model, tok)
    prompts = [tok("List the files in /app.", add_special_tokens=False)["input_ids"],
               tok("Count lines of /app/a.txt", add_special_tokens=False)["input_ids"]]
    hf = TransformersEngine(lambda: model, tok, temperature=1.0, top_p=1.0, top_k=1, stop_ids=stops)
    got_hf = hf.generate(prompts, [16, 16], seeds=[0, 1])
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    vl = VLLMEngine(str(tmp_path / "m"), temperature=1.0, top_p=1.0, top_k=1, stop_ids=stops, lora_rank=8,
                    enable_sleep_mode=False)
    got_vl = vl.generate(prompts, [16, 16], seeds=[0, 1])
    for a, b in zip(got_hf, got_vl):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=2e-2)


@pytest.fixture(scope="module")
def tiny_student(tmp_path_factory, tokenizer):
    from conftest import save_tiny_llama
    from termforge.models.transformers_backend import load_causal_lm
    from termforge.opsd.config import OPSDConfig
    from termforge.opsd.trainer import OPSDTrainer

    path = save_tiny_llama(tmp_path_factory.mktemp("tiny-sampler"), tokenizer)
    model, tok = load_causal_lm(path, device="cpu", dtype="float32")
    cfg = OPSDConfig.from_dict({"model": path, "device": "cpu", "num_threads": 1, "lora_r": 4, "lora_alpha": 8.0,
                                "lora_target_modules": ["q_proj", "v_proj"], "probe_size": 0})
    return OPSDTrainer(cfg, model, tok)


@pytest.mark.parametrize("temperature", [0.7, 1.1])
def test_sampler_and_trainer_logprobs_agree_at_any_temperature(tiny_student, temperature):
    """The engine reports the log-probability of each sampled token under the distribution it drew
    it from (temperature, top-k 20, top-p 0.95: vLLM's processed log-probs); the trainer's GRPO
    recomputes it from a full forward of the same ids (loss.token_logprobs with the same knobs).
    They agree to 1e-3, so the importance ratio starts at 1. The raw log-softmax (vLLM's default)
    and the untruncated tempered one both differ by far more: the check can fail."""
    from termforge.opsd.loss import token_logprobs
    from termforge.opsd.rollout import Trajectory, collate, stop_token_ids
    from termforge.opsd.terminal import TransformersEngine

    trainer = tiny_student
    tok = trainer.tokenizer
    engine = TransformersEngine(trainer.generation_model, tok, temperature=temperature, top_p=0.95, top_k=20,
                                stop_ids=stop_token_ids(trainer.generation_model(), tok))
    prompts = [tok(text, add_special_tokens=False)["input_ids"] for text in
               ("List the files in /app.", "Count the lines of /app/data/a.txt and print the number.", "ls")]
    samples = engine.generate(prompts, [24, 24, 24], seeds=[11, 12, 13])
    trajs = [Trajectory(f"r{i}", p + s.token_ids, [0] * len(p) + [1] * len(s.token_ids), p + s.token_ids,
                        [0] * len(p) + [1] * len(s.token_ids)) for i, (p, s) in enumerate(zip(prompts, samples))]
    side, _ = collate(trajs, trainer.pad_id, trainer.device)
    logits = trainer.student_logits(side, grad=False)
    mask = side.token_mask
    sampler = torch.zeros_like(mask, dtype=torch.float32)
    for b, s in enumerate(samples):
        assert len(s.token_ids) == len(s.logprobs) > 0
        sampler[b, : len(s.logprobs)] = torch.tensor(s.logprobs)
    trained = token_logprobs(logits, side.target_ids, temperature=temperature, top_k=20, top_p=0.95)
    assert (trained - sampler)[mask].abs().max() < 1e-3
    raw = token_logprobs(logits, side.target_ids)  # vLLM's default raw_logprobs
    tempered = token_logprobs(logits, side.target_ids, temperature=temperature)  # no truncation
    assert (raw - sampler)[mask].abs().max() > 1e-2
    assert (tempered - sampler)[mask].abs().max() > 1e-2


def test_transformers_engine_reply_depends_on_its_own_seed_only(tiny_student):
    """A reply is the same whichever other rows share the generate call (and whatever padding
    that brings): episodes can be spread over processes without changing what they sample."""
    from termforge.opsd.rollout import stop_token_ids
    from termforge.opsd.terminal import TransformersEngine

    trainer = tiny_student
    tok = trainer.tokenizer
    engine = TransformersEngine(trainer.generation_model, tok, temperature=1.1, top_p=0.95, top_k=20,
                                stop_ids=stop_token_ids(trainer.generation_model(), tok))
    prompts = [tok(text, add_special_tokens=False)["input_ids"] for text in
               ("a much longer first prompt that pads the others a lot", "short", "middle sized prompt")]
    together = engine.generate(prompts, [10, 16, 12], seeds=[5, 6, 7])
    for i in range(3):
        alone = engine.generate([prompts[i]], [[10, 16, 12][i]], seeds=[[5, 6, 7][i]])[0]
        assert alone.token_ids == together[i].token_ids
        assert alone.logprobs == pytest.approx(together[i].logprobs, abs=1e-5)
    other_seed = engine.generate([prompts[1]], [16], seeds=[99])[0]
    assert other_seed.token_ids != together[1].token_ids


@needs_bwrap
def test_a_batch_larger_than_the_work_root_admits_runs_in_rounds_that_fit(tokenizer, corpus):
    """Every episode of a round keeps its session open, and each session reserves its disk_mb on
    the work root: four episodes on a root with room for two must run two at a time, not wait on
    their own reservations (before: the batch of four waited, then was refused, as infra)."""
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs work root needs root")
    import tempfile
    from pathlib import Path

    root, tasks = corpus
    work = Path(tempfile.mkdtemp(prefix="tf-test-work-root-"))  # /tmp: the sandbox's uid can enter it
    work.chmod(0o711)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200m,mode=0711", "tmpfs", str(work)], check=True)
    try:
        from termforge.runtime import workspace

        limits = Limits(wall_sec=60, cpu_sec=60, memory_mb=4096, disk_mb=64)  # 72 MiB reserved each
        assert workspace.room_for(work, workspace.session_bytes(limits.disk_mb)) == 2
        old_wait, workspace.WAIT_SEC = workspace.WAIT_SEC, 2.0
        try:
            engine = ScriptedEngine(tokenizer, look_then_submit)
            specs = [EpisodeSpec(t.name, r, "grpo") for t in tasks for r in range(2)]
            episodes, stats = _run(engine, tokenizer, root, specs, runtime=BwrapRuntime(work_root=work),
                                   limits=limits)
        finally:
            workspace.WAIT_SEC = old_wait
        assert [e.status for e in episodes] == ["graded"] * 4 and stats["infra_failed"] == 0, episodes[0].infra_attempts
        assert stats["infra_retries"] == 0  # no session was refused for want of space
        assert max(engine.calls) == 2 and sum(engine.calls) == 8  # two rounds of two, two turns each
    finally:
        subprocess.run(["umount", "-l", str(work)], check=False)
        os.rmdir(work)
