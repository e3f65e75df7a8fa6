package org.cohort;

/**
 * A validated optimizer configuration ({@code cohort_optimizer}); a bad field throws
 * INVALID_ARGUMENT naming it. Trainers copy it, so it may be closed once they are made.
 */
public final class Optimizer extends Handle {
  /** {@code cohort_optimizer_kind}. */
  public enum Kind {
    SGD(cohort_optimizer_kind.COHORT_OPTIM_SGD),
    ADAMW(cohort_optimizer_kind.COHORT_OPTIM_ADAMW);

    final int code;

    Kind(int code) {
      this.code = code;
    }

    static Kind of(int code) {
      for (Kind k : values()) {
        if (k.code == code) return k;
      }
      throw new CohortException(Status.INTERNAL, "cohort: unknown optimizer kind " + code);
    }
  }

  /** {@code cohort_schedule_kind}. */
  public enum Schedule {
    CONSTANT(cohort_schedule_kind.COHORT_SCHEDULE_CONSTANT),
    /** Linear warmup, then cosine decay to minLr at totalSteps. */
    WARMUP_COSINE(cohort_schedule_kind.COHORT_SCHEDULE_WARMUP_COSINE);

    final int code;

    Schedule(int code) {
      this.code = code;
    }

    static Schedule of(int code) {
      for (Schedule s : values()) {
        if (s.code == code) return s;
      }
      throw new CohortException(Status.INTERNAL, "cohort: unknown schedule " + code);
    }
  }

  public Optimizer(OptimizerOptions options) {
    super(createFrom(options));
  }

  private static long createFrom(OptimizerOptions options) {
    cohort_optimizer_options o = options.toNative();
    try {
      return create(out -> CohortC.cohort_optimizer_create(o, out));
    } finally {
      o.delete();
    }
  }

  @Override
  int destroy(long ptr) {
    return CohortC.cohort_optimizer_destroy(ptr);
  }
}
