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


if __name__ == "__main__":
    unittest.main()
