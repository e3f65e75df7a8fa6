"""Statuses and exceptions: every failed cohort call raises the subclass of cohort.Error named
after its status, with cohort's own message (which names the call and the caller's objects).

Subclasses also derive from the closest built-in exception where one fits (ValueError for bad
arguments and shapes, LookupError for unknown names, OSError for I/O, MemoryError, TimeoutError,
ArithmeticError for a step that met NaN or Inf),
so code that already catches those keeps working.
"""
import builtins
import enum

from . import capi as _capi


class Status(enum.IntEnum):
    """cohort_status: what failed, and what is still usable afterwards."""

    OK = _capi.COHORT_OK
    INVALID_ARGUMENT = _capi.COHORT_ERR_INVALID_ARGUMENT
    INVALID_HANDLE = _capi.COHORT_ERR_INVALID_HANDLE
    SHAPE_MISMATCH = _capi.COHORT_ERR_SHAPE_MISMATCH
    NOT_FOUND = _capi.COHORT_ERR_NOT_FOUND
    IO = _capi.COHORT_ERR_IO
    CORRUPT = _capi.COHORT_ERR_CORRUPT
    OUT_OF_MEMORY = _capi.COHORT_ERR_OUT_OF_MEMORY
    UNSUPPORTED = _capi.COHORT_ERR_UNSUPPORTED
    INTERNAL = _capi.COHORT_ERR_INTERNAL
    PEER_FAILED = _capi.COHORT_ERR_PEER_FAILED
    TIMEOUT = _capi.COHORT_ERR_TIMEOUT
    INVALID_PLAN = _capi.COHORT_ERR_INVALID_PLAN
    INVALID_STATE = _capi.COHORT_ERR_INVALID_STATE
    NON_FINITE = _capi.COHORT_ERR_NON_FINITE

    @property
    def description(self):
        """cohort's lower-case name of the status ("shape mismatch")."""
        return _capi.cohort_status_name(int(self))


class Error(Exception):
    """A cohort call failed. str(error) is cohort's message; .status says which failure."""

    status = None  # the Status of each subclass; set per instance for statuses without one

    def __str__(self):
        return self.args[0] if self.args else ""

    @property
    def status_name(self):
        """cohort's lower-case name of the status ("shape mismatch")."""
        return _capi.cohort_status_name(int(self.status or 0))


class InvalidArgumentError(Error, ValueError):
    """A bad value; nothing changed."""
    status = Status.INVALID_ARGUMENT


class InvalidHandleError(Error):
    """A closed (or never opened) object was used; nothing changed."""
    status = Status.INVALID_HANDLE


class ShapeMismatchError(Error, ValueError):
    """Shapes or dtypes disagree; nothing changed."""
    status = Status.SHAPE_MISMATCH


class NotFoundError(Error, LookupError):
    """Unknown operator or name; nothing changed."""
    status = Status.NOT_FOUND


class IOError(Error, OSError):  # noqa: A001 (cohort.IOError, like concurrent.futures.TimeoutError)
    """The file system failed; objects in memory are unchanged."""
    status = Status.IO


class CorruptError(Error):
    """A file failed verification; nothing was loaded."""
    status = Status.CORRUPT


class OutOfMemoryError(Error, MemoryError):
    """An allocation failed; the object is unchanged."""
    status = Status.OUT_OF_MEMORY


class UnsupportedError(Error):
    """Valid, but not available in this build or configuration."""
    status = Status.UNSUPPORTED


class InternalError(Error):
    """A bug in cohort: close the object."""
    status = Status.INTERNAL


class PeerFailedError(Error):
    """A peer rank died or left: close the communicator and what was made with it."""
    status = Status.PEER_FAILED


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001
    """A wait passed its deadline (a Work stays valid); a communicator timeout: close it."""
    status = Status.TIMEOUT


class InvalidPlanError(Error, ValueError):
    """The parallel plan does not fit: rebuild the plan."""
    status = Status.INVALID_PLAN


class InvalidStateError(Error):
    """Called in the wrong state; nothing changed."""
    status = Status.INVALID_STATE


class NonFiniteError(Error, ArithmeticError):
    """A training step met NaN or Inf in its loss or gradients; its update was skipped and the
    trainer is as before the step: skip the batch and go on."""
    status = Status.NON_FINITE


_CLASSES = (
    InvalidArgumentError, InvalidHandleError, ShapeMismatchError, NotFoundError, IOError, CorruptError,
    OutOfMemoryError, UnsupportedError, InternalError, PeerFailedError, TimeoutError, InvalidPlanError,
    InvalidStateError, NonFiniteError)
_BY_STATUS = {cls.status: cls for cls in _CLASSES}
for _cls in (Error,) + _CLASSES:
    _cls.__module__ = "cohort"  # tracebacks say cohort.ShapeMismatchError


def error_class(status):
    """The exception class raised for a status (cohort.Error for one without its own)."""
    return _BY_STATUS.get(status, Error)


# The C half raises classes[status]; classes[0] is the base for statuses added after this file.
_capi.pyc_set_error_classes(tuple(error_class(s) if s else Error for s in range(max(_BY_STATUS) + 1)))
