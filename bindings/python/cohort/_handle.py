"""The base of every class that owns a cohort handle.

An object owns its handle until close() (or the end of a `with` block, or garbage collection)
destroys it. A closed object passes NULL to cohort, so using it raises InvalidHandleError with
cohort's message instead of touching freed memory.
"""


class Handle:
    """Owns one cohort handle; close() destroys it, and is safe to call twice."""

    __slots__ = ("_handle", "__weakref__")
    _destroy = None  # the cohort_*_destroy function of the subclass (a staticmethod)

    def __init__(self, handle):
        self._handle = handle

    @property
    def closed(self):
        return self._handle is None

    def close(self):
        """Destroys the handle (waiting for what cohort says its destroy waits for)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            self._destroy(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __del__(self):
        # During interpreter shutdown the module may already be half torn down.
        try:
            self.close()
        except Exception:  # noqa: BLE001 — a destructor must not raise
            pass

    def __repr__(self):
        state = "closed" if self._handle is None else "open"
        return f"<cohort.{type(self).__name__} {state}>"
