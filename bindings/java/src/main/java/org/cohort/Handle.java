package org.cohort;

/**
 * An owned C handle. {@link #close()} destroys it once (later calls do nothing); a closed handle
 * passes NULL to C, so using it again throws {@link CohortException} with status INVALID_HANDLE
 * and the C message ("cohort_trainer_step: trainer is NULL") instead of touching freed memory.
 * Like the C handles, one object must not be used from two threads at once; closing one while
 * another thread uses it is such a use. Handles are not freed by the garbage collector: close
 * them (try-with-resources).
 */
abstract class Handle implements AutoCloseable {
  private long ptr;

  Handle(long ptr) {
    this.ptr = ptr;
  }

  /** The C handle, or 0 once closed. */
  final long ptr() {
    return ptr;
  }

  /** Whether {@link #close()} has run. */
  public final boolean isClosed() {
    return ptr == 0;
  }

  /** Destroys the C object; does nothing when already closed. */
  @Override
  public void close() {
    long p = ptr;
    if (p == 0) return;
    ptr = 0;
    CohortException.check(destroy(p));
  }

  /** Calls the C destroy function on {@code ptr} and returns its status. */
  abstract int destroy(long ptr);

  /** The pointer of an optional handle argument: 0 for null, an error for a closed one. */
  static long optional(Handle h, String function, String arg) {
    if (h == null) return 0;
    if (h.isClosed()) {
      throw new CohortException(Status.INVALID_HANDLE, function + ": " + arg + " is closed");
    }
    return h.ptr;
  }

  /** The pointer of a required handle argument (0 for null or closed: C reports it). */
  static long required(Handle h) {
    return h == null ? 0 : h.ptr;
  }

  /** Runs a C create function that writes one handle and returns it, or throws its failure. */
  static long create(Creator creator) {
    long[] out = new long[1];
    CohortException.check(creator.create(out));
    return out[0];
  }

  /** A C create call: writes the new handle to out[0] and returns the status. */
  @FunctionalInterface
  interface Creator {
    int create(long[] out);
  }
}
