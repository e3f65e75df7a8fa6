package org.cohort;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * 1,000 cycles of creating, using and closing every kind of handle, registered memory included
 * (and of failing calls), leave the process's resident memory where it was. Each cycle makes a
 * trainer of ~0.5 MiB of model state, so one leaked object per cycle would add hundreds of MiB.
 */
@Tag("leak")
class LeakTest {
  private static final long BATCH = 16;
  private static final int HIDDEN = 64;
  private static final long ALLOWED_GROWTH = 24L << 20;

  @Test
  void createDestroyCyclesDoNotLeak() throws IOException, InterruptedException {
    float[] x = new float[(int) BATCH * 784];
    int[] y = new int[(int) BATCH];
    for (int i = 0; i < x.length; ++i) x[i] = (i % 255) / 255f;
    ByteBuffer commBuffer = ByteBuffer.allocateDirect(1024).order(ByteOrder.nativeOrder());
    try (Dataset data = Dataset.fashionMnist(TestSupport.dataDir(), Dataset.Split.VALIDATION);
         Comm comm = Comm.fromEnv()) {
      for (int i = 0; i < 100; ++i) cycle(x, y, data, comm, commBuffer);
      long before = settledRss();
      for (int i = 0; i < 1000; ++i) cycle(x, y, data, comm, commBuffer);
      long after = settledRss();
      System.out.printf("RSS after 100 warm-up cycles %.1f MiB, after 1000 more %.1f MiB%n",
          before / 1048576.0, after / 1048576.0);
      assertTrue(after - before < ALLOWED_GROWTH,
          "RSS grew by " + (after - before) / 1048576.0 + " MiB over 1000 cycles");
    }
  }

  private static void cycle(float[] x, int[] y, Dataset data, Comm comm, ByteBuffer buffer) {
    MlpOptions mlp = new MlpOptions().batch(BATCH).hidden(HIDDEN);
    try (Graph g = Graph.mlp(mlp);
         Attrs attrs = new Attrs().setInts("shape", 4, 4).setString("mode", "x");
         Optimizer adamw = new Optimizer(OptimizerOptions.adamw(1e-3));
         Trainer t = new Trainer(g, adamw, new TrainerOptions().seed(1)); Plan plan = Plan.ddp();
         Sampler s = new Sampler(data, new SamplerOptions())) {
      t.step(Tensor.of("x", x, BATCH, 784), Tensor.of("y", y, BATCH));
      t.setCheckpointValue("k", 1);
      t.stats();
      // Failing calls allocate messages and exceptions; they must not keep anything either.
      assertThrows(CohortException.class, () -> g.addOp("no_such_op", null, 0));
      assertThrows(CohortException.class, () -> t.step(Tensor.of("x", new float[1], BATCH, 784)));
      try (Work w = comm.allReduce(buffer, buffer, 256, DType.F32, Comm.ReduceOp.SUM)) {
        w.await();
      }
      // 64 KiB of registered memory: 1,000 never unmapped would be 64 MiB.
      try (RegisteredBuffer registered = comm.alloc(16384, DType.F32)) {
        registered.put(7, new float[] {1f});
        try (Work w = comm.allReduce(registered, registered, 16384, Comm.ReduceOp.SUM)) {
          w.await();
        }
      }
    }
  }

  /** RSS once the collector has run and the heap has settled. */
  private static long settledRss() throws IOException, InterruptedException {
    for (int i = 0; i < 3; ++i) {
      System.gc();
      Thread.sleep(20);
    }
    return TestSupport.rssBytes();
  }
}
