#!/usr/bin/python3
"""PyTorch anchor for bench_gpu_gpt: trains the mirror of cohort's GPT (tests/parity/models.py)
on the GPU with AdamW (fused), clipping at 1.0, on random tokens, reading the loss back every
step as cohort's Trainer does. Attention runs through scaled_dot_product_attention (flash) where
torch has it, so each anchor is a fast path PyTorch users get. One MODE per run:
  eager_tf32    fp32 parameters, matmuls in TF32 when TF32 is 1
  eager_bf16    fp32 parameters under torch.autocast(bfloat16): PyTorch's usual mixed precision
                (cohort's bf16 keeps bf16 parameters with an fp32 master copy in the optimizer)
  compile_bf16  eager_bf16 with the model under torch.compile: the fastest path PyTorch users have;
                the first warm-up step compiles (at least one warm-up step runs)
Prints one line of key=value results: mode, tokens_per_s (median over ROUNDS rounds of STEPS
steps), max_memory_gib (torch.cuda.max_memory_allocated from before the first step: parameters,
gradients, optimizer state and activations), warmup_s (the warm-up steps, compilation included),
torch, device. A line starting "skipped:" when the mode cannot run here. With COHORT_TORCH_PROFILE=N
in the environment, N more steps run under torch.profiler afterwards and the CUDA kernels' time
table goes to stderr (where PyTorch's step spends its device time, to set beside COHORT_PROFILE).

usage: torch_gpt_gpu.py BATCH CONTEXT LAYERS WIDTH HEADS VOCAB WARMUP STEPS ROUNDS TF32 MODE
"""
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "parity"))
import models  # noqa: E402

MODES = ("eager_tf32", "eager_bf16", "compile_bf16")


def flash_attention_forward(self, x):
    B, T, C = x.shape
    H, D = self.heads, C // self.heads
    q, k, v = self.c_attn(x).split(C, dim=2)
    q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(D))
    return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


def main():
    if len(sys.argv) != 12 or sys.argv[11] not in MODES:
        sys.exit(__doc__.strip().splitlines()[-1] + "\nMODE: " + " | ".join(MODES))
    B, T, L, C, H, V, warm, steps, rounds, tf32 = (int(a) for a in sys.argv[1:11])
    mode = sys.argv[11]
    bf16, compiled = mode != "eager_tf32", mode == "compile_bf16"
    if not torch.cuda.is_available():
        print("skipped: torch sees no CUDA device")
        return
    if compiled and not hasattr(torch, "compile"):
        print(f"skipped: torch {torch.__version__} has no torch.compile (2.0 or later)")
        return
    torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
    torch.backends.cudnn.allow_tf32 = bool(tf32)
    torch.manual_seed(0)
    if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0; older ones keep the mirror's
        models.Attention.forward = flash_attention_forward
    model = models.Gpt(V, T, L, C, H).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, fused=True)
    forward = torch.compile(model) if compiled else model
    tokens = torch.randint(0, V, (B, T), device="cuda")
    targets = torch.randint(0, V, (B, T), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = forward(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(max(warm, 1 if compiled else 0)):
        step()
    warmup_s = time.perf_counter() - t0
    rates = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        rates.append(B * T * steps / (time.perf_counter() - t0))
    peak = torch.cuda.max_memory_allocated() / 2**30
    profile_steps = int(os.environ.get("COHORT_TORCH_PROFILE", "0"))
    if profile_steps > 0:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(profile_steps):
                step()
            torch.cuda.synchronize()
        print(f"torch profile: {mode}, {profile_steps} steps", file=sys.stderr)
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=40, max_name_column_width=70),
              file=sys.stderr)
    print(f"mode={mode} tokens_per_s={statistics.median(rates):.1f} max_memory_gib={peak:.2f} "
          f"warmup_s={warmup_s:.1f} torch={torch.__version__} "
          f"device={torch.cuda.get_device_name(0).replace(' ', '_')} tf32={tf32}")


if __name__ == "__main__":
    main()
