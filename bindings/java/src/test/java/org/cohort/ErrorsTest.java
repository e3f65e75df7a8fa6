package org.cohort;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Every failure reaches Java as a CohortException with the C status and the C message. */
class ErrorsTest {
  private static final long BATCH = 8;

  private static Tensor[] batch() {
    float[] x = TestSupport.features(BATCH, 1);
    return new Tensor[] {Tensor.of("x", x, BATCH, TestSupport.FEATURES),
        Tensor.of("y", TestSupport.labels(x, BATCH), BATCH)};
  }

  @Test
  void badShape() {
    try (Graph g = new Graph()) {
      int a = g.addInput("a", DType.F32, 4, 3);
      int b = g.addInput("b", DType.F32, 5, 2);
      CohortException e = TestSupport.expectError(Status.SHAPE_MISMATCH,
          () -> g.addOp("matmul", "mm", a, b), "cohort_graph_add_op: ", "'mm'");
      assertTrue(e.toString().startsWith("CohortException(SHAPE_MISMATCH): "));
      // The graph is unchanged and still usable.
      assertEquals(2, g.stats().values());
    }
  }

  @Test
  void unknownOperator() {
    try (Graph g = new Graph()) {
      int a = g.addInput("a", DType.F32, 4);
      TestSupport.expectError(Status.NOT_FOUND,
          () -> g.addOp("no_such_op", "n", a), "cohort_graph_add_op", "no_such_op");
      TestSupport.expectError(
          Status.NOT_FOUND, () -> g.find("nothing"), "cohort_graph_find", "'nothing'");
    }
  }

  @Test
  void nonFiniteStep() {
    try (Graph g = TestSupport.tinyClassifier(BATCH);
        Optimizer sgd = new Optimizer(new OptimizerOptions());
        Trainer t = new Trainer(g, sgd)) {
      t.step(batch());
      float[] x = TestSupport.features(BATCH, 1);
      x[3] = Float.NaN;
      Tensor[] bad = {Tensor.of("x", x, BATCH, TestSupport.FEATURES),
          Tensor.of("y", TestSupport.labels(TestSupport.features(BATCH, 1), BATCH), BATCH)};
      TestSupport.expectError(Status.NON_FINITE, () -> t.step(bad), "cohort_trainer_step",
          "the update was skipped");
      assertEquals(1, t.stats().step()); // the trainer is as before: go on
      t.step(batch());
      assertEquals(2, t.stats().step());
    }
  }

  @Test
  void closedHandles() {
    Graph g = TestSupport.tinyClassifier(BATCH);
    Optimizer sgd = new Optimizer(new OptimizerOptions());
    Trainer t = new Trainer(g, sgd);
    Attrs attrs = new Attrs();
    g.close();
    g.close(); // a second close does nothing
    assertTrue(g.isClosed());
    TestSupport.expectError(Status.INVALID_HANDLE,
        () -> g.addInput("z", DType.F32, 1), "cohort_graph_add_input: ", "NULL");
    TestSupport.expectError(
        Status.INVALID_HANDLE, () -> new Trainer(g, sgd), "cohort_trainer_create");
    t.close();
    TestSupport.expectError(Status.INVALID_HANDLE, () -> t.step(batch()), "cohort_trainer_step");
    TestSupport.expectError(Status.INVALID_HANDLE, t::stats, "cohort_trainer_get_stats");
    attrs.close();
    try (Graph h = new Graph()) {
      int a = h.addInput("a", DType.F32, 2);
      TestSupport.expectError(Status.INVALID_HANDLE,
          () -> h.addOp("relu", "r", attrs, a), "cohort_graph_add_op", "attrs is closed");
    }
    sgd.close();
    TestSupport.expectError(
        Status.INVALID_HANDLE, () -> new Trainer(TestSupport.tinyClassifier(BATCH), sgd));
  }

  @Test
  void invalidPlan() {
    TestSupport.expectError(Status.INVALID_PLAN,
        ()
            -> new Plan(new PlanOptions().mode(Plan.Mode.LOCALSGD).tau(0)).close(),
        "cohort_plan_create", "tau");
    TestSupport.expectError(Status.INVALID_PLAN,
        ()
            -> new Plan(new PlanOptions().outerMomentum(1.5)).close(),
        "cohort_plan_create", "momentum");
    TestSupport.expectError(Status.UNSUPPORTED,
        () -> new Plan(new PlanOptions().mode(Plan.Mode.CO2).tau(2).zeroStage(3)).close(), "cohort_plan_create",
        "needs the sync (DDP) mode");
    TestSupport.expectError(Status.INVALID_PLAN, () -> new Plan(new PlanOptions().innerNoiseScaling(true)).close(),
        "cohort_plan_create", "inner_noise_scaling applies to local steps");
    new Plan(new PlanOptions().preset(Plan.Preset.CO2).tau(2).innerNoiseScaling(true)).close();
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().preset(Plan.Preset.CO2).tau(2).averageInnerState(true)).close(),
        "cohort_plan_create", "average_inner_state applies to localsgd's blocking round ends");
    new Plan(new PlanOptions().preset(Plan.Preset.DILOCO).tau(4).averageInnerState(true)).close();
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().preset(Plan.Preset.CO2).tau(2).outerBits(6)).close(), "cohort_plan_create",
        "outer bits = 6");
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().preset(Plan.Preset.CO2).tau(2).overlapSteps(3)).close(),
        "cohort_plan_create", "overlap");
    new Plan(new PlanOptions().preset(Plan.Preset.CO2).tau(4).overlapSteps(-1).outerBits(4)).close();
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().preset(Plan.Preset.CO2).tau(2).outerFragments(3)).close(),
        "cohort_plan_create", "plan: outer_fragments = 3 must be <= tau = 2");
    TestSupport.expectError(Status.UNSUPPORTED,
        () -> new Plan(new PlanOptions().preset(Plan.Preset.DDP).outerFragments(2)).close(), "cohort_plan_create",
        "plan: outer_fragments = 2 applies to");
    new Plan(new PlanOptions().preset(Plan.Preset.DILOCO).tau(4).outerFragments(4)).close();
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().preset(Plan.Preset.DILOCO).tau(4).shardGroup(2)).close(),
        "cohort_plan_create", "plan: shard_group = 2 runs ZeRO over each replica's ranks");
    TestSupport.expectError(Status.UNSUPPORTED,
        () -> new Plan(new PlanOptions().preset(Plan.Preset.DDP).zeroStage(3).shardGroup(2)).close(),
        "cohort_plan_create", "plan: shard_group = 2 applies to localsgd / co2");
    new Plan(new PlanOptions().preset(Plan.Preset.CO2).tau(4).zeroStage(3).shardGroup(2)).close();
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().preset(Plan.Preset.DDP).gradKeep(1.5)).close(), "cohort_plan_create",
        "plan: grad_keep = 1.5 must be in (0, 1]");
    TestSupport.expectError(Status.UNSUPPORTED,
        () -> new Plan(new PlanOptions().preset(Plan.Preset.CO2).tau(4).gradKeep(0.1)).close(),
        "cohort_plan_create", "plan: grad_keep = 0.1 compresses the sync mode's gradients");
    new Plan(new PlanOptions().preset(Plan.Preset.DDP).gradKeep(0.1)).close();
    assertEquals(1, new PlanOptions().tensorY());
    TestSupport.expectError(Status.INVALID_PLAN, () -> new Plan(new PlanOptions().tensor(1, 0, 1)).close(),
        "cohort_plan_create", "plan: tensor_y = 0 must be in 1..65536");
    TestSupport.expectError(Status.INVALID_PLAN, () -> new Plan(new PlanOptions().tensor(0, 2, 1)).close(),
        "cohort_plan_create", "plan: tensor_x = 0 must be in 1..65536");
    new Plan(new PlanOptions().tensor(2, 2, 2)).close();  // AxoNN's 3D grid (fitted to a world later)
    TestSupport.expectError(Status.INVALID_PLAN, () -> new Plan(new PlanOptions().sequenceParallel(1)).close(),
        "cohort_plan_create", "plan: sequence parallelism splits the tokens over tensor_y, which is 1");
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().tensor(1, 2, 1).sequenceParallel(3)).close(), "cohort_plan_create",
        "plan: sequence_parallel = 3 (0 none, 1 Megatron's, 2 all-to-all)");
    new Plan(new PlanOptions().tensor(1, 2, 1).sequenceParallel(2)).close();
    new Plan(new PlanOptions().tensor(1, 2, 1).tensorOverlapOff(true)).close();
    assertEquals(false, new PlanOptions().activationCheckpointing());
    new Plan(new PlanOptions().activationCheckpointing(true)).close();
    // Pipeline parallelism: the defaults, 0 keeping them, and each bad value named.
    assertEquals(1, new PlanOptions().pipelineStages());
    assertEquals(1, new PlanOptions().microBatches());
    assertEquals(1, new PlanOptions().pipelineSchedule()); // COHORT_PIPELINE_1F1B
    new Plan(new PlanOptions().pipelineStages(0).pipelineChunks(0).microBatches(0)).close();
    TestSupport.expectError(Status.INVALID_PLAN, () -> new Plan(new PlanOptions().pipelineStages(-1)).close(),
        "cohort_plan_create", "plan: pipeline_stages = -1 must be in [1, 65536]");
    TestSupport.expectError(Status.INVALID_PLAN, () -> new Plan(new PlanOptions().microBatches(-2)).close(),
        "cohort_plan_create", "plan: micro_batches = -2 must be >= 1");
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().pipelineStages(2).pipelineSchedule(5)).close(), "cohort_plan_create",
        "plan: unknown pipeline_schedule 5");
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().pipelineStages(2).pipelineChunks(2)).close(), "cohort_plan_create",
        "plan: pipeline_chunks = 2 needs the interleaved schedule");
    new Plan(new PlanOptions().pipelineStages(2).pipelineChunks(2).microBatches(4).pipelineSchedule(2)).close();
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().pipelineStages(2).pipelineCuts("a,b")).close(), "cohort_plan_create",
        "plan: pipeline_cuts names 2 node(s); 2 stages need 1");
    new Plan(new PlanOptions().pipelineStages(2).pipelineCuts("logits")).close(); // names checked by the trainer
  }

  @Test
  void fencePlansAndLinkProbe() {
    PlanOptions d = new PlanOptions();
    assertEquals(false, d.fence());
    assertEquals(true, d.fenceCompression());
    assertEquals(0.0, d.fenceMinKeep());
    assertEquals(null, d.pipelineKeep());
    assertEquals(null, new PlanOptions().pipelineKeep(new double[0]).pipelineKeep()); // none compressed
    // Pipeline keep: one share per cut, each in (0, 1]; INVALID_PLAN naming "pipeline keep".
    new Plan(new PlanOptions().pipelineStages(2).pipelineKeep(0.1)).close();
    new Plan(new PlanOptions().pipelineStages(3).pipelineKeep(1, 1e-4)).close();
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().pipelineStages(2).pipelineKeep(1.5)).close(), "cohort_plan_create",
        "pipeline keep of cut 0 is 1.5");
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().pipelineStages(2).pipelineKeep(Double.NaN)).close(), "cohort_plan_create",
        "pipeline keep");
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().pipelineStages(2).pipelineKeep(0.5, 0.5)).close(), "cohort_plan_create",
        "pipeline keep gives 2 ratio(s)");
    // Fence: the world one pipeline, so no tensor or data axes; its minimum keep in [0, 1].
    new Plan(new PlanOptions().fence(true)).close();
    new Plan(new PlanOptions().fence(true).fenceCompression(false).fenceMinKeep(0.05)).close();
    TestSupport.expectError(Status.UNSUPPORTED, () -> new Plan(new PlanOptions().fence(true).tensor(1, 2, 1)).close(),
        "cohort_plan_create", "fence makes the whole world one pipeline");
    TestSupport.expectError(Status.INVALID_PLAN, () -> new Plan(new PlanOptions().fence(true).fenceMinKeep(2)).close(),
        "cohort_plan_create", "plan: fence_min_keep = 2");
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().fence(true).pipelineStages(2).pipelineKeep(0.5)).close(), "cohort_plan_create",
        "fence chooses the stages");
    TestSupport.expectError(Status.INVALID_PLAN, () -> new Plan(new PlanOptions().fence(true).automatic(true)).close(),
        "cohort_plan_create", "fence and automatic");
    Comm closed;
    try (Comm comm = Comm.fromEnv(); Optimizer sgd = new Optimizer(OptimizerOptions.sgd(0.1));
         Plan pipeline = new Plan(new PlanOptions().pipelineStages(2))) {
      closed = comm;
      // World rank 0 reads a pipeline plan's graph: null there is refused (other ranks may pass null).
      TestSupport.expectError(Status.INVALID_HANDLE,
          () -> Trainer.createParallel(null, sgd, pipeline, comm, new TrainerOptions()).close(),
          "cohort_trainer_create_parallel", "graph is NULL");
      // A world of one: nothing to measure, a 1 x 1 zero matrix.
      Comm.Links links = comm.probeLinks();
      assertEquals(1, links.bytesPerSecond().length);
      assertEquals(0.0, links.bytesPerSecond()[0][0]);
      assertEquals(0.0, links.latencySeconds()[0][0]);
      assertTrue(links.report().startsWith("links, Mbit/s (latency ms):"), links.report());
      assertTrue(links.report().contains("rank 0"), links.report());
    }
    TestSupport.expectError(Status.INVALID_HANDLE, closed::probeLinks, "cohort_comm_probe_links: comm is NULL");
  }

  @Test
  void planChooseResolvesAutomaticPlans() {
    assertEquals(false, new PlanOptions().automatic());
    assertEquals(0, new PlanOptions().autoTrials());
    assertEquals(0.0, new PlanOptions().memoryLimitBytes());
    TestSupport.expectError(Status.INVALID_PLAN,
        () -> new Plan(new PlanOptions().automatic(true).autoTrials(65)).close(), "cohort_plan_create",
        "plan: auto_trials = 65 must be in [0, 64]");
    TestSupport.expectError(Status.INVALID_PLAN, () -> new Plan(new PlanOptions().memoryLimitBytes(-1)).close(),
        "cohort_plan_create", "plan: memory_limit_bytes = -1");
    try (Comm comm = Comm.fromEnv(); Graph g = TestSupport.tinyClassifier(BATCH);
         Optimizer sgd = new Optimizer(OptimizerOptions.sgd(0.1))) {
      // An unresolved automatic plan: the trainer names the call that resolves it.
      try (Plan auto = new Plan(new PlanOptions().preset(Plan.Preset.DDP).automatic(true))) {
        TestSupport.expectError(Status.INVALID_PLAN,
            () -> Trainer.createParallel(g, sgd, auto, comm, new TrainerOptions()).close(),
            "cohort_trainer_create_parallel", "cohort_plan_choose");
      }
      TestSupport.expectError(Status.INVALID_PLAN,
          () -> Plan.choose(new PlanOptions().memoryLimitBytes(1024), g, sgd, comm, new TrainerOptions()),
          "cohort_plan_choose", "memory_limit_bytes");
      TestSupport.expectError(Status.INVALID_PLAN,
          () -> Plan.choose(new PlanOptions().automatic(true).fence(true), g, sgd, comm, new TrainerOptions()),
          "cohort_plan_choose", "fence and automatic");
      // A world of one: the layout is one rank's; rank 0's report names the choice.
      Plan.Choice choice = Plan.choose(new PlanOptions().preset(Plan.Preset.DDP).automatic(true).bucketBytes(1 << 20),
          g, sgd, comm, new TrainerOptions());
      assertTrue(choice.report().contains("auto plan: chose"), choice.report());
      PlanOptions chosen = choice.options();
      assertEquals(false, chosen.automatic());
      assertEquals(false, chosen.fence());
      assertEquals(true, chosen.fenceCompression());
      assertEquals(null, chosen.pipelineKeep());
      assertEquals(Plan.Preset.DDP, chosen.preset());
      assertEquals(1 << 20, chosen.bucketBytes());
      assertEquals(1, chosen.pipelineStages());
      assertEquals(1, chosen.tensorX() * chosen.tensorY() * chosen.tensorZ());
      try (Plan plan = new Plan(chosen); Trainer t = Trainer.createParallel(g, sgd, plan, comm, new TrainerOptions())) {
        assertTrue(Float.isFinite(t.step(batch())));
      }
    }
  }

  @Test
  void microBatchesTrainAndReportStats() {
    try (Comm comm = Comm.fromEnv(); Graph g = TestSupport.tinyClassifier(BATCH);
         Optimizer sgd = new Optimizer(OptimizerOptions.sgd(0.1))) {
      try (Plan three = new Plan(new PlanOptions().microBatches(3))) {
        TestSupport.expectError(Status.INVALID_PLAN, () -> Trainer.createParallel(g, sgd, three, comm, new TrainerOptions()).close(),
            "cohort_trainer_create_parallel", "plan: micro_batches = 3 does not divide the batch 8");
      }
      try (Plan plan = new Plan(new PlanOptions().microBatches(2).pipelineSchedule(0));
           Trainer t = Trainer.createParallel(g, sgd, plan, comm, new TrainerOptions())) {
        assertTrue(Float.isFinite(t.step(batch())));
        TrainerStats s = t.stats();
        assertEquals(1, s.step());
        assertEquals(2, s.microBatches());
        // One stage: nothing to wait for but the schedule's bookkeeping.
        assertTrue(s.pipelineBubbleFraction() >= 0.0 && s.pipelineBubbleFraction() < 0.5);
        assertEquals("", t.pipelineStages()); // no pipeline stages
      }
    }
  }

  @Test
  void corruptCheckpoint(@TempDir Path dir) throws IOException {
    Path path = dir.resolve("t.ckpt");
    try (Graph g = TestSupport.tinyClassifier(BATCH);
         Optimizer sgd = new Optimizer(new OptimizerOptions()); Trainer t = new Trainer(g, sgd)) {
      t.step(batch());
      t.saveCheckpoint(path.toString());
      long size = Files.size(path);
      // A flipped byte in the data, then a truncated file: both fail verification.
      try (RandomAccessFile f = new RandomAccessFile(path.toFile(), "rw")) {
        f.seek(size - 5);
        int b = f.read();
        f.seek(size - 5);
        f.write(b ^ 0x5a);
      }
      TestSupport.expectError(Status.CORRUPT,
          ()
              -> t.loadCheckpoint(path.toString()),
          "cohort_trainer_load_checkpoint", path.toString());
      try (RandomAccessFile f = new RandomAccessFile(path.toFile(), "rw")) {
        f.setLength(size / 2);
      }
      TestSupport.expectError(Status.CORRUPT, () -> t.loadCheckpoint(path.toString()), "truncated");
      TestSupport.expectError(
          Status.IO, () -> t.loadCheckpoint(dir.resolve("missing").toString()), "missing");
      // After every failure the trainer is as before and usable.
      assertEquals(1, t.stats().step());
      t.step(batch());
    }
  }

  @Test
  void wrongSizeBuffers() {
    try (Graph g = TestSupport.tinyClassifier(BATCH);
         Optimizer sgd = new Optimizer(new OptimizerOptions()); Trainer t = new Trainer(g, sgd)) {
      Tensor shortX = Tensor.of("x", new float[3], BATCH, TestSupport.FEATURES);
      Tensor y = Tensor.of("y", new int[(int) BATCH], BATCH);
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          ()
              -> t.step(shortX, y),
          "cohort_trainer_step", "'x'", "buffer has 12 bytes",
          "needs " + BATCH * TestSupport.FEATURES * 4);
      Tensor x = Tensor.allocate("x", DType.F32, BATCH, TestSupport.FEATURES);
      ByteBuffer bigY =
          ByteBuffer.allocateDirect((int) (BATCH + 1) * 4).order(ByteOrder.nativeOrder());
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          ()
              -> t.step(x, Tensor.of("y", bigY, DType.I32, BATCH)),
          "'y'", "buffer has " + (BATCH + 1) * 4 + " bytes");
      // A shape that disagrees with the graph's declaration.
      TestSupport.expectError(Status.SHAPE_MISMATCH,
          ()
              -> t.step(Tensor.of("x", new float[(int) (2 * BATCH * TestSupport.FEATURES)],
                            2 * BATCH, TestSupport.FEATURES),
                  y),
          "cohort_trainer_step");
      TestSupport.expectError(
          Status.NOT_FOUND, () -> t.step(x, Tensor.of("nope", new int[8], 8)), "'nope'");
      TestSupport.expectError(Status.INVALID_ARGUMENT, () -> t.step(x, null), "inputs[1] is null");
    }
  }

  @Test
  void buffersTheBindingRefuses() {
    TestSupport.expectError(Status.INVALID_ARGUMENT,
        () -> Tensor.of("x", ByteBuffer.allocate(16), DType.F32, 4), "not direct");
    TestSupport.expectError(Status.INVALID_ARGUMENT,
        () -> Tensor.of("x", ByteBuffer.allocateDirect(16), DType.F32, 4), "byte order");
    TestSupport.expectError(Status.INVALID_ARGUMENT,
        ()
            -> Tensor.of("x",
                ByteBuffer.allocateDirect(16).order(ByteOrder.nativeOrder()).asIntBuffer(),
                DType.F32, 4),
        "IntBuffer cannot hold f32");
    TestSupport.expectError(
        Status.INVALID_ARGUMENT, () -> Tensor.of("x", new short[4], DType.F32, 4), "short[]");
    try (Graph g = TestSupport.tinyClassifier(BATCH);
         Optimizer sgd = new Optimizer(new OptimizerOptions()); Trainer t = new Trainer(g, sgd)) {
      ByteBuffer ro = ByteBuffer.allocateDirect(TestSupport.CLASSES * 4)
                          .asReadOnlyBuffer()
                          .order(ByteOrder.nativeOrder());
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          ()
              -> t.getParameter(Tensor.of("fc.bias", ro, DType.F32, TestSupport.CLASSES)),
          "read-only");
    }
  }

  @Test
  void argumentsCAPIRejects(@TempDir Path dir) {
    TestSupport.expectError(Status.INVALID_ARGUMENT,
        () -> new Optimizer(OptimizerOptions.sgd(-1)), "cohort_optimizer_create", "lr");
    TestSupport.expectError(
        Status.INVALID_ARGUMENT, () -> Cohort.setLogLevel(7), "cohort_set_log_level");
    TestSupport.expectError(
        Status.INVALID_ARGUMENT, () -> Cohort.setNumThreads(0), "cohort_set_num_threads");
    TestSupport.expectError(Status.INVALID_ARGUMENT,
        () -> Graph.gpt(new GptOptions().width(256).heads(3)), "heads (3) must divide width (256)");
    TestSupport.expectError(Status.IO,
        ()
            -> Dataset.fashionMnist(dir.toString(), Dataset.Split.TRAIN),
        "cohort_dataset_open_fashion_mnist", dir.toString());
    TestSupport.expectError(
        Status.IO, () -> Graph.load(dir.resolve("none.graph").toString()), "cohort_graph_load");
    try (Graph g = TestSupport.tinyClassifier(BATCH);
         Optimizer sgd = new Optimizer(new OptimizerOptions()); Trainer t = new Trainer(g, sgd)) {
      TestSupport.expectError(Status.NOT_FOUND, () -> t.checkpointValue("absent"), "absent");
      TestSupport.expectError(
          Status.INVALID_STATE, t::parallelStats, "cohort_trainer_get_parallel_stats");
      TestSupport.expectError(
          Status.INVALID_STATE, () -> t.saveParallelCheckpoint(dir.resolve("p").toString()));
      TestSupport.expectError(Status.IO,
          ()
              -> t.saveCheckpoint(dir.resolve("no/such/dir/x.ckpt").toString()),
          "cohort_trainer_save_checkpoint");
    }
  }

  @Test
  void devices() {
    assertEquals(new Cohort.Usability(true, ""), Cohort.deviceUsable(Device.CPU));
    assertEquals(Device.CPU, new TrainerOptions().device());
    Cohort.Usability cuda = Cohort.deviceUsable(Device.CUDA);
    try (Graph g = TestSupport.tinyClassifier(BATCH);
         Optimizer sgd = new Optimizer(new OptimizerOptions())) {
      try (Trainer t = new Trainer(g, sgd, new TrainerOptions().device(Device.CPU))) {
        t.step(batch());
      }
      TrainerOptions onCuda = new TrainerOptions().seed(1).device(Device.CUDA);
      assertEquals(Device.CUDA, onCuda.device());
      if (cuda.usable()) {
        assertEquals("", cuda.reason());
        try (Trainer t = new Trainer(g, sgd, onCuda)) {
          assertTrue(t.step(batch()) > 0);
        }
      } else {
        assertFalse(cuda.reason().isEmpty());
        CohortException e = TestSupport.expectError(Status.UNSUPPORTED,
            () -> new Trainer(g, sgd, onCuda).close(), "cohort_trainer_create", cuda.reason());
        assertTrue(e.getMessage().toLowerCase(Locale.ROOT).contains("cuda"), e.getMessage());
      }
      // Data parallelism on the GPU: runs where the device can be used, refused with the reason
      // elsewhere.
      try (Comm comm = Comm.fromEnv(); Plan plan = Plan.ddp()) {
        if (cuda.usable()) {
          try (Trainer t = Trainer.createParallel(g, sgd, plan, comm, onCuda)) {
            assertTrue(t.step(batch()) > 0);
          }
        } else {
          CohortException e = TestSupport.expectError(Status.UNSUPPORTED,
              ()
                  -> Trainer.createParallel(g, sgd, plan, comm, onCuda).close(),
              "cohort_trainer_create_parallel", cuda.reason());
          assertTrue(e.getMessage().toLowerCase(Locale.ROOT).contains("cuda"), e.getMessage());
        }
      }
    }
    // A value that is no device: only through the raw layer (or null) from Java.
    assertThrows(NullPointerException.class, () -> Cohort.deviceUsable(null));
    assertThrows(NullPointerException.class, () -> new TrainerOptions().device(null));
    TestSupport.expectError(Status.INVALID_ARGUMENT,
        () -> CohortException.check(CohortC.cohort_device_usable(7, new int[1], new byte[64])),
        "cohort_device_usable", "device = 7 is not a cohort_device");
  }

  /**
   * Issue #25: an element type that does not match the value's dtype is refused, never read by
   * its byte count. Java arrays and typed buffers carry their element type; a byte[] or a
   * ByteBuffer is untyped, so its dtype is the one named with it and its byte count must hold the
   * shape exactly.
   */
  @Test
  void elementTypesMustMatchTheGraph() {
    final int n = (int) (BATCH * TestSupport.FEATURES);
    try (Graph g = TestSupport.tinyClassifier(BATCH);
         Optimizer sgd = new Optimizer(new OptimizerOptions()); Trainer t = new Trainer(g, sgd)) {
      Tensor x = Tensor.of("x", new float[n], BATCH, TestSupport.FEATURES);
      Tensor y = Tensor.of("y", new int[(int) BATCH], BATCH);
      TestSupport.expectError(Status.SHAPE_MISMATCH,
          () -> t.step(Tensor.of("x", new int[n], BATCH, TestSupport.FEATURES), y),
          "cohort_trainer_step", "input 'x' has dtype i32, expected f32");
      TestSupport.expectError(Status.SHAPE_MISMATCH,
          () -> t.step(x, Tensor.of("y", new long[(int) BATCH], BATCH)),
          "input 'y' has dtype i64, expected i32");
      TestSupport.expectError(Status.SHAPE_MISMATCH,
          () -> t.step(x, Tensor.of("y", new float[(int) BATCH], BATCH)),
          "input 'y' has dtype f32, expected i32");
      // uint8 pixels named f32: the byte count cannot hold the shape, and the message says so
      // (a byte[] once counted dtype-size bytes per array element: C read, and for outputs
      // wrote, past the array).
      Tensor pixels = Tensor.of("x", new byte[n], DType.F32, BATCH, TestSupport.FEATURES);
      assertEquals(n, pixels.bytes());
      TestSupport.expectError(Status.INVALID_ARGUMENT, () -> t.step(pixels, y), "'x'",
          "buffer has " + n + " bytes, but shape [" + BATCH + ", " + TestSupport.FEATURES
              + "] of f32 needs " + 4 * n);
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          ()
              -> t.getParameter(Tensor.of(
                  "fc.bias", new byte[TestSupport.CLASSES], DType.F32, TestSupport.CLASSES)),
          "cohort_trainer_get_parameter", "buffer has " + TestSupport.CLASSES + " bytes");
      byte[] biasBytes = new byte[4 * TestSupport.CLASSES];
      t.getParameter(Tensor.of("fc.bias", biasBytes, DType.F32, TestSupport.CLASSES));
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          ()
              -> Tensor.of("x",
                  ByteBuffer.allocateDirect(8 * n).order(ByteOrder.nativeOrder()).asDoubleBuffer(),
                  DType.F32, BATCH, TestSupport.FEATURES),
          "Tensor 'x'", "a DoubleBuffer cannot hold f32");
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          ()
              -> t.getParameter(Tensor.of("fc.bias",
                  ByteBuffer.allocateDirect(TestSupport.CLASSES * 8)
                      .order(ByteOrder.nativeOrder())
                      .asLongBuffer(),
                  DType.F32, TestSupport.CLASSES)),
          "a LongBuffer cannot hold f32");
      // Raw bytes of the right dtype and size train like the float[] they hold.
      ByteBuffer raw = ByteBuffer.allocateDirect(4 * n).order(ByteOrder.nativeOrder());
      assertTrue(Float.isFinite(t.step(Tensor.of("x", raw, DType.F32, BATCH, TestSupport.FEATURES), y)));
    }
    try (Comm comm = Comm.fromEnv()) {
      ByteBuffer bytes = ByteBuffer.allocateDirect(32).order(ByteOrder.nativeOrder());
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          () -> comm.allReduce(bytes.asDoubleBuffer(), bytes.asDoubleBuffer(), 4, DType.F32,
              Comm.ReduceOp.SUM),
          "cohort_comm_all_reduce: in", "a DoubleBuffer cannot hold f32");
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          () -> comm.send(bytes.asFloatBuffer(), 4, DType.I32, 0),
          "cohort_comm_send: buf", "a FloatBuffer cannot hold i32");
    }
  }

  @Test
  void collectiveBuffersAreChecked() {
    Comm comm = Comm.fromEnv();
    try {
      ByteBuffer in = ByteBuffer.allocateDirect(16).order(ByteOrder.nativeOrder());
      ByteBuffer small = ByteBuffer.allocateDirect(12).order(ByteOrder.nativeOrder());
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          ()
              -> comm.allReduce(in, small, 4, DType.F32, Comm.ReduceOp.SUM),
          "cohort_comm_all_reduce: out has 12 bytes, but 4 f32 elements need 16");
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          () -> comm.broadcast(ByteBuffer.allocate(16), 4, DType.F32, 0), "not direct");
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          ()
              -> comm.recv(in.asReadOnlyBuffer().order(ByteOrder.nativeOrder()), 4, DType.F32, 0),
          "read-only");
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          () -> comm.allReduce(in, in, -1, DType.F32, Comm.ReduceOp.SUM), "count");
      comm.close();
      TestSupport.expectError(Status.INVALID_HANDLE,
          () -> comm.allReduce(in, in, 4, DType.F32, Comm.ReduceOp.SUM), "cohort_comm_all_reduce");
      TestSupport.expectError(Status.INVALID_HANDLE, comm::rank, "cohort_comm_rank");
    } finally {
      comm.close();
    }
  }

  @Test
  void failedCommunicatorKeepsBuffersUntilClose() {
    // A send to a rank that froze may outlive its failed operation: once the communicator has
    // failed, a closed Work's buffers stay reachable from the Comm until it is closed.
    Comm comm = Comm.fromEnv();
    try {
      ByteBuffer healthy = ByteBuffer.allocateDirect(16).order(ByteOrder.nativeOrder());
      try (Work w = comm.allReduce(healthy, healthy, 4, DType.F32, Comm.ReduceOp.SUM)) {
        w.await();
      }
      assertEquals(0, comm.keptCount()); // a healthy communicator lets go at once
      comm.abort();
      java.lang.ref.WeakReference<ByteBuffer> weak =
          new java.lang.ref.WeakReference<>(ByteBuffer.allocateDirect(16).order(ByteOrder.nativeOrder()));
      Work w = comm.allReduce(weak.get(), weak.get(), 4, DType.F32, Comm.ReduceOp.SUM);
      TestSupport.expectError(Status.INVALID_STATE, w::await, "aborted");
      w.close();
      assertEquals(1, comm.keptCount());
      for (int i = 0; i < 3; ++i) System.gc();
      assertTrue(weak.get() != null, "the buffer of an operation of a failed communicator was collected");
      comm.close();
      assertEquals(0, comm.keptCount());
    } finally {
      comm.close();
    }
  }

  @Test
  void registeredMemoryMistakes() {
    Comm comm = Comm.fromEnv();
    try {
      RegisteredBuffer buf = comm.alloc(8, DType.F32);
      assertEquals(8, buf.count());
      assertEquals(32, buf.byteSize());
      assertEquals(DType.F32, buf.dtype());
      assertEquals("RegisteredBuffer(8 f32, live)", buf.toString());
      buf.put(0, new float[] {1, 2, 3});

      // Out of bounds, wrong arrays, wrong dtypes: nothing is copied.
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          ()
              -> buf.put(6, new float[3]),
          "RegisteredBuffer.put: elements [6, 9) are outside the registered buffer of 8 f32");
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          () -> buf.get(-1, new float[1]), "RegisteredBuffer.get", "[-1, 0)");
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          () -> buf.put(0, new float[4], 2, 3), "offset 2 and length 3 do not fit a float[] of 4");
      TestSupport.expectError(
          Status.INVALID_ARGUMENT, () -> buf.get(0, (float[]) null), "the array is null");
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          () -> buf.put(0, new int[2]), "a int[] does not hold f32 elements");
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          ()
              -> buf.putBytes(30, ByteBuffer.allocate(4)),
          "bytes [30, 34) are outside the registered buffer of 8 f32 (32 bytes)");
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          () -> buf.getBytes(0, ByteBuffer.allocate(4).asReadOnlyBuffer()), "read-only");
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          ()
              -> comm.allReduce(buf, buf, 9, Comm.ReduceOp.SUM),
          "cohort_comm_all_reduce: in holds 8 f32 elements, so count must be 0..8, got 9");
      float[] back = new float[8];
      buf.get(0, back);
      assertEquals(3f, back[2]);
      assertEquals(0f, back[3]);

      // Heap and read-only byte buffers copy too, in the platform's byte order.
      ByteBuffer heap = ByteBuffer.allocate(8).order(ByteOrder.nativeOrder());
      heap.putFloat(0, 5f).putFloat(4, 6f);
      buf.putBytes(12, heap.asReadOnlyBuffer().order(ByteOrder.nativeOrder()));
      buf.getBytes(8, heap.clear());
      assertEquals(3f, heap.getFloat(0));
      assertEquals(5f, heap.getFloat(4));

      // An open Work pins the memory.
      Work w = comm.allReduce(buf, buf, 8, Comm.ReduceOp.SUM);
      TestSupport.expectError(
          Status.INVALID_STATE, buf::free, "RegisteredBuffer.free: 1 open Work");
      w.await();
      w.close();
      buf.free();
      assertTrue(buf.isFreed());

      // Free twice, use after free; close() after free does nothing.
      TestSupport.expectError(Status.INVALID_HANDLE, buf::free,
          "RegisteredBuffer.free: the registered buffer of 8 f32 was freed");
      TestSupport.expectError(Status.INVALID_HANDLE,
          () -> buf.get(0, new float[1]), "RegisteredBuffer.get", "was freed");
      TestSupport.expectError(Status.INVALID_HANDLE,
          () -> comm.allReduce(buf, buf, 8, Comm.ReduceOp.SUM), "cohort_comm_all_reduce: in: the");
      buf.close();

      // Sizes.
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          () -> comm.alloc(0, DType.F32), "cohort_comm_mem_alloc", "0 bytes");
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          () -> comm.alloc(-1, DType.F32), "Comm.alloc: count must be 1..");

      // Memory of this communicator used by another's open Work keeps this one from closing.
      RegisteredBuffer kept = comm.alloc(4, DType.I32);
      try (Comm other = comm.split(0, 0)) {
        Work pinned = other.allReduce(kept, kept, 4, Comm.ReduceOp.SUM);
        TestSupport.expectError(
            Status.INVALID_STATE, comm::close, "Comm.close", "another communicator");
        assertTrue(!comm.isClosed() && !kept.isFreed());
        pinned.close();
      }

      // Closing the communicator releases its memory: every use afterwards is INVALID_HANDLE.
      comm.close();
      assertTrue(kept.isFreed());
      assertEquals("RegisteredBuffer(4 i32, released with its communicator)", kept.toString());
      TestSupport.expectError(
          Status.INVALID_HANDLE, kept::free, "was released when its communicator was closed");
      TestSupport.expectError(Status.INVALID_HANDLE, () -> kept.put(0, new int[1]), "released");
      kept.close();
      TestSupport.expectError(Status.INVALID_HANDLE,
          () -> comm.alloc(4, DType.F32), "cohort_comm_mem_alloc: comm is NULL");
      TestSupport.expectError(Status.INVALID_HANDLE,
          ()
              -> comm.allReduce(kept, kept, 4, Comm.ReduceOp.SUM),
          "cohort_comm_all_reduce: comm is NULL");
    } finally {
      comm.close();
    }
  }

  @Test
  void samplersRejectBadPositions() {
    try (Dataset test = Dataset.fashionMnist(TestSupport.dataDir(), Dataset.Split.VALIDATION);
         Sampler s = new Sampler(test, new SamplerOptions())) {
      TestSupport.expectError(
          Status.INVALID_ARGUMENT, () -> s.setPosition(-1, 0), "cohort_sampler_set_position");
      TestSupport.expectError(Status.INVALID_ARGUMENT,
          () -> new Sampler(test, new SamplerOptions().rank(2).world(2)), "cohort_sampler_create");
      TestSupport.expectError(Status.SHAPE_MISMATCH,
          ()
              -> test.nextBatch(
                  s, Tensor.allocate("x", DType.F32, 4, 783), Tensor.allocate("y", DType.I32, 4)),
          "cohort_dataset_next_batch");
    }
  }
}
