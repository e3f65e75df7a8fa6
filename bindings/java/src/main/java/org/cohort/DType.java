package org.cohort;

/** Element types ({@code cohort_dtype}). */
public enum DType {
  F32(cohort_dtype.COHORT_F32),
  /** bf16 storage; CPU math accumulates in f32. Java holds its bit patterns in short[]. */
  BF16(cohort_dtype.COHORT_BF16),
  /** Indices and labels. */
  I32(cohort_dtype.COHORT_I32),
  I64(cohort_dtype.COHORT_I64),
  /** IEEE half; Java holds its bit patterns in short[]. */
  F16(cohort_dtype.COHORT_F16);

  private final int code;

  DType(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** Bytes per element, as libcohort reports them ({@code cohort_dtype_size}). */
  public int size() {
    return (int) CohortC.cohort_dtype_size(code);
  }

  /** The lower-case name used in cohort's messages ("f32"). */
  public String cName() {
    return name().toLowerCase(java.util.Locale.ROOT);
  }

  static DType of(int code) {
    for (DType d : values()) {
      if (d.code == code) return d;
    }
    throw new CohortException(Status.INTERNAL, "cohort: unknown dtype " + code);
  }
}
