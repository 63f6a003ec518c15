"""The OPSD training loop (docs/opsd.md): on-policy rollouts, a privileged teacher, and a
full-vocabulary distillation loss, on accelerate (plain python on CPU, or `accelerate launch`).

One optimizer step:
  1. the current student samples replies to `prompts_per_step` prompts (seeded per step);
  2. the teacher, the same model given the privileged context (weights per `teacher_mode`),
     scores those exact tokens under inference mode;
  3. the student scores them with gradient; with loss_reduction token_mean (the default) the
     loss (loss.py) is summed over micro-batches and divided by the step's total number of scored
     tokens, so the step's gradient is that of the token-mean over the whole step, however it is
     split into micro-batches or processes; micro_batch_mean is the reference's mean of
     per-micro-batch token means (micro_batch_loss_scale);
  4. gradient-norm clip, AdamW, schedule; the EMA teacher follows when teacher_mode is ema.

Logits are computed only at the positions that predict scored tokens (2-D `logits_to_keep`),
rows are padded only to the longest sequence of their micro-batch, and the loss is chunked over
tokens: the objective is the reference's, the memory is not.

Checkpoints hold the trainable weights, optimizer, scheduler, EMA weights, RNG states and data
position, written to a staging folder and renamed into place; resuming gives the weights an
uninterrupted run would have reached.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import random
import resource
import shutil
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from termforge.cpu_budget import allotted_cpus
from termforge.errors import ConfigError, TermforgeError
from termforge.io import (
    append_jsonl,
    atomic_write_json,
    atomic_write_jsonl,
    clean_stale_staging,
    publish_dir,
    read_json,
    read_jsonl_tolerant,
    seed_from,
    staging_dir,
)
from termforge.opsd.config import OPSDConfig, incompatible_keys
from termforge.opsd.data import PromptRow, context_text, split_probe_rows, step_row_indices, teacher_messages
from termforge.opsd.rollout import (
    SideBatch,
    Trajectory,
    check_thinking_switches,
    collate,
    context_block_ids,
    prompt_token_ids,
    sample_rollouts,
)

__all__ = ["OPSDTrainer", "RolloutFn", "latest_checkpoint", "micro_batch_loss_scale", "run_train_cli_args",
           "train"]

# (trainer, rows, step) -> trajectories; the default samples one reply per prompt. The lead's
# harness rollouts plug in here (see rollout.transcript_trajectory).
RolloutFn = Callable[["OPSDTrainer", Sequence[PromptRow], int], list[Trajectory]]

CHECKPOINT_PREFIX = "step-"


def _torch():
    import torch

    return torch


def make_accelerator(cfg: OPSDConfig):
    """An Accelerator for this config: CPU when asked (or when no GPU is visible), bf16 autocast
    on GPU unless mixed_precision says otherwise. Under `accelerate launch` the launcher's process
    group and device assignment are used."""
    from accelerate import Accelerator

    torch = _torch()
    cpu = cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available())
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"train.device: {cfg.device!r} requested but torch sees no CUDA device")
    mixed = cfg.mixed_precision
    if mixed == "auto":
        mixed = "no" if cpu else "bf16"
    return Accelerator(cpu=cpu, mixed_precision=mixed)


def _weight_dtype(cfg: OPSDConfig, on_gpu: bool) -> str:
    if cfg.dtype != "auto":
        return cfg.dtype
    # A frozen LoRA base loses nothing in bf16; trained full weights need fp32 master copies.
    return "bfloat16" if (on_gpu and cfg.finetune == "lora") else "float32"


def micro_batch_loss_scale(reduction: str, micro_tokens: int, local_micro_batches: int, global_tokens: float,
                           num_processes: int) -> float:
    """The factor on a micro-batch's summed token losses before backward, given that DDP averages
    gradients over processes.

    token_mean: every scored token of the step weighs 1 / global_tokens (the factor num_processes
    undoes DDP's average). micro_batch_mean, the reference's reduction (a token mean inside each
    micro-batch, divided by the accumulation steps by the Trainer, averaged over processes by DDP):
    a token weighs 1 / (micro_tokens * local_micro_batches * num_processes); a micro-batch without
    scored tokens contributes nothing (the reference would divide 0 by 0).
    """
    if reduction == "token_mean":
        return num_processes / global_tokens
    if micro_tokens == 0:
        return 0.0
    return 1.0 / (micro_tokens * local_micro_batches)


def lr_lambda_for(cfg: OPSDConfig) -> Callable[[int], float]:
    """The learning-rate factor of optimizer step `step` (0-based), as transformers' schedules
    (get_constant_schedule_with_warmup, get_linear_schedule_with_warmup,
    get_cosine_schedule_with_warmup): warmup rises as step / warmup_steps, so the first step's
    rate is 0, then constant, linear to 0 at max_steps, or a half cosine."""
    warmup, total, kind = cfg.warmup_steps, cfg.max_steps, cfg.lr_scheduler

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return step / warmup
        if kind == "constant":
            return 1.0
        progress = (step - warmup) / max(1, total - warmup)
        progress = min(max(progress, 0.0), 1.0)
        if kind == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


class OPSDTrainer:
    """Holds the student (with LoRA or fully trainable), the teacher view, optimizer and schedule.

    `model` is a loaded causal LM; the trainer wraps it (LoRA) and owns it from then on.
    """

    def __init__(self, cfg: OPSDConfig, model: Any, tokenizer: Any, accelerator: Any = None) -> None:
        torch = _torch()
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.accelerator = accelerator or make_accelerator(cfg)
        self.device = self.accelerator.device
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.temperature = cfg.effective_loss_temperature
        check_thinking_switches(tokenizer, cfg)

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_from("opsd-init", cfg.seed) % (2**63))
            if cfg.finetune == "lora":
                from peft import LoraConfig, get_peft_model

                missing = [m for m in cfg.lora_target_modules
                           if not any(name.split(".")[-1] == m for name, _ in model.named_modules())]
                if missing:
                    raise ConfigError(f"train.lora_target_modules: model {cfg.model!r} has no module named "
                                      f"{', '.join(missing)}")
                lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                                  target_modules=list(cfg.lora_target_modules), bias="none", task_type="CAUSAL_LM")
                with warnings.catch_warnings():
                    # peft 0.21 reads a property transformers 5 deprecated; nothing for a user to act on.
                    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
                    model = get_peft_model(model, lora)
            else:
                for p in model.parameters():
                    p.requires_grad_(True)
        self._separate_teacher = None
        if cfg.finetune == "full" and cfg.teacher_mode in ("fixed", "ema"):
            # Without adapters to switch off, the base (or its average) must be a second copy.
            self._separate_teacher = copy.deepcopy(model).eval()
            for p in self._separate_teacher.parameters():
                p.requires_grad_(False)
        if cfg.gradient_checkpointing:
            # Non-reentrant checkpointing needs no input that requires grad (frozen embeddings are fine).
            options = {"use_reentrant": False}
            if hasattr(model, "activation_checkpointing_enable"):
                model.activation_checkpointing_enable(activation_checkpointing_kwargs=options)
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=options)
        model.train()
        self.trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not self.trainable:
            raise TermforgeError("the model has no trainable parameters")
        # The EMA teacher follows the reference's timing (zhaoruizhi/OPSD-main opsd_trainer.py
        # _update_ema): no average until the first optimizer step has been taken, the teacher being
        # the current weights until then; the first update copies the weights, later ones decay.
        self.ema: list[Any] | None = None
        self._ema_started = False
        self.optimizer = torch.optim.AdamW(
            [p for _, p in self.trainable], lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
            eps=cfg.adam_epsilon, weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda_for(cfg))
        # Only the model is prepared: the schedule steps once per optimizer step, whatever the
        # number of processes, and clipping/AdamW are the plain torch ones.
        self.model = self.accelerator.prepare_model(model)
        self.unwrapped = self.accelerator.unwrap_model(self.model)

    # -- model views ------------------------------------------------------------------------
    @property
    def num_processes(self) -> int:
        return self.accelerator.num_processes

    def generation_model(self) -> Any:
        return self.unwrapped

    @contextlib.contextmanager
    def teacher_view(self):
        """The module to run as the teacher, in eval mode, for the configured teacher_mode."""
        torch = _torch()
        if self._separate_teacher is not None:
            yield self._separate_teacher
            return
        model = self.unwrapped
        was_training = model.training
        model.eval()
        try:
            if self.cfg.teacher_mode == "fixed":
                with model.disable_adapter():
                    yield model
            elif self.cfg.teacher_mode == "ema" and self.ema is None:
                yield model  # before the first optimizer step: the current weights
            elif self.cfg.teacher_mode == "ema":
                with torch.no_grad():
                    backup = [p.detach().clone() for _, p in self.trainable]
                    for (_, p), e in zip(self.trainable, self.ema):
                        p.copy_(e.to(p.dtype))
                try:
                    yield model
                finally:
                    with torch.no_grad():
                        for (_, p), b in zip(self.trainable, backup):
                            p.copy_(b)
            else:
                yield model
        finally:
            model.train(was_training)

    def reference_logits(self, side: SideBatch) -> Any:
        """Logits of the base weights (LoRA off, or full fine-tuning's frozen copy), under inference
        mode: the reference of GRPO's KL term, whatever the teacher is."""
        torch = _torch()
        if self.cfg.finetune == "lora":
            model = self.unwrapped
            was_training = model.training
            model.eval()
            try:
                with model.disable_adapter(), torch.inference_mode():
                    return self._forward_logits(model, side)
            finally:
                model.train(was_training)
        if self._separate_teacher is None or self.cfg.teacher_mode != "fixed":
            raise TermforgeError("full fine-tuning keeps the base weights only as the fixed teacher")
        with torch.inference_mode():
            return self._forward_logits(self._separate_teacher, side)

    def _forward_logits(self, module: Any, side: SideBatch) -> Any:
        with self.accelerator.autocast():
            return module(**side.model_inputs()).logits

    def teacher_logits(self, side: SideBatch) -> Any:
        """Teacher logits [B, slots, V] at the scored positions, under inference mode."""
        torch = _torch()
        with self.teacher_view() as teacher, torch.inference_mode():
            return self._forward_logits(teacher, side)

    def student_logits(self, side: SideBatch, grad: bool = True, synced: bool = True) -> Any:
        """Student logits [B, slots, V]; with grad=False in eval mode (for the probe). With
        synced=False the forward bypasses DDP: its gradients stay in this process until
        all_reduce_gradients() (for steps whose processes run different numbers of forwards)."""
        torch = _torch()
        if grad:
            return self._forward_logits(self.model if synced else self.unwrapped, side)
        was_training = self.unwrapped.training
        self.unwrapped.eval()
        try:
            with torch.inference_mode():
                return self._forward_logits(self.unwrapped, side)
        finally:
            self.unwrapped.train(was_training)

    # -- one step ---------------------------------------------------------------------------
    def rollouts(self, rows: Sequence[PromptRow], step: int) -> list[Trajectory]:
        seed = seed_from("opsd-rollout", self.cfg.seed, step, self.accelerator.process_index)
        return sample_rollouts(self.generation_model(), self.tokenizer, rows, self.cfg, seed)

    # -- collectives (every process must call them, in the same order) -----------------------
    @property
    def process_index(self) -> int:
        return self.accelerator.process_index

    def gather_objects(self, items: Sequence[Any]) -> list[list[Any]]:
        """Every process's `items` (picklable), in process order."""
        if self.num_processes == 1:
            return [list(items)]
        import torch.distributed as dist

        out: list[Any] = [None] * self.num_processes
        dist.all_gather_object(out, list(items))
        return out

    def global_sums(self, values: Sequence[float]) -> list[float]:
        """Element-wise sums over processes, in float64."""
        if self.num_processes == 1:
            return [float(v) for v in values]
        torch = _torch()
        tensor = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        return [float(v) for v in self.accelerator.reduce(tensor, reduction="sum")]

    def all_reduce_gradients(self) -> None:
        """Sum the trainable parameters' gradients over processes, for a step whose forwards
        bypassed DDP (student_logits(synced=False)) so that processes could run different numbers
        of micro-batches, none included. A parameter that has a gradient in no process keeps
        none (the optimizer then leaves it alone, as one process would)."""
        if self.num_processes == 1:
            return
        import torch.distributed as dist

        torch = _torch()
        params = [p for _, p in self.trainable]
        has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=self.device)
        dist.all_reduce(has)
        params = [p for p, present in zip(params, has.tolist()) if present]

        def reduce(bucket: list[Any]) -> None:
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float()
                              for p in bucket])
            dist.all_reduce(flat)
            offset = 0
            for p in bucket:
                p.grad = flat[offset: offset + p.numel()].view_as(p).to(p.dtype).clone()
                offset += p.numel()

        bucket, size = [], 0
        for p in params:  # buckets of ~64M values bound the float32 copy for full fine-tuning
            bucket.append(p)
            size += p.numel()
            if size >= 2**26:
                reduce(bucket)
                bucket, size = [], 0
        if bucket:
            reduce(bucket)
        for (_, p), present in zip(self.trainable, has.tolist()):
            if not present:
                p.grad = None

    def _global_sum(self, value: float) -> float:
        if self.num_processes == 1:
            return value
        torch = _torch()
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        return float(self.accelerator.reduce(tensor, reduction="sum")[0])

    def _global_max(self, value: float) -> float:
        if self.num_processes == 1:
            return value
        torch = _torch()
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        return float(self.accelerator.gather(tensor).max())

    def micro_batch_loss(self, student_side, teacher_side, synced: bool = True, sampling_logprobs: Any = None):
        """The summed OPSD loss of one micro-batch (full-vocabulary divergence with the per-entry
        clip, the sampled-token variant, or prime-rl's ref_kl form, which needs the sampler's
        log-probs [B, slots] of the scored tokens), its stats, and the vocabulary size (None for the
        sampled-token losses). The teacher's scores carry no gradient. `synced` as in
        student_logits."""
        torch = _torch()
        from termforge.opsd.loss import (PRIME_RL_TEACHER_TEMPERATURE, generalized_jsd_token_loss, ref_kl_token_loss,
                                         sampled_token_loss, token_logprobs)

        cfg = self.cfg
        if cfg.loss_type == "ref_kl":
            if sampling_logprobs is None:
                raise TermforgeError("loss_type ref_kl needs the sampler's log-probs of the scored tokens")
            # The teacher prefill-scores at temperature 1 with no truncation, the student at the
            # distribution the engine sampled from: as prime-rl (prompt_logprobs at temperature 1.0
            # vs the trainer's per-token sampling temperature).
            with torch.inference_mode():
                t_lp = token_logprobs(self.teacher_logits(teacher_side), teacher_side.target_ids,
                                      temperature=PRIME_RL_TEACHER_TEMPERATURE)
            s_logits = self.student_logits(student_side, synced=synced)
            s_lp = token_logprobs(s_logits, student_side.target_ids, temperature=cfg.temperature, top_k=cfg.top_k,
                                  top_p=cfg.top_p)
            loss_sum, stats = ref_kl_token_loss(s_lp, sampling_logprobs, t_lp.clone(), student_side.token_mask,
                                                reduction="sum")
            return loss_sum, stats, None
        if cfg.loss_type == "full_vocab":
            t_logits = self.teacher_logits(teacher_side)
            s_logits = self.student_logits(student_side, synced=synced)
            loss_sum, stats = generalized_jsd_token_loss(
                s_logits, t_logits, student_side.token_mask, beta=cfg.beta, temperature=self.temperature,
                token_clip=cfg.token_clip, chunk_size=cfg.loss_chunk_size, reduction="sum")
            return loss_sum, stats, s_logits.shape[-1]
        with torch.inference_mode():
            t_lp = token_logprobs(self.teacher_logits(teacher_side), teacher_side.target_ids,
                                  temperature=self.temperature)
        s_logits = self.student_logits(student_side, synced=synced)
        s_lp = token_logprobs(s_logits, student_side.target_ids, temperature=self.temperature)
        loss_sum, stats = sampled_token_loss(s_lp, t_lp.clone(), student_side.token_mask, reduction="sum")
        return loss_sum, stats, None

    def train_step(self, step: int, rows: Sequence[PromptRow], rollout_fn: RolloutFn | None = None) -> dict[str, Any]:
        """Roll out on `rows` (this process's share of the step), then one optimizer step."""
        torch = _torch()
        from termforge.opsd.loss import divergence_name

        cfg = self.cfg
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        started = time.perf_counter()
        trajectories = (rollout_fn or OPSDTrainer.rollouts)(self, rows, step)
        rollout_s = time.perf_counter() - started
        local_tokens = sum(t.num_scored for t in trajectories)
        global_tokens = self._global_sum(float(local_tokens))
        if global_tokens <= 0:
            raise TermforgeError(f"step {step + 1}: the rollouts contain no scored token")
        objective_total = divergence_total = clipped_total = 0.0
        vocab = None
        self.model.train()
        micro_batches = [trajectories[i: i + cfg.micro_batch_size]
                         for i in range(0, len(trajectories), cfg.micro_batch_size)]
        for index, micro in enumerate(micro_batches):
            student_side, teacher_side = collate(micro, self.pad_id, self.device)
            last = index == len(micro_batches) - 1
            sync = contextlib.nullcontext() if last else self.accelerator.no_sync(self.model)
            with sync:
                loss_sum, stats, micro_vocab = self.micro_batch_loss(student_side, teacher_side)
                vocab = micro_vocab or vocab
                scale = micro_batch_loss_scale(cfg.loss_reduction, stats.num_tokens, len(micro_batches),
                                               global_tokens, self.num_processes)
                self.accelerator.backward(loss_sum * scale)
            objective_total += float(loss_sum.detach()) * scale
            divergence_total += stats.divergence_mean * stats.num_tokens
            clipped_total += stats.clipped_fraction * stats.num_tokens * (vocab or 1)
        max_norm = cfg.max_grad_norm if cfg.max_grad_norm is not None else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_([p for _, p in self.trainable], max_norm))
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.update_teacher()
        step_s = time.perf_counter() - started

        sequences = self._global_sum(float(len(trajectories)))
        truncated = self._global_sum(float(sum(t.finish_reason == "length" for t in trajectories)))
        longest = self._global_max(float(max((t.num_scored for t in trajectories), default=0)))
        # The step's objective as its gradient sees it (DDP averages the processes' parts).
        loss_value = self._global_sum(objective_total) / self.num_processes
        divergence_value = self._global_sum(divergence_total) / global_tokens
        divergence = divergence_name(cfg.loss_type, cfg.beta)
        clipped_value = (self._global_sum(clipped_total) / (global_tokens * vocab)) if vocab else 0.0
        return {
            "step": step + 1,
            "loss": loss_value,
            # Named after what it is (the JSD when 0 < beta < 1), plus a generic pair for readers
            # that compare runs with different betas.
            "divergence": divergence,
            "divergence_mean": divergence_value,
            f"{divergence}_mean": divergence_value,
            "clipped_fraction": clipped_value,
            "grad_norm": grad_norm,
            "lr": lr,
            "sequences": int(sequences),
            "completion_tokens": int(global_tokens),
            "completion_len_mean": global_tokens / max(sequences, 1.0),
            "completion_len_max": int(longest),
            "truncated_fraction": truncated / max(sequences, 1.0),
            "rollout_s": rollout_s,
            "train_s": step_s - rollout_s,
            "step_s": step_s,
            "tokens_per_s": global_tokens / step_s if step_s > 0 else 0.0,
            "peak_memory_mb": self.peak_memory_mb(),
        }

    def update_teacher(self) -> None:
        """After an optimizer step (teacher_mode ema): the first call snapshots the weights, each
        later one moves the average by (1 - ema_decay) towards them."""
        torch = _torch()
        if self.cfg.teacher_mode != "ema":
            return
        decay = self.cfg.ema_decay
        with torch.no_grad():
            if self._separate_teacher is None:
                if self.ema is None:
                    self.ema = [p.detach().float().clone() for _, p in self.trainable]
                else:
                    for e, (_, p) in zip(self.ema, self.trainable):
                        e.lerp_(p.detach().float(), 1.0 - decay)
            else:
                for t, s in zip(self._separate_teacher.parameters(), self.unwrapped.parameters()):
                    if self._ema_started:
                        t.lerp_(s.detach().to(t.dtype), 1.0 - decay)
                    else:
                        t.copy_(s.detach())
        self._ema_started = True

    def peak_memory_mb(self) -> float:
        torch = _torch()
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        # Process resident high-water mark (Linux reports KiB): an upper bound on the step's own.
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    # -- checkpoints ------------------------------------------------------------------------
    def _trainable_state(self) -> dict[str, Any]:
        return {name: p.detach().cpu().contiguous() for name, p in self.trainable}

    def save_checkpoint(self, root: Path, step: int, data_position: int) -> Path:
        """Write checkpoints/step-NNNNNN atomically (main process); returns its path."""
        torch = _torch()
        from safetensors.torch import save_file

        import numpy as np

        final = Path(root) / f"{CHECKPOINT_PREFIX}{step:06d}"
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            stage = staging_dir(final)
            try:
                save_file(self._trainable_state(), str(stage / "trainable.safetensors"))
                if self.ema is not None:
                    save_file({name: e.cpu().contiguous() for (name, _), e in zip(self.trainable, self.ema)},
                              str(stage / "ema.safetensors"))
                if self._separate_teacher is not None and self.cfg.teacher_mode == "ema":
                    save_file({n: p.detach().cpu().contiguous()
                               for n, p in self._separate_teacher.named_parameters()},
                              str(stage / "ema_teacher.safetensors"))
                torch.save(self.optimizer.state_dict(), stage / "optimizer.pt")
                torch.save(self.scheduler.state_dict(), stage / "scheduler.pt")
                rng = {"python": random.getstate(), "numpy": np.random.get_state(),
                       "torch": torch.get_rng_state()}
                if torch.cuda.is_available():
                    rng["cuda"] = torch.cuda.get_rng_state_all()
                torch.save(rng, stage / "rng.pt")
                atomic_write_json(stage / "trainer_state.json", {
                    "step": step, "data_position": data_position, "config": self.cfg.to_dict(),
                    "num_processes": self.num_processes})
                publish_dir(stage, final)
            except BaseException:
                shutil.rmtree(stage, ignore_errors=True)
                raise
            self._prune_checkpoints(Path(root))
        self.accelerator.wait_for_everyone()
        return final

    def _prune_checkpoints(self, root: Path) -> None:
        found = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(CHECKPOINT_PREFIX))
        for old in found[: max(0, len(found) - self.cfg.checkpoint_keep)]:
            shutil.rmtree(old, ignore_errors=True)

    def load_checkpoint(self, path: Path) -> dict[str, Any]:
        """Restore weights, optimizer, scheduler, EMA and RNG states; returns trainer_state.json."""
        torch = _torch()
        from safetensors.torch import load_file

        import numpy as np

        path = Path(path)
        state = read_json(path / "trainer_state.json")
        weights = load_file(str(path / "trainable.safetensors"))
        names = [n for n, _ in self.trainable]
        if sorted(weights) != sorted(names):
            raise TermforgeError(f"checkpoint {path}: its trainable tensors do not match this model's "
                                 f"({len(weights)} saved, {len(names)} here)")
        with torch.no_grad():
            for name, p in self.trainable:
                p.copy_(weights[name].to(p.device, p.dtype))
            # A checkpoint follows at least one optimizer step, so its EMA has started.
            if self.cfg.teacher_mode == "ema" and self._separate_teacher is None:
                saved = load_file(str(path / "ema.safetensors"))
                self.ema = [saved[name].to(p.device, torch.float32) for name, p in self.trainable]
                self._ema_started = True
            if self._separate_teacher is not None and self.cfg.teacher_mode == "ema":
                saved = load_file(str(path / "ema_teacher.safetensors"))
                for n, p in self._separate_teacher.named_parameters():
                    p.copy_(saved[n].to(p.device, p.dtype))
                self._ema_started = True
        self.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=self.device, weights_only=False))
        self.scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=False))
        rng = torch.load(path / "rng.pt", weights_only=False)
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        torch.set_rng_state(rng["torch"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        return state

    def save_final(self, out_dir: Path) -> Path:
        """The trained adapter (out_dir/adapter) or model (out_dir/model), with the tokenizer."""
        final = Path(out_dir) / ("adapter" if self.cfg.finetune == "lora" else "model")
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            stage = staging_dir(final)
            try:
                self.unwrapped.save_pretrained(stage)
                self.tokenizer.save_pretrained(stage)
                atomic_write_json(stage / "opsd.json", {"base_model": self.cfg.model, "finetune": self.cfg.finetune,
                                                        "config": self.cfg.to_dict()})
                publish_dir(stage, final)
            except BaseException:
                shutil.rmtree(stage, ignore_errors=True)
                raise
        self.accelerator.wait_for_everyone()
        return final


def latest_checkpoint(root: Path) -> Path | None:
    root = Path(root)
    if not root.is_dir():
        return None
    found = sorted(p for p in root.iterdir()
                   if p.is_dir() and p.name.startswith(CHECKPOINT_PREFIX) and (p / "trainer_state.json").is_file())
    return found[-1] if found else None


def _check_resume_compatible(checkpoint: Path, cfg: OPSDConfig) -> dict[str, Any]:
    state = read_json(checkpoint / "trainer_state.json")
    differing = incompatible_keys(state.get("config", {}), cfg.to_dict())
    if differing:
        saved = state.get("config", {})
        details = "; ".join(f"{k}: checkpoint {saved.get(k)!r} vs config {getattr(cfg, k, None)!r}" for k in differing)
        raise ConfigError(f"train: the checkpoint {checkpoint} was written by a different config ({details}); "
                          f"use another output folder, restore those keys, or set train.resume false to start over")
    return state


def teacher_prompt_length(tokenizer: Any, row: PromptRow, cfg: OPSDConfig) -> int:
    """Tokens of the teacher's prompt: its own chat, or (leading_system) the context block plus the
    student's prompt it prefixes."""
    if cfg.teacher_context_role == "leading_system":
        block = context_block_ids(tokenizer, context_text(row, cfg).strip(), cfg.teacher_thinking)
        return len(block) + len(prompt_token_ids(tokenizer, row.messages(), cfg.student_thinking))
    return len(prompt_token_ids(tokenizer, teacher_messages(row, cfg), cfg.teacher_thinking))


def _filter_long_prompts(rows: Sequence[PromptRow], cfg: OPSDConfig, tokenizer: Any, label: str) -> list[PromptRow]:
    if cfg.max_prompt_tokens is None:
        return list(rows)
    kept = [r for r in rows
            if teacher_prompt_length(tokenizer, r, cfg) <= cfg.max_prompt_tokens]
    print(f"train: kept {len(kept)} of {len(rows)} {label} rows whose teacher prompt fits "
          f"max_prompt_tokens={cfg.max_prompt_tokens}")
    if not kept:
        raise ConfigError(f"train.max_prompt_tokens: {cfg.max_prompt_tokens} keeps none of the {len(rows)} {label} rows")
    return kept


def _truncate_metrics(path: Path, last_step: int) -> list[dict[str, Any]]:
    rows = [r for r in read_jsonl_tolerant(path) if r.get("step", 0) <= last_step]
    if path.exists():
        atomic_write_jsonl(path, rows)
    return rows


def _probe(trainer: OPSDTrainer, trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    from termforge.opsd.evaluate import probe_kl

    return probe_kl(lambda side: trainer.student_logits(side, grad=False), trainer.teacher_logits, trajectories,
                    pad_id=trainer.pad_id, temperature=trainer.temperature, batch_size=trainer.cfg.micro_batch_size,
                    device=trainer.device, chunk_size=trainer.cfg.loss_chunk_size)


def train(cfg: OPSDConfig, data_rows: Sequence[PromptRow], out_dir: str | os.PathLike, *,
          probe_rows: Sequence[PromptRow] | None = None, rollout_fn: RolloutFn | None = None,
          stop_after_steps: int | None = None) -> dict[str, Any]:
    """Train with OPSD; returns the summary (also written to out_dir/summary.json).

    Outputs under out_dir: checkpoints/step-NNNNNN/, adapter/ (LoRA) or model/ (full), metrics.jsonl,
    loss_curve.png, probe/ (the fixed probe completions and the before-training KL), kl_probe.json,
    summary.json. `probe_rows` are the held-out prompts of the KL probe; without them,
    cfg.probe_size rows are held out of data_rows. `stop_after_steps` ends this invocation after
    that many steps of this call (checkpointing first), as a time-limited job would; calling again
    resumes. `rollout_fn` replaces single-reply sampling (e.g. harness transcripts).
    """
    torch = _torch()
    started = time.perf_counter()
    out_dir = Path(out_dir)
    checkpoints = out_dir / "checkpoints"
    metrics_path = out_dir / "metrics.jsonl"
    probe_dir = out_dir / "probe"

    resume_from = None
    if cfg.resume:
        clean_stale_staging(checkpoints)
        resume_from = latest_checkpoint(checkpoints)
        if resume_from is not None:
            _check_resume_compatible(resume_from, cfg)  # before the model loads: fail fast
    elif checkpoints.exists() or metrics_path.exists() or probe_dir.exists() or (out_dir / "reward_probe").exists():
        print(f"train: resume is off; removing the earlier run's checkpoints, metrics and probe in {out_dir}")
        shutil.rmtree(checkpoints, ignore_errors=True)
        shutil.rmtree(probe_dir, ignore_errors=True)
        shutil.rmtree(out_dir / "reward_probe", ignore_errors=True)
        metrics_path.unlink(missing_ok=True)

    rows = list(data_rows)
    if not rows:
        raise TermforgeError("train: no training rows")
    from termforge.opsd.reward_probe import split_reward_probe

    # Held-out reward (terminal data): its tasks leave training first, then the KL probe's.
    rows, reward_rows, reward_choice = split_reward_probe(rows, cfg)
    if probe_rows is None and cfg.probe_size > 0 and cfg.data_kind == "terminal":
        # The probe needs a hint (the teacher's view); reward-only tasks all stay in training, and
        # at least one hinted task stays too (a small corpus shrinks the probe, and says so).
        hinted = [r for r in rows if r.privileged_context]
        size = min(cfg.probe_size, max(0, len(hinted) - 1))
        if size < cfg.probe_size:
            print(f"train: only {len(hinted)} hinted tasks; the KL probe holds out {size} (probe_size {cfg.probe_size})")
        _, probe_rows = split_probe_rows(hinted, size, cfg.seed) if size else (hinted, [])
        held = {r.id for r in probe_rows}
        rows = [r for r in rows if r.id not in held]
        print(f"train: holding {len(probe_rows)} hinted tasks out of training for the KL probe")
    elif probe_rows is None and cfg.probe_size > 0:
        rows, probe_rows = split_probe_rows(rows, cfg.probe_size, cfg.seed)
        print(f"train: holding {len(probe_rows)} rows out of training for the KL probe")
    probe_rows = list(probe_rows or [])[: cfg.probe_size] if cfg.probe_size > 0 else []

    threads = cfg.num_threads or allotted_cpus()
    torch.set_num_threads(threads)
    print(f"train: {threads} torch threads ({'train.num_threads' if cfg.num_threads else 'the CPUs allotted'}; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')})")
    accelerator = make_accelerator(cfg)
    process_seed = seed_from("opsd-process", cfg.seed, accelerator.process_index)
    random.seed(process_seed)
    import numpy as np

    np.random.seed(process_seed % (2**32))
    torch.manual_seed(process_seed % (2**63))

    from termforge.models.transformers_backend import load_causal_lm

    device = accelerator.device
    model, tokenizer = load_causal_lm(cfg.model, device="cpu" if device.type == "cpu" else str(device),
                                      dtype=_weight_dtype(cfg, device.type == "cuda"))
    check_thinking_switches(tokenizer, cfg)
    rows = _filter_long_prompts(rows, cfg, tokenizer, "training")
    if probe_rows:
        probe_rows = _filter_long_prompts(probe_rows, cfg, tokenizer, "probe")
    trainer = OPSDTrainer(cfg, model, tokenizer, accelerator)
    terminal_run = None
    if cfg.data_kind == "terminal":
        from termforge.opsd.terminal_train import TerminalRun

        terminal_run = TerminalRun(cfg, rows, out_dir)

    # The probe's completions come from the untrained student and are frozen on disk, so a resumed
    # run scores exactly the tokens the first invocation sampled.
    probe_trajectories: list[Trajectory] = []
    probe_before = None
    if probe_rows:
        completions_path = probe_dir / "completions.json"
        before_path = probe_dir / "before.json"
        if resume_from is not None:
            if not (completions_path.exists() and before_path.exists()):
                raise TermforgeError(f"train: {resume_from} exists but the probe files in {probe_dir} are missing; "
                                     "they fix the held-out completions, so the run cannot resume without them")
            probe_trajectories = [Trajectory.from_dict(d) for d in read_json(completions_path)]
            probe_before = read_json(before_path)
        else:  # a fresh start: any probe files left by an earlier run may be from another config
            if terminal_run is not None:  # the untrained student's own held-out episodes
                probe_trajectories = terminal_run.probe_trajectories(trainer, probe_rows)
                if not probe_trajectories:
                    raise TermforgeError(f"train: none of the {len(probe_rows)} held-out probe episodes was graded "
                                         "with a scored token (see the infra errors above); set train.probe_size 0 "
                                         "or fix the sandbox")
            else:
                probe_trajectories = sample_rollouts(
                    trainer.generation_model(), tokenizer, probe_rows, cfg, seed_from("opsd-probe-sample", cfg.seed),
                    max_new_tokens=cfg.probe_max_new_tokens)
            probe_before = _probe(trainer, probe_trajectories)
            if accelerator.is_main_process:
                atomic_write_json(completions_path, [t.to_dict() for t in probe_trajectories])
                atomic_write_json(before_path, probe_before)
            print(f"train: KL probe before training: {probe_before['kl_mean']:.5f} over "
                  f"{probe_before['num_tokens']} tokens of {len(probe_trajectories)} held-out completions")

    reward_before = _reward_probe_before(terminal_run, trainer, reward_rows, cfg, out_dir / "reward_probe",
                                         resume_from, accelerator.is_main_process)

    start_step = 0
    metrics: list[dict[str, Any]] = []
    if resume_from is not None:
        state = trainer.load_checkpoint(resume_from)
        start_step = int(state["step"])
        metrics = _truncate_metrics(metrics_path, start_step) if accelerator.is_main_process else []
        print(f"train: resumed from {resume_from} at step {start_step}")
    elif accelerator.is_main_process:
        metrics_path.unlink(missing_ok=True)

    steps_this_call = 0
    completed = True
    for step in range(start_step, cfg.max_steps):
        indices = step_row_indices(len(rows), step, cfg.prompts_per_step, cfg.seed)
        mine = indices[accelerator.process_index:: accelerator.num_processes]
        if terminal_run is not None:
            record = terminal_run.train_step(trainer, step)
        else:
            record = trainer.train_step(step, [rows[i] for i in mine], rollout_fn)
        metrics.append(record)
        if accelerator.is_main_process:
            append_jsonl(metrics_path, record)
            print(f"train: step {record['step']}/{cfg.max_steps} loss {record['loss']:.5f} "
                  f"{record['divergence']} {record['divergence_mean']:.5f} clipped {record['clipped_fraction']:.2e} "
                  f"len {record['completion_len_mean']:.1f} {record['tokens_per_s']:.1f} tok/s "
                  f"{record['step_s']:.1f}s")
        steps_this_call += 1
        done = step + 1
        interrupted = stop_after_steps is not None and steps_this_call >= stop_after_steps and done < cfg.max_steps
        if done == cfg.max_steps or interrupted or (cfg.checkpoint_every and done % cfg.checkpoint_every == 0):
            trainer.save_checkpoint(checkpoints, done, done * cfg.prompts_per_step)
        if interrupted:
            completed = False
            break

    summary: dict[str, Any] = {
        "completed": completed,
        "steps": metrics[-1]["step"] if metrics else start_step,
        "max_steps": cfg.max_steps,
        "resumed_from": str(resume_from) if resume_from else None,
        "train_rows": len(rows),
        "probe_rows": len(probe_rows),
        "final_loss": metrics[-1]["loss"] if metrics else None,
        "divergence": metrics[-1]["divergence"] if metrics else None,
        "final_divergence_mean": metrics[-1]["divergence_mean"] if metrics else None,
        "peak_memory_mb": max((m["peak_memory_mb"] for m in metrics), default=trainer.peak_memory_mb()),
        "peak_memory_kind": "cuda_max_allocated" if trainer.device.type == "cuda" else "process_max_rss",
        "wall_s_this_call": time.perf_counter() - started,
    }
    if terminal_run is not None:
        summary["objective"] = cfg.objective
        summary["rl_pool"] = terminal_run.pool_report or None
        summary["reward_curve"] = [m.get("reward_mean") for m in metrics]
    if not completed:
        return summary

    final_dir = trainer.save_final(out_dir)
    summary["weights"] = str(final_dir)
    if probe_trajectories:
        after = _probe(trainer, probe_trajectories)
        probe_report = {
            "metric": "mean per-token KL(teacher || student), unclipped, over fixed held-out completions",
            "temperature": trainer.temperature,
            "teacher_mode": cfg.teacher_mode,
            "before": probe_before["kl_mean"],
            "after": after["kl_mean"],
            "reduction": probe_before["kl_mean"] - after["kl_mean"],
            "relative_reduction": (probe_before["kl_mean"] - after["kl_mean"]) / probe_before["kl_mean"]
            if probe_before["kl_mean"] > 0 else None,
            "num_tokens": after["num_tokens"],
            "rows": [{"id": b["id"], "tokens": b["tokens"], "before": b["kl"], "after": a["kl"]}
                     for b, a in zip(probe_before["rows"], after["rows"])],
        }
        if accelerator.is_main_process:
            atomic_write_json(out_dir / "kl_probe.json", probe_report)
        summary["kl_probe"] = {"before": probe_report["before"], "after": probe_report["after"]}
        print(f"train: KL probe {probe_report['before']:.5f} -> {probe_report['after']:.5f}")
    if reward_before is not None:
        from termforge.opsd.reward_probe import measure_reward, reward_probe_report

        report = reward_probe_report(reward_before, measure_reward(terminal_run, trainer, reward_rows, cfg),
                                     reward_choice)
        if accelerator.is_main_process:
            atomic_write_json(out_dir / "reward_probe.json", report)
        summary["reward_probe"] = {"before": report["before"], "after": report["after"], "delta": report["delta"],
                                   "tasks": len(reward_rows), "episodes_per_task": cfg.reward_probe_episodes}
        print(f"train: held-out reward {report['before']:.4f} -> {report['after']:.4f} over {len(reward_rows)} "
              f"tasks x {cfg.reward_probe_episodes} episodes")
    if accelerator.is_main_process:
        all_metrics = read_jsonl_tolerant(metrics_path)
        if cfg.plot and all_metrics:
            from termforge.opsd.evaluate import write_loss_curve

            write_loss_curve(all_metrics, out_dir / "loss_curve.png", title=f"OPSD {cfg.model}")
        atomic_write_json(out_dir / "summary.json", summary)
    return summary


def _reward_probe_before(terminal_run: Any, trainer: OPSDTrainer, reward_rows: Sequence[PromptRow], cfg: OPSDConfig,
                         probe_dir: Path, resume_from: Path | None, main_process: bool) -> dict[str, Any] | None:
    """The held-out reward of the untrained policy (opsd/reward_probe.py), measured on a fresh start
    and stored, so a resumed run compares with the same number."""
    if not reward_rows:
        return None
    from termforge.opsd.reward_probe import measure_reward

    path = probe_dir / "before.json"
    if resume_from is not None:
        if not path.exists():
            raise TermforgeError(f"train: {resume_from} exists but {path} is missing; it holds the untrained "
                                 "policy's held-out reward, so the run cannot resume without it")
        return read_json(path)
    before = measure_reward(terminal_run, trainer, reward_rows, cfg)
    if main_process:
        atomic_write_json(path, before)
    print(f"train: held-out reward before training: {before['reward_mean']:.4f} over {before['episodes']} episodes "
          f"of {len(reward_rows)} tasks")
    return before


def run_train_cli_args(train_options: Mapping[str, Any] | None, out_dir: str | os.PathLike, *,
                       dataset: str | None = None, probe_dataset: str | None = None, demos: str | None = None,
                       tasks_dir: str | None = None, images_dir: str | None = None, passk: str | None = None,
                       corpus: str | None = None,
                       stop_after_steps: int | None = None,
                       where: str = "train") -> dict[str, Any]:
    """What the `termforge train` command does: the config's `train:` mapping plus the data paths
    the workflow passes as rule inputs (each overrides the matching key) -> rows -> train()."""
    from termforge.opsd.data import load_math_rows, load_prompt_rows

    options = dict(train_options or {})
    terminal = options.get("data_kind") == "terminal"
    for key, value in (("dataset", dataset), ("probe_dataset", probe_dataset), ("demos", demos),
                       ("tasks_dir", tasks_dir), ("images_dir", images_dir), ("passk", passk),
                       ("corpus", corpus)):
        # The workflow hands the math files to every ablation; a terminal run has no use for them.
        if value is not None and not (terminal and key in ("dataset", "probe_dataset")):
            options[key] = str(value)
    cfg = OPSDConfig.from_dict(options, where=where)
    if cfg.data_kind == "terminal":
        from termforge.opsd.terminal_train import load_terminal_tasks

        rows = load_terminal_tasks(cfg, where=where)  # every kept task: hinted ones also feed OPSD
    else:
        rows = load_prompt_rows(cfg, where=where)
    probe_rows = None
    if cfg.probe_dataset and cfg.probe_size > 0:
        if cfg.data_kind != "math":
            raise ConfigError(f"{where}.probe_dataset: only math probe sets are supported; terminal runs hold "
                              "probe rows out of the training tasks")
        probe_rows = load_math_rows(cfg, source=cfg.probe_dataset, where=f"{where}.probe_dataset")
    return train(cfg, rows, out_dir, probe_rows=probe_rows, stop_after_steps=stop_after_steps)
