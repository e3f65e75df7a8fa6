"""torch.distributed gloo anchor for bench_collectives: times all_reduce, all_gather (and
reduce_scatter where gloo has it) on `world` local processes and prints one line per case:
GLOO <op> <world> <bytes> <seconds per op>. Run with OMP_NUM_THREADS=1 under /usr/bin/python3."""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def iterations(nbytes, quick):
    budget = (64 if quick else 256) << 20
    return max(2 if quick else 3, min(200 if quick else 500, budget // max(nbytes, 1)))


def run(rank, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    world = args.world
    for op in args.ops.split(","):
        for nbytes in [int(s) for s in args.sizes.split(",")]:
            n = max(nbytes // 4, world)
            if op == "lat8":
                if nbytes != 8:
                    continue
                x = torch.ones(2)
                fn = lambda: dist.all_reduce(x)
            elif op == "all_reduce":
                x = torch.ones(n)
                fn = lambda: dist.all_reduce(x)
            elif op == "all_gather":
                x = torch.ones(n // world)
                outs = [torch.empty_like(x) for _ in range(world)]
                fn = lambda: dist.all_gather(outs, x)
            elif op == "reduce_scatter":
                outs = [torch.ones(n // world) for _ in range(world)]
                y = torch.empty(n // world)
                fn = lambda: dist.reduce_scatter(y, outs)
            else:
                continue
            try:
                fn()
            except RuntimeError:
                if rank == 0:
                    print(f"GLOO {op} {world} {nbytes} nan", flush=True)
                continue
            iters = 300 if op == "lat8" else iterations(nbytes, args.quick)
            times = []
            for _ in range(3):  # the median of three measurements
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                times.append(t.item())
            if rank == 0:
                print(f"GLOO {op} {world} {nbytes} {sorted(times)[1]:.9f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ops", default="all_reduce,reduce_scatter,all_gather,lat8")
    p.add_argument("--sizes", required=True)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    mp.spawn(run, args=(a,), nprocs=a.world, join=True)
