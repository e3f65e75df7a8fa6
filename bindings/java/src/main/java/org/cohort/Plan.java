package org.cohort;

import java.nio.charset.StandardCharsets;

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
    /**
     * DiLoCo's outer optimizer (lr 0.7, Nesterov momentum 0.9), no clip, staleness penalty off
     * (constant 1.0 when switched on); over an SGD optimizer, plain averaging (lr 1, no momentum).
     */
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

  /** {@link #choose}'s result: the concrete options and world rank 0's report. */
  public static final class Choice {
    private final PlanOptions options;
    private final String report;

    Choice(PlanOptions options, String report) {
      this.options = options;
      this.report = report;
    }

    /**
     * The options to make the plan from: every field as given except the layout (data-parallel
     * degree, tensor grid, sequence parallelism, pipeline stages, chunks, micro-batches and
     * schedule, ZeRO stage, activation checkpointing), which is the chosen one; pipeline cuts null
     * (balanced), pipeline keep null, automatic false, fence false.
     */
    public PlanOptions options() {
      return options;
    }

    /** The probe's table, the ranked layouts and the choice on world rank 0; "" elsewhere. */
    public String report() {
      return report;
    }
  }

  /** The report's capacity: a collective cannot be asked again, so the text is cut here. */
  private static final int REPORT_BYTES = 1 << 18;

  /**
   * Resolves an automatic plan ({@code cohort_plan_choose}): a collective over {@code comm} —
   * every rank calls it with the same arguments — that probes the links, ranks the layouts that
   * fit with the planner's model (world rank 0 decides; every rank gets the same choice) and,
   * with {@link PlanOptions#autoTrials} K > 0, times a few steps of the K best with {@code
   * optimizer} and {@code trainerOptions}. {@code globalGraph} is the model at the GLOBAL batch,
   * every data replica's rows together; each rank then trains it at global / (D x tensorZ) rows,
   * D = comm size / (pipelineStages x tensorX x tensorY x tensorZ). {@code options.automatic} is
   * not read: this always chooses; pipeline cuts and keep are not taken, nor is fence (which
   * chooses the layout itself: the result has it false; INVALID_PLAN with automatic set too).
   * INVALID_PLAN naming memory_limit_bytes when no layout fits, naming the field for a bad option.
   */
  public static Choice choose(PlanOptions options, Graph globalGraph, Optimizer optimizer, Comm comm,
      TrainerOptions trainerOptions) {
    cohort_plan_options o = options.toNative();
    cohort_plan_options chosen = CohortC.cohort_plan_options_default();
    cohort_trainer_options t = trainerOptions.toNative();
    try {
      byte[] report = new byte[REPORT_BYTES];
      long[] needed = new long[1];
      CohortException.check(CohortC.cohort_plan_choose(o, Handle.required(globalGraph), Handle.required(optimizer),
          t, Handle.required(comm), chosen, report, needed));
      int length = 0;
      while (length < report.length && report[length] != 0) length++;
      return new Choice(PlanOptions.of(chosen), new String(report, 0, length, StandardCharsets.UTF_8));
    } finally {
      o.delete();
      chosen.delete();
      t.delete();
    }
  }

  private static long createFrom(PlanOptions options) {
    cohort_plan_options o = options.toNative();
    try {
      return create(out -> CohortC.cohortj_plan_create(o, options.pipelineCuts(), options.pipelineKeepText(), out));
    } finally {
      o.delete();
    }
  }

  @Override
  int destroy(long ptr) {
    return CohortC.cohort_plan_destroy(ptr);
  }
}
