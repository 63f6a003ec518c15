"""One OPSD optimizer step at the reference batch shape: this trainer vs a reference-style step.

The model is Qwen3-1.7B-shaped (hidden 2048, 28 layers, 16 query / 8 key-value heads of 128,
MLP 6144, vocabulary 151,936, tied embeddings) with random weights built from the config, so the
benchmark needs no download. The batch is the reference recipe's: 32 prompts, one rollout each,
completions of varying length up to 1,024 tokens, teacher prompts longer by the privileged
context; LoRA r64/alpha128 on all projections, forward KL with token clip 0.05, grad clip 0.1.
Rollouts are not timed: both variants would sample the same tokens, so the trajectories are
drawn from a seeded RNG and handed to both.

Variants (each in its own process, so peaks are not shared):
  ours       OPSDTrainer.train_step: rows padded to the micro-batch's longest, logits only at
             scored positions (model dtype), chunked vocabulary loss, teacher under inference mode
  reference  what the published trainer does (zhaoruizhi/OPSD-main opsd_trainer.py compute_loss and
             generalized_jsd_loss): every completion padded to 1,024 tokens, full-sequence logits
             of student and teacher in the model dtype (bf16 on GPU, no float32 copy), the
             log-softmax and per-entry terms in that dtype over the whole [B, T, V] block, the
             masked terms gathered, summed and divided by the micro-batch's scored tokens, each
             micro-batch's loss divided by the accumulation steps
Both weigh tokens the reference's way (ours with loss_reduction micro_batch_mean), so they
optimise the same objective: the printed losses agree to bf16 rounding (ours computes the terms
in float32), and the ratios are what the layout and chunking buy. Not reproduced: the
reference's DeepSpeed ZeRO-2 with the optimizer offloaded to the CPU (accelerate.yaml); both
variants step the same torch AdamW on the GPU.

    python bench/bench_opsd_step.py                 # GPU, reference shape
    python bench/bench_opsd_step.py --tiny          # CPU smoke test (tiny config, seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

from bench_args import chosen

QWEN3_1_7B_SHAPE = dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                        num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                        rope_theta=1_000_000.0, tie_word_embeddings=True, rms_norm_eps=1e-6)
TINY_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=2048, max_position_embeddings=4096,
                  rope_theta=1_000_000.0, tie_word_embeddings=True, rms_norm_eps=1e-6)
PAD_ID = 0


class _BenchTokenizer:
    """The trainer reads only these attributes of a tokenizer when rollouts are supplied."""

    pad_token_id = PAD_ID
    eos_token_id = 1
    chat_template = ""


def make_trajectories(args):
    from termforge.opsd.rollout import Trajectory

    rng = random.Random(args.seed)
    vocab = args.vocab
    out = []
    for i in range(args.prompts):
        prompt_len = rng.randint(args.prompt_min, args.prompt_max)
        context_len = rng.randint(args.context_min, args.context_max)
        # A quarter of rollouts hit the cap, the rest stop somewhere below it, as sampled replies do.
        length = args.max_completion if rng.random() < 0.25 else rng.randint(args.max_completion // 8,
                                                                              args.max_completion)
        prompt = [rng.randrange(2, vocab) for _ in range(prompt_len)]
        context = [rng.randrange(2, vocab) for _ in range(context_len)]
        completion = [rng.randrange(2, vocab) for _ in range(length)]
        out.append(Trajectory(f"row-{i}", prompt + completion, [0] * prompt_len + [1] * length,
                              context + prompt + completion, [0] * (context_len + prompt_len) + [1] * length,
                              finish_reason="length" if length == args.max_completion else "stop"))
    return out


def build_model(args, device):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    shape = TINY_SHAPE if args.tiny else QWEN3_1_7B_SHAPE
    config = Qwen3Config(**shape, pad_token_id=PAD_ID, eos_token_id=1, bos_token_id=1)
    torch.manual_seed(args.seed)
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(dtype)
    model.eval()
    return model


def opsd_config(args):
    from termforge.opsd.config import OPSDConfig

    return OPSDConfig.from_dict({
        "device": "cpu" if args.tiny else "cuda", "prompts_per_step": args.prompts, "max_new_tokens": args.max_completion,
        "micro_batch_size": args.micro_batch, "learning_rate": 5e-6, "max_grad_norm": 0.1, "token_clip": 0.05,
        "beta": 0.0, "temperature": 1.1, "lora_r": 64, "lora_alpha": 128,
        "gradient_checkpointing": args.gradient_checkpointing, "loss_chunk_size": args.chunk_size, "max_steps": 10,
        "loss_reduction": "micro_batch_mean", "seed": args.seed})


def reference_micro_loss(student_logits, teacher_logits, mask, temperature, token_clip):
    """The reference's forward-KL loss of one micro-batch (beta 0), in the logits' own dtype:
    log-softmax of both full blocks, per-entry terms, clamp, the masked rows gathered, summed and
    divided by the number of scored tokens (all [B, T, V] tensors kept by autograd)."""
    import torch.nn.functional as F

    log_s = F.log_softmax(student_logits / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits / temperature, dim=-1)
    terms = F.kl_div(log_s, log_t, reduction="none", log_target=True).clamp(max=token_clip)
    return terms[mask].sum() / mask.sum()


def reference_step(trainer, trajectories, cfg, max_completion):
    """A reference-style step on the same trainer state: completions padded to max_completion,
    full-sequence logits in the model dtype, unchunked loss, teacher under no_grad, a mean of
    per-micro-batch token means."""
    import torch

    device = trainer.device
    accumulation = -(-len(trajectories) // cfg.micro_batch_size)
    loss_total = 0.0
    model = trainer.unwrapped
    model.train()

    def block(seqs, masks):
        prompt_lens = [m.index(1) for m in masks]
        width = max(prompt_lens)
        ids = torch.full((len(seqs), width + max_completion), PAD_ID, dtype=torch.long)
        attn = torch.zeros_like(ids)
        comp_mask = torch.zeros((len(seqs), max_completion), dtype=torch.bool)
        for b, (seq, p) in enumerate(zip(seqs, prompt_lens)):
            n = len(seq) - p
            ids[b, width - p: width + n] = torch.tensor(seq)  # prompt left-padded, completion right-padded
            attn[b, width - p: width + n] = 1
            comp_mask[b, :n] = True
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        return ids.to(device), attn.to(device), positions.to(device), comp_mask.to(device), width

    for start in range(0, len(trajectories), cfg.micro_batch_size):
        micro = trajectories[start: start + cfg.micro_batch_size]
        t_ids, t_attn, t_pos, mask, t_width = block([t.teacher_ids for t in micro], [t.teacher_mask for t in micro])
        s_ids, s_attn, s_pos, _, s_width = block([t.student_ids for t in micro], [t.student_mask for t in micro])
        with torch.no_grad(), model.disable_adapter(), torch.autocast(device.type, dtype=torch.bfloat16,
                                                                      enabled=device.type == "cuda"):
            model.eval()
            teacher = model(input_ids=t_ids, attention_mask=t_attn, position_ids=t_pos, use_cache=False).logits
            model.train()
        teacher = teacher[:, t_width - 1: t_width - 1 + max_completion]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            student = model(input_ids=s_ids, attention_mask=s_attn, position_ids=s_pos, use_cache=False).logits
        student = student[:, s_width - 1: s_width - 1 + max_completion]
        loss = reference_micro_loss(student, teacher, mask, cfg.effective_loss_temperature,
                                    cfg.token_clip) / accumulation
        loss.backward()
        loss_total += float(loss.detach())
        del teacher, student, loss
    torch.nn.utils.clip_grad_norm_([p for _, p in trainer.trainable], cfg.max_grad_norm)
    trainer.optimizer.step()
    trainer.scheduler.step()
    trainer.optimizer.zero_grad(set_to_none=True)
    return loss_total


def run_variant(args) -> dict:
    import torch

    from termforge.opsd.trainer import OPSDTrainer

    device = torch.device("cpu" if args.tiny else "cuda")
    cfg = opsd_config(args)
    model = build_model(args, device)
    trainer = OPSDTrainer(cfg, model, _BenchTokenizer())
    trajectories = make_trajectories(args)
    supply = lambda _trainer, _rows, _step: trajectories  # noqa: E731 - rollouts are fixed inputs here

    def one_step(step):
        if args.variant == "ours":
            return trainer.train_step(step, [], rollout_fn=supply)["loss"]
        return reference_step(trainer, trajectories, cfg, args.max_completion)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    losses, times = [], []
    for step in range(args.warmup + args.steps):
        if step == args.warmup and device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        sync()
        started = time.perf_counter()
        losses.append(one_step(step))
        sync()
        if step >= args.warmup:
            times.append(time.perf_counter() - started)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
    return {"variant": args.variant, "step_s": min(times), "step_s_all": times, "peak_gib": peak,
            "first_loss": losses[0], "scored_tokens": sum(t.num_scored for t in trajectories),
            "student_tokens": sum(len(t.student_ids) for t in trajectories),
            "teacher_tokens": sum(len(t.teacher_ids) for t in trajectories)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="tiny config on CPU (smoke test)")
    parser.add_argument("--variants", default="ours,reference")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-completion", type=int, default=1024)
    parser.add_argument("--prompt-min", type=int, default=64)
    parser.add_argument("--prompt-max", type=int, default=256)
    parser.add_argument("--context-min", type=int, default=256, help="privileged context tokens (teacher only)")
    parser.add_argument("--context-max", type=int, default=768)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--no-gradient-checkpointing", dest="gradient_checkpointing", action="store_false")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # internal: run one variant in this process
    args = parser.parse_args()
    variants = chosen("--variants", args.variants, ("ours", "reference"))
    if args.tiny:
        for key, value in dict(prompts=4, max_completion=48, prompt_min=8, prompt_max=24, context_min=16,
                               context_max=40, micro_batch=2, chunk_size=16, steps=1).items():
            if parser.get_default(key) == getattr(args, key):
                setattr(args, key, value)
    args.vocab = (TINY_SHAPE if args.tiny else QWEN3_1_7B_SHAPE)["vocab_size"]

    if args.variant:
        print("RESULT " + json.dumps(run_variant(args)), flush=True)
        return 0

    results = {}
    for variant in variants:
        cmd = [sys.executable, __file__, "--variant", variant] + [a for a in sys.argv[1:]
                                                                    if not a.startswith("--variants")]
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=os.environ.get("PYTORCH_CUDA_ALLOC_CONF",
                                                                          "expandable_segments:True"))
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            tail = (proc.stderr or proc.stdout)[-3000:]
            oom = "out of memory" in tail.lower()
            print(f"{variant}: {'OUT OF MEMORY' if oom else 'failed'} (exit {proc.returncode})\n{tail}")
            results[variant] = None
            continue
        results[variant] = json.loads(line[len("RESULT "):])
        r = results[variant]
        peak = f"{r['peak_gib']:.2f} GiB" if r["peak_gib"] is not None else "n/a (CPU)"
        print(f"{variant:10s} step {r['step_s']:.3f}s  peak {peak}  first loss {r['first_loss']:.6f}  "
              f"(scored {r['scored_tokens']}, student {r['student_tokens']}, teacher {r['teacher_tokens']} tokens)")
    ours, ref = results.get("ours"), results.get("reference")
    if ours and ref:
        print(f"ratio reference/ours: time {ref['step_s'] / ours['step_s']:.2f}x"
              + (f", peak memory {ref['peak_gib'] / ours['peak_gib']:.2f}x" if ours["peak_gib"] else "")
              + f"; loss difference {abs(ref['first_loss'] - ours['first_loss']):.2e} "
              f"(relative {abs(ref['first_loss'] - ours['first_loss']) / max(abs(ref['first_loss']), 1e-12):.2e})")
    print(json.dumps({"shape": "tiny" if args.tiny else "qwen3-1.7b", "results": results}))
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
