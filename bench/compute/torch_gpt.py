#!/usr/bin/python3
"""PyTorch anchor for bench_compute: trains the mirror of cohort's GPT (tests/parity/models.py)
with AdamW on random tokens and prints one line of key=value results.

Memory is the process's resident-set peak delta: /proc/self/clear_refs resets VmHWM after torch
is imported, then VmHWM - VmRSS(before the model) covers parameters, gradients, AdamW state,
activations and allocator slack. (tracemalloc cannot see torch's C++ allocations.)

usage: torch_gpt.py BATCH CONTEXT LAYERS WIDTH HEADS WARMUP_STEPS TIMED_STEPS ROUNDS
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
    B, T, L, C, H, warm, timed, rounds = (int(a) for a in sys.argv[1:9])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        hwm_ok = True
    except OSError:
        hwm_ok = False
    base = status_kib("VmRSS")
    model = models.Gpt(256, T, L, C, H)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    tokens = torch.randint(0, 256, (B, T))
    targets = torch.randint(0, 256, (B, T))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(tokens, targets)
        loss.backward()
        opt.step()

    for _ in range(warm):
        step()
    rates = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(timed):
            step()
        rates.append(B * T * timed / (time.perf_counter() - t0))
    peak = (status_kib("VmHWM") - base) * 1024 if hwm_ok else -1
    print(f"tokens_per_s={statistics.median(rates):.1f} rss_peak_delta_bytes={peak} "
          f"blas_core={os.environ.get('OPENBLAS_CORETYPE', 'as-installed')}")


if __name__ == "__main__":
    main()
