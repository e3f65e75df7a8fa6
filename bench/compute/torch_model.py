#!/usr/bin/python3
"""PyTorch anchor for bench_compute: trains the mirror of cohort's GPT or CNN (tests/parity/
models.py) with AdamW on random tokens or images and prints one line of key=value results.

Memory is the process's resident-set peak delta: /proc/self/clear_refs resets VmHWM after torch
is imported, then VmHWM - VmRSS(before the model) covers parameters, gradients, AdamW state,
activations and allocator slack. (tracemalloc cannot see torch's C++ allocations.)

usage: torch_model.py [--threads N] [--cnn] BATCH CONTEXT LAYERS WIDTH HEADS WARMUP_STEPS TIMED_STEPS
                      ROUNDS|serve
(--cnn: the CNN on [BATCH, 1, 28, 28] images, CONTEXT .. HEADS ignored; items are images, printed
as tokens_per_s all the same. --threads: torch.set_num_threads, default 1.)

With ROUNDS it times that many rounds and prints the median. With "serve" (how bench_compute runs
it, so that its rounds interleave with cohort's and both see the same load on the box) it prints
"ready" after the warm-up, then answers each "round" line on stdin with one round's
tokens_per_s=..., and "quit" (or the end of stdin) with the memory line.
"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "parity"))
import models  # noqa: E402


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def main():
    args = sys.argv[1:]
    threads, cnn = 1, False
    while args and args[0].startswith("--"):
        if args[0] == "--threads":
            threads = int(args[1])
            args = args[2:]
        elif args[0] == "--cnn":
            cnn = True
            args = args[1:]
        else:
            sys.exit(f"unknown option {args[0]}")
    B, T, L, C, H, warm, timed = (int(a) for a in args[0:7])
    serve = args[7] == "serve"
    rounds = 0 if serve else int(args[7])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        hwm_ok = True
    except OSError:
        hwm_ok = False
    base = status_kib("VmRSS")
    if cnn:
        model = models.Cnn()
        tokens = torch.rand(B, 1, 28, 28)
        targets = torch.randint(0, 10, (B,))
        T = 1  # items per sequence: one image
    else:
        model = models.Gpt(256, T, L, C, H)
        tokens = torch.randint(0, 256, (B, T))
        targets = torch.randint(0, 256, (B, T))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(tokens, targets)
        loss.backward()
        opt.step()

    for _ in range(warm):
        step()

    def timed_round():
        t0 = time.perf_counter()
        for _ in range(timed):
            step()
        return B * T * timed / (time.perf_counter() - t0)

    def memory_line():
        peak = (status_kib("VmHWM") - base) * 1024 if hwm_ok else -1
        return f"rss_peak_delta_bytes={peak} blas_core={os.environ.get('OPENBLAS_CORETYPE', 'as-installed')}"

    if serve:
        print("ready", flush=True)
        for line in sys.stdin:
            if line.strip() != "round":
                break
            print(f"tokens_per_s={timed_round():.1f}", flush=True)
        print(memory_line(), flush=True)
        return
    rates = [timed_round() for _ in range(rounds)]
    print(f"tokens_per_s={statistics.median(rates):.1f} {memory_line()}")


if __name__ == "__main__":
    main()
