"""The graph builder, attributes, initializers, built-in models and module-level functions."""
import os
import re
import tempfile
import unittest

import cohort
from support import classifier, learnable_batch


class ModuleTest(unittest.TestCase):
    def test_version(self):
        self.assertRegex(cohort.version(), r"^\d+\.\d+\.\d+$")
        self.assertEqual(cohort.__version__, cohort.version())
        self.assertEqual(cohort.abi_version(), cohort.ABI_VERSION)

    def test_settings(self):
        cohort.set_log_level(1)
        cohort.set_num_threads(1)
        self.assertEqual(cohort.dtype_size("bf16"), 2)
        self.assertEqual(cohort.dtype_size(cohort.I64), 8)

    def test_op_list(self):
        ops = cohort.op_list()
        for op in ("linear", "relu", "cross_entropy", "matmul", "attention"):
            self.assertIn(op, ops)

    def test_op_describe(self):
        linear = cohort.op_describe("linear")
        self.assertEqual((linear.name, linear.inputs, linear.min_inputs, linear.outputs, linear.outputs_from),
                         ("linear", ("x", "weight", "bias"), 2, ("y",), None))
        split = cohort.op_describe("split")
        self.assertEqual((split.outputs, split.outputs_from), (("part",), "sizes"))
        sizes = {a.name: a for a in split.attrs}["sizes"]
        self.assertEqual((sizes.type, sizes.required, sizes.default), (cohort.AttrType.INTS, True, None))
        reduction = {a.name: a for a in cohort.op_describe("cross_entropy").attrs}["reduction"]
        self.assertEqual(reduction, cohort.OpAttr("reduction", cohort.AttrType.STRING, False, "mean"))
        stride = {a.name: a for a in cohort.op_describe("conv2d").attrs}["stride"]
        self.assertEqual(stride.default, (1, 1))
        # Every public operator is described; the description's required attributes build a node
        # (split needs sizes that fit its input, which the capi completeness test covers).
        for op in cohort.op_list():
            info = cohort.op_describe(op)
            self.assertEqual(info.name, op)
            self.assertGreaterEqual(len(info.inputs), info.min_inputs)
        with classifier() as g:
            required = {a.name for a in cohort.op_describe("transpose").attrs if a.required}
            self.assertEqual(required, {"perm"})
            g.add_op("transpose", ["x"], perm=[1, 0], name="xt")
        with self.assertRaisesRegex(cohort.NotFoundError, "cohort_op_describe: no public operator is named 'nope'"):
            cohort.op_describe("nope")

    def test_enums_take_names(self):
        self.assertIs(cohort.Tensor(b"", "bfloat16").dtype, int(cohort.BF16))
        with self.assertRaisesRegex(ValueError, "not a Schedule"):
            cohort.Optimizer(schedule="linear")

    def test_log_callback(self):
        lines = []
        cohort.set_log_callback(lambda level, message: lines.append((level, message)))
        try:
            cohort.set_log_level(3)
            with classifier() as g, cohort.Optimizer() as opt, cohort.Trainer(g, opt) as trainer:
                trainer.step(dict(zip("xy", learnable_batch())))
        finally:
            cohort.set_log_level(1)
            cohort.set_log_callback(None)
        for level, message in lines:
            self.assertIn(level, range(4))
            self.assertIsInstance(message, str)
        with self.assertRaises(TypeError):
            cohort.set_log_callback(42)


class GraphTest(unittest.TestCase):
    def test_builder(self):
        with classifier(batch=8, features=4, hidden=16, classes=3) as g:
            self.assertEqual(g.value_shape("x"), (cohort.F32, (8, 4)))
            self.assertEqual(g.value_shape("y"), (cohort.I32, (8,)))
            self.assertEqual(g.value_shape("out"), (cohort.F32, (8, 3)))
            self.assertEqual(g.value_shape("loss"), (cohort.F32, ()))
            stats = g.stats()
            self.assertEqual(stats.num_parameters, 4)
            self.assertEqual(stats.num_parameter_elements, 16 * 4 + 16 + 3 * 16 + 3)
            self.assertEqual(g.find("fc1.weight"), g.value("fc1.weight"))
            self.assertEqual(g.outputs, ["out"])
            # Every output of a multi-output operator, named "<name>:<k>".
            outputs = g.add_op_outputs("cross_entropy", ["out", "y"], name="ce2")
            self.assertGreaterEqual(len(outputs), 1)
            self.assertEqual(g.find("ce2"), outputs[0])

    def test_attributes(self):
        with cohort.Graph() as g:
            x = g.add_input("x", (2, 3, 4), "f32")
            t = g.add_op("transpose", [x], name="t", perm=[0, 2, 1])
            self.assertEqual(g.value_shape(t)[1], (2, 4, 3))
            r = g.add_op("reshape", [t], name="r", attrs={"shape": (8, 3)})
            self.assertEqual(g.value_shape(r)[1], (8, 3))
            s = g.add_op("scale", [r], name="s", factor=0.5)
            self.assertEqual(g.value_shape(s)[1], (8, 3))
            with cohort.Attrs(axis=1, sizes=[1, 2]) as attrs:
                parts = g.add_op_outputs("split", [s], name="parts", attrs=attrs)
            self.assertEqual([g.value_shape(p)[1] for p in parts], [(8, 1), (8, 2)])
            self.assertEqual(g.find("parts:1"), parts[1])
            w = g.add_parameter("w", (5, 4), init=cohort.Initializer.normal(0.0, 0.02, seed=7))
            m = g.add_op("matmul", [g.add_input("a", (3, 4)), w], transpose_b=True)
            self.assertEqual(g.value_shape(m)[1], (3, 5))
            with self.assertRaises(TypeError):
                g.add_op("scale", [r], factor=object())

    def test_initializers(self):
        kinds = [cohort.Initializer.zeros(), cohort.Initializer.ones(), cohort.Initializer.constant(3),
                 cohort.Initializer.uniform(-1, 1), cohort.Initializer.normal(0, 1),
                 cohort.Initializer.xavier_uniform(), cohort.Initializer.kaiming_uniform(),
                 cohort.Initializer.kaiming_normal(), "kaiming_normal", None]
        with cohort.Graph() as g:
            for i, init in enumerate(kinds):
                g.add_parameter(f"p{i}", (4, 4), init=init)
            self.assertEqual(g.stats().num_parameters, len(kinds))
        self.assertIn("uniform", repr(cohort.Initializer.uniform(0, 1)))

    def test_save_and_load(self):
        with tempfile.TemporaryDirectory() as tmp, classifier() as g:
            path = os.path.join(tmp, "model.graph")
            g.save(path)
            with cohort.Graph.load(path) as loaded:
                self.assertEqual(loaded.stats(), g.stats())
                self.assertEqual(loaded.value_shape("out"), g.value_shape("out"))

    def test_context_manager_and_close(self):
        g = cohort.Graph()
        self.assertFalse(g.closed)
        with g:
            pass
        self.assertTrue(g.closed)
        g.close()  # twice is fine
        self.assertIn("closed", repr(g))


class ModelsTest(unittest.TestCase):
    def test_mlp(self):
        with cohort.models.mlp(batch=4, in_features=10, hidden=(8, 6), classes=5, activation="tanh") as g:
            self.assertEqual(g.value_shape("x"), (cohort.F32, (4, 10)))
            self.assertEqual(g.value_shape("logits")[1], (4, 5))
            self.assertEqual(g.value_shape("fc3.weight")[1], (5, 6))

    def test_cnn(self):
        with cohort.models.cnn(batch=2, widths=(8, 16), groups=4) as g:
            self.assertEqual(g.value_shape("x")[1], (2, 1, 28, 28))
            self.assertEqual(g.value_shape("logits")[1], (2, 10))

    def test_gpt(self):
        with cohort.models.gpt(batch=2, context=16, vocab=64, layers=1, width=32, heads=2) as g:
            self.assertEqual(g.value_shape("tokens"), (cohort.I32, (2, 16)))
            self.assertEqual(g.value_shape("logits")[1], (2, 16, 64))
            self.assertTrue(re.match(r"\d+", str(g.stats().num_parameter_elements)))

    def test_unknown_option(self):
        with self.assertRaisesRegex(TypeError, "unexpected keyword argument 'depth'"):
            cohort.models.gpt(depth=3)


if __name__ == "__main__":
    unittest.main()
