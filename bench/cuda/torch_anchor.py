# PyTorch anchor for bench_cuda_kernels, run on the same GPU: torch.matmul TFLOP/s for the same
# gemm shapes (bf16, TF32) and scaled_dot_product_attention (flash) for the attention shape.
# Median of 20 event-timed runs after 3 warm-ups, random inputs. Usage: python3 torch_anchor.py
import torch


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


def main():
    print("torch", torch.__version__, torch.cuda.get_device_name(0))
    torch.backends.cuda.matmul.allow_tf32 = True
    for M, N, K in [(4096, 4096, 4096), (8192, 2304, 768), (8192, 3072, 768), (8192, 768, 3072)]:
        for name, dt in [("bf16", torch.bfloat16), ("tf32", torch.float32)]:
            a = torch.randn(M, K, device="cuda", dtype=dt)
            b = torch.randn(K, N, device="cuda", dtype=dt)
            ms = median_ms(lambda: torch.matmul(a, b))
            print(f"torch gemm {name:5s} [{M:5d} x {K:5d}] x [{K:5d} x {N:5d}]  {ms:8.3f} ms  "
                  f"{2 * M * N * K / ms / 1e9:7.1f} TFLOP/s")
    B, T, H, D = 8, 1024, 12, 64
    for dt in [torch.bfloat16, torch.float32]:
        q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=dt) for _ in range(3))
        f = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        ms = median_ms(f)
        print(f"torch sdpa causal B8 T1024 H12 D64 {str(dt)[6:]:9s} {ms:8.3f} ms  "
              f"{2 * B * H * T * T * D / ms / 1e9:7.1f} TFLOP/s")
        for x in (q, k, v):
            x.requires_grad_(True)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        g = torch.randn_like(y)
        ms = median_ms(lambda: torch.autograd.grad(y, (q, k, v), g, retain_graph=True))
        print(f"torch sdpa bwd causal B8 T1024 H12 D64 {str(dt)[6:]:9s} {ms:8.3f} ms  "
              f"{2.5 * 2 * B * H * T * T * D / ms / 1e9:7.1f} TFLOP/s")


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
