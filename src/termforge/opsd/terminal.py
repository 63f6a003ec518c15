"""Multi-turn terminal episodes for training: the policy's own vanillux episodes in the task's
sandbox, kept as exact token ids (docs/opsd.md, "Terminal episodes, GRPO and mixed batches").

Every episode follows the harness's rules through `harness.EpisodeDriver` (the code `solve` runs:
submit marker, 10k observation truncation, format nudges, turn cap, per-command timeout) in a
fresh sandbox of the task's image with the same `Limits`, and is graded by the clean verifier
(`verifier.run_verifier`) after the agent's shell is gone, exactly as `solve.rollout_once` does.

What differs from solve is how replies are produced: all live episodes' next replies come from
ONE batched call of a `RolloutEngine` per turn, and the trajectory is built from token ids, never
from re-encoded text. The token stream of an episode is

    prompt ids (system + instruction, generation prompt)
    [sampled ids of turn 1, as sampled, through the stop token]          scored
    [continuation ids: end-of-turn decoration, the observation as a user turn, generation prompt]
    [sampled ids of turn 2] ...

and the model is always conditioned on exactly that stream, so what is scored is what was
sampled. The continuation is rendered by the chat template around a placeholder reply, so the
template (not this module) decides the decoration.

Token budget (`max_episode_tokens`): before each turn the reply's cap is min(max_new_tokens,
budget - tokens so far); when no room is left the episode ends with end_reason "token_budget"
(like a turn cap: it is still graded, and every turn it took is scored). Episodes so ended and
replies cut by the budget are counted in the step's metrics, never dropped silently.

Infrastructure failures (sandbox start, shell or verifier crash) end that attempt, are counted,
and the episode is re-run from scratch in the next round (up to max_infra_retries); an episode
that still fails is reported as infra_failed with reward None: it is never scored 0.
"""

from __future__ import annotations

import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from termforge.errors import TermforgeError
from termforge.harness import EpisodeDriver, HarnessConfig
from termforge.io import seed_from
from termforge.opsd.rollout import _encode, _render, prompt_token_ids
from termforge.runtime import workspace
from termforge.runtime.base import Limits, task_image
from termforge.runtime.bwrap import default_work_root

__all__ = [
    "EpisodeSpec",
    "RolloutEngine",
    "Sample",
    "TerminalEpisode",
    "TransformersEngine",
    "VLLMEngine",
    "continuation_text",
    "episode_seed",
    "run_terminal_episodes",
]

_PLACEHOLDER = "TFPLACEHOLDERREPLY"


@dataclass
class Sample:
    """One sampled reply: exact token ids (through the stop token when one was sampled), the
    sampling policy's log-probability of each (the distribution it was drawn from: temperature,
    then top-k, then top-p, renormalised; vLLM's processed log-probs), and why it ended."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length"


class RolloutEngine(Protocol):
    """Generates the next reply of many conversations at once from their token ids. `seeds` holds
    one seed per conversation: a reply depends on its own prompt and seed only, never on which
    other conversations share the call (so episodes can be spread over processes)."""

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: Sequence[int],
                 seeds: Sequence[int]) -> list[Sample]:
        ...


class _SeededSampler:
    """A transformers logits processor that samples each row from its own generator.

    generate() runs greedy; this processor applies transformers' own warpers (temperature, top-k,
    top-p: the ones `do_sample=True` would apply, in its order), draws the token as vLLM does
    (argmax of probs / q with q ~ Exp(1) from the row's generator, the exponential race, which
    samples from probs), records its log-probability under the warped distribution, and hands
    greedy a one-hot score. A row's draws come from its generator alone, so its reply does not
    depend on the batch it was sampled in."""

    def __init__(self, warpers: Any, seeds: Sequence[int], device: Any):
        import torch

        self.warpers = warpers
        self.generators = []
        for seed in seeds:
            g = torch.Generator(device=device)
            g.manual_seed(int(seed) % (2**63))
            self.generators.append(g)
        self.logprobs: list[Any] = []

    def __call__(self, input_ids, scores):
        import torch

        warped = self.warpers(input_ids, scores.float())
        logprobs = torch.log_softmax(warped, dim=-1)
        q = torch.empty_like(logprobs)
        for row, g in enumerate(self.generators):
            q[row].exponential_(generator=g)
        chosen = (logprobs.exp() / q).argmax(dim=-1)
        self.logprobs.append(logprobs.gather(-1, chosen.unsqueeze(-1)).squeeze(-1))
        onehot = torch.full_like(scores, float("-inf"))
        onehot.scatter_(-1, chosen.unsqueeze(-1), 0.0)
        return onehot


class TransformersEngine:
    """transformers `generate` over a left-padded batch (CPU or GPU), on the module `model_fn`
    returns at call time (the trainer's current student, LoRA on); each row sampled from its own
    seed (_SeededSampler)."""

    def __init__(self, model_fn: Callable[[], Any], tokenizer: Any, *, temperature: float, top_p: float,
                 top_k: int, stop_ids: Sequence[int]):
        self.model_fn = model_fn
        self.tokenizer = tokenizer
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.stop_ids = list(stop_ids)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0]
        self.calls = 0

    def _warpers(self):
        from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

        warpers = LogitsProcessorList()
        if self.temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(self.temperature))
        if self.top_k:
            warpers.append(TopKLogitsWarper(self.top_k))
        if self.top_p < 1.0:
            warpers.append(TopPLogitsWarper(self.top_p))
        return warpers

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: Sequence[int],
                 seeds: Sequence[int]) -> list[Sample]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        if len(seeds) != len(prompts):
            raise TermforgeError(f"rollout engine: {len(prompts)} prompts but {len(seeds)} seeds")
        model = self.model_fn()
        device = next(model.parameters()).device
        cap = max(max_new_tokens)
        config = GenerationConfig(do_sample=False, max_new_tokens=cap, pad_token_id=self.pad_id,
                                  eos_token_id=self.stop_ids, return_dict_in_generate=True)
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p):] = torch.tensor(p)
            attention[i, width - len(p):] = 1
        sampler = _SeededSampler(self._warpers(), seeds, device)
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                out = model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                                     generation_config=config, logits_processor=LogitsProcessorList([sampler]))
        finally:
            model.train(was_training)
        self.calls += 1
        new = out.sequences[:, width:]
        picked = torch.stack(sampler.logprobs, dim=1).float().cpu()
        samples = []
        for row, limit in enumerate(max_new_tokens):
            ids = new[row].tolist()
            end = next((j + 1 for j, t in enumerate(ids) if t in self.stop_ids), None)
            if end is not None and end <= limit:
                cut, finish = end, "stop"
            else:
                cut, finish = min(limit, len(ids)), "length"
            samples.append(Sample(ids[:cut], picked[row, :cut].tolist(), finish))
        return samples


class VLLMEngine:
    """vLLM colocated with the trainer (GPU): the engine shares the device with training at a
    memory fraction (`gpu_memory_utilization`) and sleeps between rollout phases; the adapter
    being trained is saved each step and handed over as a `LoRARequest`, so rollouts always come
    from the current student. Written against vLLM's public API (LLM.generate with
    TokensPrompt, SamplingParams(logprobs=0, seed=...), LoRARequest, LLM.sleep/wake_up); vllm is
    not installed on the CPU machines this project is tested on, so it is imported only here.

    The engine is built with `logprobs_mode="processed_logprobs"` (vLLM >= 0.10.2): the sampled
    token's log-probability comes from the distribution it was drawn from (after temperature,
    top-k and top-p), which is what the trainer recomputes (loss.token_logprobs with the same
    knobs). vLLM's default, raw_logprobs, reports the softmax of the raw logits, whose ratio to
    the trainer's is not 1 at any temperature but 1 (TMax's open-instruct asks for processed
    log-probs for this reason)."""

    def __init__(self, base_model: str, *, temperature: float, top_p: float, top_k: int, stop_ids: Sequence[int],
                 lora_rank: int, gpu_memory_utilization: float = 0.35, max_model_len: int | None = None,
                 enable_sleep_mode: bool = True, seed: int = 0, external_launcher: bool = False):
        try:
            import vllm  # noqa: F401
        except ImportError as exc:
            raise TermforgeError(f"rollout engine vllm: the vllm package is not installed ({exc}); use the "
                                 "transformers engine, or install vllm on a GPU node") from None
        from vllm import LLM

        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.stop_ids = list(stop_ids)
        # Under torchrun (one trainer process per GPU) each process runs its own engine on its own
        # GPU: vLLM's "external_launcher" backend takes the launcher's process and device instead
        # of spawning workers (as TRL's colocated mode does, tensor parallel size 1).
        launcher = {"distributed_executor_backend": "external_launcher"} if external_launcher else {}
        self.llm = LLM(model=base_model, enable_lora=True, max_lora_rank=lora_rank, seed=seed,
                       gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                       enable_sleep_mode=enable_sleep_mode, logprobs_mode="processed_logprobs", **launcher)
        self.sleeping = False
        self.adapter_path: str | None = None
        self.adapter_version = 0

    def set_adapter(self, path: str) -> None:
        """The folder where the trainer saved the current adapter (peft save_pretrained)."""
        self.adapter_path = str(path)
        self.adapter_version += 1

    def sleep(self) -> None:
        if not self.sleeping:
            self.llm.sleep(level=1)  # weights offloaded, KV cache freed: the trainer gets the memory
            self.sleeping = True

    def wake(self) -> None:
        if self.sleeping:
            self.llm.wake_up()
            self.sleeping = False

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: Sequence[int],
                 seeds: Sequence[int]) -> list[Sample]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.lora.request import LoRARequest

        self.wake()
        # A per-request seed gives each request its own generator in vLLM's sampler.
        params = [SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k or -1,
                                 max_tokens=int(n), stop_token_ids=self.stop_ids, logprobs=0,
                                 seed=int(s) % (2**31), detokenize=False)
                  for n, s in zip(max_new_tokens, seeds)]
        lora = (LoRARequest(f"student-{self.adapter_version}", self.adapter_version, self.adapter_path)
                if self.adapter_path else None)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params,
                                    lora_request=lora, use_tqdm=False)
        samples = []
        for out in outputs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            # logprobs=0 returns the sampled token's entry (vLLM adds it to the top-0 list).
            lps = [d[t].logprob if d and t in d else 0.0 for t, d in zip(ids, c.logprobs or [{}] * len(ids))]
            samples.append(Sample(ids, [float(x) for x in lps],
                                  "stop" if c.finish_reason == "stop" else "length"))
        return samples


# ------------------------------------------------------------------------------------------------
# Token stream
# ------------------------------------------------------------------------------------------------

def continuation_text(tokenizer: Any, observation: str, thinking: bool | None, stop_text: str | None) -> str:
    """The text the template puts between a finished assistant reply and the next one: its
    end-of-turn decoration (without the stop token the model already sampled, when it did), the
    observation as a user turn, and the generation prompt."""
    base = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": _PLACEHOLDER}]
    closed = _render(tokenizer, base, thinking, generation_prompt=False)
    opened = _render(tokenizer, base + [{"role": "user", "content": observation}], thinking, generation_prompt=True)
    if not opened.startswith(closed) or _PLACEHOLDER not in closed:
        raise TermforgeError("the chat template re-renders earlier turns when a turn is added; multi-turn "
                             "token streams need a template that appends")
    tail = closed[closed.rindex(_PLACEHOLDER) + len(_PLACEHOLDER):]
    if stop_text and tail.startswith(stop_text):
        tail = tail[len(stop_text):]
    return tail + opened[len(closed):]


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to run: a task, which rollout of it, and which part of the batch wants it."""

    task_id: str
    rollout: int
    part: str  # "opsd" | "grpo" | "probe"


def episode_seed(seed: int, spec: EpisodeSpec, attempt: int, turn: int) -> int:
    """The sampling seed of one reply: the run's seed for this batch, the episode, which attempt
    of it (an infra retry samples afresh) and which turn."""
    return seed_from("terminal-generate", seed, spec.task_id, spec.rollout, spec.part, attempt, turn)


@dataclass(eq=False)  # identity semantics: episodes are tracked in sets across retry rounds
class TerminalEpisode:
    spec: EpisodeSpec
    status: str = "pending"  # graded | infra_failed
    reward: float | None = None
    verifier: dict = field(default_factory=dict)
    end_reason: str = ""
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # sampling log-probs, 0.0 on unscored tokens
    prompt_len: int = 0
    turns: int = 0
    format_errors: int = 0
    budget_cut_replies: int = 0
    messages: list[dict] = field(default_factory=list)
    infra_attempts: list[dict] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)

    @property
    def num_scored(self) -> int:
        return sum(self.mask)

    def summary(self) -> dict:
        return {"task_id": self.spec.task_id, "rollout": self.spec.rollout, "part": self.spec.part,
                "status": self.status, "reward": self.reward, "end_reason": self.end_reason, "turns": self.turns,
                "format_errors": self.format_errors, "scored_tokens": self.num_scored, "tokens": len(self.ids),
                "budget_cut_replies": self.budget_cut_replies, "infra_attempts": len(self.infra_attempts),
                "verifier_reason": self.verifier.get("reason"), "hacked": list(self.verifier.get("hacked") or [])}


class _Live:
    """An episode in flight: its sandbox, harness driver and token stream."""

    def __init__(self, episode: TerminalEpisode, session: Any, shell: Any, driver: EpisodeDriver, prompt: list[int]):
        self.episode, self.session, self.shell, self.driver = episode, session, shell, driver
        self.ids = list(prompt)
        self.mask = [0] * len(prompt)
        self.logprobs = [0.0] * len(prompt)
        self.budget_cut = 0


def _close(live: _Live) -> None:
    try:
        live.shell.close()
    except Exception:  # noqa: BLE001 - the sandbox is discarded either way
        pass
    try:
        live.session.stop()
    except Exception:  # noqa: BLE001
        pass


def run_terminal_episodes(engine: RolloutEngine, tokenizer: Any, specs: Sequence[EpisodeSpec], *,
                          tasks_dir: Path, images_dir: Path, runtime: Any, harness: HarnessConfig, limits: Limits,
                          seed: int, max_new_tokens: int, max_episode_tokens: int | None = None,
                          thinking: bool | None = None, max_infra_retries: int = 2, workers: int = 4,
                          expected: dict[str, list[str]] | None = None,
                          opening: Callable[[EpisodeSpec, list[dict]], list[dict]] | None = None
                          ) -> tuple[list[TerminalEpisode], dict[str, Any]]:
    """Run `specs` concurrently (one batched generate per turn); returns the episodes in the order
    of `specs` and counters (generate calls, infra retries, budget-ended episodes, timings).
    `expected` maps task ids to the test ids validation recorded (the corpus manifest's
    `collected`): a grade that collects another set is a 0. `opening`, when given, rewrites an
    episode's opening messages before its first turn (the hint-uplift measurement puts the hint
    in the policy's own context with it)."""
    episodes = [TerminalEpisode(spec) for spec in specs]
    stats = {"generate_calls": 0, "infra_retries": 0, "generate_s": 0.0, "env_s": 0.0, "grade_s": 0.0}
    pending = list(range(len(episodes)))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for attempt in range(max_infra_retries + 1):
            if not pending:
                break
            if attempt:
                stats["infra_retries"] += len(pending)
            failed: set = set()
            # Every episode of a round keeps its session open until the round ends (one batched
            # generate per turn), and each session reserves its disk_mb on the work root: a round
            # never holds more sessions than the root can admit, or it would wait on itself.
            todo = list(pending)
            while todo:
                fit = _episodes_that_fit(runtime, limits)
                chunk, todo = todo[:fit], todo[fit:]
                failed |= _run_round(engine, tokenizer, [episodes[i] for i in chunk], attempt, pool, stats,
                                     tasks_dir=Path(tasks_dir), images_dir=Path(images_dir), runtime=runtime,
                                     harness=harness, limits=limits, seed=seed, max_new_tokens=max_new_tokens,
                                     max_episode_tokens=max_episode_tokens, thinking=thinking,
                                     expected=expected or {}, opening=opening)
            pending = [i for i in pending if episodes[i] in failed]
    for i in pending:
        episodes[i].status, episodes[i].reward = "infra_failed", None
    stats["infra_failed"] = len(pending)
    return episodes, stats


def _episodes_that_fit(runtime: Any, limits: Limits) -> int:
    """How many episodes' sessions the runtime's work root admits at once now (at least one: a
    single session that does not fit waits for space, then is refused, as any session)."""
    root = getattr(runtime, "work_root", None) or default_work_root() or Path(tempfile.gettempdir())
    return max(1, workspace.room_for(root, workspace.session_bytes(limits.disk_mb)))


def _infra(episode: TerminalEpisode, attempt: int, exc: BaseException) -> None:
    episode.infra_attempts.append({"attempt": attempt, "error": f"{type(exc).__name__}: {exc}"[:500],
                                   "trace": traceback.format_exc(limit=3)[-1500:]})


def _run_round(engine, tokenizer, episodes: list[TerminalEpisode], attempt: int, pool, stats, *, tasks_dir,
               images_dir, runtime, harness, limits, seed, max_new_tokens, max_episode_tokens, thinking,
               expected: dict[str, list[str]], opening=None) -> set:
    failed: set = set()
    stop_ids = list(getattr(engine, "stop_ids", []) or [tokenizer.eos_token_id])

    def start(ep: TerminalEpisode) -> _Live | None:
        session = None
        try:
            task_dir = tasks_dir / ep.spec.task_id
            instruction = (task_dir / "instruction.md").read_text()
            image = task_image(runtime, images_dir, task_dir)
            session = runtime.start(image, limits)
            shell = session.open_shell()
            driver = EpisodeDriver(shell, instruction, harness)
            if opening is not None:
                driver.messages[:] = opening(ep.spec, [dict(m) for m in driver.messages])
            return _Live(ep, session, shell, driver, prompt_token_ids(tokenizer, driver.messages, thinking))
        except Exception as exc:  # noqa: BLE001 - recorded and retried, never scored
            _infra(ep, attempt, exc)
            if session is not None:
                session.stop()
            return None

    t0 = time.perf_counter()
    started = list(pool.map(start, episodes))
    stats["env_s"] += time.perf_counter() - t0
    live: list[_Live] = []
    for ep, lv in zip(episodes, started):
        if lv is None:
            failed.add(ep)
        else:
            live.append(lv)
    finished: list[_Live] = []
    while live:
        ready = []
        for lv in live:
            if not lv.driver.before_turn():
                finished.append(lv)
                continue
            room = max_new_tokens if max_episode_tokens is None else min(max_new_tokens,
                                                                         max_episode_tokens - len(lv.ids))
            if room < 1:
                lv.driver.finish("token_budget")
                finished.append(lv)
                continue
            if room < max_new_tokens:
                lv.budget_cut += 1
            ready.append((lv, room))
        if not ready:
            break
        t0 = time.perf_counter()
        # Each reply's seed names its episode, attempt and turn: the same episode samples the
        # same reply whichever other episodes (or processes) share the call.
        samples = engine.generate([lv.ids for lv, _ in ready], [room for _, room in ready],
                                  [episode_seed(seed, lv.episode.spec, attempt, len(lv.driver.turns))
                                   for lv, _ in ready])
        gen_s = time.perf_counter() - t0
        stats["generate_s"] += gen_s
        stats["generate_calls"] += 1

        def act(item) -> tuple[_Live, str | None, BaseException | None]:
            (lv, _), sample = item
            lv.ids += sample.token_ids
            lv.mask += [1] * len(sample.token_ids)
            lv.logprobs += list(sample.logprobs)
            stopped = sample.finish_reason == "stop" and sample.token_ids and sample.token_ids[-1] in stop_ids
            body = sample.token_ids[:-1] if stopped else sample.token_ids
            reply = tokenizer.decode(body, skip_special_tokens=True)
            try:
                observation = lv.driver.apply(reply, gen_s / len(ready), len(lv.ids) - len(sample.token_ids),
                                              len(sample.token_ids))
            except Exception as exc:  # noqa: BLE001 - a sandbox that breaks mid-episode is infrastructure
                return lv, None, exc
            return lv, observation, None

        t0 = time.perf_counter()
        results = list(pool.map(act, zip(ready, samples)))
        stats["env_s"] += time.perf_counter() - t0
        live = []
        for lv, observation, exc in results:
            if exc is not None:
                _infra(lv.episode, attempt, exc)
                failed.add(lv.episode)
                _close(lv)
                continue
            if lv.driver.done:
                finished.append(lv)
                continue
            sample_stop = lv.ids[-1] if lv.mask and lv.mask[-1] and lv.ids[-1] in stop_ids else None
            stop_text = tokenizer.convert_ids_to_tokens(sample_stop) if sample_stop is not None else None
            cont = _encode(tokenizer, continuation_text(tokenizer, observation, thinking, stop_text))
            lv.ids += cont
            lv.mask += [0] * len(cont)
            lv.logprobs += [0.0] * len(cont)
            live.append(lv)

    def grade(lv: _Live) -> tuple[_Live, BaseException | None]:
        from termforge.grading.verifier import run_verifier

        try:
            lv.shell.close()  # the agent's processes end with its shell, before grading (as solve)
            task_id = lv.episode.spec.task_id
            verdict = run_verifier(lv.session, tasks_dir / task_id, timeout=limits.wall_sec,
                                   expected=expected.get(task_id))
        except Exception as exc:  # noqa: BLE001
            _close(lv)
            return lv, exc
        lv.session.stop()
        ep = lv.episode
        # A grade with integrity findings is a 0 whatever the tests said (as a hacked rollout is a
        # failure in pass@k): the policy must never be rewarded for a forge that half worked.
        ep.status, ep.reward = "graded", 0.0 if verdict.findings else verdict.reward
        ep.verifier = {"reason": verdict.reason, "tests_ran": verdict.tests_ran, "passed": verdict.passed,
                       "collected": verdict.collected, "graded_by": verdict.graded_by,
                       "limit_hit": verdict.limit_hit, "hacked": list(verdict.findings)}
        return lv, None

    t0 = time.perf_counter()
    for lv, exc in pool.map(grade, finished):
        if exc is not None:
            _infra(lv.episode, attempt, exc)
            failed.add(lv.episode)
            continue
        ep, episode = lv.episode, lv.driver.finish()
        # Unscored tokens after the last reply condition nothing that is scored: dropped.
        last = max((i for i, m in enumerate(lv.mask) if m), default=-1) + 1
        last = last or len(lv.ids)
        ep.ids, ep.mask, ep.logprobs = lv.ids[:last], lv.mask[:last], lv.logprobs[:last]
        ep.prompt_len = next((i for i, m in enumerate(lv.mask) if m), len(lv.mask))
        ep.end_reason, ep.turns = episode.end_reason, len(episode.turns)
        ep.format_errors = sum(t.format_error for t in episode.turns)
        ep.budget_cut_replies = lv.budget_cut
        ep.messages, ep.commands = episode.messages, episode.commands
    stats["grade_s"] += time.perf_counter() - t0
    return failed
