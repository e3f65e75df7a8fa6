"""Training through the binding: the loss falls, evaluation, parameters, statistics, checkpoints
and checkpoint values, datasets and samplers."""
import array
import os
import tempfile
import unittest

import cohort
from support import classifier, have_fashion_mnist, learnable_batch


class TrainingTest(unittest.TestCase):
    def setUp(self):
        self.graph = classifier(batch=8, features=4, hidden=16, classes=3)
        self.optimizer = cohort.Optimizer("adamw", lr=0.05, weight_decay=0.0, clip_norm=5.0)
        self.trainer = cohort.Trainer(self.graph, self.optimizer, seed=3)
        self.x, self.y = learnable_batch()

    def tearDown(self):
        for handle in (self.trainer, self.optimizer, self.graph):
            handle.close()

    def test_loss_falls(self):
        losses = [self.trainer.step(x=self.x, y=self.y) for _ in range(40)]
        self.assertTrue(all(isinstance(loss, float) for loss in losses))
        self.assertLess(losses[-1], 0.5 * losses[0], losses)
        stats = self.trainer.stats()
        self.assertEqual(stats.step, 40)
        self.assertGreater(stats.parameter_bytes, 0)
        self.assertGreaterEqual(stats.grad_norm, 0.0)

    def test_inputs_as_dict_or_keywords(self):
        a = self.trainer.step({"x": self.x, "y": self.y})
        b = self.trainer.step({"x": self.x}, y=self.y)
        c = self.trainer.step([("x", self.x), ("y", self.y)])
        self.assertTrue(a > 0 and b > 0 and c > 0)

    def test_evaluate(self):
        for _ in range(40):
            self.trainer.step(x=self.x, y=self.y)
        result = self.trainer.evaluate({"x": self.x})  # the marked output, allocated
        logits = result["out"]
        self.assertIsInstance(logits, memoryview)
        self.assertEqual(logits.shape, (8, 3))
        rows = logits.tolist()
        predicted = [row.index(max(row)) for row in rows]
        self.assertEqual(predicted, list(self.y))
        # Another batch size, the loss as a 0-d result, and the caller's own buffer.
        x2, y2 = learnable_batch(batch=5)
        mine = array.array("f", bytes(4 * 5 * 3))
        result = self.trainer.evaluate({"x": x2, "y": y2}, {"out": mine, "loss": None})
        self.assertIs(result["out"], mine)
        self.assertEqual(result["loss"].shape, ())
        self.assertLess(result["loss"].tolist(), 1.0)
        self.assertEqual(self.trainer.evaluate({"x": x2}, "out")["out"].shape, (5, 3))

    def test_parameters(self):
        weight = self.trainer.get_parameter("fc1.weight")
        self.assertEqual(weight.shape, (16, 4))
        values = array.array("f", (0.01 * i for i in range(64)))
        self.trainer.set_parameter("fc1.weight", values)
        back = array.array("f", bytes(4 * 64))
        self.assertIs(self.trainer.get_parameter("fc1.weight", out=back), back)
        self.assertEqual(back, values)
        self.assertEqual(self.trainer.get_parameter("out.bias").tolist(), [0.0, 0.0, 0.0])

    def test_checkpoints(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.ckpt")
            self.trainer.step(x=self.x, y=self.y)
            self.trainer.set_checkpoint_value("sampler.epoch", 7)
            self.trainer.save_checkpoint(path)
            saved = self.trainer.get_parameter("fc1.weight").tobytes()
            self.trainer.step(x=self.x, y=self.y)
            self.trainer.set_checkpoint_value("sampler.epoch", 8)
            self.assertNotEqual(self.trainer.get_parameter("fc1.weight").tobytes(), saved)
            self.trainer.load_checkpoint(path)
            self.assertEqual(self.trainer.get_parameter("fc1.weight").tobytes(), saved)
            self.assertEqual(self.trainer.get_checkpoint_value("sampler.epoch"), 7)
            self.assertEqual(self.trainer.stats().step, 1)
            # Resumed training is bit-identical to training that never stopped.
            after_resume = self.trainer.step(x=self.x, y=self.y)
            with cohort.Trainer(self.graph, self.optimizer, seed=3) as fresh:
                fresh.step(x=self.x, y=self.y)
                self.assertEqual(fresh.step(x=self.x, y=self.y), after_resume)

    def test_graph_may_close_first(self):
        self.graph.close()
        self.assertGreater(self.trainer.step(x=self.x, y=self.y), 0)
        self.assertEqual(self.trainer.evaluate({"x": self.x})["out"].shape, (8, 3))


class BuiltinModelTest(unittest.TestCase):
    def test_gpt_step(self):
        with cohort.models.gpt(batch=2, context=8, vocab=32, layers=1, width=16, heads=2) as g, \
                cohort.Optimizer("adamw", lr=1e-2) as opt, cohort.Trainer(g, opt, seed=1) as trainer:
            tokens = array.array("i", (i % 32 for i in range(16)))
            targets = array.array("i", ((i + 1) % 32 for i in range(16)))
            first = trainer.step(tokens=tokens, targets=targets)
            for _ in range(10):
                last = trainer.step(tokens=tokens, targets=targets)
            self.assertLess(last, first)
            self.assertEqual(trainer.evaluate({"tokens": tokens})["logits"].shape, (2, 8, 32))
            self.assertEqual(trainer.get_parameter("wte.weight").shape, (32, 16))


@unittest.skipUnless(have_fashion_mnist(), "Fashion-MNIST is not installed (dataset-fashion-mnist)")
class DatasetTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.test = cohort.Dataset.fashion_mnist(split="validation")

    @classmethod
    def tearDownClass(cls):
        cls.test.close()

    def test_batches_and_positions(self):
        self.assertEqual(len(self.test), 10000)
        with cohort.Sampler(self.test, seed=0, shuffle=False) as sampler:
            images = array.array("f", bytes(4 * 4 * 784))
            labels = array.array("i", bytes(4 * 4))
            self.test.next_batch(sampler, images, labels, batch=4)
            self.assertEqual(sampler.position, (0, 4))
            self.assertTrue(all(0.0 <= v <= 1.0 for v in images))
            first = list(labels)
            sampler.position = (0, 0)
            self.test.next_batch(sampler, images, labels)  # batch from the labels' length
            self.assertEqual(list(labels), first)
            with self.assertRaises(cohort.InvalidArgumentError):
                sampler.set_position(-1, 0)

    def test_shards(self):
        with cohort.Sampler(self.test, seed=5, rank=0, world=2) as a, \
                cohort.Sampler(self.test, seed=5, rank=1, world=2) as b:
            la, lb = array.array("i", bytes(400)), array.array("i", bytes(400))
            xa, xb = array.array("f", bytes(400 * 784)), array.array("f", bytes(400 * 784))
            self.test.next_batch(a, xa, la, batch=100)
            self.test.next_batch(b, xb, lb, batch=100)
            self.assertNotEqual(xa, xb)


if __name__ == "__main__":
    unittest.main()
