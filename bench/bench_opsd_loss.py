"""Memory and time of the OPSD vocabulary loss: chunked vs fully materialised, forward + backward.

Each variant runs in its own subprocess on identical seeded inputs (fp32 student and teacher
logits, [batch, tokens, vocab]); the peak is the process's resident high-water mark (VmHWM, reset
after the inputs exist) minus its resident size at that moment, so it counts everything the loss
allocates, the student gradient included, and nothing the inputs hold (see MALLOC_ENV). Time is
given as wall and as process CPU time; on a shared machine the CPU time is the steadier ratio.

Variants:
  naive_full  the straightforward loss over the whole [B, T, V] batch, masked afterwards
              (the baseline: what one writes without thinking about memory)
  unchunked   generalized_jsd_token_loss(chunk_size=None): valid rows gathered, plain autograd
  chunked     generalized_jsd_token_loss(chunk_size=N): bounded temporaries, gradient in forward

    .venv/bin/python bench/bench_opsd_loss.py                 # 4 x 1024 tokens, vocab 49,152
    .venv/bin/python bench/bench_opsd_loss.py --tokens 256    # quicker
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

from bench_args import chosen

VARIANTS = ("naive_full", "unchunked", "chunked")
# glibc raises its mmap threshold (up to 32 MiB) after the first large free, and then serves
# chunk-sized tensors from a heap it rarely returns; a fixed 1 MiB threshold sends every large
# tensor to mmap, so the resident peak measures live tensors in every variant alike.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
GRAD_SAMPLE_STRIDE = 64  # every 64th token row of the gradient is compared across variants


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} missing from /proc/self/status")


def _reset_peak_rss() -> bool:
    """Linux resets VmHWM to the current RSS when 5 is written to clear_refs (since 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def naive_full_loss(student, teacher, mask, *, beta, temperature, token_clip):
    import torch
    import torch.nn.functional as F

    log_s = F.log_softmax(student.float() / temperature, dim=-1)
    log_t = F.log_softmax(teacher.float() / temperature, dim=-1)
    if beta == 0.0:
        terms = F.kl_div(log_s, log_t, reduction="none", log_target=True)
    elif beta == 1.0:
        terms = F.kl_div(log_t, log_s, reduction="none", log_target=True)
    else:
        log_m = torch.logaddexp(log_t + math.log(beta), log_s + math.log1p(-beta))
        terms = (beta * F.kl_div(log_m, log_t, reduction="none", log_target=True)
                 + (1 - beta) * F.kl_div(log_m, log_s, reduction="none", log_target=True))
    if token_clip is not None:
        terms = terms.clamp(max=token_clip)
    weights = mask.to(terms.dtype)
    return (terms.sum(-1) * weights).sum() / weights.sum().clamp(min=1)


def make_inputs(args):
    import torch

    gen = torch.Generator().manual_seed(args.seed)
    shape = (args.batch, args.tokens, args.vocab)
    # Built in place so that making the inputs never holds more than the two tensors themselves.
    student = torch.randn(shape, generator=gen).mul_(3.0)
    teacher = torch.randn(shape, generator=gen).add_(student)
    lengths = torch.full((args.batch,), args.tokens)
    if args.pad_fraction > 0:
        short = torch.randint(int(args.tokens * (1 - args.pad_fraction)), args.tokens + 1,
                              (args.batch,), generator=gen)
        lengths = short.clamp(min=1)
        lengths[0] = args.tokens
    mask = torch.arange(args.tokens)[None, :] < lengths[:, None]
    return student.requires_grad_(True), teacher, mask


def worker(args) -> None:
    import torch

    from termforge.opsd.loss import generalized_jsd_token_loss

    torch.set_num_threads(args.threads)
    student, teacher, mask = make_inputs(args)
    options = dict(beta=args.beta, temperature=args.temperature, token_clip=args.clip)
    rss_before = _status_kib("VmRSS")
    exact_peak = _reset_peak_rss()
    start, cpu_start = time.perf_counter(), time.process_time()
    if args.worker == "naive_full":
        loss = naive_full_loss(student, teacher, mask, **options)
    else:
        chunk = args.chunk_size if args.worker == "chunked" else None
        loss, _ = generalized_jsd_token_loss(student, teacher, mask, chunk_size=chunk, **options)
    loss.backward()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    peak_kib = _status_kib("VmHWM") if exact_peak else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    torch.save({"grad_rows": student.grad[:, ::GRAD_SAMPLE_STRIDE].clone()}, args.out + ".pt")
    with open(args.out, "w") as fh:
        json.dump({"variant": args.worker, "loss": loss.item(), "seconds": seconds, "cpu_seconds": cpu_seconds,
                   "peak_mib": (peak_kib - rss_before) / 1024, "exact_peak": exact_peak,
                   "grad_norm": student.grad.norm().item()}, fh)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=1024, help="completion tokens per sequence")
    parser.add_argument("--vocab", type=int, default=49152, help="SmolLM2's vocabulary by default")
    parser.add_argument("--chunk-size", type=int, default=128, help="token rows per chunk")
    parser.add_argument("--pad-fraction", type=float, default=0.0,
                        help="rows other than the first may be this much shorter (right padding)")
    parser.add_argument("--beta", type=float, default=0.0)
    parser.add_argument("--temperature", type=float, default=1.1)
    parser.add_argument("--clip", type=float, default=0.05)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    variants = chosen("--variants", args.variants, VARIANTS)
    if args.worker:
        worker(args)
        return

    import torch

    logits_mib = args.batch * args.tokens * args.vocab * 4 / 2**20
    print(f"batch {args.batch} x {args.tokens} tokens, vocab {args.vocab}, fp32 logits "
          f"({logits_mib:.0f} MiB each; the student gradient is one more), chunk {args.chunk_size}, "
          f"beta {args.beta}, T {args.temperature}, clip {args.clip}, {args.threads} threads")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in variants:
            out = os.path.join(tmp, variant + ".json")
            passthrough = [a for a in sys.argv[1:] if not a.startswith(("--worker", "--out"))]
            subprocess.run([sys.executable, __file__, *passthrough, "--worker", variant, "--out", out],
                           check=True, env={**os.environ, **MALLOC_ENV})
            with open(out) as fh:
                results[variant] = json.load(fh)
            results[variant]["grad_rows"] = torch.load(out + ".pt")["grad_rows"]
            r = results[variant]
            print(f"  {variant:<11} loss {r['loss']:.9g}  peak +{r['peak_mib']:8.0f} MiB  "
                  f"{r['seconds']:6.1f} s wall {r['cpu_seconds']:6.1f} s cpu  |grad| {r['grad_norm']:.6g}"
                  + ("" if r["exact_peak"] else "  (peak from ru_maxrss: includes setup)"))

    reference_name = next(iter(results))
    reference = results[reference_name]
    for name, r in results.items():
        if name == reference_name:
            continue
        scale = reference["grad_rows"].abs().max().item()
        grad_diff = (r["grad_rows"] - reference["grad_rows"]).abs().max().item() / scale
        loss_diff = abs(r["loss"] - reference["loss"]) / abs(reference["loss"])
        agree = loss_diff < 1e-5 and grad_diff < 1e-5
        print(f"  {name} vs {reference_name}: loss rel diff {loss_diff:.2e}, sampled grad max rel diff "
              f"{grad_diff:.2e} -> {'agree' if agree else 'DISAGREE'}")
    if "chunked" in results:
        chunked = results["chunked"]
        for name in ("naive_full", "unchunked"):
            if name in results:
                print(f"  memory {name}/chunked = {results[name]['peak_mib'] / chunked['peak_mib']:.2f}x"
                      f"   wall time {results[name]['seconds'] / chunked['seconds']:.2f}x"
                      f"   cpu time {results[name]['cpu_seconds'] / chunked['cpu_seconds']:.2f}x")


if __name__ == "__main__":
    main()
