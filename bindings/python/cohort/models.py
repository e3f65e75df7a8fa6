"""Built-in models: builders that return a ready Graph with the output "logits" and the loss
"loss" (mean cross entropy against an i32 label input). Options left out keep cohort's defaults
(the *_options_default() of cohort.h); a bad value raises InvalidArgumentError naming it.

    graph = cohort.models.mlp(batch=64, hidden=(256,))   # inputs "x" [64, 784] f32, "y" [64] i32
"""
from . import capi as _capi
from ._types import Activation, set_options
from .graph import Graph


def _options(default, fields, kwargs, what, enums=None):
    return set_options(default(), fields, kwargs, enums or {}, what)


def _builtin(handle, names, loss="loss", outputs=("logits",)):
    graph = Graph(handle)
    for name in names:
        graph.find(name)
    graph._outputs = list(outputs)
    graph._loss = loss
    return graph


_MLP_FIELDS = ("batch", "in_features", "classes", "activation")


def mlp(hidden=None, **options):
    """A multilayer perceptron: inputs "x" f32 [batch, in_features] and "y" i32 [batch], hidden
    layers of the widths in `hidden` (default (128,)), parameters "fc1.weight", "fc1.bias", ...
    Options: batch (32), in_features (784), classes (10), activation ("relu", "gelu", "tanh")."""
    o = _options(_capi.cohort_model_mlp_options_default, _MLP_FIELDS, options, "mlp", {"activation": Activation})
    handle = _capi.pyc_graph_create_mlp(o, None if hidden is None else [int(h) for h in hidden])
    return _builtin(handle, ("x", "y", "logits", "loss"))


_CNN_FIELDS = ("batch", "channels", "height", "width", "classes", "blocks_per_stage", "groups", "eps")


def cnn(widths=None, **options):
    """A small ResNet: inputs "x" f32 [batch, channels, height, width] and "y" i32 [batch]; one
    stage per entry of `widths` (default (16, 32, 64)). Options: batch (32), channels (1),
    height (28), width (28), classes (10), blocks_per_stage (1), groups (8), eps (1e-5)."""
    o = _options(_capi.cohort_model_cnn_options_default, _CNN_FIELDS, options, "cnn")
    handle = _capi.pyc_graph_create_cnn(o, None if widths is None else [int(w) for w in widths])
    return _builtin(handle, ("x", "y", "logits", "loss"))


_GPT_FIELDS = ("batch", "context", "vocab", "layers", "width", "heads", "tie_weights", "dropout", "eps")


def gpt(**options):
    """A GPT-2 style decoder: inputs "tokens" and "targets" i32 [batch, context], logits
    [batch, context, vocab]; parameters named as Hugging Face's GPT2LMHeadModel ("wte.weight",
    "h.0.attn.c_attn.weight", ...). Options: batch (8), context (128), vocab (256), layers (4),
    width (256), heads (4), tie_weights (True), dropout (0), eps (1e-5)."""
    o = _options(_capi.cohort_model_gpt_options_default, _GPT_FIELDS, options, "gpt")
    return _builtin(_capi.cohort_graph_create_gpt(o), ("tokens", "targets", "logits", "loss"))
