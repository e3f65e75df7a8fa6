package org.cohort;

/**
 * The C API's status codes ({@code cohort_status}); every failure arrives as a
 * {@link CohortException} carrying one of them. Each says what is still usable afterwards.
 */
public enum Status {
  /** Success; never carried by an exception. */
  OK(cohort_status.COHORT_OK),
  /** A bad value: nothing changed. */
  INVALID_ARGUMENT(cohort_status.COHORT_ERR_INVALID_ARGUMENT),
  /** A closed, destroyed or wrong handle: nothing changed. */
  INVALID_HANDLE(cohort_status.COHORT_ERR_INVALID_HANDLE),
  /** Shapes or dtypes disagree: nothing changed. */
  SHAPE_MISMATCH(cohort_status.COHORT_ERR_SHAPE_MISMATCH),
  /** An unknown operator or name: nothing changed. */
  NOT_FOUND(cohort_status.COHORT_ERR_NOT_FOUND),
  /** The file system failed: objects in memory are unchanged. */
  IO(cohort_status.COHORT_ERR_IO),
  /** A file failed verification: nothing was loaded. */
  CORRUPT(cohort_status.COHORT_ERR_CORRUPT),
  /** An allocation failed: the object is unchanged. */
  OUT_OF_MEMORY(cohort_status.COHORT_ERR_OUT_OF_MEMORY),
  /** Valid, but not available in this build or configuration. */
  UNSUPPORTED(cohort_status.COHORT_ERR_UNSUPPORTED),
  /** A bug in cohort (or a status newer than this binding): close the object. */
  INTERNAL(cohort_status.COHORT_ERR_INTERNAL),
  /** A peer rank died or left: abort and close the communicator. */
  PEER_FAILED(cohort_status.COHORT_ERR_PEER_FAILED),
  /** A wait passed its deadline: abort and close the communicator. */
  TIMEOUT(cohort_status.COHORT_ERR_TIMEOUT),
  /** The parallel plan does not fit: rebuild the plan. */
  INVALID_PLAN(cohort_status.COHORT_ERR_INVALID_PLAN),
  /** Called in the wrong state: nothing changed. */
  INVALID_STATE(cohort_status.COHORT_ERR_INVALID_STATE),
  /**
   * A training step met NaN or Inf in its loss or gradients: its update was skipped and the
   * trainer is as before the step; skip the batch and go on.
   */
  NON_FINITE(cohort_status.COHORT_ERR_NON_FINITE);

  private static final Status[] BY_CODE = new Status[values().length];

  static {
    for (Status s : values()) BY_CODE[s.code] = s;
  }

  private final int code;

  Status(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The C library's lower-case name for this status ("shape mismatch"). */
  public String cName() {
    return CohortC.cohort_status_name(code);
  }

  /** The status with C value {@code code}; INTERNAL for a code this binding does not know. */
  public static Status of(int code) {
    return code >= 0 && code < BY_CODE.length && BY_CODE[code] != null ? BY_CODE[code] : INTERNAL;
  }
}
