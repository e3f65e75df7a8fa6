package org.cohort;

/**
 * How a model is spread over the ranks of a communicator ({@code cohort_plan_options}).
 * Starts at C's defaults: preset NONE, the whole communicator data-parallel, mode DDP, tau 1,
 * outer lr 1, no momentum, no Nesterov, no staleness penalty (constant 1), no clip, ZeRO stage 0,
 * 25 MiB buckets, no tensor parallelism (grid 1 x 1 x 1), no pipeline (1 stage, 1 chunk, 1
 * micro-batch, schedule 1F1B, cuts chosen by the estimator, no cut compressed), no fence. A preset
 * other than NONE sets the mode and every outer setting itself.
 */
public final class PlanOptions {
  private Plan.Preset preset;
  private int dataParallel;
  private Plan.Mode mode;
  private long tau;
  private double outerLr;
  private double outerMomentum;
  private boolean outerNesterov;
  private boolean stalenessPenalty;
  private double penaltyConstant;
  private double clipThreshold;
  private int zeroStage;
  private long bucketBytes;
  private boolean innerNoiseScaling;
  private long overlapSteps;
  private int outerBits;
  private int outerFragments;
  private int shardGroup;
  private double gradKeep;
  private boolean averageInnerState;
  private int tensorX;
  private int tensorY;
  private int tensorZ;
  private boolean tensorOverlapOff;
  private boolean activationCheckpointing;
  private int sequenceParallel;
  private int pipelineStages;
  private int pipelineChunks;
  private int microBatches;
  private int pipelineSchedule;
  private String pipelineCuts;
  private boolean automatic;
  private int autoTrials;
  private double memoryLimitBytes;
  private boolean fence;
  private boolean fenceCompression;
  private double fenceMinKeep;
  private double[] pipelineKeep;

  public PlanOptions() {
    cohort_plan_options d = CohortC.cohort_plan_options_default();
    try {
      read(d);
    } finally {
      d.delete();
    }
  }

  /**
   * The options of a native struct ({@link Plan#choose}'s result); pipeline_cuts and pipeline_keep
   * are not read.
   */
  static PlanOptions of(cohort_plan_options d) {
    PlanOptions o = new PlanOptions();
    o.read(d);
    return o;
  }

  private void read(cohort_plan_options d) {
    {  // every field but pipeline_cuts and pipeline_keep, strings the struct does not own
      preset = Plan.Preset.of(d.getPreset());
      dataParallel = d.getData_parallel();
      mode = Plan.Mode.of(d.getMode());
      tau = d.getTau();
      outerLr = d.getOuter_lr();
      outerMomentum = d.getOuter_momentum();
      outerNesterov = d.getOuter_nesterov() != 0;
      stalenessPenalty = d.getStaleness_penalty() != 0;
      penaltyConstant = d.getPenalty_constant();
      clipThreshold = d.getClip_threshold();
      zeroStage = d.getZero_stage();
      bucketBytes = d.getBucket_bytes();
      innerNoiseScaling = d.getInner_noise_scaling() != 0;
      overlapSteps = d.getOverlap_steps();
      outerBits = d.getOuter_bits();
      outerFragments = d.getOuter_fragments();
      shardGroup = d.getShard_group();
      gradKeep = d.getGrad_keep();
      averageInnerState = d.getAverage_inner_state() != 0;
      tensorX = d.getTensor_x();
      tensorY = d.getTensor_y();
      tensorZ = d.getTensor_z();
      tensorOverlapOff = d.getTensor_overlap_off() != 0;
      activationCheckpointing = d.getActivation_checkpointing() != 0;
      sequenceParallel = d.getSequence_parallel();
      pipelineStages = d.getPipeline_stages();
      pipelineChunks = d.getPipeline_chunks();
      microBatches = d.getMicro_batches();
      pipelineSchedule = d.getPipeline_schedule();
      pipelineCuts = null;
      automatic = d.getAutomatic() != 0;
      autoTrials = d.getAuto_trials();
      memoryLimitBytes = d.getMemory_limit_bytes();
      fence = d.getFence() != 0;
      fenceCompression = d.getFence_compression_off() == 0;
      fenceMinKeep = d.getFence_min_keep();
      pipelineKeep = null;
    }
  }

  public PlanOptions preset(Plan.Preset value) {
    preset = value;
    return this;
  }

  /** Ranks in the data-parallel group; 0 = the whole communicator. */
  public PlanOptions dataParallel(int value) {
    dataParallel = value;
    return this;
  }

  public PlanOptions mode(Plan.Mode value) {
    mode = value;
    return this;
  }

  /** Inner steps per round (localsgd, co2), >= 1. */
  public PlanOptions tau(long value) {
    tau = value;
    return this;
  }

  /** Alpha, >= 0. */
  public PlanOptions outerLr(double value) {
    outerLr = value;
    return this;
  }

  /** Beta, in [0, 1). */
  public PlanOptions outerMomentum(double value) {
    outerMomentum = value;
    return this;
  }

  public PlanOptions outerNesterov(boolean value) {
    outerNesterov = value;
    return this;
  }

  /** co2: scale the stale pseudo-gradient by the gap. */
  public PlanOptions stalenessPenalty(boolean value) {
    stalenessPenalty = value;
    return this;
  }

  /** Lambda of the staleness penalty, >= 0. */
  public PlanOptions penaltyConstant(double value) {
    penaltyConstant = value;
    return this;
  }

  /** Outer momentum L2-norm clip, >= 0; 0 = off. */
  public PlanOptions clipThreshold(double value) {
    clipThreshold = value;
    return this;
  }

  /** 0..3 (DDP mode only for 2 and 3): 1 shards optimizer state, 2 also gradients, 3 also parameters. */
  public PlanOptions zeroStage(int value) {
    zeroStage = value;
    return this;
  }

  /** DDP gradient bucket size, > 0. */
  public PlanOptions bucketBytes(long value) {
    bucketBytes = value;
    return this;
  }

  /**
   * localsgd, co2 with AdamW: each rank normalises its local steps by the second moment expected
   * of the group's averaged gradient. No preset sets it; refused (INVALID_PLAN) under DDP.
   */
  public PlanOptions innerNoiseScaling(boolean value) {
    innerNoiseScaling = value;
    return this;
  }

  public boolean innerNoiseScaling() {
    return innerNoiseScaling;
  }

  /**
   * co2: inner steps a round's average travels before it is merged, 1..tau; 0 means 1, -1 chosen
   * (and re-chosen) from the measured all-reduce and step times. INVALID_PLAN outside co2 for -1.
   */
  public PlanOptions overlapSteps(long value) {
    overlapSteps = value;
    return this;
  }

  public long overlapSteps() {
    return overlapSteps;
  }

  /**
   * co2: bits per value of the pseudo-gradient each rank sends: 32, or 8 or 4 (block-scaled
   * integers, averaged in fp32); 0 means the default: 4 under co2 (8 over an SGD optimizer), 32 with
   * shard groups or in another mode. INVALID_PLAN for other values, and for 8 or 4 outside co2.
   */
  public PlanOptions outerBits(int value) {
    outerBits = value;
    return this;
  }

  public int outerBits() {
    return outerBits;
  }

  /**
   * localsgd, co2: streaming outer synchronisation — the parameters cut, in graph order, into
   * this many fragments of about equal bytes, fragment f synchronised f * tau / F steps into each
   * round, so each outer all-reduce carries about 1/F of the model. 0 or 1 (the default): the
   * whole model at once. INVALID_PLAN below 0 or above tau (or the model's parameter count, at
   * trainer creation); UNSUPPORTED above 1 under DDP, overlap auto, ZeRO or a tensor / pipeline
   * axis.
   */
  public PlanOptions outerFragments(int value) {
    outerFragments = value;
    return this;
  }

  public int outerFragments() {
    return outerFragments;
  }

  /**
   * localsgd, co2: shard groups — the data-parallel ranks as replicas of this many consecutive
   * ranks, each replica training synchronously with ZeRO stage zeroStage (1..3) over its ranks,
   * the outer rule between replicas on each rank's ZeRO shard (a rank's outer state and each outer
   * all-reduce ~1/S of the model). 0 or 1 (the default): every rank its own replica.
   * INVALID_PLAN below 0, above 1 with ZeRO stage 0, or (at trainer creation) not dividing the
   * data-parallel degree; UNSUPPORTED above 1 under DDP, outer bits 8 / 4, inner noise scaling,
   * outer fragments, a tensor / pipeline axis or an automatic layout.
   */
  public PlanOptions shardGroup(int value) {
    shardGroup = value;
    return this;
  }

  public int shardGroup() {
    return shardGroup;
  }

  /**
   * DDP: top-k compression of the gradients with error feedback — each gradient bucket sends only
   * this fraction of its entries of largest magnitude (its gradient plus what earlier steps left
   * unsent), all ranks average the messages, and the rest waits for later steps. Fewer bytes than
   * an all-reduce below about 1 / data-parallel degree. 0 or 1 (the default): off. INVALID_PLAN
   * below 0 or above 1; UNSUPPORTED below 1 outside DDP, with ZeRO stage 2 / 3, a tensor / pipeline
   * axis or an automatic layout.
   */
  public PlanOptions gradKeep(double value) {
    gradKeep = value;
    return this;
  }

  public double gradKeep() {
    return gradKeep;
  }

  /**
   * Local SGD mode (the LOCALSGD, SLOWMO and DILOCO presets): average every rank's inner optimizer
   * state (SGD's momentum, AdamW's moments) over the data-parallel ranks at each round end, as
   * DDP's replicas share theirs; one more blocking all-reduce a round, of the state's size.
   * Default false. INVALID_PLAN outside local SGD mode; UNSUPPORTED with shard groups.
   */
  public PlanOptions averageInnerState(boolean value) {
    averageInnerState = value;
    return this;
  }

  public boolean averageInnerState() {
    return averageInnerState;
  }

  /**
   * The tensor grid (AxoNN's X, Y, Z axes), ranks per axis, >= 1 (default 1). Each rank trains its
   * part of the model (split layers hold blocks): a split layer's weight is cut over X along its
   * in-features and over Y along its out-features ({@code tensorY} alone is Megatron's 1D tensor
   * parallelism), and its block over Z along its rows; the ranks of one tensor group step on the
   * same rows, except that the Z ranks each step on their own.
   */
  public PlanOptions tensor(int x, int y, int z) {
    tensorX = x;
    tensorY = y;
    tensorZ = z;
    return this;
  }

  /** Waits for each tensor-parallel collective at once instead of overlapping it (comparison). */
  public PlanOptions tensorOverlapOff(boolean value) {
    tensorOverlapOff = value;
    return this;
  }

  public int tensorX() {
    return tensorX;
  }

  public int tensorY() {
    return tensorY;
  }

  public int tensorZ() {
    return tensorZ;
  }

  public boolean tensorOverlapOff() {
    return tensorOverlapOff;
  }

  /**
   * Activation checkpointing per transformer block (a gpt's "h.&lt;layer&gt;." nodes): backward
   * recomputes each block's activations from its input; the same gradients, less activation
   * memory. A model without blocks is refused when the trainer is made (INVALID_PLAN).
   */
  public PlanOptions activationCheckpointing(boolean value) {
    activationCheckpointing = value;
    return this;
  }

  public boolean activationCheckpointing() {
    return activationCheckpointing;
  }

  /**
   * Sequence parallelism over tensorY: 0 none, 1 Megatron's (the regions between split layers hold
   * each rank's block of the tokens), 2 the all-to-all kind (tensorY a sequence axis: every layer
   * holds its block of the tokens, attention exchanges them for heads). tensorY 1 is INVALID_PLAN;
   * a model it does not fit is refused when the trainer is made.
   */
  public PlanOptions sequenceParallel(int mode) {
    sequenceParallel = mode;
    return this;
  }

  public int sequenceParallel() {
    return sequenceParallel;
  }

  /**
   * Pipeline parallelism: the model cut into {@code stages} stages over consecutive ranks (ranks
   * laid out row-major over data, pipe, x, y, z), each holding only its part; 0 or 1 = none.
   * INVALID_PLAN naming pipeline_stages when negative or when it does not divide the communicator
   * (with the tensor grid).
   */
  public PlanOptions pipelineStages(int stages) {
    pipelineStages = stages;
    return this;
  }

  public int pipelineStages() {
    return pipelineStages;
  }

  /** Stages per rank (virtual stages), only under the interleaved schedule; 0 or 1 = one. */
  public PlanOptions pipelineChunks(int chunks) {
    pipelineChunks = chunks;
    return this;
  }

  public int pipelineChunks() {
    return pipelineChunks;
  }

  /**
   * Each rank's batch cut into this many micro-batches (gradients summed: one step on the whole
   * batch); 0 or 1 = one. INVALID_PLAN naming micro_batches when it does not divide the batch.
   */
  public PlanOptions microBatches(int count) {
    microBatches = count;
    return this;
  }

  public int microBatches() {
    return microBatches;
  }

  /**
   * {@code cohort_pipeline_schedule}: 0 GPipe, 1 1F1B (the default), 2 interleaved 1F1B. Another
   * value is INVALID_PLAN naming pipeline_schedule.
   */
  public PlanOptions pipelineSchedule(int schedule) {
    pipelineSchedule = schedule;
    return this;
  }

  public int pipelineSchedule() {
    return pipelineSchedule;
  }

  /**
   * The first node of stages 1.. by name, separated by commas ("h.1.ln_1"); null or "" = chosen
   * where the graph is narrowest, balancing the estimated time. A name that is no node, or where
   * no stage can begin, is INVALID_PLAN naming pipeline_cuts when the trainer is made.
   */
  public PlanOptions pipelineCuts(String cuts) {
    pipelineCuts = cuts;
    return this;
  }

  public String pipelineCuts() {
    return pipelineCuts;
  }

  /**
   * The layout is the planner's to choose ({@link Plan#choose} resolves it: the data, tensor and
   * pipeline axes, micro-batches, schedule, ZeRO stage and activation checkpointing). A trainer
   * refuses an automatic plan with INVALID_PLAN naming cohort_plan_choose.
   */
  public PlanOptions automatic(boolean value) {
    automatic = value;
    return this;
  }

  public boolean automatic() {
    return automatic;
  }

  /**
   * {@link Plan#choose}: time a few steps of the K best predicted layouts and take the fastest
   * measured; 0 (the default) takes the fastest predicted. INVALID_PLAN naming auto_trials outside
   * [0, 64].
   */
  public PlanOptions autoTrials(int value) {
    autoTrials = value;
    return this;
  }

  public int autoTrials() {
    return autoTrials;
  }

  /**
   * Memory a rank may use, in bytes: {@link Plan#choose} passes over layouts predicted to need
   * more (INVALID_PLAN naming memory_limit_bytes when none fits), a trainer refuses a plan that
   * does. 0 (the default): the host's memory over the ranks. Negative: INVALID_PLAN.
   */
  public PlanOptions memoryLimitBytes(double value) {
    memoryLimitBytes = value;
    return this;
  }

  public double memoryLimitBytes() {
    return memoryLimitBytes;
  }

  /**
   * OP-Fence: the communicator's ranks become one pipeline, a stage per rank, whose rank order,
   * cuts and top-k compression the trainer chooses from the links it measures between the ranks
   * ({@link Comm#probeLinks}) and their compute. The tensor grid and the data-parallel degree must
   * be 1 (UNSUPPORTED otherwise), pipeline chunks 1, and the pipeline cuts and keep unset
   * (INVALID_PLAN); pipeline stages is ignored. Ranks other than world rank 0 may make their
   * trainer with a null graph ({@link Trainer#createParallel}).
   */
  public PlanOptions fence(boolean value) {
    fence = value;
    return this;
  }

  public boolean fence() {
    return fence;
  }

  /**
   * Fence: whether a cut whose transfer would be the pipeline's bottleneck sends only the top-k
   * entries of its activations (true, the default) or everything (false).
   */
  public PlanOptions fenceCompression(boolean value) {
    fenceCompression = value;
    return this;
  }

  public boolean fenceCompression() {
    return fenceCompression;
  }

  /**
   * Fence: the smallest share of entries a compressed cut keeps, in (0, 1]; 0 (the default) =
   * 0.1. INVALID_PLAN naming fence_min_keep outside [0, 1].
   */
  public PlanOptions fenceMinKeep(double value) {
    fenceMinKeep = value;
    return this;
  }

  public double fenceMinKeep() {
    return fenceMinKeep;
  }

  /**
   * Per cut of a pipeline, the share of its activations' entries sent (their top-k by
   * magnitude), one per cut (pipelineStages x pipelineChunks - 1), each in (0, 1]: {@code
   * pipelineKeep(1, 0.1)} compresses the second cut of three stages to a tenth. None (the
   * default, or null): no cut compressed. A bad count or value is INVALID_PLAN naming pipeline keep.
   */
  public PlanOptions pipelineKeep(double... keep) {
    pipelineKeep = keep == null || keep.length == 0 ? null : keep.clone();
    return this;
  }

  /** The keep shares per cut, or null when none is compressed. */
  public double[] pipelineKeep() {
    return pipelineKeep == null ? null : pipelineKeep.clone();
  }

  /** pipelineKeep as cohort_plan_options.pipeline_keep: "1.0,0.1", or null. */
  String pipelineKeepText() {
    if (pipelineKeep == null) return null;
    StringBuilder text = new StringBuilder();
    for (double k : pipelineKeep) {
      if (text.length() > 0) text.append(',');
      text.append(k); // Double.toString: "0.1", "1.0E-4", "NaN", "Infinity" — C's strtod reads each
    }
    return text.toString();
  }

  public Plan.Preset preset() {
    return preset;
  }

  public int dataParallel() {
    return dataParallel;
  }

  public Plan.Mode mode() {
    return mode;
  }

  public long tau() {
    return tau;
  }

  public double outerLr() {
    return outerLr;
  }

  public double outerMomentum() {
    return outerMomentum;
  }

  public boolean outerNesterov() {
    return outerNesterov;
  }

  public boolean stalenessPenalty() {
    return stalenessPenalty;
  }

  public double penaltyConstant() {
    return penaltyConstant;
  }

  public double clipThreshold() {
    return clipThreshold;
  }

  public int zeroStage() {
    return zeroStage;
  }

  public long bucketBytes() {
    return bucketBytes;
  }

  cohort_plan_options toNative() {
    cohort_plan_options o = CohortC.cohort_plan_options_default();
    o.setPreset(preset.code);
    o.setData_parallel(dataParallel);
    o.setMode(mode.code);
    o.setTau(tau);
    o.setOuter_lr(outerLr);
    o.setOuter_momentum(outerMomentum);
    o.setOuter_nesterov(outerNesterov ? 1 : 0);
    o.setStaleness_penalty(stalenessPenalty ? 1 : 0);
    o.setPenalty_constant(penaltyConstant);
    o.setClip_threshold(clipThreshold);
    o.setZero_stage(zeroStage);
    o.setBucket_bytes(bucketBytes);
    o.setInner_noise_scaling(innerNoiseScaling ? 1 : 0);
    o.setOverlap_steps(overlapSteps);
    o.setOuter_bits(outerBits);
    o.setOuter_fragments(outerFragments);
    o.setShard_group(shardGroup);
    o.setGrad_keep(gradKeep);
    o.setAverage_inner_state(averageInnerState ? 1 : 0);
    o.setTensor_x(tensorX);
    o.setTensor_y(tensorY);
    o.setTensor_z(tensorZ);
    o.setTensor_overlap_off(tensorOverlapOff ? 1 : 0);
    o.setActivation_checkpointing(activationCheckpointing ? 1 : 0);
    o.setSequence_parallel(sequenceParallel);
    o.setPipeline_stages(pipelineStages);
    o.setPipeline_chunks(pipelineChunks);
    o.setMicro_batches(microBatches);
    o.setPipeline_schedule(pipelineSchedule);
    o.setAutomatic(automatic ? 1 : 0);
    o.setAuto_trials(autoTrials);
    o.setMemory_limit_bytes(memoryLimitBytes);
    o.setFence(fence ? 1 : 0);
    o.setFence_compression_off(fenceCompression ? 0 : 1);
    o.setFence_min_keep(fenceMinKeep);
    return o;
  }
}
