"""Shared by the binding's tests: a small classifier built with the graph builder, and a batch it
can learn. Tests run with the build tree's package on PYTHONPATH (bindings/python/CMakeLists.txt).
"""
import array
import math
import os

import cohort

try:
    import numpy
except ImportError:  # the numpy tests skip
    numpy = None

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def have_fashion_mnist():
    return os.path.exists(os.path.join(FASHION_MNIST, "t10k-labels-idx1-ubyte.gz"))


def classifier(batch=8, features=4, hidden=16, classes=3):
    """x f32 [batch, features] -> linear "fc1" -> relu -> linear "out" -> loss "loss" against
    y i32 [batch]; "out" is the marked output."""
    g = cohort.Graph()
    x = g.add_input("x", (batch, features), cohort.F32)
    y = g.add_input("y", (batch,), "i32")
    gain = 1 / math.sqrt(3)
    w1 = g.add_parameter("fc1.weight", (hidden, features), init=cohort.Initializer.kaiming_uniform(gain))
    b1 = g.add_parameter("fc1.bias", (hidden,))
    h = g.add_op("relu", [g.add_op("linear", [x, w1, b1], name="fc1")], name="act")
    w2 = g.add_parameter("out.weight", (classes, hidden), init=cohort.Initializer.kaiming_uniform(gain))
    b2 = g.add_parameter("out.bias", (classes,), init="zeros")
    out = g.add_op("linear", [h, w2, b2], name="out")
    loss = g.add_op("cross_entropy", [out, y], name="loss")
    g.mark_output(out)
    g.set_loss(loss)
    return g


def learnable_batch(batch=8, features=4, classes=3, offset=0):
    """A batch whose label is readable from the features: feature (label) is large."""
    x = array.array("f", bytes(4 * batch * features))
    y = array.array("i", bytes(4 * batch))
    for i in range(batch):
        label = (i + offset) % classes
        y[i] = label
        for j in range(features):
            x[i * features + j] = (2.0 if j == label else 0.0) + 0.1 * ((i * 7 + j * 3) % 5)
    return x, y
