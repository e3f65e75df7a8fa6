# PyTorch anchor for bench_cuda_kernels, run on the same GPU: torch.matmul TFLOP/s for the same
# gemm shapes (bf16, TF32), and scaled_dot_product_attention (causal, GPT-2 small's heads H12 D64,
# T 1024/2048/4096 at 8192 tokens) forward and backward in bf16 and fp32. The attention inputs are
# q, k, v viewed in one [B, T, 3, H, D] buffer, the layout cohort's kernels read (GPT-2's fused
# qkv); contiguous [B, H, T, D] tensors are timed too, for reference. Then, when it finds
# bench_cuda_kernels (COHORT_BENCH_CUDA_KERNELS, else /tmp/cohort-gpu/ where run_on_device.sh
# builds it, else build/bench/cuda/), it runs `bench_cuda_kernels --attention` and prints cohort's
# TFLOP/s over PyTorch's for each row (target >= 0.9x).
# Median of 20 event-timed runs after 3 warm-ups, random inputs. Usage: python3 torch_anchor.py
import os
import re
import subprocess
import sys

import torch

TARGET = 0.9


def median_ms(f, reps=20):
    for _ in range(3):
        f()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def bench_gemm():
    torch.backends.cuda.matmul.allow_tf32 = True
    for M, N, K in [(4096, 4096, 4096), (8192, 2304, 768), (8192, 3072, 768), (8192, 768, 3072)]:
        for name, dt in [("bf16", torch.bfloat16), ("tf32", torch.float32)]:
            a = torch.randn(M, K, device="cuda", dtype=dt)
            b = torch.randn(K, N, device="cuda", dtype=dt)
            ms = median_ms(lambda: torch.matmul(a, b))
            print(f"torch gemm {name:5s} [{M:5d} x {K:5d}] x [{K:5d} x {N:5d}]  {ms:8.3f} ms  "
                  f"{2 * M * N * K / ms / 1e9:7.1f} TFLOP/s")


def sdpa_times(B, T, H, D, dt, layout):
    """Forward and backward median ms of causal SDPA; layout 'qkv' (views of one buffer) or
    'contiguous'."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if layout == "qkv":
        qkv = torch.randn(B, T, 3, H, D, device="cuda", dtype=dt)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # [B, H, T, D] views
    else:
        q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=dt) for _ in range(3))
    fwd = median_ms(lambda: sdpa(q, k, v, is_causal=True))
    q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
    y = sdpa(q, k, v, is_causal=True)
    g = torch.randn_like(y)
    bwd = median_ms(lambda: torch.autograd.grad(y, (q, k, v), g, retain_graph=True))
    return fwd, bwd


def bench_attention():
    """{(direction, dtype, T): TFLOP/s} of PyTorch on the qkv-view layout."""
    H, D = 12, 64
    anchor = {}
    for T in (1024, 2048, 4096):
        B = 8192 // T
        fwd_flops = 2 * B * H * T * T * D  # causal: half of 4 B H T^2 D; backward 2.5x
        for name, dt in [("bf16", torch.bfloat16), ("f32", torch.float32)]:
            for layout in ("qkv", "contiguous"):
                fwd, bwd = sdpa_times(B, T, H, D, dt, layout)
                for direction, ms, flops in (("fwd", fwd, fwd_flops), ("bwd", bwd, 2.5 * fwd_flops)):
                    tflops = flops / ms / 1e9
                    print(f"torch sdpa {direction} {name:4s} B{B} T{T} H{H} D{D} causal {layout:10s} "
                          f"{ms:8.3f} ms  {tflops:7.1f} TFLOP/s")
                    if layout == "qkv":
                        anchor[(direction, name, T)] = tflops
    return anchor


def find_bench():
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.environ.get("COHORT_BENCH_CUDA_KERNELS", ""), "/tmp/cohort-gpu/bench_cuda_kernels",
                 os.path.join(here, "..", "..", "build", "bench", "cuda", "bench_cuda_kernels")):
        if path and os.access(path, os.X_OK):
            return path
    return None


ROW = re.compile(r"^attention (fwd|bwd) (\w+)\s+(\w+)\s+B\d+ T(\d+) H\d+ D\d+ \w+\s+([\d.]+) ms\s+([\d.]+) TFLOP/s")


def print_ratios(anchor):
    bench = find_bench()
    if not bench:
        print("attention ratios: bench_cuda_kernels not found (set COHORT_BENCH_CUDA_KERNELS)")
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # PyTorch's cached blocks back to the device for the benchmark
    try:
        run = subprocess.run([bench, "--attention"], capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        print(f"attention ratios: {bench} --attention ran past 240 s")
        return
    print(f"cohort attention ({bench} --attention, exit {run.returncode}):")
    for line in run.stdout.splitlines():
        if line.startswith("attention "):
            print("  " + line)
    if run.returncode != 0:
        print(run.stderr[-2000:])
    print(f"cohort / PyTorch SDPA (same shapes, qkv-view layout; target >= {TARGET}x):")
    for line in run.stdout.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        direction, dtype, impl, T, tflops = m.group(1), m.group(2), m.group(3), int(m.group(4)), float(m.group(6))
        ref = anchor.get((direction, dtype, T))
        if not ref:
            continue
        ratio = tflops / ref
        print(f"  attention {direction} {dtype:4s} {impl:6s} T{T:<5d} {tflops:7.1f} / {ref:7.1f} TFLOP/s = "
              f"{ratio:.2f}x {'met' if ratio >= TARGET else 'NOT met'}")


def main():
    sys.stdout.reconfigure(line_buffering=True)  # a run cut off by a timeout keeps what it printed
    print("torch", torch.__version__, torch.cuda.get_device_name(0))
    bench_gemm()
    anchor = bench_attention()
    print_ratios(anchor)


def attention_fp32_more():
    """sdpa in fp32 for the shapes of kernels_bench's tf32 attention rows that main() lacks."""
    for B, T, H, D, causal in [(8, 1024, 12, 64, False), (8, 1024, 6, 128, True)]:
        q, k, v = (torch.randn(B, H, T, D, device="cuda") for _ in range(3))
        f = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        flops = 4 * B * H * T * T * D * (0.5 if causal else 1.0)
        name = f"{'causal' if causal else 'full'} B{B} T{T} H{H} D{D}"
        ms = median_ms(f)
        print(f"torch sdpa {name:28s} float32 {ms:8.3f} ms  {flops / ms / 1e9:7.1f} TFLOP/s")
        for x in (q, k, v):
            x.requires_grad_(True)
        y = f()
        g = torch.randn_like(y)
        ms = median_ms(lambda: torch.autograd.grad(y, (q, k, v), g, retain_graph=True))
        print(f"torch sdpa bwd {name:24s} float32 {ms:8.3f} ms  {2.5 * flops / ms / 1e9:7.1f} TFLOP/s")


if __name__ == "__main__":
    main()
    attention_fp32_more()
