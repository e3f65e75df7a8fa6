#!/usr/bin/env python3
"""Call overhead of the Python binding: one training step of a small MLP, timed per step
(bench/bindings/README.md). Prints `step_us MEDIAN MEAN` in microseconds.

    step_python --hidden H --batch B --steps N --warmup W
"""
import argparse
import array
import statistics
import time

import cohort


def main():
    p = argparse.ArgumentParser(prog="step_python")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    args = p.parse_args()
    batch = args.batch

    cohort.set_num_threads(1)
    graph = cohort.models.mlp(batch=batch, in_features=784, hidden=(args.hidden,), classes=10, activation="relu")
    optimizer = cohort.Optimizer()  # cohort_optimizer_options_default(): SGD, lr 0.01
    trainer = cohort.Trainer(graph, optimizer, seed=1)

    # The inputs, made once in the language's own arrays and passed to every step.
    x = array.array("f", ((i % 255) / 255.0 for i in range(batch * 784)))
    y = array.array("i", (i % 10 for i in range(batch)))

    step = trainer.step
    for _ in range(args.warmup):
        step(x=x, y=y)
    times = []
    clock = time.perf_counter_ns  # monotonic
    for _ in range(args.steps):
        begin = clock()
        step(x=x, y=y)
        times.append((clock() - begin) / 1000.0)
    print(f"step_us {statistics.median(times):.2f} {statistics.fmean(times):.2f}")

    for handle in (trainer, optimizer, graph):
        handle.close()


if __name__ == "__main__":
    main()
