"""No leak over 1,000 create/use/destroy cycles: Python allocations (tracemalloc) and the process's
resident memory (which also sees libcohort's and the extension's C allocations) stay bounded.
Half of the cycles close explicitly, half leave it to garbage collection; every cycle also
raises and drops an error. Registered memory goes through 1,000 allocate/use/free cycles too."""
import array
import gc
import os
import tracemalloc
import unittest

import cohort
from support import classifier, learnable_batch

CYCLES = 1000


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one_cycle(i, x, y, out):
    graph = classifier(batch=8, features=4, hidden=8, classes=3)
    optimizer = cohort.Optimizer("adamw", lr=1e-3)
    trainer = cohort.Trainer(graph, optimizer, seed=i)
    trainer.step(x=x, y=y)
    trainer.evaluate({"x": x}, {"out": out})
    trainer.get_parameter("fc1.weight")
    with cohort.Attrs(perm=[1, 0], factor=0.5), cohort.Plan("localsgd", tau=2):
        pass
    try:
        trainer.step(x=x)
    except cohort.InvalidArgumentError:
        pass
    if i % 2:
        for handle in (trainer, optimizer, graph):
            handle.close()


class LeakTest(unittest.TestCase):
    def test_create_destroy_cycles(self):
        x, y = learnable_batch(batch=8, features=4)
        out = array.array("f", bytes(4 * 8 * 3))
        for i in range(50):  # warm up caches, allocator pools and lazily built tables
            one_cycle(i, x, y, out)
        gc.collect()
        tracemalloc.start()
        traced_before = tracemalloc.get_traced_memory()[0]
        rss_before = rss_bytes()
        for i in range(CYCLES):
            one_cycle(i, x, y, out)
        gc.collect()
        traced_growth = tracemalloc.get_traced_memory()[0] - traced_before
        tracemalloc.stop()
        rss_growth = rss_bytes() - rss_before
        # A leak of one small object per cycle would already exceed these bounds.
        self.assertLess(traced_growth, 64 * 1024, f"Python allocations grew {traced_growth} bytes")
        if not os.environ.get("COHORT_TEST_SANITIZED"):  # ASan's quarantine keeps freed memory resident
            self.assertLess(rss_growth, 8 * 1024 * 1024, f"resident memory grew {rss_growth} bytes")

    def test_registered_memory_cycles(self):
        # 64 KiB per buffer: 1,000 buffers never unmapped would be 64 MiB of resident memory.
        def cycle(comm, i):
            buf = comm.alloc(16384, "f32")
            with memoryview(buf) as view:
                view[i % 16384] = 1.0
            comm.all_reduce(buf)
            buf.free()

        with cohort.Comm.from_env() as comm:
            for i in range(50):
                cycle(comm, i)
            gc.collect()
            tracemalloc.start()
            traced_before = tracemalloc.get_traced_memory()[0]
            rss_before = rss_bytes()
            for i in range(CYCLES):
                cycle(comm, i)
            comm.barrier()  # frees take effect once earlier operations are done
            gc.collect()
            traced_growth = tracemalloc.get_traced_memory()[0] - traced_before
            tracemalloc.stop()
            rss_growth = rss_bytes() - rss_before
        self.assertLess(traced_growth, 64 * 1024, f"Python allocations grew {traced_growth} bytes")
        if not os.environ.get("COHORT_TEST_SANITIZED"):
            self.assertLess(rss_growth, 8 * 1024 * 1024, f"resident memory grew {rss_growth} bytes")


if __name__ == "__main__":
    unittest.main()
