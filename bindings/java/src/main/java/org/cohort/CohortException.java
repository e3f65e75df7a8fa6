package org.cohort;

/**
 * A failed cohort call: the {@link Status} and the C library's message, verbatim
 * ({@code "cohort_graph_add_op: matmul 'fc2': input 1 has shape [64, 300], expected [300, *]"}).
 * Unchecked, like the other exceptions of a library's misuse; the status says what is still
 * usable afterwards.
 */
public class CohortException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final Status status;
  private final int code;

  public CohortException(Status status, String message) {
    this(status, status.code(), message);
  }

  private CohortException(Status status, int code, String message) {
    super(message);
    this.status = status;
    this.code = code;
  }

  /** What went wrong, as the C API classifies it. */
  public Status status() {
    return status;
  }

  /**
   * The raw C status; differs from {@code status().code()} only for a status newer than this
   * binding.
   */
  public int code() {
    return code;
  }

  @Override
  public String toString() {
    return "CohortException(" + status + "): " + getMessage();
  }

  /** Throws the failure of the C call that just returned {@code code} on this thread, if any. */
  static void check(int code) {
    if (code != cohort_status.COHORT_OK) throw fromLastError(code);
  }

  /** The exception for status {@code code} with this thread's cohort_last_error() message. */
  static CohortException fromLastError(int code) {
    return new CohortException(Status.of(code), code, CohortC.cohort_last_error());
  }

  /** A failure found on the Java side, before any C call, worded like the C messages. */
  static CohortException invalid(String function, String message) {
    return new CohortException(Status.INVALID_ARGUMENT, function + ": " + message);
  }
}
