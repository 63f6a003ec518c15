"""One training step on terminal tasks: multi-turn OPSD, GRPO on the verifier's reward, or both
in one batch (`train.objective`), on top of the OPSD trainer's model, optimizer and checkpoints.

A step:
  1. picks its tasks from the step number alone (so a resumed run picks the same ones): an OPSD
     part of `prompts_per_step` hinted tasks x `rollouts_per_prompt` episodes and/or a GRPO part
     of `prompts_per_step` tasks of the calibrated pool x `group_size` episodes;
  2. runs every episode of the step together (terminal.run_terminal_episodes: one batched
     generate per turn, real sandboxes, the clean verifier's reward recorded for every episode);
  3. GRPO: groups of graded episodes whose rewards all agree are dropped and counted; with
     `active_sampling_rounds`, more groups are run until prompts_per_step groups carry signal;
     advantages per group (rl.group_advantages);
  4. loss = opsd_weight * (OPSD loss per loss_type, token-mean over the OPSD part; the teacher is
     the model per teacher_mode, by default the current policy, with the hint added to its view
     only) + rl_weight * (policy gradient loss normalised over the GRPO part), accumulated over
     micro-batches;
  5. gradient clip, AdamW, schedule, EMA teacher, as the math trainer.

On N processes (torchrun, one per GPU, on one node or several): every process derives the same
step specs, runs its share (specs[rank::N]; each reply's seed names its episode, so an episode
samples the same tokens wherever it runs), and the episodes' outcomes are gathered so that every
process forms the same groups, drops the same zero-variance groups, runs the same refill rounds
and computes the same advantages. Each process then backpropagates its own trajectories with the
loss normalised by the whole step's token counts, outside DDP (processes may hold different
numbers of micro-batches, or none), and the gradients are summed over processes before the
clip and the optimizer step: the update one process would make with every episode.

The RL pool comes from the solve stage's pass rates: tasks solved sometimes but not always by
default (TMax: a task always or never solved gives a group with no signal). When the band is
empty (the embedded weak model solves nothing), `rl_pool_fallback: all` uses every kept task and
the step metrics say so.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from termforge.containment import contained
from termforge.errors import ConfigError, TermforgeError
from termforge.io import atomic_write_json, seed_from
from termforge.opsd.config import OPSDConfig
from termforge.opsd.data import PromptRow, context_text, step_row_indices, teacher_messages
from termforge.opsd.loss import divergence_name
from termforge.opsd.rollout import Trajectory, collate, context_block_ids, prompt_token_ids, stop_token_ids

__all__ = ["Outcome", "TerminalRun", "calibrated_pool", "load_terminal_tasks"]


@dataclass(frozen=True)
class Outcome:
    """What every process needs of an episode that may have run in another one: its spec and its
    result, without its tokens (small, picklable, gathered after each batch of episodes)."""

    spec: Any  # terminal.EpisodeSpec
    status: str
    reward: float | None
    end_reason: str
    turns: int
    num_scored: int
    budget_cut_replies: int
    summary: dict

    @classmethod
    def of(cls, episode: Any) -> "Outcome":
        return cls(episode.spec, episode.status, episode.reward, episode.end_reason, episode.turns,
                   episode.num_scored, episode.budget_cut_replies, episode.summary())


def load_terminal_tasks(cfg: OPSDConfig, where: str = "train") -> list[PromptRow]:
    """Every kept task (cfg.corpus's `kept` list, else the tasks of demos.parquet), with its hint
    from demos.parquet when it has one (the hints stage lists hinted tasks only; the others are
    GRPO-only): PromptRows whose privileged context may be empty."""
    from termforge.harness import initial_messages

    if not cfg.demos:
        raise ConfigError(f"{where}.demos: data_kind terminal needs the hints stage's demos.parquet")
    if not cfg.tasks_dir:
        raise ConfigError(f"{where}.tasks_dir: data_kind terminal needs the folder of task directories")
    if not Path(cfg.demos).is_file():
        raise ConfigError(f"{where}.demos: {cfg.demos} does not exist")
    from termforge.schemas import read  # shapes to the leaves; task ids are safe path components

    table = read("demos", cfg.demos)
    hints = {r["task_id"]: (r.get("demo") or "").strip() for r in table.to_pylist()}
    if cfg.corpus:
        if not Path(cfg.corpus).is_file():
            raise ConfigError(f"{where}.corpus: {cfg.corpus} does not exist")
        task_ids = list(read("corpus_manifest", cfg.corpus, check_refs=False)["kept"])
    else:
        task_ids = list(hints)
    rows = []
    for task_id in task_ids:
        path = contained(cfg.tasks_dir, task_id, "instruction.md")
        if not path.is_file():
            raise TermforgeError(f"task {task_id}: listed as kept but {path} is missing")
        rows.append(PromptRow(id=task_id, prompt_messages=tuple(initial_messages(path.read_text())),
                              privileged_context=hints.get(task_id, ""), kind="terminal"))
    if not rows:
        raise ConfigError(f"{where}.demos: {cfg.demos} lists no task")
    if cfg.max_rows is not None:
        rows = rows[: cfg.max_rows]
    hinted = sum(1 for r in rows if r.privileged_context)
    print(f"{where}: {len(rows)} kept tasks, {hinted} with a hint (OPSD), {len(rows) - hinted} reward-only")
    return rows


def calibrated_pool(task_ids: Sequence[str], passk_path: str | None, low: float, high: float,
                    fallback: str) -> tuple[list[str], dict[str, Any]]:
    """(pool, report): the tasks whose solve pass rate c/n lies strictly inside (low, high)."""
    from termforge.passk import difficulty_band

    per_task = {}
    if passk_path:
        if not Path(passk_path).is_file():
            raise ConfigError(f"train.passk: {passk_path} does not exist")
        from termforge.schemas import read

        per_task = {e["task_id"]: e for e in read("passk", passk_path)["per_task"]}
    bands = {t: difficulty_band(per_task[t]["n"], per_task[t]["c"]) if t in per_task else "not_solved_yet"
             for t in task_ids}
    pool = [t for t in task_ids if t in per_task and per_task[t]["n"]
            and low < per_task[t]["c"] / per_task[t]["n"] < high]
    report: dict[str, Any] = {"rule": f"{low} < solve pass rate < {high}", "candidates": len(task_ids),
                              "candidates_by_band": dict(sorted(Counter(bands.values()).items())),
                              "in_band": len(pool), "fallback": None}
    if not pool:
        if fallback == "all":
            pool = list(task_ids)
            report["fallback"] = (f"no task in the band ({report['candidates_by_band']}); GRPO runs on all "
                                  f"{len(pool)} kept tasks (rl_pool_fallback: all)")
        else:
            report["fallback"] = "no task in the band; no GRPO part (rl_pool_fallback: none)"
    report["pool"] = len(pool)
    report["pool_by_band"] = dict(sorted(Counter(bands[t] for t in pool).items()))
    return pool, report


def scored_values(micro: Sequence[Trajectory], key: str, shape, device):
    """[B, slots] float32 of each trajectory's per-scored-token list meta[key] (zeros after it),
    aligned with collate's scored slots."""
    import torch

    out = torch.zeros(shape, dtype=torch.float32, device=device)
    for b, t in enumerate(micro):
        values = t.meta[key]
        out[b, : len(values)] = torch.tensor(values, dtype=torch.float32)
    return out


class TerminalRun:
    """The terminal-data side of a training run: tasks, RL pool, sandboxes, engine, step."""

    def __init__(self, cfg: OPSDConfig, rows: Sequence[PromptRow], out_dir: Path):
        from termforge.harness import HarnessConfig
        from termforge.images.runtimes import get_runtime
        from termforge.runtime.base import Limits

        self.cfg = cfg
        self.rows = {r.id: r for r in rows}
        self.hinted = [r for r in rows if r.privileged_context]
        if cfg.drop_hints_without_uplift:
            from termforge.opsd.uplift import hints_without_uplift

            flat = hints_without_uplift(cfg.hint_uplift)
            dropped = [r.id for r in self.hinted if r.id in flat]
            self.hinted = [r for r in self.hinted if r.id not in flat]
            print(f"train: {len(dropped)} hinted tasks left out of OPSD, their hint having no uplift "
                  f"({cfg.hint_uplift}); {len(self.hinted)} stay")
        self.out_dir = Path(out_dir)
        if cfg.objective in ("opsd", "mixed") and not self.hinted:
            raise ConfigError(f"train.objective: {cfg.objective} needs hinted tasks, and no training task has a hint")
        self.pool: list[str] = []
        self.pool_report: dict[str, Any] = {}
        if cfg.objective in ("grpo", "mixed"):
            self.pool, self.pool_report = calibrated_pool([r.id for r in rows], cfg.passk, cfg.rl_pass_rate_low,
                                                          cfg.rl_pass_rate_high, cfg.rl_pool_fallback)
            print(f"train: GRPO pool {self.pool_report['pool']} tasks ({self.pool_report['rule']}): "
                  f"{self.pool_report['pool_by_band']}" + (f"; {self.pool_report['fallback']}"
                                                           if self.pool_report["fallback"] else ""))
            if cfg.objective == "grpo" and not self.pool:
                raise ConfigError("train.rl_pool_fallback: none, and no task lies in the pass-rate band; "
                                  "objective grpo has nothing to train on")
        if not cfg.images_dir:
            raise ConfigError("train.images_dir: data_kind terminal runs episodes; it needs the built images")
        self.runtime = get_runtime(cfg.runtime_backend)
        self.harness = HarnessConfig(turn_cap=cfg.episode_turn_cap, max_format_errors=cfg.episode_max_format_errors,
                                     command_timeout_sec=cfg.episode_command_timeout_sec,
                                     task_timeout_sec=cfg.episode_task_timeout_sec, task_clock="commands")
        self.limits = Limits(wall_sec=cfg.sandbox_wall_sec, cpu_sec=cfg.sandbox_cpu_sec,
                             memory_mb=cfg.sandbox_memory_mb)
        # The test ids validation recorded per kept task: every episode's grade must collect them.
        from termforge.schemas import read

        self.collected: dict[str, list[str]] = dict(read("corpus_manifest", cfg.corpus).get("collected") or {}) if cfg.corpus else {}
        self._engine = None

    # -- episodes ---------------------------------------------------------------------------
    def engine(self, trainer: Any):
        if self._engine is None:
            stops = stop_token_ids(trainer.generation_model(), trainer.tokenizer)
            if self.cfg.rollout_engine == "vllm":
                from termforge.opsd.terminal import VLLMEngine

                self._engine = VLLMEngine(self.cfg.model, temperature=self.cfg.temperature, top_p=self.cfg.top_p,
                                          top_k=self.cfg.top_k, stop_ids=stops, lora_rank=self.cfg.lora_r,
                                          gpu_memory_utilization=self.cfg.vllm_gpu_memory_utilization,
                                          seed=self.cfg.seed, external_launcher=trainer.num_processes > 1)
            else:
                from termforge.opsd.terminal import TransformersEngine

                self._engine = TransformersEngine(trainer.generation_model, trainer.tokenizer,
                                                  temperature=self.cfg.temperature, top_p=self.cfg.top_p,
                                                  top_k=self.cfg.top_k, stop_ids=stops)
        if self.cfg.rollout_engine == "vllm":
            # The current student, handed over as a LoRARequest (each process its own copy).
            adapter = self.out_dir / ("vllm-adapter" if trainer.num_processes == 1
                                      else f"vllm-adapter-rank{trainer.process_index}")
            trainer.unwrapped.save_pretrained(adapter)
            self._engine.set_adapter(str(adapter))
        return self._engine

    def run_episodes(self, trainer: Any, specs, seed: int, max_new_tokens: int | None = None, opening=None):
        """Run this process's share of `specs` (all of them on one process): (local episodes,
        outcomes of every episode in the order of `specs`, counters summed over processes).
        `opening` as in terminal.run_terminal_episodes."""
        from termforge.opsd.terminal import run_terminal_episodes

        cfg = self.cfg
        world, rank = trainer.num_processes, trainer.process_index
        local, stats = run_terminal_episodes(
            self.engine(trainer), trainer.tokenizer, list(specs)[rank::world], tasks_dir=Path(cfg.tasks_dir),
            images_dir=Path(cfg.images_dir), runtime=self.runtime, harness=self.harness, limits=self.limits,
            seed=seed, max_new_tokens=max_new_tokens or cfg.max_new_tokens,
            max_episode_tokens=cfg.max_episode_tokens, thinking=cfg.student_thinking,
            max_infra_retries=cfg.max_infra_retries, workers=cfg.episode_workers, expected=self.collected,
            opening=opening)
        if world == 1:
            return local, [Outcome.of(e) for e in local], stats
        shares = trainer.gather_objects([Outcome.of(e) for e in local])
        outcomes = [shares[i % world][i // world] for i in range(len(specs))]  # back in the order of specs
        keys = sorted(k for k, v in stats.items() if isinstance(v, (int, float)))
        stats = dict(zip(keys, trainer.global_sums([stats[k] for k in keys])))
        return local, outcomes, stats

    def opsd_trajectory(self, trainer: Any, episode) -> Trajectory:
        """The episode's exact token stream for the student; for the teacher the same stream after
        its own prompt, which adds the hint (teacher_messages) and nothing else, or (leading_system)
        the hint's own system block followed by the student's whole stream, prompt included."""
        row = self.rows[episode.spec.task_id]
        if self.cfg.teacher_context_role == "leading_system":
            block = context_block_ids(trainer.tokenizer, context_text(row, self.cfg).strip(), self.cfg.teacher_thinking)
            teacher_ids, teacher_mask = block + list(episode.ids), [0] * len(block) + list(episode.mask)
        else:
            teacher_prompt = prompt_token_ids(trainer.tokenizer, teacher_messages(row, self.cfg),
                                              self.cfg.teacher_thinking)
            teacher_ids = teacher_prompt + list(episode.ids[episode.prompt_len:])
            teacher_mask = [0] * len(teacher_prompt) + list(episode.mask[episode.prompt_len:])
        return Trajectory(row.id, list(episode.ids), list(episode.mask), teacher_ids, teacher_mask,
                          completion_text="".join(m["content"] for m in episode.messages if m["role"] == "assistant"),
                          finish_reason=episode.end_reason,
                          meta={"reward": episode.reward,
                                "old_logprobs": [lp for lp, m in zip(episode.logprobs, episode.mask) if m]})

    def probe_trajectories(self, trainer: Any, probe_rows: Sequence[PromptRow]) -> list[Trajectory]:
        """Held-out hinted tasks: one episode each from the untrained student (frozen on disk by
        the caller), scored before and after training."""
        from termforge.opsd.terminal import EpisodeSpec

        for row in probe_rows:
            self.rows.setdefault(row.id, row)
        specs = [EpisodeSpec(r.id, 0, "probe") for r in probe_rows]
        episodes, _, _ = self.run_episodes(trainer, specs, seed_from("opsd-probe-sample", self.cfg.seed),
                                           max_new_tokens=self.cfg.probe_max_new_tokens)
        local = {(e.spec.task_id, e.spec.rollout): self.opsd_trajectory(trainer, e).to_dict()
                 for e in episodes if e.status == "graded" and e.num_scored}
        found = {k: v for share in trainer.gather_objects(list(local.items())) for k, v in share}
        return [Trajectory.from_dict(found[(s.task_id, s.rollout)]) for s in specs
                if (s.task_id, s.rollout) in found]

    # -- one step ---------------------------------------------------------------------------
    def step_specs(self, step: int):
        from termforge.opsd.terminal import EpisodeSpec

        cfg = self.cfg
        specs = []
        if cfg.objective in ("opsd", "mixed"):
            for i in step_row_indices(len(self.hinted), step, cfg.prompts_per_step, cfg.seed):
                specs += [EpisodeSpec(self.hinted[i].id, k, "opsd") for k in range(cfg.rollouts_per_prompt)]
        if cfg.objective in ("grpo", "mixed") and self.pool:
            for slot, i in enumerate(step_row_indices(len(self.pool), step, cfg.prompts_per_step,
                                                      seed_from("grpo-order", cfg.seed))):
                specs += [EpisodeSpec(self.pool[i], slot * cfg.group_size + g, "grpo") for g in range(cfg.group_size)]
        return specs

    def train_step(self, trainer: Any, step: int) -> dict[str, Any]:
        import torch

        from termforge.opsd.rl import filter_zero_variance_groups, group_advantages
        from termforge.opsd.terminal import EpisodeSpec

        cfg = self.cfg
        if trainer.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(trainer.device)
        started = time.perf_counter()
        specs = self.step_specs(step)
        episodes, outcomes, estats = self.run_episodes(trainer, specs, seed_from("terminal-step", cfg.seed, step))
        group_rewards = self._groups(outcomes)
        filt = filter_zero_variance_groups(group_rewards)
        rounds_used = 0
        totals = Counter({k: v for k, v in filt.counts.items()})
        kept_groups = list(filt.kept)
        # Every process sees every outcome, so all take the same refill decisions.
        while (cfg.objective in ("grpo", "mixed") and self.pool and len(kept_groups) < cfg.prompts_per_step
               and rounds_used < cfg.active_sampling_rounds):
            rounds_used += 1
            need = cfg.prompts_per_step - len(kept_groups)
            base = (rounds_used + 1) * 10_000 * cfg.group_size  # slots no earlier round used
            extra = [EpisodeSpec(self.pool[i], base + slot * cfg.group_size + g, "grpo")
                     for slot, i in enumerate(step_row_indices(len(self.pool), step, need,
                                                               seed_from("grpo-refill", cfg.seed, rounds_used)))
                     for g in range(cfg.group_size)]
            more, more_outcomes, more_stats = self.run_episodes(
                trainer, extra, seed_from("terminal-refill", cfg.seed, step, rounds_used))
            for key in ("generate_calls", "infra_retries", "infra_failed", "generate_s", "env_s", "grade_s"):
                estats[key] = estats.get(key, 0) + more_stats.get(key, 0)
            episodes += more
            outcomes += more_outcomes
            new_groups = self._groups(more_outcomes)
            refill = filter_zero_variance_groups(new_groups)
            totals.update(refill.counts)
            kept_groups += refill.kept[: need]
            group_rewards.update(new_groups)
        rollout_s = time.perf_counter() - started

        # -- advantages from the whole groups, trajectories of this process's episodes ------
        members = defaultdict(list)
        for o in outcomes:
            if o.spec.part == "grpo" and o.status == "graded":
                members[self._group_key(o)].append(o)
        advantage = {}
        for key in kept_groups:
            for o, adv in zip(members[key], group_advantages([o.reward for o in members[key]], cfg.advantage)):
                advantage[(o.spec.task_id, o.spec.rollout)] = adv
        opsd_trajs = [self.opsd_trajectory(trainer, e) for e in episodes
                      if e.spec.part == "opsd" and e.status == "graded" and e.num_scored]
        grpo_trajs = []
        for e in episodes:
            adv = advantage.get((e.spec.task_id, e.spec.rollout)) if e.spec.part == "grpo" else None
            if adv is None or e.status != "graded" or not e.num_scored:
                continue
            grpo_trajs.append(Trajectory(e.spec.task_id, list(e.ids), list(e.mask), list(e.ids), list(e.mask),
                                         finish_reason=e.end_reason,
                                         meta={"advantage": adv, "reward": e.reward,
                                               "old_logprobs": [lp for lp, m in zip(e.logprobs, e.mask) if m]}))

        # -- loss and update ---------------------------------------------------------------
        trainer.model.train()
        sizes = trainer.global_sums([sum(t.num_scored for t in opsd_trajs), len(opsd_trajs),
                                     sum(t.num_scored for t in grpo_trajs), len(grpo_trajs)])
        opsd = self._opsd_part(trainer, opsd_trajs, tokens=int(sizes[0]), sequences=int(sizes[1]))
        grpo = self._grpo_part(trainer, grpo_trajs, tokens=int(sizes[2]), sequences=int(sizes[3]))
        trainer.all_reduce_gradients()
        max_norm = cfg.max_grad_norm if cfg.max_grad_norm is not None else float("inf")
        params = [p for _, p in trainer.trainable]
        has_grad = any(p.grad is not None for p in params)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm)) if has_grad else 0.0
        lr = trainer.scheduler.get_last_lr()[0]
        trainer.optimizer.step()  # parameters without a gradient (an empty step) are left alone
        trainer.scheduler.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.update_teacher()
        step_s = time.perf_counter() - started
        record = self._record(step, outcomes, estats, totals, rounds_used, opsd, grpo, grad_norm, lr,
                              rollout_s, step_s, trainer)
        if trainer.accelerator.is_main_process:
            atomic_write_json(self.out_dir / "episodes" / f"step-{step + 1:06d}.json",
                              [o.summary for o in outcomes])
        return record

    def _group_key(self, episode) -> str:
        # Groups are (task, slot): rollout = slot * group_size + member, so the same task drawn
        # twice in a step makes two groups.
        return f"{episode.spec.task_id}#{episode.spec.rollout // self.cfg.group_size}"

    def _groups(self, outcomes) -> dict[str, list[float]]:
        groups: dict[str, list[float]] = defaultdict(list)
        for o in outcomes:
            if o.spec.part == "grpo" and o.status == "graded":
                groups[self._group_key(o)].append(o.reward)
        return dict(groups)

    def _micro_batches(self, trajectories):
        size = self.cfg.micro_batch_size
        return [trajectories[i: i + size] for i in range(0, len(trajectories), size)]

    def _opsd_part(self, trainer: Any, trajectories: list[Trajectory], tokens: int, sequences: int
                   ) -> dict[str, Any]:
        """Backward of this process's OPSD trajectories, normalised by the part's `tokens` over
        all processes; returns the part's stats over all processes (collective)."""
        cfg = self.cfg
        out = {"sequences": sequences, "tokens": tokens, "loss": 0.0, "kl_mean": 0.0, "clipped_fraction": 0.0}
        if not tokens:
            return out
        scale = cfg.opsd_weight / tokens if cfg.objective == "mixed" else 1.0 / tokens
        loss_total = kl_total = clipped_terms = 0.0
        vocab = 0
        for micro in self._micro_batches(trajectories):
            student_side, teacher_side = collate(micro, trainer.pad_id, trainer.device)
            sampling = (scored_values(micro, "old_logprobs", student_side.target_ids.shape, trainer.device)
                        if cfg.loss_type == "ref_kl" else None)
            loss_sum, stats, micro_vocab = trainer.micro_batch_loss(student_side, teacher_side, synced=False,
                                                                    sampling_logprobs=sampling)
            vocab = micro_vocab or vocab
            trainer.accelerator.backward(loss_sum * scale)
            loss_total += float(loss_sum.detach())
            kl_total += stats.kl_mean * stats.num_tokens
            clipped_terms += stats.clipped_fraction * stats.num_tokens * (micro_vocab or 1)
        loss_total, kl_total, clipped_terms, vocab_sum, with_vocab = trainer.global_sums(
            [loss_total, kl_total, clipped_terms, vocab, 1.0 if vocab else 0.0])
        vocab = vocab_sum / with_vocab if with_vocab else 1.0
        out.update(loss=loss_total / tokens, kl_mean=kl_total / tokens, clipped_fraction=clipped_terms / (tokens * vocab))
        return out

    def _grpo_part(self, trainer: Any, trajectories: list[Trajectory], tokens: int, sequences: int
                   ) -> dict[str, Any]:
        """Backward of this process's GRPO trajectories with per-token weights over the whole
        part (`tokens`, `sequences` over all processes); the part's stats (collective)."""
        import torch

        from termforge.opsd.loss import token_logprobs
        from termforge.opsd.rl import pg_token_weights, policy_gradient_loss

        cfg = self.cfg
        out = {"sequences": sequences, "tokens": tokens, "loss": 0.0, "pg_clipped_fraction": 0.0,
               "ratio_mean": 1.0, "kl_ref_mean": 0.0}
        if not tokens:
            return out
        weight = cfg.rl_weight if cfg.objective == "mixed" else 1.0
        loss_total = clipped = ratio = kl_ref = 0.0
        for micro in self._micro_batches(trajectories):
            side, _ = collate(micro, trainer.pad_id, trainer.device)
            old = scored_values(micro, "old_logprobs", side.target_ids.shape, trainer.device)
            adv = torch.zeros_like(old)
            for b, t in enumerate(micro):
                adv[b, : t.num_scored] = float(t.meta["advantage"])
            ref = None
            if cfg.kl_coef:
                with torch.inference_mode():
                    ref = token_logprobs(trainer.reference_logits(side), side.target_ids,
                                         temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p).clone()
            logits = trainer.student_logits(side, synced=False)
            # The policy's log-probs under the distribution the engine sampled from (temperature,
            # top-k, top-p, renormalised), as the engines report theirs (processed log-probs): the
            # ratio starts at 1 at any temperature.
            new = token_logprobs(logits, side.target_ids, temperature=cfg.temperature, top_k=cfg.top_k,
                                 top_p=cfg.top_p)
            weights = pg_token_weights(side.token_mask, cfg.pg_reduction, num_sequences=sequences, num_tokens=tokens)
            loss, stats = policy_gradient_loss(new, old, adv, side.token_mask, weights.to(new.dtype),
                                               loss=cfg.rl_loss, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                                               dppo_threshold=cfg.dppo_threshold, ref_logprobs=ref,
                                               kl_coef=cfg.kl_coef)
            trainer.accelerator.backward(loss * weight)
            del logits
            loss_total += float(loss.detach())
            clipped += stats.clipped_fraction * stats.num_tokens
            ratio += stats.ratio_mean * stats.num_tokens
            kl_ref += stats.kl_ref_mean * stats.num_tokens
        loss_total, clipped, ratio, kl_ref = trainer.global_sums([loss_total, clipped, ratio, kl_ref])
        out.update(loss=loss_total, pg_clipped_fraction=clipped / tokens, ratio_mean=ratio / tokens,
                   kl_ref_mean=kl_ref / tokens)
        return out

    def _record(self, step, episodes, estats, totals, rounds_used, opsd, grpo, grad_norm, lr, rollout_s, step_s,
                trainer) -> dict[str, Any]:
        """The step's metrics from every episode's outcome (all processes')."""
        cfg = self.cfg
        graded = [e for e in episodes if e.status == "graded"]

        def mean_reward(part):
            rs = [e.reward for e in graded if e.spec.part == part]
            return sum(rs) / len(rs) if rs else None

        divergence = divergence_name(cfg.loss_type, cfg.beta)
        weight_opsd = cfg.opsd_weight if cfg.objective == "mixed" else 1.0
        weight_rl = cfg.rl_weight if cfg.objective == "mixed" else 1.0
        scored = opsd["tokens"] + grpo["tokens"]
        sequences = opsd["sequences"] + grpo["sequences"]
        record: dict[str, Any] = {
            "step": step + 1,
            "objective": cfg.objective,
            "processes": trainer.num_processes,
            "loss": weight_opsd * opsd["loss"] + weight_rl * grpo["loss"],
            # The OPSD part's divergence, named after what it is (as the math trainer names it).
            "divergence": divergence,
            "divergence_mean": opsd["kl_mean"],
            f"{divergence}_mean": opsd["kl_mean"],
            "kl_mean": opsd["kl_mean"],
            "clipped_fraction": opsd["clipped_fraction"],
            "grad_norm": grad_norm,
            "lr": lr,
            "sequences": sequences,
            "completion_tokens": scored,
            "completion_len_mean": scored / max(sequences, 1),
            "completion_len_max": max((e.num_scored for e in episodes), default=0),
            "truncated_fraction": sum(e.end_reason == "token_budget" for e in graded) / max(len(graded), 1),
            "rollout_s": rollout_s,
            "train_s": step_s - rollout_s,
            "step_s": step_s,
            "tokens_per_s": scored / step_s if step_s > 0 else 0.0,
            "peak_memory_mb": trainer.peak_memory_mb(),
            # episodes and reward
            "episodes": len(episodes),
            "episodes_graded": len(graded),
            "episodes_infra_failed": sum(e.status == "infra_failed" for e in episodes),
            # Graded 0 whatever the tests said: the grade carried integrity findings.
            "episodes_hacked": sum(bool(e.summary.get("hacked")) for e in graded),
            "infra_retries": estats.get("infra_retries", 0),
            "episodes_token_budget": sum(e.end_reason == "token_budget" for e in graded),
            "replies_cut_by_budget": sum(e.budget_cut_replies for e in graded),
            "episodes_without_scored_tokens": sum(1 for e in graded if not e.num_scored),
            "end_reasons": dict(sorted(Counter(e.end_reason for e in graded).items())),
            "turns_mean": sum(e.turns for e in graded) / max(len(graded), 1),
            "reward_mean": sum(e.reward for e in graded) / len(graded) if graded else None,
            "reward_mean_opsd": mean_reward("opsd"),
            "reward_mean_grpo": mean_reward("grpo"),
            "generate_calls": estats.get("generate_calls", 0),
            "generate_s": estats.get("generate_s", 0.0),
            "env_s": estats.get("env_s", 0.0),
            "grade_s": estats.get("grade_s", 0.0),
            # per part
            "opsd_loss": opsd["loss"], "opsd_kl_mean": opsd["kl_mean"], "opsd_tokens": opsd["tokens"],
            "opsd_sequences": opsd["sequences"],
            "grpo_loss": grpo["loss"], "grpo_tokens": grpo["tokens"], "grpo_sequences": grpo["sequences"],
            "grpo_pg_clipped_fraction": grpo.get("pg_clipped_fraction", 0.0),
            "grpo_ratio_mean": grpo.get("ratio_mean", 1.0), "grpo_kl_ref_mean": grpo.get("kl_ref_mean", 0.0),
            "active_sampling_rounds": rounds_used,
        }
        if cfg.objective in ("grpo", "mixed"):
            record.update({k: int(v) for k, v in sorted(totals.items())})
            record["rl_pool"] = self.pool_report.get("pool", 0)
            record["rl_pool_fallback"] = self.pool_report.get("fallback")
            if not totals.get("groups_kept"):
                record["grpo_no_signal_reason"] = (
                    f"every group's rewards agree ({totals.get('groups_all_failed', 0)} all failed, "
                    f"{totals.get('groups_all_solved', 0)} all solved, "
                    f"{totals.get('groups_zero_variance_other', 0)} other): no advantage to learn from")
        return record
