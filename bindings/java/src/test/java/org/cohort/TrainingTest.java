package org.cohort;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Training through the binding: the graph builder, trainers, evaluation, parameters, checkpoints.
 */
class TrainingTest {
  private static final long BATCH = 32;

  @Test
  void lossFallsWithTheGraphBuilder() {
    try (Graph g = TestSupport.tinyClassifier(BATCH);
         Optimizer sgd = new Optimizer(OptimizerOptions.sgd(0.5).momentum(0.9));
         Trainer t = new Trainer(g, sgd, new TrainerOptions().seed(7))) {
      float first = 0;
      float last = 0;
      for (int step = 0; step < 60; ++step) {
        float[] x = TestSupport.features(BATCH, step % 8);
        float loss = t.step(Tensor.of("x", x, BATCH, TestSupport.FEATURES),
            Tensor.of("y", TestSupport.labels(x, BATCH), BATCH));
        assertTrue(Float.isFinite(loss));
        if (step < 5) first += loss / 5;
        if (step >= 55) last += loss / 5;
      }
      assertTrue(last < 0.6 * first, "loss fell from " + first + " to " + last);
      TrainerStats stats = t.stats();
      assertEquals(60, stats.step());
      assertEquals(0.5, stats.learningRate(), 1e-12);
      assertTrue(stats.gradNorm() > 0 && stats.parameterBytes() > 0);
    }
  }

  @Test
  void directBuffersAndArraysGiveTheSameStep() {
    float[] x = TestSupport.features(BATCH, 3);
    int[] y = TestSupport.labels(x, BATCH);
    Tensor xd = Tensor.allocate("x", DType.F32, BATCH, TestSupport.FEATURES);
    xd.floatBuffer().put(x);
    Tensor yd = Tensor.allocate("y", DType.I32, BATCH);
    yd.intBuffer().put(y);
    try (Graph g = TestSupport.tinyClassifier(BATCH);
         Optimizer sgd = new Optimizer(OptimizerOptions.sgd(0.1));
         Trainer a = new Trainer(g, sgd, new TrainerOptions().seed(3));
         Trainer b = new Trainer(g, sgd, new TrainerOptions().seed(3))) {
      float la = a.step(Tensor.of("x", x, BATCH, TestSupport.FEATURES), Tensor.of("y", y, BATCH));
      float lb = b.step(xd, yd);
      assertEquals(la, lb);
      // The Java arrays were inputs: the binding must not have written into them.
      assertArrayEquals(TestSupport.features(BATCH, 3), x);
    }
  }

  @Test
  void evaluateAndParametersRoundTrip() {
    try (Graph g = TestSupport.tinyClassifier(BATCH);
         Optimizer sgd = new Optimizer(new OptimizerOptions());
         Trainer t = new Trainer(g, sgd, new TrainerOptions().seed(11))) {
      // Evaluation may feed another batch size than the graph declares.
      float[] x = TestSupport.features(5, 1);
      float[] logits = new float[5 * TestSupport.CLASSES];
      t.evaluate(new Tensor[] {Tensor.of("x", x, 5, TestSupport.FEATURES)},
          Tensor.of("logits", logits, 5, TestSupport.CLASSES));
      assertNotEquals(0f, logits[0]);

      float[] weight = new float[TestSupport.CLASSES * TestSupport.FEATURES];
      t.getParameter(Tensor.of("fc.weight", weight, TestSupport.CLASSES, TestSupport.FEATURES));
      assertNotEquals(0f, weight[0]);
      // Zero weights and a bias of 1: every logit is 1.
      t.setParameter(Tensor.of(
          "fc.weight", new float[weight.length], TestSupport.CLASSES, TestSupport.FEATURES));
      float[] ones = {1, 1, 1, 1};
      t.setParameter(Tensor.of("fc.bias", ones, TestSupport.CLASSES));
      FloatBuffer out = ByteBuffer.allocateDirect(5 * TestSupport.CLASSES * 4)
                            .order(ByteOrder.nativeOrder())
                            .asFloatBuffer();
      t.evaluate(new Tensor[] {Tensor.of("x", x, 5, TestSupport.FEATURES)},
          Tensor.of("logits", out, DType.F32, 5, TestSupport.CLASSES));
      for (int i = 0; i < out.capacity(); ++i) assertEquals(1f, out.get(i));
    }
  }

  @Test
  void checkpointsRestoreTheTrainerAndItsValues(@TempDir Path dir) {
    String path = dir.resolve("tiny.ckpt").toString();
    float[] x = TestSupport.features(BATCH, 5);
    Tensor[] batch = {Tensor.of("x", x, BATCH, TestSupport.FEATURES),
        Tensor.of("y", TestSupport.labels(x, BATCH), BATCH)};
    try (Graph g = TestSupport.tinyClassifier(BATCH);
         Optimizer adamw = new Optimizer(OptimizerOptions.adamw(1e-2));
         Trainer t = new Trainer(g, adamw, new TrainerOptions().seed(2))) {
      t.step(batch);
      t.setCheckpointValue("sampler.epoch", 3);
      t.saveCheckpoint(path);
      float expected = t.step(batch);
      t.setCheckpointValue("sampler.epoch", 4);
      t.loadCheckpoint(path);
      assertEquals(3, t.checkpointValue("sampler.epoch"));
      assertEquals(1, t.stats().step());
      assertEquals(expected, t.step(batch), "resumed training is bit-identical");
    }
  }

  @Test
  void graphsSaveLoadAndReport(@TempDir Path dir) {
    String path = dir.resolve("tiny.graph").toString();
    try (Graph g = TestSupport.tinyClassifier(8)) {
      GraphStats s = g.stats();
      assertEquals(2, s.parameters());
      assertEquals(TestSupport.CLASSES * (TestSupport.FEATURES + 1), s.parameterElements());
      int logits = g.find("logits");
      assertArrayEquals(new long[] {8, TestSupport.CLASSES}, g.shape(logits));
      assertEquals(DType.F32, g.dtype(logits));
      assertEquals(DType.I32, g.dtype(g.find("y")));
      g.save(path);
      try (Graph loaded = Graph.load(path)) {
        assertEquals(s, loaded.stats());
      }
    }
  }

  @Test
  void operatorsTakeAttributesAndReportAllOutputs() {
    try (Graph g = new Graph(); Attrs attrs = new Attrs()) {
      int x = g.addInput("x", DType.F32, 2, 6);
      attrs.setInts("shape", 3, 4)
          .setFloat("unused_float", 0.5)
          .setString("unused_string", "s")
          .setFloats("unused_floats", 1.0, 2.0)
          .setInt("unused_int", 1);
      try (Attrs reshape = new Attrs().setInts("shape", 3, 4)) {
        int r = g.addOp("reshape", "r", reshape, x);
        assertArrayEquals(new long[] {3, 4}, g.shape(r));
      }
      int y = g.addInput("y", DType.I32, 2);
      int w = g.addParameter("w", DType.F32, Initializer.normal(0, 0.02).withSeed(5), 3, 6);
      int wt;
      try (Attrs perm = new Attrs().setInts("perm", 1, 0)) {
        wt = g.addOp("transpose", null, perm, w);
      }
      assertArrayEquals(new long[] {6, 3}, g.shape(wt));
      int logits = g.addOp("matmul", "logits", x, wt);
      int[] outs = g.addOpOutputs("cross_entropy", "loss", null, logits, y);
      assertTrue(outs.length >= 1);
      assertEquals(outs[0], g.find("loss"));
    }
  }

  @Test
  void builtInModelsBuild() {
    try (Graph mlp =
             Graph.mlp(new MlpOptions().batch(4).inFeatures(20).hidden(8, 8).classes(3).activation(
                 Activation.TANH));
         Graph cnn = Graph.cnn(new CnnOptions().batch(2).widths(8, 16).groups(4));
         Graph gpt = Graph.gpt(
             new GptOptions().batch(2).context(16).layers(1).width(32).heads(2).vocab(64))) {
      assertEquals(6, mlp.stats().parameters());
      assertArrayEquals(new long[] {4, 3}, mlp.shape(mlp.find("logits")));
      assertArrayEquals(new long[] {2, 10}, cnn.shape(cnn.find("logits")));
      assertArrayEquals(new long[] {2, 16, 64}, gpt.shape(gpt.find("logits")));
      assertNull(new MlpOptions().hidden(), "the default hidden list is C's");
    }
  }

  @Test
  void datasetsFeedBatchesAndSamplersResume() {
    try (Dataset test = Dataset.fashionMnist(TestSupport.dataDir(), Dataset.Split.VALIDATION);
         Sampler s = new Sampler(test, new SamplerOptions().seed(4).rank(1).world(2))) {
      assertEquals(10000, test.size());
      Tensor images = Tensor.allocate("x", DType.F32, 8, 784);
      int[] labels = new int[8];
      test.nextBatch(s, images, Tensor.of("y", labels, 8));
      Sampler.Position after = s.position();
      assertEquals(new Sampler.Position(0, 8), after);
      float[] first = new float[8 * 784];
      images.floatBuffer().get(first);
      for (float v : first) assertTrue(v >= 0 && v <= 1);
      for (int l : labels) assertTrue(l >= 0 && l < 10);
      // Rewind: the same batch again (names are only for messages here, so may be null).
      s.setPosition(0, 0);
      int[] again = new int[8];
      test.nextBatch(s, Tensor.allocate("x", DType.F32, 8, 1, 28, 28), Tensor.of(null, again, 8));
      assertArrayEquals(labels, again);
    }
  }

  @Test
  void logLinesReachTheHandler() {
    List<String> lines = new CopyOnWriteArrayList<>();
    Cohort.setLogHandler((level, message) -> {
      lines.add(level + " " + message);
      throw new IllegalStateException("a handler's exception is dropped");
    });
    try {
      // What the JNI layer calls for every line (cohortj_log): UTF-8 bytes, on any thread.
      Thread t = new Thread(
          () -> LogBridge.deliver(1, "[rank 0] caf\u00e9".getBytes(StandardCharsets.UTF_8)));
      t.start();
      t.join();
      assertEquals(List.of("1 [rank 0] caf\u00e9"), lines);
    } catch (InterruptedException e) {
      throw new AssertionError(e);
    } finally {
      Cohort.setLogHandler(null);
    }
    LogBridge.deliver(2, new byte[] {'x'});
    assertEquals(1, lines.size(), "no handler, no delivery");
  }

  @Test
  void processSettings() {
    assertEquals(Cohort.bindingAbiVersion() / 10000, Cohort.abiVersion() / 10000);
    assertTrue(Cohort.version().matches("\\d+\\.\\d+\\.\\d+"));
    assertTrue(Cohort.ops().contains("matmul") && Cohort.ops().contains("cross_entropy"));
    Cohort.setLogLevel(2);
    Cohort.setNumThreads(1);
    assertEquals(4, DType.F32.size());
    assertEquals(2, DType.BF16.size());
    assertEquals("shape mismatch", Status.SHAPE_MISMATCH.cName());
  }

  @Test
  void operatorsDescribeWhatAddOpAccepts() {
    OpInfo linear = Cohort.describeOp("linear");
    assertEquals(List.of("x", "weight", "bias"), linear.inputs());
    assertEquals(2, linear.minInputs());
    assertEquals(List.of("y"), linear.outputs());
    assertNull(linear.outputsFrom());
    OpInfo split = Cohort.describeOp("split");
    assertEquals(List.of("part"), split.outputs());
    assertEquals("sizes", split.outputsFrom());
    assertTrue(split.attrs().contains(new OpInfo.Attr("sizes", OpInfo.AttrType.INTS, true, null)));
    assertTrue(Cohort.describeOp("cross_entropy")
                   .attrs()
                   .contains(new OpInfo.Attr("reduction", OpInfo.AttrType.STRING, false, "mean")));
    assertTrue(Cohort.describeOp("conv2d").attrs().contains(
        new OpInfo.Attr("stride", OpInfo.AttrType.INTS, false, List.of(1L, 1L))));
    for (String op : Cohort.ops()) assertEquals(op, Cohort.describeOp(op).name());
    // The required attribute the description names is what builds the node.
    try (Graph g = new Graph(); Attrs perm = new Attrs()) {
      int x = g.addInput("x", DType.F32, 2, 3);
      OpInfo.Attr required = Cohort.describeOp("transpose").attrs().get(0);
      assertTrue(required.required());
      perm.setInts(required.name(), 1, 0);
      g.addOp("transpose", "xt", perm, x);
    }
    TestSupport.expectError(Status.NOT_FOUND, () -> Cohort.describeOp("nope"),
        "cohort_op_describe: no public operator is named 'nope'");
    TestSupport.expectError(
        Status.INVALID_ARGUMENT, () -> Cohort.describeOp(null), "cohort_op_describe: op is NULL");
  }
}
