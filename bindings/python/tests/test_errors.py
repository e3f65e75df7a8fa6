"""Every failure reaches Python as the cohort.Error subclass of its status, with cohort's message."""
import array
import gc
import os
import tempfile
import unittest
import weakref

import cohort
from support import classifier, learnable_batch


class ErrorTest(unittest.TestCase):
    def setUp(self):
        self.graph = classifier(batch=8, features=4)
        self.optimizer = cohort.Optimizer()
        self.trainer = cohort.Trainer(self.graph, self.optimizer, seed=1)
        self.x, self.y = learnable_batch(batch=8, features=4)

    def tearDown(self):
        for handle in (self.trainer, self.optimizer, self.graph):
            handle.close()

    def assertFails(self, cls, message, call, *args, **kwargs):
        """call raises exactly cls (a cohort.Error) whose text contains message."""
        with self.assertRaises(cohort.Error) as caught:
            call(*args, **kwargs)
        self.assertIs(type(caught.exception), cls, caught.exception)
        self.assertIn(message, str(caught.exception))
        self.assertEqual(caught.exception.status, cls.status)
        return caught.exception

    def test_bad_shape(self):
        self.assertFails(cohort.ShapeMismatchError, "cohort_trainer_step: step: input 'x' has shape [4, 8], "
                         "expected [8, 4]", self.trainer.step, x=cohort.Tensor(self.x, shape=(4, 8)), y=self.y)
        self.assertFails(cohort.ShapeMismatchError, "input 'x' has shape [9], expected [8, 4]",
                         self.trainer.step, x=array.array("f", bytes(4 * 9)), y=self.y)
        self.assertFails(cohort.ShapeMismatchError, "cohort_graph_add_op: matmul", self.graph.add_op,
                         "matmul", ["x", "out"])
        error = self.assertFails(cohort.ShapeMismatchError, "input 'x' is f32, but the buffer holds float64 elements (format 'd')",
                                 self.trainer.step, x=array.array("d", bytes(8 * 32)), y=self.y)
        self.assertIsInstance(error, ValueError)
        self.assertEqual(error.status_name, "shape mismatch")

    def test_closed_handles(self):
        self.graph.close()
        self.assertFails(cohort.InvalidHandleError, "cohort_graph_add_input: graph is NULL", self.graph.add_input,
                         "z", (1,))
        self.trainer.close()
        self.assertFails(cohort.InvalidHandleError, "cohort_trainer_step: trainer is NULL", self.trainer.step,
                         x=self.x, y=self.y)
        self.assertFails(cohort.InvalidHandleError, "cohort_trainer_get_stats: trainer is NULL", self.trainer.stats)
        self.optimizer.close()
        with classifier() as g:
            self.assertFails(cohort.InvalidHandleError, "cohort_trainer_create: optimizer is NULL", cohort.Trainer,
                             g, self.optimizer)
        with cohort.Comm.from_env() as comm:
            pass
        self.assertFails(cohort.InvalidHandleError, "comm is NULL", comm.all_reduce, array.array("f", [1.0]))
        self.assertFails(cohort.InvalidHandleError, "comm is NULL", lambda: comm.rank)

    def test_registered_memory(self):
        comm = cohort.Comm.from_env()
        buf = comm.alloc(8, "i32")
        self.assertIsInstance(buf, cohort.RegisteredBuffer)
        self.assertIs(buf.comm, comm)
        with self.assertRaisesRegex(TypeError, "cannot create"):
            cohort.RegisteredBuffer()
        # Free and close refuse while a view is alive, and change nothing.
        view = memoryview(buf)
        with self.assertRaisesRegex(BufferError, r"RegisteredBuffer.free: 1 export\(s\) of the memory are alive"):
            buf.free()
        with self.assertRaisesRegex(BufferError, "Comm.close: registered buffer of 8 i32 still has 1 export"):
            comm.close()
        self.assertFalse(comm.closed or buf.freed)
        view[7] = 42  # still mapped
        view.release()
        # An operation in flight holds the buffer too.
        work = comm.all_reduce(buf, async_op=True)
        with self.assertRaisesRegex(BufferError, "operations in flight"):
            buf.free()
        work.wait()
        self.assertEqual(memoryview(buf)[7], 42)
        work.close()
        buf.free()
        self.assertTrue(buf.freed)
        # Free twice, use after free.
        self.assertFails(cohort.InvalidHandleError, "RegisteredBuffer.free: the registered buffer of 8 i32 was freed",
                         buf.free)
        self.assertFails(cohort.InvalidHandleError, "the registered buffer of 8 i32 was freed", memoryview, buf)
        self.assertFails(cohort.InvalidHandleError, "cohort_comm_all_reduce: buf: the registered buffer of 8 i32 "
                         "was freed", comm.all_reduce, buf)
        self.assertFails(cohort.InvalidHandleError, "cohort_trainer_step: input 'x': the registered buffer",
                         self.trainer.step, x=buf, y=self.y)
        self.assertEqual(len(buf), 8)
        # Sizes and dtypes.
        self.assertFails(cohort.InvalidArgumentError, "cohort_comm_mem_alloc: allocate: 0 bytes", comm.alloc, 0)
        self.assertFails(cohort.InvalidArgumentError, "Comm.alloc: count must be 1..", comm.alloc, -1)
        self.assertFails(cohort.InvalidArgumentError, "more than any host has", comm.alloc, 1 << 50)
        with self.assertRaisesRegex(ValueError, "not a cohort dtype"):
            comm.alloc(4, "f64")
        # Free after the communicator closed: its memory was released with it.
        kept = comm.alloc(4, "f16")
        self.assertEqual(memoryview(kept).format, "H")
        comm.close()
        self.assertTrue(kept.freed)
        self.assertIn("released with its communicator", repr(kept))
        self.assertFails(cohort.InvalidHandleError, "was released when its communicator was closed", kept.free)
        self.assertFails(cohort.InvalidHandleError, "was released when its communicator was closed", memoryview,
                         kept)
        self.assertFails(cohort.InvalidHandleError, "cohort_comm_mem_alloc: comm is NULL", comm.alloc, 4)

    def test_registered_memory_lifetime(self):
        # A buffer keeps its communicator alive; garbage collection does not free it (that is
        # collective), the communicator releases it.
        buf = cohort.Comm.from_env().alloc(4)
        gc.collect()
        comm = buf.comm
        self.assertFalse(comm.closed)
        with buf:
            memoryview(buf)[0] = 1.5
        self.assertTrue(buf.freed)  # the with block freed it
        with self.assertRaisesRegex(BufferError, "RegisteredBuffer.free: 1 export"):
            with comm.alloc(4) as held:
                view = memoryview(held)
        view.release()
        held.free()
        with self.assertRaisesRegex(KeyError, "the block's own error"):  # not hidden by a BufferError
            with comm.alloc(4) as held:
                view = memoryview(held)
                raise KeyError("the block's own error")
        self.assertFalse(held.freed)  # left to the communicator
        view.release()
        dropped = weakref.ref(comm.alloc(16))
        gc.collect()
        self.assertIsNone(dropped())
        comm.close()

    def test_failed_communicator_keeps_buffers_until_close(self):
        # A send to a rank that froze may outlive its failed operation: once the communicator
        # has failed, the buffers stay referenced until close() destroys it. A bytearray shows it
        # (it cannot be resized while exported).
        def exported(buf):
            try:
                buf.extend(b"1234")
            except BufferError:
                return True
            del buf[-4:]
            return False

        comm = cohort.Comm.from_env()
        healthy = bytearray(16)
        work = comm.all_reduce(healthy, dtype="f32", async_op=True)
        self.assertTrue(exported(healthy))  # the Work holds it until it is waited for
        work.wait()
        self.assertFalse(exported(healthy))  # a healthy communicator lets go at once
        work.close()
        registered = comm.alloc(4)
        comm.abort()
        kept, sync = bytearray(16), bytearray(16)
        work = comm.all_reduce(kept, dtype="f32", async_op=True)
        self.assertFails(cohort.InvalidStateError, "aborted", work.wait)
        work.close()
        self.assertTrue(exported(kept))
        self.assertFails(cohort.InvalidStateError, "cohort_comm_all_reduce: communicator 'world'",
                         comm.all_reduce, sync, dtype="f32")
        self.assertTrue(exported(sync))
        # Registered memory is the communicator's: not held, so close() does not refuse.
        work = comm.all_reduce(registered, async_op=True)
        self.assertRaises(cohort.InvalidStateError, work.wait)
        work.close()
        comm.close()
        self.assertFalse(exported(kept) or exported(sync))
        self.assertTrue(registered.freed)

    def test_invalid_plan(self):
        self.assertFails(cohort.InvalidPlanError, "tau = 0 must be >= 1", cohort.Plan, mode="localsgd", tau=0)
        self.assertFails(cohort.UnsupportedError, "ZeRO stage 3 needs the sync (DDP) mode", cohort.Plan, mode="co2",
                         tau=2, zero_stage=3)
        self.assertFails(cohort.InvalidPlanError, "inner_noise_scaling applies to local steps", cohort.Plan,
                         inner_noise_scaling=1)
        cohort.Plan("co2", tau=2, inner_noise_scaling=1).close()
        self.assertFails(cohort.InvalidPlanError, "average_inner_state applies to localsgd's blocking round ends",
                         cohort.Plan, "co2", tau=2, average_inner_state=1)
        cohort.Plan("diloco", tau=4, average_inner_state=1).close()
        self.assertFails(cohort.InvalidPlanError, "overlap = 3 must be in [1, tau = 2]", cohort.Plan, "co2", tau=2,
                         overlap_steps=3)
        cohort.Plan("co2", tau=2, overlap_steps=-1).close()  # auto
        self.assertFails(cohort.InvalidPlanError, "outer bits = 6", cohort.Plan, "co2", tau=2, outer_bits=6)
        self.assertFails(cohort.InvalidPlanError, "outer bits = 8", cohort.Plan, "diloco", tau=2, outer_bits=8)
        cohort.Plan("co2", tau=2, outer_bits=4).close()
        self.assertFails(cohort.InvalidPlanError, "plan: outer_fragments = 3 must be <= tau = 2", cohort.Plan, "co2",
                         tau=2, outer_fragments=3)
        self.assertFails(cohort.UnsupportedError, "plan: outer_fragments = 2 applies to", cohort.Plan, "ddp",
                         outer_fragments=2)
        cohort.Plan("diloco", tau=4, outer_fragments=4).close()
        self.assertFails(cohort.InvalidPlanError, "plan: shard_group = 2 runs ZeRO over each replica's ranks",
                         cohort.Plan, "diloco", tau=4, shard_group=2)
        self.assertFails(cohort.UnsupportedError, "plan: shard_group = 2 applies to localsgd / co2", cohort.Plan,
                         "ddp", zero_stage=3, shard_group=2)
        cohort.Plan("co2", tau=4, zero_stage=3, shard_group=2).close()
        self.assertFails(cohort.InvalidPlanError, "plan: grad_keep = 1.5 must be in (0, 1]", cohort.Plan, "ddp",
                         grad_keep=1.5)
        self.assertFails(cohort.UnsupportedError, "plan: grad_keep = 0.1 compresses the sync mode's gradients",
                         cohort.Plan, "co2", tau=4, grad_keep=0.1)
        cohort.Plan("ddp", grad_keep=0.1).close()
        self.assertFails(cohort.InvalidPlanError, "plan: tensor_y = 0 must be in 1..65536", cohort.Plan, tensor_y=0)
        self.assertFails(cohort.InvalidPlanError, "plan: tensor_z = 0 must be in 1..65536", cohort.Plan, tensor_z=0)
        cohort.Plan(tensor_x=2, tensor_y=2, tensor_z=2).close()  # AxoNN's 3D grid (fitted to a world later)
        self.assertFails(cohort.InvalidPlanError, "plan: sequence parallelism splits the tokens over tensor_y, which is 1",
                         cohort.Plan, sequence_parallel=1)
        cohort.Plan(tensor_y=2, sequence_parallel=1).close()
        self.assertFails(cohort.InvalidPlanError, "plan: sequence_parallel = 3 (0 none, 1 Megatron's, 2 all-to-all)",
                         cohort.Plan, tensor_y=2, sequence_parallel=3)
        cohort.Plan("co2", tau=2, tensor_y=2, tensor_overlap_off=1).close()
        # Pipeline parallelism: 0 keeps the defaults; each bad value named.
        cohort.Plan(pipeline_stages=0, pipeline_chunks=0, micro_batches=0).close()
        self.assertFails(cohort.InvalidPlanError, "plan: pipeline_stages = -1 must be in [1, 65536]", cohort.Plan,
                         pipeline_stages=-1)
        self.assertFails(cohort.InvalidPlanError, "plan: micro_batches = -2 must be >= 1", cohort.Plan, micro_batches=-2)
        self.assertFails(cohort.InvalidPlanError, "plan: unknown pipeline_schedule 5", cohort.Plan, pipeline_stages=2,
                         pipeline_schedule=5)
        self.assertFails(cohort.InvalidPlanError, "plan: pipeline_chunks = 2 needs the interleaved schedule", cohort.Plan,
                         pipeline_stages=2, pipeline_chunks=2)
        cohort.Plan(pipeline_stages=2, pipeline_chunks=2, micro_batches=4,
                    pipeline_schedule=cohort.capi.COHORT_PIPELINE_INTERLEAVED).close()
        self.assertFails(cohort.InvalidPlanError, "plan: pipeline_cuts names 2 node(s); 2 stages need 1", cohort.Plan,
                         pipeline_stages=2, pipeline_cuts="fc1,out")
        self.assertFails(cohort.InvalidPlanError, "plan: pipeline_cuts names 2 node(s); 2 stages need 1", cohort.Plan,
                         pipeline_stages=2, pipeline_cuts=["act", "out"])
        cohort.Plan(pipeline_stages=2, pipeline_cuts=["out"]).close()
        with cohort.Plan(micro_batches=3) as plan:  # the classifier's batch is 8
            with cohort.Comm.from_env() as comm:
                self.assertFails(cohort.InvalidPlanError, "plan: micro_batches = 3 does not divide the batch 8",
                                 cohort.Trainer, self.graph, self.optimizer, plan=plan, comm=comm)
        # Automatic plans: auto_trials and memory_limit_bytes named; a Trainer refuses an unresolved
        # one naming cohort_plan_choose; Plan.choose in a world of one with nothing fitting names the
        # memory limit.
        self.assertFails(cohort.InvalidPlanError, "plan: auto_trials = 65 must be in [0, 64]", cohort.Plan,
                         automatic=1, auto_trials=65)
        self.assertFails(cohort.InvalidPlanError, "plan: memory_limit_bytes = -1", cohort.Plan, memory_limit_bytes=-1.0)
        with cohort.Comm.from_env() as comm:
            with cohort.Plan("ddp", automatic=1) as plan:
                self.assertFails(cohort.InvalidPlanError, "cohort_plan_choose", cohort.Trainer, self.graph,
                                 self.optimizer, plan=plan, comm=comm)
            self.assertFails(cohort.InvalidPlanError, "auto_trials = -1", cohort.Plan.choose, self.graph,
                             self.optimizer, comm, auto_trials=-1)
            self.assertFails(cohort.InvalidPlanError, "memory_limit_bytes", cohort.Plan.choose, self.graph,
                             self.optimizer, comm, memory_limit_bytes=1024.0)
            options, report = cohort.Plan.choose(self.graph, self.optimizer, comm, "ddp")
            self.assertIn("auto plan: chose", report)
            self.assertEqual(options["automatic"], 0)
            self.assertEqual((options["fence"], options["fence_compression"], options["fence_min_keep"]),
                             (False, True, None))
            with cohort.Plan(**options) as plan, cohort.Trainer(self.graph, self.optimizer, plan=plan, comm=comm) as t:
                self.assertGreater(t.step(x=self.x, y=self.y), 0.0)
        cohort.Plan("ddp", activation_checkpointing=1).close()  # a model without blocks: refused by the trainer
        with cohort.Plan("ddp") as plan:
            self.assertFalse(plan.closed)

    def test_fence_plans_and_link_probe(self):
        # pipeline_keep: one share per cut, each in (0, 1]; a bad one is InvalidPlanError naming
        # "pipeline keep". A sequence of floats or a str.
        cohort.Plan(pipeline_stages=2, pipeline_keep=[0.1]).close()
        cohort.Plan(pipeline_stages=3, pipeline_keep="1,0.1").close()
        cohort.Plan(pipeline_stages=2, pipeline_keep=None).close()
        self.assertFails(cohort.InvalidPlanError, "pipeline keep of cut 0 is 1.5", cohort.Plan, pipeline_stages=2,
                         pipeline_keep=[1.5])
        self.assertFails(cohort.InvalidPlanError, "pipeline keep of cut 1 is 0", cohort.Plan, pipeline_stages=3,
                         pipeline_keep=(0.5, 0))
        self.assertFails(cohort.InvalidPlanError, "pipeline keep gives 2 ratio(s)", cohort.Plan, pipeline_stages=2,
                         pipeline_keep=[0.5, 0.5])
        self.assertFails(cohort.InvalidPlanError, "pipeline keep", cohort.Plan, pipeline_stages=2, pipeline_keep="x")
        self.assertRaises(ValueError, cohort.Plan, pipeline_stages=2, pipeline_keep=["half"])  # float("half")
        # fence: the whole world one pipeline, so no tensor or data axes; its minimum keep in [0, 1].
        cohort.Plan(fence=True).close()
        cohort.Plan(fence=True, fence_compression=False, fence_min_keep=0.05).close()
        self.assertFails(cohort.UnsupportedError, "fence makes the whole world one pipeline", cohort.Plan, fence=True,
                         tensor_y=2)
        self.assertFails(cohort.InvalidPlanError, "plan: fence_min_keep = 2", cohort.Plan, fence=True,
                         fence_min_keep=2.0)
        self.assertFails(cohort.InvalidPlanError, "fence chooses the stages", cohort.Plan, fence=True,
                         pipeline_stages=2, pipeline_keep=[0.5])
        self.assertFails(cohort.InvalidPlanError, "fence and automatic", cohort.Plan, fence=True, automatic=1)
        with cohort.Comm.from_env() as comm:
            self.assertFails(cohort.InvalidPlanError, "fence and automatic", cohort.Plan.choose, self.graph,
                             self.optimizer, comm, fence=True)
            # World rank 0 reads the graph of a pipeline plan: None there is refused (other ranks may pass None).
            with cohort.Plan(pipeline_stages=2) as plan:
                self.assertFails(cohort.InvalidHandleError, "cohort_trainer_create_parallel: graph is NULL",
                                 cohort.Trainer, None, self.optimizer, plan=plan, comm=comm)
            # The link probe of a world of one: nothing to measure, a 1 x 1 zero matrix.
            bandwidth, latency, report = comm.probe_links()
            self.assertEqual((bandwidth, latency), ([[0.0]], [[0.0]]))
            self.assertIn("links, Mbit/s (latency ms):", report)
            self.assertIn("rank 0", report)
        self.assertFails(cohort.InvalidHandleError, "cohort_comm_probe_links: comm is NULL", comm.probe_links)

    def test_corrupt_checkpoint(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.ckpt")
            self.trainer.save_checkpoint(path)
            with open(path, "rb") as f:
                data = bytearray(f.read())
            data[len(data) // 2] ^= 0xFF
            with open(path, "wb") as f:
                f.write(data)
            before = self.trainer.get_parameter("fc1.weight").tobytes()
            self.assertFails(cohort.CorruptError, f"cohort_trainer_load_checkpoint: checkpoint '{path}'",
                             self.trainer.load_checkpoint, path)
            with open(path, "wb") as f:
                f.write(data[:100])
            self.assertFails(cohort.CorruptError, "truncated", self.trainer.load_checkpoint, path)
            self.assertEqual(self.trainer.get_parameter("fc1.weight").tobytes(), before)  # unchanged
            missing = os.path.join(tmp, "missing", "run.ckpt")
            error = self.assertFails(cohort.IOError, "No such file or directory", self.trainer.load_checkpoint,
                                     missing)
            self.assertIsInstance(error, OSError)

    def test_unknown_op_and_names(self):
        self.assertFails(cohort.NotFoundError, "cohort_graph_add_op: unknown operator 'no_such_op'",
                         self.graph.add_op, "no_such_op", ["x"])
        error = self.assertFails(cohort.NotFoundError, "'nope'", self.graph.find, "nope")
        self.assertIsInstance(error, LookupError)
        self.assertFails(cohort.NotFoundError, "the graph has no input named 'z'", self.trainer.step, x=self.x,
                         y=self.y, z=self.y)
        self.assertFails(cohort.NotFoundError, "no checkpoint value named 'nope'", self.trainer.get_checkpoint_value,
                         "nope")
        self.assertFails(cohort.NotFoundError, "parameter 'nope'", self.trainer.get_parameter, "nope")

    def test_bad_arguments(self):
        self.assertFails(cohort.InvalidArgumentError, "input 'y' is needed by the loss", self.trainer.step, x=self.x)
        self.assertFails(cohort.InvalidArgumentError, "unknown attribute 'bogus'", self.graph.add_op, "scale", ["x"],
                         bogus=1)
        self.assertFails(cohort.InvalidArgumentError, "lr = -1", cohort.Optimizer, lr=-1)
        self.assertFails(cohort.InvalidArgumentError, "gpt: heads (3) must divide width (256)", cohort.models.gpt,
                         heads=3)
        self.assertFails(cohort.InvalidArgumentError, "cohort_set_log_level: level must be 0..3, got 7",
                         cohort.set_log_level, 7)
        self.assertFails(cohort.InvalidArgumentError, "output 'out': Object is not writable", self.trainer.evaluate,
                         {"x": self.x}, {"out": bytes(96)})
        self.assertFails(cohort.InvalidArgumentError, "input 'x': a bytes-like object is required",
                         self.trainer.step, x=[1.0, 2.0], y=self.y)
        self.assertFails(cohort.InvalidArgumentError, "input 'x': a bytes-like object is required, not 'NoneType'",
                         self.trainer.step, x=None, y=self.y)
        self.assertFails(cohort.InvalidArgumentError, "parameter 'fc1.weight'", self.trainer.set_parameter,
                         "fc1.weight", None)
        with self.assertRaises(TypeError):
            cohort.Optimizer(learning_rate=0.1)

    def test_state_and_io(self):
        self.assertFails(cohort.InvalidStateError, "not data-parallel", self.trainer.parallel_stats)
        self.assertFails(cohort.InvalidStateError, "", self.trainer.save_parallel_checkpoint, "/tmp/unused.ckpt")
        self.assertFails(cohort.IOError, "dataset-fashion-mnist", cohort.Dataset.fashion_mnist, "/nonexistent")

    def test_devices(self):
        self.assertEqual(cohort.device_usable("cpu"), (True, ""))
        self.assertEqual(cohort.device_usable(cohort.Device.CPU), (True, ""))
        with cohort.Trainer(self.graph, self.optimizer, seed=1, device="cpu") as trainer:
            self.assertGreater(trainer.step(x=self.x, y=self.y), 0)
        usable, reason = cohort.device_usable("cuda")
        self.assertIs(type(usable), bool)
        self.assertEqual(cohort.device_usable(cohort.Device.CUDA), (usable, reason))
        if usable:
            self.assertEqual(reason, "")
            with cohort.Trainer(self.graph, self.optimizer, seed=1, device="cuda") as trainer:
                self.assertGreater(trainer.step(x=self.x, y=self.y), 0)
        else:
            self.assertTrue(reason)
            error = self.assertFails(cohort.UnsupportedError, reason, cohort.Trainer, self.graph, self.optimizer,
                                     device="cuda")
            self.assertIn("cuda", str(error).lower())
        # Data parallelism on the GPU: runs where the device can be used, refused with the reason elsewhere.
        with cohort.Comm.from_env() as comm, cohort.Plan("ddp") as plan:
            if usable:
                with cohort.Trainer(self.graph, self.optimizer, seed=1, device="cuda", plan=plan, comm=comm) as trainer:
                    self.assertGreater(trainer.step(x=self.x, y=self.y), 0)
            else:
                error = self.assertFails(cohort.UnsupportedError, reason, cohort.Trainer, self.graph, self.optimizer,
                                         device="cuda", plan=plan, comm=comm)
                self.assertIn("cuda", str(error).lower())
        # Unknown devices: by name or value in Python, by value in C.
        for bad in ("tpu", "gpu", 7):
            with self.assertRaisesRegex(ValueError, repr(bad)):
                cohort.Trainer(self.graph, self.optimizer, device=bad)
            with self.assertRaisesRegex(ValueError, repr(bad)):
                cohort.device_usable(bad)
        self.assertFails(cohort.InvalidArgumentError, "cohort_device_usable: device = 7 is not a cohort_device",
                         cohort.capi.cohort_device_usable, 7)

    def test_non_finite_step(self):
        self.trainer.step(x=self.x, y=self.y)
        before = self.trainer.stats().step
        x = array.array("f", self.x)
        x[3] = float("nan")
        error = self.assertFails(cohort.NonFiniteError, "the update was skipped", self.trainer.step, x=x, y=self.y)
        self.assertIsInstance(error, ArithmeticError)
        self.assertEqual(self.trainer.stats().step, before)  # the trainer is as before: go on
        self.trainer.step(x=self.x, y=self.y)
        self.assertEqual(self.trainer.stats().step, before + 1)

    def test_hierarchy(self):
        for status in cohort.Status:
            if status == cohort.Status.OK:
                continue
            cls = cohort._errors.error_class(status)
            self.assertTrue(issubclass(cls, cohort.Error))
            self.assertEqual(cls.status, status)
        self.assertTrue(issubclass(cohort.TimeoutError, TimeoutError))
        self.assertTrue(issubclass(cohort.OutOfMemoryError, MemoryError))


if __name__ == "__main__":
    unittest.main()
