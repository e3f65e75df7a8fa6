"""Element types, the enums of the C API as IntEnums, and Tensor — a buffer with an explicit
dtype and shape. Every enum argument of the package also accepts the member's lower-case name
("adamw", "warmup_cosine") or its integer value.
"""
import collections
import enum

from . import capi as _capi


class DType(enum.IntEnum):
    """cohort_dtype. Buffers carry theirs in their format ('f', 'i', 'q', 'e'), and a buffer of
    another element type (uint8, float64, ...) is refused; bf16 has none (pass uint16 data with
    dtype=BF16, or bytes / bytearray where the graph declares the dtype)."""

    F32 = _capi.COHORT_F32
    BF16 = _capi.COHORT_BF16
    I32 = _capi.COHORT_I32
    I64 = _capi.COHORT_I64
    F16 = _capi.COHORT_F16

    @property
    def size(self):
        """Bytes per element."""
        return _capi.cohort_dtype_size(int(self))


F32, BF16, I32, I64, F16 = DType.F32, DType.BF16, DType.I32, DType.I64, DType.F16

_DTYPE_NAMES = {
    "f32": F32, "float32": F32, "float": F32,
    "bf16": BF16, "bfloat16": BF16,
    "i32": I32, "int32": I32,
    "i64": I64, "int64": I64,
    "f16": F16, "float16": F16, "half": F16,
}


def as_dtype(value):
    """A DType from a DType, an int, a name ("f32", "float32", ...) or a numpy dtype / type."""
    if isinstance(value, DType):
        return value
    if isinstance(value, int):
        return DType(value)
    name = value if isinstance(value, str) else getattr(value, "name", None) or getattr(value, "__name__", None)
    if isinstance(name, str) and name.lower() in _DTYPE_NAMES:
        return _DTYPE_NAMES[name.lower()]
    raise ValueError(f"not a cohort dtype: {value!r} (use cohort.F32, BF16, I32, I64 or F16)")


class AttrType(enum.IntEnum):
    """cohort_attr_type: what an operator attribute holds (op_describe). FLOAT takes an int too,
    FLOATS a list of ints."""
    INT = _capi.COHORT_ATTR_INT
    FLOAT = _capi.COHORT_ATTR_FLOAT
    STRING = _capi.COHORT_ATTR_STRING
    INTS = _capi.COHORT_ATTR_INTS
    FLOATS = _capi.COHORT_ATTR_FLOATS


class Device(enum.IntEnum):
    """cohort_device: where a trainer keeps its parameters and runs its steps."""
    CPU = _capi.COHORT_DEVICE_CPU
    CUDA = _capi.COHORT_DEVICE_CUDA  # the current CUDA device, in builds with the CUDA backend


class InitKind(enum.IntEnum):
    """cohort_init_kind: how a parameter gets its first values."""
    ZEROS = _capi.COHORT_INIT_ZEROS
    ONES = _capi.COHORT_INIT_ONES
    CONSTANT = _capi.COHORT_INIT_CONSTANT
    UNIFORM = _capi.COHORT_INIT_UNIFORM
    NORMAL = _capi.COHORT_INIT_NORMAL
    XAVIER_UNIFORM = _capi.COHORT_INIT_XAVIER_UNIFORM
    KAIMING_UNIFORM = _capi.COHORT_INIT_KAIMING_UNIFORM
    KAIMING_NORMAL = _capi.COHORT_INIT_KAIMING_NORMAL


class OptimizerKind(enum.IntEnum):
    SGD = _capi.COHORT_OPTIM_SGD
    ADAMW = _capi.COHORT_OPTIM_ADAMW


class Schedule(enum.IntEnum):
    CONSTANT = _capi.COHORT_SCHEDULE_CONSTANT
    WARMUP_COSINE = _capi.COHORT_SCHEDULE_WARMUP_COSINE


class Activation(enum.IntEnum):
    RELU = _capi.COHORT_ACTIVATION_RELU
    GELU = _capi.COHORT_ACTIVATION_GELU
    TANH = _capi.COHORT_ACTIVATION_TANH


class Split(enum.IntEnum):
    TRAIN = _capi.COHORT_SPLIT_TRAIN
    VALIDATION = _capi.COHORT_SPLIT_VALIDATION  # Fashion-MNIST: the t10k test set


class ReduceOp(enum.IntEnum):
    SUM = _capi.COHORT_REDUCE_SUM
    AVG = _capi.COHORT_REDUCE_AVG
    MAX = _capi.COHORT_REDUCE_MAX


class SyncMode(enum.IntEnum):
    DDP = _capi.COHORT_SYNC_DDP
    LOCALSGD = _capi.COHORT_SYNC_LOCALSGD
    CO2 = _capi.COHORT_SYNC_CO2


class Preset(enum.IntEnum):
    NONE = _capi.COHORT_PRESET_NONE
    DDP = _capi.COHORT_PRESET_DDP
    LOCALSGD = _capi.COHORT_PRESET_LOCALSGD
    SLOWMO = _capi.COHORT_PRESET_SLOWMO
    DILOCO = _capi.COHORT_PRESET_DILOCO
    CO2 = _capi.COHORT_PRESET_CO2


def as_enum(cls, value):
    """A member of the IntEnum `cls` from a member, an int or a case-insensitive name."""
    if isinstance(value, str):
        try:
            return cls[value.upper()]
        except KeyError:
            names = ", ".join(m.name.lower() for m in cls)
            raise ValueError(f"{value!r} is not a {cls.__name__} (one of: {names})") from None
    return cls(value)


class Tensor(collections.namedtuple("Tensor", "data dtype shape")):
    """A buffer with an explicit dtype and/or shape, where the buffer's own are not the ones to
    use: Tensor(uint16_array, dtype=cohort.BF16), Tensor(flat, shape=(8, 784)). Either may be
    None (taken from the buffer, or from what the graph declares for the name). A dtype reads a
    buffer of one-byte elements as raw bytes; typed elements must already be of that dtype
    (Tensor(float64_array, dtype=F32) is refused, not reinterpreted)."""

    __slots__ = ()

    def __new__(cls, data, dtype=None, shape=None):
        dtype = None if dtype is None else int(as_dtype(dtype))
        shape = None if shape is None else tuple(int(d) for d in shape)
        return super().__new__(cls, data, dtype, shape)


def set_options(options, fields, kwargs, enums, what):
    """Copies keyword arguments onto a SWIG options struct: only `fields`, enums (a dict field ->
    IntEnum class) by name or value, bools as ints. An unknown keyword is a TypeError."""
    for key, value in kwargs.items():
        if key not in fields:
            raise TypeError(f"{what}() got an unexpected keyword argument {key!r} (accepted: {', '.join(fields)})")
        if key in enums:
            value = int(as_enum(enums[key], value))
        elif isinstance(value, bool):
            value = int(value)
        setattr(options, key, value)
    return options
