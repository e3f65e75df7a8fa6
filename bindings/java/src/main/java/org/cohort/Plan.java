package org.cohort;

/**
 * A validated parallel plan ({@code cohort_plan}): synchronous DDP, local SGD with an outer
 * optimizer (localsgd, SlowMo, DiLoCo) or CO2 (Sun et al., ICLR 2024). A bad field throws
 * INVALID_PLAN naming it. Trainers keep their own copy, so the plan may be closed once they are
 * made ({@link Trainer#createParallel}).
 */
public final class Plan extends Handle {
  /** {@code cohort_sync_mode}. */
  public enum Mode {
    /** Gradients averaged every step. */
    DDP(cohort_sync_mode.COHORT_SYNC_DDP),
    /** Tau inner steps, then a blocking outer step. */
    LOCALSGD(cohort_sync_mode.COHORT_SYNC_LOCALSGD),
    /** Tau inner steps; the outer average overlaps the next round. */
    CO2(cohort_sync_mode.COHORT_SYNC_CO2);

    final int code;

    Mode(int code) {
      this.code = code;
    }

    static Mode of(int code) {
      for (Mode m : values()) {
        if (m.code == code) return m;
      }
      throw new CohortException(Status.INTERNAL, "cohort: unknown sync mode " + code);
    }
  }

  /** {@code cohort_plan_preset}: one outer-optimizer rule with different constants. */
  public enum Preset {
    /** Mode and outer settings exactly as given. */
    NONE(cohort_plan_preset.COHORT_PRESET_NONE),
    DDP(cohort_plan_preset.COHORT_PRESET_DDP),
    /** Outer lr 1, momentum 0: plain parameter averaging. */
    LOCALSGD(cohort_plan_preset.COHORT_PRESET_LOCALSGD),
    /** Outer lr 1, momentum 0.5. */
    SLOWMO(cohort_plan_preset.COHORT_PRESET_SLOWMO),
    /** Outer lr 0.7, Nesterov momentum 0.9. */
    DILOCO(cohort_plan_preset.COHORT_PRESET_DILOCO),
    /** Outer lr 1, momentum 0, clip 1.0; staleness penalty off (constant 1.0 when switched on). */
    CO2(cohort_plan_preset.COHORT_PRESET_CO2);

    final int code;

    Preset(int code) {
      this.code = code;
    }

    static Preset of(int code) {
      for (Preset p : values()) {
        if (p.code == code) return p;
      }
      throw new CohortException(Status.INTERNAL, "cohort: unknown plan preset " + code);
    }
  }

  public Plan(PlanOptions options) {
    super(createFrom(options));
  }

  /** Synchronous data parallelism over the whole communicator. */
  public static Plan ddp() {
    return new Plan(new PlanOptions().preset(Preset.DDP));
  }

  private static long createFrom(PlanOptions options) {
    cohort_plan_options o = options.toNative();
    try {
      return create(out -> CohortC.cohortj_plan_create(o, options.pipelineCuts(), out));
    } finally {
      o.delete();
    }
  }

  @Override
  int destroy(long ptr) {
    return CohortC.cohort_plan_destroy(ptr);
  }
}
