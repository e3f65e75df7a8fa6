#!/usr/bin/env python3
"""Fashion-MNIST with a two-layer MLP through the cohort Python package — the same program, step
for step, as examples/c/fashion_mnist.c (examples/README.md), so that both print the same test
accuracy for the same arguments. Run it alone, or on several ranks:

    cohort-run -n 2 -- /usr/bin/python3 examples/python/fashion_mnist.py --steps 300 --threads 1
"""
import argparse
import array
import math
import sys
import time

try:
    import cohort
except ImportError as error:  # neither installed nor on PYTHONPATH
    sys.exit(f"error: cannot import cohort ({error}): `pip install <build>/bindings/python`, or run with "
             "PYTHONPATH=<build>/bindings/python (<build>/examples/run_fashion_mnist_python does)")

CLASSES = 10
PIXELS = 784


def parse_args():
    p = argparse.ArgumentParser(prog="fashion_mnist", description=__doc__.split("\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="directory of the IDX files")
    p.add_argument("--steps", type=int, default=0, help="training steps (0: --epochs epochs)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64, help="examples per step and rank")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="CPU threads of this rank (0: leave as is)")
    args = p.parse_args()
    if args.epochs < 1 or args.batch < 1 or args.hidden < 1 or args.steps < 0 or args.threads < 0 \
            or not args.lr > 0:
        p.error("epochs, batch and hidden must be >= 1, lr > 0, steps and threads >= 0")
    return args


def add_linear(graph, name, x, fan_in, fan_out):
    """x @ weight^T + bias, initialised like PyTorch's nn.Linear (kaiming-uniform, gain 1/sqrt(3))."""
    weight = graph.add_parameter(f"{name}.weight", (fan_out, fan_in),
                                 init=cohort.Initializer.kaiming_uniform(1 / math.sqrt(3)))
    bias = graph.add_parameter(f"{name}.bias", (fan_out,))
    return graph.add_op("linear", [x, weight, bias], name=name)


def build_graph(batch, hidden):
    # x: (B, 784) -> fc1 -> relu -> logits (B, 10); loss = cross_entropy(logits, y)
    graph = cohort.Graph()
    x = graph.add_input("x", (batch, PIXELS), cohort.F32)
    y = graph.add_input("y", (batch,), cohort.I32)
    h = add_linear(graph, "fc1", x, PIXELS, hidden)
    r = graph.add_op("relu", [h], name="act1")
    logits = add_linear(graph, "logits", r, hidden, CLASSES)
    loss = graph.add_op("cross_entropy", [logits, y], name="loss")
    graph.mark_output(logits)
    graph.set_loss(loss)
    return graph


def test_accuracy(trainer, test, sampler, batches=10, batch=1000):
    """Accuracy over `batches` batches of the test sampler: argmax of the logits (first maximum
    wins) against the label."""
    images = array.array("f", bytes(4 * batch * PIXELS))
    labels = array.array("i", bytes(4 * batch))
    logits = array.array("f", bytes(4 * batch * CLASSES))
    correct = 0
    for _ in range(batches):
        test.next_batch(sampler, images, labels, batch=batch)
        trainer.evaluate({"x": images}, {"logits": logits})
        for i in range(batch):
            row = logits[i * CLASSES:(i + 1) * CLASSES]
            correct += max(range(CLASSES), key=row.__getitem__) == labels[i]
    return correct / (batches * batch)


def main():
    args = parse_args()
    if args.threads > 0:
        cohort.set_num_threads(args.threads)
    with cohort.Comm.from_env() as comm:
        rank, world = comm.rank, comm.size
        train = cohort.Dataset.fashion_mnist(args.data, "train")
        test = cohort.Dataset.fashion_mnist(args.data, "validation")
        train_sampler = cohort.Sampler(train, seed=args.seed, rank=rank, world=world, shuffle=True)
        test_sampler = cohort.Sampler(test, seed=0, rank=0, world=1, shuffle=False)

        graph = build_graph(args.batch, args.hidden)
        steps_per_epoch = len(train) // world // args.batch
        total = args.steps if args.steps > 0 else args.epochs * steps_per_epoch
        if total < 1:
            print("error: no steps: the batch is larger than this rank's share of the data", file=sys.stderr)
            sys.exit(2)
        optimizer = cohort.Optimizer("adamw", lr=args.lr, schedule="warmup_cosine", warmup_steps=total // 20,
                                     total_steps=total, min_lr=args.lr / 10)
        if world == 1:
            trainer = cohort.Trainer(graph, optimizer, seed=args.seed)
        else:
            with cohort.Plan("ddp") as plan:
                trainer = cohort.Trainer(graph, optimizer, seed=args.seed, plan=plan, comm=comm)

        # The program's own arrays, refilled in place every step.
        images = array.array("f", bytes(4 * args.batch * PIXELS))
        labels = array.array("i", bytes(4 * args.batch))
        if rank == 0:
            print(f"cohort {cohort.version()} | Fashion-MNIST MLP 784-{args.hidden}-10 | {world} rank(s) | "
                  f"{total} steps of batch {args.batch}", flush=True)
        start = time.monotonic()
        smooth = 0.0
        for step in range(total):
            train.next_batch(train_sampler, images, labels, batch=args.batch)
            loss = trainer.step(x=images, y=labels)
            smooth = loss if step == 0 else 0.95 * smooth + 0.05 * loss
            if rank == 0 and (step % 20 == 0 or step + 1 == total):
                elapsed = time.monotonic() - start
                rate = (step + 1) * args.batch * world / elapsed
                eta = int((total - step - 1) * elapsed / (step + 1))
                print(f"\rstep {step + 1}/{total} | loss {smooth:.4f} | {rate:.0f} samples/s | "
                      f"ETA {eta // 60:02d}:{eta % 60:02d}   ", end="", flush=True)
        if rank == 0:
            print(flush=True)

        accuracy = test_accuracy(trainer, test, test_sampler)
        print(f"done in {time.monotonic() - start:.1f} s | test accuracy {100 * accuracy:.2f}% | final loss "
              f"{smooth:.4f}", flush=True)
        for handle in (trainer, optimizer, graph, test_sampler, train_sampler, test, train):
            handle.close()


if __name__ == "__main__":
    try:
        main()
    except cohort.Error as error:
        print(f"\nerror: {error} ({error.status_name})", file=sys.stderr)
        sys.exit(1)
