package org.cohort;

import java.nio.charset.StandardCharsets;

/**
 * Runs training steps and evaluations of one model ({@code cohort_trainer}). Made from a graph
 * with a loss and an optimizer (both copied), or with {@link #createParallel} data-parallel over
 * a communicator. Inputs are bound by name through {@link Tensor}s whose shape and dtype match
 * the graph's declaration exactly.
 */
public final class Trainer extends Handle {
  /** Reused by step: one trainer is used by one thread at a time. */
  private final float[] loss = new float[1];

  /** A trainer with the default options (seed 0). */
  public Trainer(Graph graph, Optimizer optimizer) {
    this(graph, optimizer, new TrainerOptions());
  }

  /** Copies the graph and the optimizer, adds the backward pass and initialises the parameters. */
  public Trainer(Graph graph, Optimizer optimizer, TrainerOptions options) {
    super(createPlain(graph, optimizer, options));
  }

  private Trainer(long ptr) {
    super(ptr);
  }

  private static long createPlain(Graph graph, Optimizer optimizer, TrainerOptions options) {
    cohort_trainer_options o = options.toNative();
    try {
      return create(
          out -> CohortC.cohort_trainer_create(required(graph), required(optimizer), o, out));
    } finally {
      o.delete();
    }
  }

  /**
   * A data-parallel trainer over {@code comm} with {@code plan}: rank 0's initial parameters are
   * broadcast to every rank, so every rank of comm must call this (in the same order as its other
   * collectives). Steps then feed this rank's shard of the batch. Graph, optimizer, plan and comm
   * may be closed afterwards. PEER_FAILED or TIMEOUT (now or from a later step) mean this trainer
   * and the communicator must be closed. With a pipeline plan (pipeline stages > 1, or {@link
   * PlanOptions#fence}) only world rank 0 reads the graph and sends every rank its stages: the
   * other ranks may pass a null graph.
   */
  public static Trainer createParallel(
      Graph graph, Optimizer optimizer, Plan plan, Comm comm, TrainerOptions options) {
    cohort_trainer_options o = options.toNative();
    try {
      return new Trainer(create(out
          -> CohortC.cohort_trainer_create_parallel(
              required(graph), required(optimizer), required(plan), required(comm), o, out)));
    } finally {
      o.delete();
    }
  }

  @Override
  int destroy(long ptr) {
    return CohortC.cohort_trainer_destroy(ptr);
  }

  /**
   * One training step (forward, backward, update) on {@code inputs}, which bind every graph input
   * the loss needs; returns the loss. On an error before the update nothing changed.
   */
  public float step(Tensor... inputs) {
    Tensor.checkElements("cohort_trainer_step", "inputs", inputs);
    CohortException.check(CohortC.cohort_trainer_step(ptr(), inputs, loss));
    return loss[0];
  }

  /**
   * Forward only, in evaluation mode: binds {@code inputs} like step (dimension 0 may differ from
   * the declared batch) and writes each requested output (a marked output or the loss, by name)
   * into its Tensor, whose shape must match.
   */
  public void evaluate(Tensor[] inputs, Tensor... outputs) {
    Tensor.checkElements("cohort_trainer_evaluate", "inputs", inputs);
    Tensor.checkElements("cohort_trainer_evaluate", "outputs", outputs);
    checkWritable("cohort_trainer_evaluate", outputs);
    CohortException.check(CohortC.cohort_trainer_evaluate(ptr(), inputs, outputs));
  }

  /** Copies the parameter named {@code into.name()} into its memory (f32 converts from bf16). */
  public void getParameter(Tensor into) {
    Tensor.checkElements("cohort_trainer_get_parameter", "parameter", into);
    checkWritable("cohort_trainer_get_parameter", into);
    CohortException.check(CohortC.cohort_trainer_get_parameter(ptr(), into));
  }

  /**
   * Makes every parameter whole until the next step: under ZeRO stage 3 a collective every rank
   * calls at the same point (e.g. before one rank alone evaluates); otherwise a no-op.
   */
  public void gatherParameters() {
    CohortException.check(CohortC.cohort_trainer_gather_parameters(ptr()));
  }

  /**
   * Under local updating (localsgd, slowmo, diloco, co2) makes {@link #evaluate} and parameter
   * reads see the average of every data-parallel replica's parameters until the next step or
   * {@link #setParameter}, leaving this rank's own (and so the run) unchanged: call it before
   * evaluating such a run. A collective every rank calls at the same point. Returns false, doing
   * nothing, where the replicas hold the same parameters anyway (sync, one replica).
   */
  public boolean averageReplicas() {
    int[] averaged = new int[1];
    CohortException.check(CohortC.cohort_trainer_average_replicas(ptr(), averaged));
    return averaged[0] != 0;
  }

  /** Overwrites the parameter named {@code from.name()} with its memory. */
  public void setParameter(Tensor from) {
    Tensor.checkElements("cohort_trainer_set_parameter", "parameter", from);
    CohortException.check(CohortC.cohort_trainer_set_parameter(ptr(), from));
  }

  public TrainerStats stats() {
    cohort_trainer_stats s = new cohort_trainer_stats();
    try {
      CohortException.check(CohortC.cohort_trainer_get_stats(ptr(), s));
      return new TrainerStats(s.getStep(), s.getLearning_rate(), s.getGrad_norm(),
          s.getPeak_activation_bytes(), s.getParameter_bytes(), s.getLast_step_seconds(),
          s.getMicro_batches(), s.getPipeline_busy_seconds(), s.getPipeline_bubble_fraction());
    } finally {
      s.delete();
    }
  }

  /**
   * The pipeline stages the plan cut the model into, as text to print (one line per stage: its
   * nodes and estimated milliseconds); "" on ranks other than world rank 0 and without pipeline
   * stages. INVALID_STATE for a trainer not made by {@link #createParallel}.
   */
  public String pipelineStages() {
    long[] needed = new long[1];
    byte[] buf = new byte[1024];
    int status = CohortC.cohort_trainer_pipeline_stages(ptr(), buf, needed);
    if (status != cohort_status.COHORT_OK && needed[0] > buf.length) {
      buf = new byte[(int) needed[0]];
      status = CohortC.cohort_trainer_pipeline_stages(ptr(), buf, needed);
    }
    CohortException.check(status);
    return new String(buf, 0, (int) needed[0] - 1, StandardCharsets.UTF_8);
  }

  /** INVALID_STATE for a trainer not made by {@link #createParallel}. */
  public ParallelStats parallelStats() {
    cohort_parallel_stats s = new cohort_parallel_stats();
    try {
      CohortException.check(CohortC.cohort_trainer_get_parallel_stats(ptr(), s));
      return new ParallelStats(s.getRounds(), s.getCompute_seconds(), s.getComm_seconds(),
          s.getWait_seconds(), s.getHidden_fraction(), s.getLast_staleness_scale(),
          s.getLast_momentum_norm(), s.getBuckets(), s.getParameter_bytes(), s.getGradient_bytes(),
          s.getOptimizer_state_bytes(), s.getParameter_gathers(), s.getParameter_gathers_prefetched(),
          s.getPeak_parameter_bytes(), s.getTau(), s.getOverlap_steps(), s.getOuter_comm_seconds(),
          s.getStep_seconds(), s.getOuter_fragments(), s.getOuter_syncs(), s.getOuter_sync_bytes(),
          s.getOuter_hidden_fraction(), s.getShard_group(), s.getGradient_sync_bytes(), s.getGrad_keep(),
          s.getOuter_shared_wait_seconds());
    } finally {
      s.delete();
    }
  }

  /**
   * Writes the whole training state to {@code path} atomically (a data-parallel trainer's outer
   * state too). IO names the path and the reason; the trainer is usable after any failure.
   */
  public void saveCheckpoint(String path) {
    CohortException.check(CohortC.cohort_trainer_save_checkpoint(ptr(), path));
  }

  /**
   * Restores the state saved by {@link #saveCheckpoint}, verified first: after any failure
   * (CORRUPT, IO, INVALID_ARGUMENT for another model) the trainer is exactly as before.
   */
  public void loadCheckpoint(String path) {
    CohortException.check(CohortC.cohort_trainer_load_checkpoint(ptr(), path));
  }

  /** Like {@link #saveCheckpoint}, but INVALID_STATE for a trainer that is not data-parallel. */
  public void saveParallelCheckpoint(String path) {
    CohortException.check(CohortC.cohort_trainer_save_parallel_checkpoint(ptr(), path));
  }

  /** Like {@link #loadCheckpoint}, but INVALID_STATE for a trainer that is not data-parallel. */
  public void loadParallelCheckpoint(String path) {
    CohortException.check(CohortC.cohort_trainer_load_parallel_checkpoint(ptr(), path));
  }

  /**
   * A named value written with every later checkpoint (e.g. a sampler's position) and replaced by
   * the checkpoint's own on a successful load. Names have 1 to 256 characters.
   */
  public void setCheckpointValue(String name, long value) {
    CohortException.check(CohortC.cohort_trainer_set_checkpoint_value(ptr(), name, value));
  }

  /** The value set or loaded under {@code name}; NOT_FOUND when there is none. */
  public long checkpointValue(String name) {
    long[] value = new long[1];
    CohortException.check(CohortC.cohort_trainer_get_checkpoint_value(ptr(), name, value));
    return value[0];
  }

  /** Outputs C writes into may not be read-only buffers. */
  static void checkWritable(String function, Tensor... tensors) {
    if (tensors == null) return;
    for (Tensor t : tensors) {
      if (t != null && t.isReadOnly()) {
        throw CohortException.invalid(function, "output '" + t.name() + "' is a read-only buffer");
      }
    }
  }
}
