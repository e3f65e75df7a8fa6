"""Graphs: the graph builder, operator attributes and parameter initializers.

    g = cohort.Graph()
    x = g.add_input("x", (64, 784), cohort.F32)
    w = g.add_parameter("fc.weight", (10, 784), init=cohort.Initializer.kaiming_uniform(3 ** -0.5))
    logits = g.add_op("linear", [x, w, g.add_parameter("fc.bias", (10,))], name="fc")

Values are the int ids cohort returns; wherever a value is expected, its name works too. The
graph remembers the names and shapes it has seen (inputs, parameters, named operators), which
is what lets a Trainer accept flat buffers and allocate results by name.
"""
import collections
import collections.abc
import numbers

from . import capi as _capi
from ._handle import Handle
from ._types import AttrType, InitKind, as_dtype, as_enum

GraphStats = collections.namedtuple("GraphStats", "num_values num_nodes num_parameters num_parameter_elements")
OpInfo = collections.namedtuple("OpInfo", "name inputs min_inputs outputs outputs_from attrs")
OpInfo.__doc__ = """What Graph.add_op accepts for one operator (op_describe). inputs: the input names in order,
of which the first min_inputs must be given; outputs: the output names (output 0 is the result; later ones
hold what the backward pass needs); outputs_from: None, or the list attribute with one output per entry,
all named outputs[0] (split's "sizes"); attrs: OpAttr tuples."""
OpAttr = collections.namedtuple("OpAttr", "name type required default")
OpAttr.__doc__ = """One attribute: its cohort.AttrType, whether add_op fails without it, and the value used
when it is not given (None when required; lists as tuples)."""


def op_list():
    """The names of the public operators."""
    return _capi.pyc_op_list()


def op_describe(name):
    """The inputs, outputs and attributes of the public operator `name` as an OpInfo, read from
    cohort's operator registry; NotFoundError for a name op_list() does not give."""
    name_, inputs, min_inputs, outputs, outputs_from, attrs = _capi.pyc_op_describe(name)
    return OpInfo(name_, inputs, min_inputs, outputs, outputs_from,
                  tuple(OpAttr(n, AttrType(t), required, default) for n, t, required, default in attrs))


class Attrs(Handle):
    """A reusable set of named operator attributes (cohort_attrs). add_op also takes a plain dict
    or keyword arguments; this class is for sets reused across many operators."""

    __slots__ = ()
    _destroy = staticmethod(_capi.cohort_attrs_destroy)

    def __init__(self, values=None, **kwargs):
        super().__init__(_capi.cohort_attrs_create())
        for name, value in {**(values or {}), **kwargs}.items():
            self.set(name, value)

    def set(self, name, value):
        """Sets one attribute: int (or bool), float, str, or a sequence of ints or of floats."""
        h = self._handle
        if isinstance(value, (bool, numbers.Integral)):
            _capi.cohort_attrs_set_int(h, name, int(value))
        elif isinstance(value, numbers.Real):
            _capi.cohort_attrs_set_float(h, name, float(value))
        elif isinstance(value, str):
            _capi.cohort_attrs_set_string(h, name, value)
        elif isinstance(value, collections.abc.Iterable):
            values = list(value)
            if all(isinstance(v, (bool, numbers.Integral)) for v in values):
                _capi.cohort_attrs_set_ints(h, name, [int(v) for v in values])
            else:
                _capi.cohort_attrs_set_floats(h, name, [float(v) for v in values])
        else:
            raise TypeError(f"attribute {name!r}: {type(value).__name__} is not an int, float, str or list")
        return self


class Initializer:
    """How a parameter gets its first values (cohort_initializer). seed 0 derives the seed from
    the trainer's seed and the parameter's name."""

    __slots__ = ("kind", "a", "b", "seed")

    def __init__(self, kind=InitKind.ZEROS, a=0.0, b=0.0, seed=0):
        self.kind = as_enum(InitKind, kind)
        self.a, self.b, self.seed = float(a), float(b), int(seed)

    @classmethod
    def zeros(cls):
        return cls(InitKind.ZEROS)

    @classmethod
    def ones(cls):
        return cls(InitKind.ONES)

    @classmethod
    def constant(cls, value):
        return cls(InitKind.CONSTANT, a=value)

    @classmethod
    def uniform(cls, low, high, seed=0):
        return cls(InitKind.UNIFORM, a=low, b=high, seed=seed)

    @classmethod
    def normal(cls, mean, std, seed=0):
        return cls(InitKind.NORMAL, a=mean, b=std, seed=seed)

    @classmethod
    def xavier_uniform(cls, gain=0.0, seed=0):
        """gain 0 means 1."""
        return cls(InitKind.XAVIER_UNIFORM, a=gain, seed=seed)

    @classmethod
    def kaiming_uniform(cls, gain=0.0, seed=0):
        """gain 0 means sqrt(2); fan_in = numel / shape[0]. gain 1/sqrt(3) is PyTorch's Linear."""
        return cls(InitKind.KAIMING_UNIFORM, a=gain, seed=seed)

    @classmethod
    def kaiming_normal(cls, gain=0.0, seed=0):
        return cls(InitKind.KAIMING_NORMAL, a=gain, seed=seed)

    def _to_c(self):
        init = _capi.cohort_initializer_default()
        init.kind, init.a, init.b, init.seed = int(self.kind), self.a, self.b, self.seed
        return init

    def __repr__(self):
        return f"Initializer({self.kind.name.lower()!r}, a={self.a}, b={self.b}, seed={self.seed})"


def _as_initializer(init):
    if init is None or isinstance(init, Initializer):
        return init
    return Initializer(init)


class Graph(Handle):
    """A model under construction (cohort_graph): inputs, parameters, operators, outputs, loss.
    A Trainer copies it; the graph may be closed afterwards."""

    __slots__ = ("_ids", "_names", "_outputs", "_loss")
    _destroy = staticmethod(_capi.cohort_graph_destroy)

    def __init__(self, _handle=None):
        super().__init__(_capi.cohort_graph_create() if _handle is None else _handle)
        self._ids = {}  # name -> value id, for every value whose name the binding knows
        self._names = {}  # value id -> name
        self._outputs = []  # names of the marked outputs, in order
        self._loss = None

    @classmethod
    def load(cls, path):
        """Reads a graph file written by save(). Names are then found on demand (find)."""
        return cls(_capi.cohort_graph_load(str(path)))

    def save(self, path):
        """Writes the structure, attributes and initializers (not trained values), atomically."""
        _capi.cohort_graph_save(self._handle, str(path))

    def _remember(self, name, value):
        self._ids[name] = value
        self._names[value] = name
        return value

    def value(self, ref):
        """The id of a value given as id or name."""
        if isinstance(ref, str):
            return self._ids[ref] if ref in self._ids else self.find(ref)
        return int(ref)

    def add_input(self, name, shape, dtype="f32"):
        """A value fed at every step. Dimension 0 is the batch (evaluation may feed another)."""
        return self._remember(name, _capi.cohort_graph_add_input(self._handle, name, int(as_dtype(dtype)), shape))

    def add_parameter(self, name, shape, init=None, dtype="f32"):
        """A trainable tensor (f32 or bf16); init None means zeros."""
        init = _as_initializer(init)
        value = _capi.cohort_graph_add_parameter(self._handle, name, int(as_dtype(dtype)), shape,
                                                 None if init is None else init._to_c())
        return self._remember(name, value)

    def add_op(self, op, inputs, name=None, attrs=None, **kwargs):
        """Adds operator `op` reading `inputs` and returns the id of its result (output 0).
        Attributes come as an Attrs, a dict and/or keyword arguments."""
        return self.add_op_outputs(op, inputs, name, attrs, **kwargs)[0]

    def add_op_outputs(self, op, inputs, name=None, attrs=None, **kwargs):
        """Like add_op, but returns the ids of all the operator's outputs (output k > 0 is named
        "<name>:<k>": what the backward pass keeps, e.g. for cross_entropy)."""
        ids = [self.value(v) for v in inputs]
        made = None
        if isinstance(attrs, Attrs):
            if kwargs:
                raise TypeError("add_op: pass either an Attrs object or attribute keywords, not both")
            handle = attrs._handle
        elif attrs or kwargs:
            made = Attrs(attrs, **kwargs)
            handle = made._handle
        else:
            handle = None
        try:
            outputs = _capi.cohort_graph_add_op(self._handle, op, name, ids, handle)
        finally:
            if made is not None:
                made.close()
        if name:
            for k, value in enumerate(outputs):
                self._remember(name if k == 0 else f"{name}:{k}", value)
        return outputs

    def mark_output(self, value):
        """Marks a value as a model output (what Trainer.evaluate returns by default)."""
        value = self.value(value)
        _capi.cohort_graph_mark_output(self._handle, value)
        name = self._names.get(value)
        if name is not None and name not in self._outputs:
            self._outputs.append(name)

    def set_loss(self, value):
        """Sets the training loss: a float scalar value."""
        value = self.value(value)
        _capi.cohort_graph_set_loss(self._handle, value)
        self._loss = self._names.get(value)

    def find(self, name):
        """The id of the value called `name` (NotFoundError if none)."""
        return self._remember(name, _capi.cohort_graph_find(self._handle, name))

    def value_shape(self, value):
        """(dtype, shape) of a value."""
        shape, dtype = _capi.cohort_graph_value_shape(self._handle, self.value(value))
        return as_dtype(dtype), shape

    def stats(self):
        """GraphStats(num_values, num_nodes, num_parameters, num_parameter_elements)."""
        return GraphStats(*_capi.cohort_graph_stats(self._handle))

    @property
    def outputs(self):
        """Names of the marked outputs the binding knows of."""
        return list(self._outputs)

    def _declared(self):
        """name -> (dtype, shape) for every value the binding knows by name: what a Trainer
        uses to shape flat buffers."""
        declared = {}
        for name, value in self._ids.items():
            shape, dtype = _capi.cohort_graph_value_shape(self._handle, value)
            declared[name] = (dtype, shape)
        return declared

    def _describe(self, name):
        """(dtype, shape) of the value called `name`, or None when the graph has no such value."""
        try:
            value = self._ids.get(name)
            if value is None:
                value = self.find(name)
            shape, dtype = _capi.cohort_graph_value_shape(self._handle, value)
            return dtype, shape
        except Exception:  # noqa: BLE001 — unknown names are reported by the call that uses them
            return None
