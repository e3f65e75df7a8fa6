"""Batches from any object with the buffer protocol, used in place where the layout allows;
results as buffers. The numpy tests skip when numpy is not installed."""
import array
import unittest

import cohort
from support import classifier, have_fashion_mnist, learnable_batch, numpy


class BufferTest(unittest.TestCase):
    def setUp(self):
        self.graph = classifier(batch=8, features=4, hidden=16, classes=3)
        self.optimizer = cohort.Optimizer("sgd", lr=0.1)
        self.x, self.y = learnable_batch(batch=8, features=4)

    def tearDown(self):
        self.optimizer.close()
        self.graph.close()

    def losses(self, x, y, steps=3):
        """Losses of a fresh trainer (same seed) stepping on x, y."""
        with cohort.Trainer(self.graph, self.optimizer, seed=9) as trainer:
            return [trainer.step(x=x, y=y) for _ in range(steps)]

    def test_array_array(self):
        reference = self.losses(self.x, self.y)
        self.assertEqual(len(reference), 3)
        self.assertLess(reference[-1], reference[0])

    def test_memoryview(self):
        reference = self.losses(self.x, self.y)
        self.assertEqual(self.losses(memoryview(self.x), memoryview(self.y)), reference)
        shaped = memoryview(self.x).cast("B").cast("f", (8, 4))
        self.assertEqual(self.losses(shaped, memoryview(self.y)), reference)
        # Raw bytes take the dtype the graph declares.
        self.assertEqual(self.losses(bytearray(self.x.tobytes()), bytes(self.y.tobytes())), reference)
        self.assertEqual(self.losses(cohort.Tensor(self.x.tobytes(), "f32", (8, 4)), self.y), reference)

    def test_results_are_buffers(self):
        with cohort.Trainer(self.graph, self.optimizer, seed=9) as trainer:
            logits = trainer.evaluate({"x": self.x})["out"]
            self.assertEqual((logits.format, logits.shape, logits.readonly), ("f", (8, 3), False))
            weight = trainer.get_parameter("fc1.weight")
            self.assertEqual(len(bytes(weight)), 16 * 4 * 4)
            trainer.set_parameter("fc1.weight", weight)  # a result feeds back in

    def test_strided_memoryview_is_copied(self):
        wide = array.array("f", bytes(4 * 8 * 8))
        for i in range(8):
            for j in range(4):
                wide[i * 8 + 2 * j] = self.x[i * 4 + j]
        strided = memoryview(wide)[::2]  # every other element: not contiguous
        self.assertFalse(strided.c_contiguous)
        self.assertEqual(self.losses(strided, self.y), self.losses(self.x, self.y))

    @unittest.skipIf(numpy is None, "numpy is not installed")
    def test_numpy(self):
        np = numpy
        reference = self.losses(self.x, self.y)
        x = np.frombuffer(self.x, dtype=np.float32).reshape(8, 4).copy()
        y = np.array(self.y, dtype=np.int32)
        self.assertEqual(self.losses(x, y), reference)
        # Non-contiguous: a transposed view of the transpose, and a strided slice.
        self.assertEqual(self.losses(np.ascontiguousarray(x.T).T, y), reference)
        padded = np.zeros((8, 8), np.float32)
        padded[:, :4] = x
        self.assertFalse(padded[:, :4].flags.c_contiguous)
        self.assertEqual(self.losses(padded[:, :4], y), reference)
        self.assertEqual(self.losses(x, y.astype(np.int64).astype(np.int32)), reference)
        with self.assertRaises(cohort.ShapeMismatchError):
            self.losses(x.astype(np.float64), y)
        with self.assertRaises(cohort.ShapeMismatchError):
            self.losses(x.reshape(4, 8), y)  # a shaped buffer must match

    @unittest.skipIf(numpy is None, "numpy is not installed")
    def test_numpy_outputs_in_place(self):
        np = numpy
        with cohort.Trainer(self.graph, self.optimizer, seed=9) as trainer:
            out = np.full((8, 3), np.nan, np.float32)
            self.assertIs(trainer.evaluate({"x": self.x}, {"out": out})["out"], out)
            self.assertFalse(np.isnan(out).any())
            allocated = np.asarray(trainer.evaluate({"x": self.x})["out"])
            np.testing.assert_array_equal(allocated, out)
            # A strided output gets the results copied back.
            wide = np.zeros((8, 6), np.float32)
            trainer.evaluate({"x": self.x}, {"out": wide[:, ::2]})
            np.testing.assert_array_equal(wide[:, ::2], out)
            self.assertFalse(wide[:, 1::2].any())
            weight = np.empty((16, 4), np.float32)
            trainer.get_parameter("fc1.weight", out=weight)
            trainer.set_parameter("fc1.weight", weight * 2)
            np.testing.assert_array_equal(np.asarray(trainer.get_parameter("fc1.weight")), weight * 2)
            # Results share memory with the views cohort returns.
            view = trainer.evaluate({"x": self.x})["out"]
            as_array = np.asarray(view)
            as_array[0, 0] = 42.0
            self.assertEqual(view[0, 0], 42.0)

    @unittest.skipUnless(have_fashion_mnist(), "Fashion-MNIST is not installed (dataset-fashion-mnist)")
    def test_batches_into_shaped_buffers(self):
        with cohort.Dataset.fashion_mnist(split="validation") as test, \
                cohort.Sampler(test, shuffle=False) as sampler:
            images = memoryview(bytearray(4 * 2 * 784)).cast("f", (2, 1, 28, 28))
            labels = array.array("i", [0, 0])
            test.next_batch(sampler, images, labels)  # the batch from the images' shape
            if numpy is not None:
                again = numpy.zeros((2, 784), numpy.float32)
                sampler.position = (0, 0)
                test.next_batch(sampler, again, numpy.zeros(2, numpy.int32))
                self.assertEqual(again.tobytes(), images.tobytes())
            with self.assertRaises(cohort.InvalidArgumentError):
                test.next_batch(sampler, bytes(4 * 784), labels)  # not writable


class ElementTypeTest(unittest.TestCase):
    """A buffer's element type comes from its format, never from its byte count (issue #25): a
    uint8 array four times as long as the f32 batch once trained on garbage, and one of the right
    length was reported as a batch of the wrong size."""

    def setUp(self):
        self.graph = classifier(batch=8, features=4, hidden=16, classes=3)
        self.optimizer = cohort.Optimizer("sgd", lr=0.1)
        self.trainer = cohort.Trainer(self.graph, self.optimizer, seed=9)
        self.x, self.y = learnable_batch(batch=8, features=4)

    def tearDown(self):
        for handle in (self.trainer, self.optimizer, self.graph):
            handle.close()

    def refused(self, message, call, *args, **kwargs):
        with self.assertRaises(cohort.ShapeMismatchError) as caught:
            call(*args, **kwargs)
        self.assertIn(message, str(caught.exception))
        return str(caught.exception)

    def test_one_byte_elements_are_not_read_as_the_declared_dtype(self):
        step = self.trainer.step
        as_many_bytes = array.array("B", bytes(4 * 8 * 4))  # the byte count of the f32 batch
        self.refused("cohort_trainer_step: input 'x' is f32, but the buffer holds uint8 elements (format 'B')",
                     step, x=as_many_bytes, y=self.y)
        text = self.refused("input 'x' is f32, but the buffer holds int8 elements (format 'b')",
                            step, x=array.array("b", bytes(8 * 4)), y=self.y)
        self.assertNotIn("shape", text)  # not "has shape [2, 4], expected [8, 4]"
        self.refused("input 'x' is f32, but the buffer holds uint8 elements",
                     step, x=memoryview(self.x).cast("B"), y=self.y)
        self.refused("input 'y' is i32, but the buffer holds uint8 elements",
                     step, x=self.x, y=array.array("B", bytes(4 * 8)))
        self.refused("input 'x' is f32, but the buffer holds uint16 elements (format 'H')",
                     step, x=array.array("H", bytes(4 * 8 * 4)), y=self.y)
        # Untyped memory takes the declared dtype; an explicit dtype reads one-byte elements as
        # raw bytes.
        reference = cohort.Trainer(self.graph, self.optimizer, seed=9)
        with reference:
            expected = reference.step(x=self.x, y=self.y)
        self.assertEqual(step(x=cohort.Tensor(array.array("B", self.x.tobytes()), "f32"),
                              y=bytearray(self.y.tobytes())), expected)

    def test_wider_and_other_elements_are_refused_by_name(self):
        step = self.trainer.step
        self.refused("input 'x' is f32, but the buffer holds float64 elements (format 'd')",
                     step, x=array.array("d", bytes(8 * 8 * 4)), y=self.y)
        self.refused("input 'y' is i32, but the buffer holds int64 elements (format 'q')",
                     step, x=self.x, y=array.array("q", bytes(8 * 8)))
        self.refused("input 'y' is i32, but the buffer holds float32 elements (format 'f')",
                     step, x=self.x, y=array.array("f", bytes(4 * 8)))
        self.refused("input 'x' is f32, but the buffer holds uint32 elements (format 'I')",
                     step, x=array.array("I", bytes(4 * 8 * 4)), y=self.y)
        # An explicit dtype does not reinterpret typed elements.
        self.refused("input 'x': dtype f32 was given, but the buffer holds float64 elements (format 'd')",
                     step, x=cohort.Tensor(array.array("d", bytes(8 * 16)), "f32", (8, 4)), y=self.y)
        self.refused("input 'y': dtype i32 was given, but the buffer holds float32 elements",
                     step, x=self.x, y=cohort.Tensor(array.array("f", bytes(4 * 8)), "i32"))

    def test_evaluate_and_parameters_check_element_types(self):
        self.refused("cohort_trainer_evaluate: output 'out' is f32, but the buffer holds int32 elements",
                     self.trainer.evaluate, {"x": self.x}, {"out": array.array("i", bytes(4 * 8 * 3))})
        self.refused("cohort_trainer_evaluate: input 'x' is f32, but the buffer holds uint8 elements",
                     self.trainer.evaluate, {"x": array.array("B", bytes(4 * 8 * 4))})
        self.refused("cohort_trainer_set_parameter: parameter 'fc1.bias' is f32, but the buffer holds int8 "
                     "elements", self.trainer.set_parameter, "fc1.bias", array.array("b", bytes(4 * 16)))
        self.refused("cohort_trainer_get_parameter: parameter 'fc1.bias' is f32, but the buffer holds uint8 "
                     "elements", self.trainer.get_parameter, "fc1.bias", out=memoryview(bytearray(64)))

    def test_collectives_check_element_types(self):
        with cohort.Comm.from_env() as comm:
            self.refused("cohort_comm_all_reduce: buf: the buffer holds uint8 elements (format 'B'), which is no "
                         "cohort dtype", comm.all_reduce, array.array("B", bytes(16)))
            self.refused("cohort_comm_all_reduce: buf: dtype f32 was given, but the buffer holds float64",
                         comm.all_reduce, array.array("d", [1.0, 2.0]), dtype="f32")
            self.refused("cohort_comm_all_reduce: buf: raw bytes (bytearray) need a dtype",
                         comm.all_reduce, bytearray(16))
            self.refused("cohort_comm_all_gather: in holds f32 elements but out i32",
                         comm.all_gather, array.array("f", [1.0]), array.array("i", [0]))
            raw = bytearray(array.array("f", [1.5, 2.5]).tobytes())
            comm.all_reduce(raw, dtype="f32")  # raw bytes with a dtype: a world of one keeps them
            self.assertEqual(array.array("f", bytes(raw)).tolist(), [1.5, 2.5])
            with comm.alloc(4, "bf16") as registered:
                self.refused("input 'x' is f32, but the buffer holds bf16 elements (a cohort.RegisteredBuffer)",
                             self.trainer.step, x=registered, y=self.y)
                self.refused("cohort_comm_all_reduce: buf: dtype f32 was given, but the buffer holds bf16",
                             comm.all_reduce, registered, dtype="f32")

    @unittest.skipIf(numpy is None, "numpy is not installed")
    def test_numpy_arrays_as_filed(self):
        np = numpy
        x = np.frombuffer(self.x, dtype=np.float32).reshape(8, 4)
        y = np.array(self.y, dtype=np.int32)
        step = self.trainer.step
        for wrong in (np.uint8, np.int8):
            self.refused(f"input 'x' is f32, but the buffer holds {np.dtype(wrong).name} elements",
                         step, x=np.zeros((32, 4), wrong), y=y)  # same byte count as the batch
            self.refused(f"input 'x' is f32, but the buffer holds {np.dtype(wrong).name} elements",
                         step, x=np.zeros((8, 4), wrong), y=y)
        self.refused("input 'x' is f32, but the buffer holds float64 elements", step, x=x.astype(np.float64), y=y)
        self.refused("input 'y' is i32, but the buffer holds int64 elements", step, x=x, y=y.astype(np.int64))
        self.refused("input 'y' is i32, but the buffer holds uint8 elements", step, x=x, y=y.astype(np.uint8))
        self.assertTrue(np.isfinite(step(x=x, y=y)))
        with cohort.Comm.from_env() as comm:
            self.refused("buf: the buffer holds float64 elements (format 'd')", comm.all_reduce, np.ones(4))
            self.refused("buf: dtype f32 was given, but the buffer holds int64", comm.all_reduce,
                         np.ones(4, np.int64), dtype="f32")

    @unittest.skipUnless(have_fashion_mnist(), "Fashion-MNIST is not installed (dataset-fashion-mnist)")
    def test_batches_check_element_types(self):
        with cohort.Dataset.fashion_mnist(split="validation") as test, \
                cohort.Sampler(test, shuffle=False) as sampler:
            labels = array.array("i", [0, 0])
            self.refused("cohort_dataset_next_batch: features: the buffer holds uint8 elements (format 'B')",
                         test.next_batch, sampler, array.array("B", bytes(4 * 2 * 784)), labels)
            self.refused("cohort_dataset_next_batch: labels: the buffer holds float64 elements",
                         test.next_batch, sampler, array.array("f", bytes(4 * 2 * 784)), array.array("d", [0, 0]))


if __name__ == "__main__":
    unittest.main()
