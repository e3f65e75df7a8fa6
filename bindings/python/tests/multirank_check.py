"""Two (or more) ranks under cohort-run, one thread each: collectives through the binding, Works
that hold their buffers until completion, the GIL released while a rank waits, collectives in
registered memory, and a data-parallel trainer whose ranks stay identical.

    cohort-run -n 2 -- python3 multirank_check.py

Every rank runs the same tests in the same (alphabetical) order, so collectives line up; a rank
that fails leaves the others failing at their next collective within the communicator timeout.
"""
import array
import gc
import math
import os
import tempfile
import threading
import time
import unittest
import weakref

import cohort
from support import classifier, learnable_batch, numpy

comm = None


def setUpModule():
    global comm
    cohort.set_num_threads(1)
    comm = cohort.Comm.from_env(timeout_ms=30000)


def tearDownModule():
    comm.close()


class CollectiveTest(unittest.TestCase):
    def setUp(self):
        self.rank, self.size = comm.rank, comm.size

    def test_all_reduce(self):
        buf = array.array("f", (float(self.rank + 1) * i for i in range(101)))
        self.assertIsNone(comm.all_reduce(buf))  # in place, waits
        total = self.size * (self.size + 1) / 2
        self.assertEqual(list(buf), [total * i for i in range(101)])
        ints = array.array("i", [self.rank, 10 * self.rank])
        out = array.array("i", [0, 0])
        comm.all_reduce(ints, out, op="max")
        self.assertEqual(list(out), [self.size - 1, 10 * (self.size - 1)])
        avg = array.array("f", [float(self.rank)])
        comm.all_reduce(avg, op=cohort.ReduceOp.AVG)
        self.assertAlmostEqual(avg[0], (self.size - 1) / 2)

    def test_async_work_holds_buffers(self):
        def start():
            source = array.array("f", [float(self.rank)] * 1000)
            result = array.array("f", bytes(4 * 1000))
            work = comm.all_reduce(source, result, async_op=True)
            return work, weakref.ref(result)

        work, result = start()
        gc.collect()
        self.assertIsNotNone(result(), "the Work must keep its buffers alive until it completes")
        with self.assertRaises(BufferError):
            result().append(1.0)  # exported to cohort: it cannot move
        keep = result()
        work.wait()
        self.assertEqual(keep[999], float(sum(range(self.size))))
        keep.append(1.0)  # released on completion
        del keep
        gc.collect()
        self.assertIsNone(result())
        self.assertTrue(work.test())
        work.close()

    def test_gather_scatter_broadcast(self):
        mine = array.array("i", [self.rank] * 3)
        everyone = array.array("i", bytes(4 * 3 * self.size))
        comm.all_gather(mine, everyone)
        self.assertEqual(list(everyone), [r for r in range(self.size) for _ in range(3)])
        blocks = array.array("f", (float(i) for i in range(2 * self.size)))
        part = array.array("f", [0.0, 0.0])
        comm.reduce_scatter(blocks, part)
        self.assertEqual(list(part), [float(self.size * 2 * self.rank), float(self.size * (2 * self.rank + 1))])
        token = array.array("q", [4242 if self.rank == 0 else 0])
        comm.broadcast(token, root=0)
        self.assertEqual(token[0], 4242)
        send = array.array("i", (100 * self.rank + j for j in range(self.size)))
        received = array.array("i", bytes(4 * self.size))
        comm.all_to_all(send, received)
        self.assertEqual(list(received), [100 * j + self.rank for j in range(self.size)])
        comm.barrier()
        comm.barrier(async_op=True).wait()

    def test_send_recv_ring(self):
        if self.size < 2:
            self.skipTest("needs two ranks")
        incoming = array.array("i", [-1])
        work = comm.recv(incoming, peer=(self.rank - 1) % self.size, async_op=True)
        comm.send(array.array("i", [self.rank]), peer=(self.rank + 1) % self.size)
        work.wait(timeout_ms=20000)
        self.assertEqual(incoming[0], (self.rank - 1) % self.size)

    def test_split(self):
        half = comm.split(self.rank % 2, key=self.rank)
        with half:
            one = array.array("i", [1])
            half.all_reduce(one)
            self.assertEqual(one[0], half.size)
        self.assertIsNone(comm.split(-1))  # takes part, gets no communicator

    @unittest.skipIf(numpy is None, "numpy is not installed")
    def test_numpy_strided_async(self):
        np = numpy
        wide = np.zeros((4, 2), np.float32)
        work = comm.all_reduce(np.full(4, self.rank + 1, np.float32), wide[:, 0], async_op=True)
        work.wait()
        np.testing.assert_array_equal(wide[:, 0], self.size * (self.size + 1) / 2)
        np.testing.assert_array_equal(wide[:, 1], 0)

    def test_size_mismatch_is_caught_before_issuing(self):
        with self.assertRaises(cohort.ShapeMismatchError):
            comm.all_gather(array.array("f", [1.0]), array.array("f", [0.0] * (self.size + 1)))
        with self.assertRaises(cohort.ShapeMismatchError):
            comm.all_reduce(array.array("f", [1.0]), array.array("i", [0]))
        self.assertEqual(comm.status(), (cohort.Status.OK, -1, ""))

    def test_wait_releases_the_gil(self):
        # Rank 0 blocks in a barrier that rank 1 joins only after a message rank 0 sends from
        # another Python thread: that thread runs only if the waiting call released the GIL.
        if self.size < 2:
            self.skipTest("needs two ranks")
        side = comm.split(0, key=self.rank)
        try:
            if self.rank == 0:
                thread = threading.Thread(target=lambda: (time.sleep(0.2),
                                                          side.send(array.array("i", [7]), peer=1)))
                thread.start()
                comm.barrier()
                thread.join()
            else:
                flag = array.array("i", [0])
                if self.rank == 1:
                    side.recv(flag, peer=0)
                    self.assertEqual(flag[0], 7)
                comm.barrier()
        finally:
            side.close()


class RegisteredMemoryTest(unittest.TestCase):
    """Collectives in registered memory (Comm.alloc), 512 KiB per rank so that they run in place
    where the ranks share a host (from 256 KiB), checked against values computed here. Every rank
    allocates and frees the same buffers in the same order."""

    N = 1 << 17  # f32 elements per rank

    def setUp(self):
        self.rank, self.size = comm.rank, comm.size
        self.total = self.size * (self.size + 1) // 2  # sum over ranks of (rank + 1)

    def fill(self, buf, values):
        with memoryview(buf) as view:
            view[:] = array.array(view.format, values)

    def test_all_reduce_in_place(self):
        n = self.N
        with comm.alloc(n, "f32") as buf:
            self.assertEqual((len(buf), buf.nbytes, buf.dtype), (n, 4 * n, cohort.F32))
            with memoryview(buf) as view:
                self.assertEqual((view.format, view.shape), ("f", (n,)))
                self.assertFalse(any(view.tolist()), "registered memory starts zeroed")
            self.fill(buf, ((self.rank + 1) * (i % 13) for i in range(n)))
            comm.all_reduce(buf)
            with memoryview(buf) as view:
                self.assertEqual(view.tolist(), [float(self.total * (i % 13)) for i in range(n)])

    def test_int64_max_from_one_buffer_into_another(self):
        n = self.N // 2
        with comm.alloc(n, "i64") as mine, comm.alloc(n, cohort.I64) as top:
            self.fill(mine, ((self.rank * n + i) * (1 if i % 2 == 0 else -1) for i in range(n)))
            comm.all_reduce(mine, top, op="max")
            with memoryview(top) as view:
                self.assertEqual(view.tolist(), [(self.size - 1) * n + i if i % 2 == 0 else -i for i in range(n)])

    def test_reduce_scatter_then_all_gather_async(self):
        n, size = self.N, self.size
        with comm.alloc(size * n) as blocks, comm.alloc(n) as part, comm.alloc(size * n) as gathered:
            self.fill(blocks, ((self.rank + 1) * (j % 13) for j in range(size * n)))
            comm.reduce_scatter(blocks, part)
            with memoryview(part) as view:
                self.assertEqual(view.tolist(), [float(self.total * ((self.rank * n + i) % 13)) for i in range(n)])
            work = comm.all_gather(part, gathered, async_op=True)
            with self.assertRaises(BufferError):
                gathered.free()  # the Work holds it until the operation completes
            work.wait()
            work.close()
            with memoryview(gathered) as view:
                self.assertEqual(view.tolist(), [float(self.total * (j % 13)) for j in range(size * n)])

    def test_bf16_takes_its_dtype_from_the_buffer(self):
        with comm.alloc(4, "bf16") as buf:
            self.fill(buf, [0x3F80] * 4)  # 1.0 as bf16 bits, in uint16 'H' storage
            comm.all_reduce(buf)  # no dtype=: the buffer knows it is bf16
            with memoryview(buf) as view:
                expected = array.array("f", [float(self.size)]).tobytes()[2:]  # the upper half of the f32
                self.assertEqual(view.tolist(), [int.from_bytes(expected, "little")] * 4)

    @unittest.skipIf(numpy is None, "numpy is not installed")
    def test_numpy_views_share_the_memory(self):
        np = numpy
        with comm.alloc(self.N, "f32") as buf:
            a = np.asarray(buf)
            a[:] = self.rank + 1
            comm.all_reduce(a[1:], op="max")  # a view inside the registered memory
            self.assertEqual(float(a[0]), self.rank + 1)
            np.testing.assert_array_equal(a[1:], self.size)
            del a  # released before the buffer is freed at the end of the block


class DataParallelTest(unittest.TestCase):
    def train(self, plan, steps=6):
        with classifier(batch=4) as graph, cohort.Optimizer("sgd", lr=0.2) as optimizer:
            trainer = cohort.Trainer(graph, optimizer, seed=11, plan=plan, comm=comm)
        x, y = learnable_batch(batch=4, offset=comm.rank)  # a different shard per rank
        losses = [trainer.step(x=x, y=y) for _ in range(steps)]
        return trainer, losses

    def assertSameOnEveryRank(self, values):
        low = array.array("f", values)
        high = array.array("f", values)
        comm.all_reduce(low, op="max")
        for i, v in enumerate(high):
            high[i] = -v
        comm.all_reduce(high, op="max")
        self.assertEqual(list(low), [-v for v in high])

    def test_pipeline(self):
        # Two stages (fc1 on rank 0, out on rank 1), every rank fed the same rows in 2 micro-batches.
        with classifier(batch=4) as graph, cohort.Optimizer("sgd", lr=0.2) as optimizer, \
                cohort.Plan("ddp", pipeline_stages=2, micro_batches=2, pipeline_schedule=0, pipeline_cuts="out") as plan:
            trainer = cohort.Trainer(graph, optimizer, seed=11, plan=plan, comm=comm)
        with trainer:
            x, y = learnable_batch(batch=4)
            losses = [trainer.step(x=x, y=y) for _ in range(6)]
            self.assertLess(losses[-1], losses[0])
            self.assertSameOnEveryRank(losses)  # the last stage's loss, broadcast
            stats = trainer.stats()
            self.assertEqual(stats.micro_batches, 2)
            self.assertGreaterEqual(stats.pipeline_bubble_fraction, 0.0)
            self.assertLess(stats.pipeline_bubble_fraction, 1.0)
            self.assertGreater(stats.pipeline_busy_seconds, 0.0)
            stages = trainer.pipeline_stages()
            if comm.rank == 0:
                self.assertRegex(stages, r"stage 0: nodes .*\nstage 1: nodes [0-9]+-[0-9]+ 'out' ")
            else:
                self.assertEqual(stages, "")

    def test_plan_choose(self):
        # The planner chooses the layout for the global batch (4 rows a rank under plain data
        # parallelism); every rank gets the same options, rank 0 the report, and they train.
        size = comm.size
        with classifier(batch=4 * size) as graph, cohort.Optimizer("sgd", lr=0.2) as optimizer:
            options, report = cohort.Plan.choose(graph, optimizer, comm, "ddp", tau=1, bucket_bytes=1 << 20)
        if comm.rank == 0:
            self.assertIn("auto plan: chose", report)
        else:
            self.assertEqual(report, "")
        self.assertEqual(options["preset"], cohort.Preset.DDP)
        self.assertEqual(options["automatic"], 0)
        self.assertEqual(options["bucket_bytes"], 1 << 20)
        layout = ("data_parallel", "tensor_x", "tensor_y", "tensor_z", "sequence_parallel", "pipeline_stages",
                  "pipeline_chunks", "micro_batches", "pipeline_schedule", "zero_stage", "activation_checkpointing")
        self.assertSameOnEveryRank([float(options[k]) for k in layout])
        degree = options["pipeline_stages"] * options["tensor_x"] * options["tensor_y"] * options["tensor_z"]
        rows = 4 * size // (size // degree * options["tensor_z"])
        with classifier(batch=rows) as graph, cohort.Optimizer("sgd", lr=0.2) as optimizer, \
                cohort.Plan(**options) as plan:
            trainer = cohort.Trainer(graph, optimizer, seed=11, plan=plan, comm=comm)
        with trainer:
            x, y = learnable_batch(batch=rows, offset=comm.rank)
            loss = trainer.step(x=x, y=y)
            self.assertTrue(math.isfinite(loss))

    def test_ddp(self):
        with cohort.Plan("ddp") as plan:
            trainer, losses = self.train(plan)
        with trainer:
            self.assertLess(losses[-1], losses[0])
            self.assertSameOnEveryRank(trainer.get_parameter("fc1.weight").tolist()[0])
            stats = trainer.parallel_stats()
            self.assertEqual(stats.rounds, 6)
            self.assertGreaterEqual(stats.buckets, 1)
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, f"rank{comm.rank}.ckpt")
                trainer.save_parallel_checkpoint(path)
                trainer.load_parallel_checkpoint(path)

    def test_zero3(self):
        with cohort.Plan("ddp", zero_stage=3, bucket_bytes=64) as plan:
            trainer, losses = self.train(plan)
        with trainer:
            self.assertLess(losses[-1], losses[0])
            stats = trainer.parallel_stats()
            self.assertGreater(stats.parameter_gathers_prefetched, 0)
            self.assertGreater(stats.buckets, 1)
            self.assertGreater(stats.peak_parameter_bytes, 0)
            trainer.gather_parameters()  # every rank, so that one could read alone
            self.assertSameOnEveryRank(trainer.get_parameter("fc1.weight").tolist()[0])

    def test_localsgd(self):
        with cohort.Plan("localsgd", tau=3) as plan:
            trainer, losses = self.train(plan, steps=6)
        with trainer:
            self.assertEqual(trainer.parallel_stats().rounds, 2)
            self.assertSameOnEveryRank(trainer.get_parameter("out.bias").tolist())

    def test_co2_stats(self):
        # co2's round shape, outer synchronisation and the split of its waits reach Python.
        with cohort.Plan("co2", tau=2, outer_fragments=2) as plan:
            trainer, losses = self.train(plan, steps=8)
        with trainer:
            stats = trainer.parallel_stats()
            self.assertEqual(stats.rounds, 4)
            self.assertEqual((stats.tau, stats.overlap_steps, stats.outer_fragments), (2, 1, 2))
            self.assertEqual(stats.outer_syncs, 8)  # a fragment's collective a round each
            self.assertGreater(stats.outer_sync_bytes, 0)
            self.assertTrue(0.0 <= stats.outer_hidden_fraction <= 1.0)
            self.assertEqual((stats.shard_group, stats.grad_keep), (1, 1.0))
            self.assertTrue(0.0 <= stats.outer_shared_wait_seconds <= stats.wait_seconds)

    def test_replica_average(self):
        # Two steps into a round of 4 the replicas differ; reads see their mean until the next step.
        with cohort.Plan("localsgd", tau=4) as plan:
            trainer, _ = self.train(plan, steps=6)
        with trainer:
            own = array.array("f", trainer.get_parameter("out.bias").tolist())
            self.assertTrue(trainer.average_replicas())
            average = trainer.get_parameter("out.bias").tolist()
            self.assertSameOnEveryRank(average)
            mean = array.array("f", own)
            comm.all_reduce(mean, op="sum")
            for got, want in zip(average, mean):
                self.assertAlmostEqual(got, want / comm.size, places=6)
            x, y = learnable_batch(batch=4, offset=comm.rank)
            trainer.step(x=x, y=y)  # from this rank's own parameters
            self.assertEqual(trainer.parallel_stats().rounds, 1)

    def test_local_files_resume_under_ddp_at_the_average(self):
        # Mid-round each rank's file holds its own replica and its own momenta; DDP resumed from
        # them starts every replica at their mean, momenta included (their all-reduced gradients
        # would keep them apart otherwise), and the replicas stay alike as they train on.
        def trainer_for(plan):
            with classifier(batch=4) as graph, cohort.Optimizer("sgd", lr=0.2, momentum=0.9) as optimizer:
                return cohort.Trainer(graph, optimizer, seed=11, plan=plan, comm=comm)
        x, y = learnable_batch(batch=4, offset=comm.rank)
        with cohort.Plan("localsgd", tau=4) as plan:
            trainer = trainer_for(plan)
        with trainer, tempfile.TemporaryDirectory() as tmp:
            for _ in range(6):
                trainer.step(x=x, y=y)
            path = os.path.join(tmp, f"rank{comm.rank}.ckpt")
            own = array.array("f", trainer.get_parameter("out.bias").tolist())
            trainer.save_checkpoint(path)
            mean = array.array("f", own)
            comm.all_reduce(mean, op="sum")
            with cohort.Plan("ddp") as ddp_plan:
                resumed = trainer_for(ddp_plan)
            with resumed:
                resumed.load_checkpoint(path)  # every rank at once: a collective here
                got = resumed.get_parameter("out.bias").tolist()
                self.assertSameOnEveryRank(got)
                for g, want in zip(got, mean):
                    self.assertAlmostEqual(g, want / comm.size, places=6)
                if comm.size > 1:
                    self.assertNotEqual(list(own), [float(v) for v in array.array("f", got)])
                for _ in range(2):
                    resumed.step(x=x, y=y)
                self.assertSameOnEveryRank(resumed.get_parameter("out.bias").tolist())

    def test_tensor_parallel(self):
        # Megatron 1D over every rank: fc1 -> relu -> out split column- then row-parallel. Every
        # rank steps on the same rows and must see the loss one process sees on them.
        # get_parameter with the graph's (whole) shape gathers a split parameter on every rank.
        x, y = learnable_batch(batch=4)
        with classifier(batch=4) as graph, cohort.Optimizer("sgd", lr=0.2) as optimizer:
            with cohort.Trainer(graph, optimizer, seed=11) as alone:
                want = [alone.step(x=x, y=y) for _ in range(4)]
                want_fc1 = alone.get_parameter("fc1.weight").tolist()
            with cohort.Plan("ddp", tensor_y=comm.size) as plan:
                trainer = cohort.Trainer(graph, optimizer, seed=11, plan=plan, comm=comm)
        with trainer:
            got = [trainer.step(x=x, y=y) for _ in range(4)]
            got_fc1 = trainer.get_parameter("fc1.weight").tolist()
        for a, b in zip(want, got):
            self.assertAlmostEqual(a, b, delta=1e-5 * abs(a))
        self.assertSameOnEveryRank(got)
        for row_want, row_got in zip(want_fc1, got_fc1):
            for a, b in zip(row_want, row_got):
                self.assertAlmostEqual(a, b, delta=1e-5)

    def test_plan_that_does_not_fit(self):
        with cohort.Plan("ddp", data_parallel=comm.size + 1) as plan:
            with self.assertRaises(cohort.InvalidPlanError):
                self.train(plan)


if __name__ == "__main__":
    unittest.main()
