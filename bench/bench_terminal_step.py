"""GPU bench of one terminal OPSD training step (prepared for one H200; --tiny runs on CPU).

Reference shape: Qwen3-1.7B, LoRA r64/alpha128 on all projections, 32 prompts per step, 1024 new
tokens. For each rollout engine (the transformers-generate baseline, then vLLM colocated when it
is importable) the step is timed in four parts, the split the issue asks for:

    rollout   the engine samples one reply per prompt (exact ids + sampling log-probs)
    teacher   the same model, LoRA off, prefill-scores those ids after the hinted prompt
    student   forward + backward of the full-vocabulary OPSD loss (per-entry clip 0.05)
    optimizer grad clip + AdamW step (+ for vLLM: the adapter saved and handed over)

and it prints generated tokens/s, scored tokens/s and peak GPU memory, then the vLLM/baseline
ratios measured in the same run. It also records the starting importance ratio: the trainer's
log-probabilities of the sampled tokens (loss.token_logprobs at the sampling temperature, top-k and
top-p, under the weights that sampled them) against the engine's processed log-probs; |ratio - 1|
is ~0 when the two agree (before processed log-probs, vLLM reported raw ones and the ratio did not
start at 1 at temperature 1.1). The check is timed apart from the step. The prompts are terminal-task openings (the harness's system
prompt + a task instruction; the hint only in the teacher's view); sandboxes are left out so the
numbers are the model's. The model must be on local disk (the GPU machine has no network):
pass --model /path/to/Qwen3-1.7B.

    python bench/bench_terminal_step.py --model /models/Qwen3-1.7B            # H200
    python bench/bench_terminal_step.py --tiny                                # CPU smoke run
    python bench/bench_terminal_step.py --device cpu --model smollm2-135m-instruct --prompts 2 \
        --max-new-tokens 8 --steps 2 --threads 2                              # CPU, a real model

On CPU, torch runs the threads --threads names (default: the CPUs the process is allotted,
termforge.cpu_budget, as training does); OMP_WAIT_POLICY is read from the environment (training
sets PASSIVE). bench/bench_shared_node.py runs this under a CPU burner to measure the slowdown.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

INSTRUCTIONS = [
    "Count the ERROR lines in /app/logs/service.log per hour and write them to /app/out/hourly.csv "
    "with a header `hour,count`, hours in ascending order.",
    "Audit /app/etc/passwd.sample: list every account with uid 0 or an empty password field in "
    "/app/out/audit.txt, one user name per line, sorted.",
    "The script /app/bin/rotate.sh fails on file names with spaces. Fix it so that it rotates every "
    "*.log file under /app/data, keeping five generations.",
    "Merge /app/conf/base.ini and /app/conf/override.ini into /app/out/merged.ini; keys of the override "
    "win, sections keep the base file's order.",
]
HINT = ("Inspect the input files first with head and wc, build the answer with a small pipeline, "
        "and compare your output's format with the instruction before submitting.")


def tiny_model(tmp: Path) -> str:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from termforge.models.transformers_backend import DEFAULT_MODEL, embedded_gguf_path

    gguf = embedded_gguf_path(DEFAULT_MODEL)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True, pad_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(tmp / "tiny")
    tok.save_pretrained(tmp / "tiny")
    return str(tmp / "tiny")


def run_engine(name: str, args, model_dir: str, out_dir: Path) -> dict:
    import torch

    from termforge.harness import initial_messages
    from termforge.models.transformers_backend import load_causal_lm
    from termforge.opsd.config import OPSDConfig
    from termforge.opsd.data import PromptRow, teacher_messages
    from termforge.opsd.loss import generalized_jsd_token_loss, token_logprobs
    from termforge.opsd.rollout import Trajectory, collate, prompt_token_ids, stop_token_ids
    from termforge.opsd.terminal import TransformersEngine, VLLMEngine
    from termforge.opsd.trainer import OPSDTrainer, _weight_dtype, make_accelerator

    on_cpu = args.device == "cpu"
    if on_cpu:
        from termforge.cpu_budget import allotted_cpus

        torch.set_num_threads(args.threads or allotted_cpus())
        print(f"cpu: {torch.get_num_threads()} torch threads, OMP_WAIT_POLICY="
              f"{__import__('os').environ.get('OMP_WAIT_POLICY', 'unset')}", flush=True)
    cfg = OPSDConfig.from_dict({
        "model": model_dir, "device": args.device, "data_kind": "terminal", "teacher_mode": "fixed",
        "lora_r": 8 if args.tiny else 64, "lora_alpha": 16.0 if args.tiny else 128.0, "learning_rate": 5e-6,
        "max_grad_norm": 0.1, "prompts_per_step": args.prompts, "max_new_tokens": args.max_new_tokens,
        "temperature": 1.1, "top_p": 0.95, "top_k": 20, "micro_batch_size": args.micro_batch,
        "student_thinking": None if on_cpu else False, "teacher_thinking": None if on_cpu else True,
        "rollout_engine": name, "loss_chunk_size": 256})
    accelerator = make_accelerator(cfg)
    on_gpu = accelerator.device.type == "cuda"
    model, tok = load_causal_lm(model_dir, device=str(accelerator.device), dtype=_weight_dtype(cfg, on_gpu))
    trainer = OPSDTrainer(cfg, model, tok, accelerator)
    stops = stop_token_ids(trainer.generation_model(), tok)
    if name == "vllm":
        engine = VLLMEngine(model_dir, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k, stop_ids=stops,
                            lora_rank=cfg.lora_r, gpu_memory_utilization=args.vllm_memory)
    else:
        engine = TransformersEngine(trainer.generation_model, tok, temperature=cfg.temperature, top_p=cfg.top_p,
                                    top_k=cfg.top_k, stop_ids=stops)
    rows = [PromptRow(f"p{i}", tuple(initial_messages(INSTRUCTIONS[i % len(INSTRUCTIONS)])), HINT, "terminal")
            for i in range(args.prompts)]
    prompts = [prompt_token_ids(tok, r.prompt_messages, cfg.student_thinking) for r in rows]
    teacher_prompts = [prompt_token_ids(tok, teacher_messages(r, cfg), cfg.teacher_thinking) for r in rows]

    def sync():
        if on_gpu:
            torch.cuda.synchronize()

    steps = []
    for step in range(args.steps):
        if on_gpu:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        if name == "vllm":
            adapter = out_dir / f"adapter-{step}"
            trainer.unwrapped.save_pretrained(adapter)
            engine.set_adapter(str(adapter))
        samples = engine.generate(prompts, [cfg.max_new_tokens] * len(prompts),
                                  seeds=[step * 100_003 + i for i in range(len(prompts))])
        if name == "vllm":
            engine.sleep()
        sync()
        t_rollout = time.perf_counter() - t0
        trajs = [Trajectory(r.id, p + s.token_ids, [0] * len(p) + [1] * len(s.token_ids), tp + s.token_ids,
                            [0] * len(tp) + [1] * len(s.token_ids))
                 for r, p, tp, s in zip(rows, prompts, teacher_prompts, samples) if s.token_ids]
        scored = sum(t.num_scored for t in trajs)
        # The starting importance ratio (not timed): trainer vs engine log-probs of the sampled tokens.
        t_check = time.perf_counter()
        sampled = [s for s in samples if s.token_ids]
        deviations, logratio_max = [], 0.0
        for i in range(0, len(trajs), cfg.micro_batch_size):
            side, _ = collate(trajs[i: i + cfg.micro_batch_size], trainer.pad_id, trainer.device)
            with torch.no_grad():
                mine = token_logprobs(trainer.student_logits(side, grad=False), side.target_ids,
                                      temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p).float().cpu()
            for b, s in enumerate(sampled[i: i + cfg.micro_batch_size]):
                log_ratio = mine[b, : len(s.logprobs)] - torch.tensor(s.logprobs)
                deviations.append((log_ratio.exp() - 1).abs())
                logratio_max = max(logratio_max, float(log_ratio.abs().max()))
        ratio_dev = float(torch.cat(deviations).mean()) if deviations else 0.0
        t_check = time.perf_counter() - t_check
        t0 += t_check
        t_teacher = t_student = 0.0
        for i in range(0, len(trajs), cfg.micro_batch_size):
            student_side, teacher_side = collate(trajs[i: i + cfg.micro_batch_size], trainer.pad_id, trainer.device)
            t1 = time.perf_counter()
            t_logits = trainer.teacher_logits(teacher_side)
            sync()
            t2 = time.perf_counter()
            s_logits = trainer.student_logits(student_side)
            loss, _ = generalized_jsd_token_loss(s_logits, t_logits, student_side.token_mask, beta=0.0,
                                                 temperature=cfg.temperature, token_clip=0.05,
                                                 chunk_size=cfg.loss_chunk_size, reduction="sum")
            trainer.accelerator.backward(loss / max(scored, 1))
            del t_logits, s_logits
            sync()
            t3 = time.perf_counter()
            t_teacher += t2 - t1
            t_student += t3 - t2
        t4 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_([p for _, p in trainer.trainable], cfg.max_grad_norm)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        sync()
        t_opt = time.perf_counter() - t4
        total = time.perf_counter() - t0
        generated = sum(len(s.token_ids) for s in samples)
        steps.append({"step": step + 1, "rollout_s": t_rollout, "teacher_s": t_teacher, "student_s": t_student,
                      "optimizer_s": t_opt, "step_s": total, "generated_tokens": generated,
                      "rollout_tokens_per_s": generated / t_rollout, "scored_tokens_per_s": scored / total,
                      "peak_memory_mb": (torch.cuda.max_memory_allocated() / 2**20) if on_gpu else None,
                      "start_ratio_abs_dev_mean": ratio_dev, "start_log_ratio_abs_max": logratio_max})
        print(name, json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in steps[-1].items()}),
              flush=True)
    measured = steps[1:] or steps  # the first step pays for compilation and allocator warm-up
    mean = {k: sum(s[k] for s in measured) / len(measured) for k in measured[0]
            if k != "step" and measured[0][k] is not None}
    del trainer, model
    if on_gpu:
        torch.cuda.empty_cache()
    return mean


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="Qwen/Qwen3-1.7B")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model on CPU (smoke run)")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=1024)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--vllm-memory", type=float, default=0.35)
    parser.add_argument("--device", default=None, help="cuda (default) or cpu (the default with --tiny)")
    parser.add_argument("--threads", type=int, default=0, help="CPU: torch threads (0: the CPUs allotted)")
    parser.add_argument("--json", default=None, help="also write the mean of each engine's steps here")
    args = parser.parse_args()
    args.device = args.device or ("cpu" if args.tiny else "cuda")
    if args.tiny:
        args.prompts, args.max_new_tokens, args.micro_batch, args.steps = 4, 16, 2, 2
    with tempfile.TemporaryDirectory(prefix="bench-terminal-step-") as tmp:
        model_dir = tiny_model(Path(tmp)) if args.tiny else args.model
        results = {"transformers": run_engine("transformers", args, model_dir, Path(tmp))}
        try:
            import vllm  # noqa: F401

            have_vllm = args.device != "cpu"
        except ImportError:
            have_vllm = False
        if have_vllm:
            results["vllm"] = run_engine("vllm", args, model_dir, Path(tmp))
        else:
            print("vllm: not importable here (or --tiny); only the transformers baseline ran")
    for name, r in results.items():
        print(f"{name}: step {r['step_s']:.2f}s = rollout {r['rollout_s']:.2f} + teacher {r['teacher_s']:.2f} + "
              f"student {r['student_s']:.2f} + optimizer {r['optimizer_s']:.2f}; "
              f"{r['rollout_tokens_per_s']:.1f} generated tok/s, {r['scored_tokens_per_s']:.1f} scored tok/s, "
              f"peak {r.get('peak_memory_mb') or float('nan'):.0f} MB; starting ratio: mean |r - 1| "
              f"{r['start_ratio_abs_dev_mean']:.2e}, max |log r| {r['start_log_ratio_abs_max']:.2e}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if "vllm" in results:
        b, v = results["transformers"], results["vllm"]
        print(f"vllm / transformers: rollout speed-up x{b['rollout_s'] / v['rollout_s']:.2f}, "
              f"step speed-up x{b['step_s'] / v['step_s']:.2f}, "
              f"peak memory x{v['peak_memory_mb'] / b['peak_memory_mb']:.2f}")


if __name__ == "__main__":
    main()
