package org.cohort;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * Collectives (also in registered memory) and a data-parallel trainer through the binding, run by
 * every rank of a job (bindings.java.multirank starts 2 under cohort-run; alone it is a world of
 * one). Every rank runs the same tests in the same order, so their collectives match; a short
 * timeout turns a rank that failed early into a prompt failure of the others instead of a hang.
 */
@Tag("multirank")
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class MultiRankTest {
  private static Comm comm;
  private static int rank;
  private static int size;

  @BeforeAll
  static void join() {
    Cohort.setNumThreads(1);
    comm = Comm.fromEnv(new CommOptions().timeoutMs(30_000));
    rank = comm.rank();
    size = comm.size();
    String expected = System.getenv("WORLD_SIZE");
    if (expected != null) assertEquals(Integer.parseInt(expected), size);
  }

  @AfterAll
  static void leave() {
    comm.close();
  }

  private static ByteBuffer direct(int bytes) {
    return ByteBuffer.allocateDirect(bytes).order(ByteOrder.nativeOrder());
  }

  @Test
  @Order(1)
  void allReduceSumsAndAveragesAndTakesTheMaximum() {
    int n = 1000;
    ByteBuffer in = direct(n * 4);
    ByteBuffer out = direct(n * 4);
    FloatBuffer fin = in.asFloatBuffer();
    for (int i = 0; i < n; ++i) fin.put(i, rank + i);
    try (Work w = comm.allReduce(in, out, n, DType.F32, Comm.ReduceOp.SUM)) {
      w.await();
      assertTrue(w.isDone());
    }
    FloatBuffer fout = out.asFloatBuffer();
    for (int i = 0; i < n; ++i) assertEquals(size * i + size * (size - 1) / 2f, fout.get(i), 1e-3);

    // In place, averaging.
    try (Work w = comm.allReduce(in, in, n, DType.F32, Comm.ReduceOp.AVG)) {
      w.await(30_000);
    }
    for (int i = 0; i < n; ++i) assertEquals(i + (size - 1) / 2f, fin.get(i), 1e-3);

    IntBuffer ints = direct(4 * 4).asIntBuffer();
    for (int i = 0; i < 4; ++i) ints.put(i, rank * 10 + i);
    try (Work w = comm.allReduce(ints, ints, 4, DType.I32, Comm.ReduceOp.MAX)) {
      w.await();
    }
    for (int i = 0; i < 4; ++i) assertEquals((size - 1) * 10 + i, ints.get(i));
  }

  @Test
  @Order(2)
  void gatherScatterBroadcastAndAllToAll() {
    int count = 3;
    IntBuffer mine = direct(count * 4).asIntBuffer();
    for (int i = 0; i < count; ++i) mine.put(i, rank * 100 + i);
    IntBuffer all = direct(size * count * 4).asIntBuffer();
    try (Work w = comm.allGather(mine, all, count, DType.I32)) {
      w.await();
    }
    for (int r = 0; r < size; ++r) {
      for (int i = 0; i < count; ++i) assertEquals(r * 100 + i, all.get(r * count + i));
    }

    // Reduce-scatter: rank r receives block r of the sum of every rank's `all`.
    IntBuffer block = direct(count * 4).asIntBuffer();
    try (Work w = comm.reduceScatter(all, block, count, DType.I32, Comm.ReduceOp.SUM)) {
      w.await();
    }
    for (int i = 0; i < count; ++i) assertEquals(size * (rank * 100 + i), block.get(i));

    FloatBuffer b = direct(8 * 4).asFloatBuffer();
    for (int i = 0; i < 8; ++i) b.put(i, rank == 0 ? 0.5f * i : -1);
    try (Work w = comm.broadcast(b, 8, DType.F32, 0)) {
      w.await();
    }
    for (int i = 0; i < 8; ++i) assertEquals(0.5f * i, b.get(i));

    // All-to-all: block r of my input goes to rank r.
    IntBuffer send = direct(size * 2 * 4).asIntBuffer();
    IntBuffer recv = direct(size * 2 * 4).asIntBuffer();
    for (int r = 0; r < size; ++r) {
      send.put(r * 2, rank * 1000 + r);
      send.put(r * 2 + 1, -rank);
    }
    try (Work w = comm.allToAll(send, recv, 2, DType.I32)) {
      w.await();
    }
    for (int r = 0; r < size; ++r) {
      assertEquals(r * 1000 + rank, recv.get(r * 2));
      assertEquals(-r, recv.get(r * 2 + 1));
    }
    try (Work w = comm.barrier()) {
      w.await();
    }
  }

  @Test
  @Order(3)
  void pointToPointAroundTheRing() {
    if (size < 2) return;
    ByteBuffer in = direct(8);
    ByteBuffer out = direct(8);
    out.asLongBuffer().put(0, 7_000_000_000L + rank);
    // Issue the receive first, then the send: both are asynchronous.
    try (Work r = comm.recv(in, 1, DType.I64, (rank + size - 1) % size);
         Work s = comm.send(out, 1, DType.I64, (rank + 1) % size)) {
      s.await();
      r.await();
    }
    assertEquals(7_000_000_000L + (rank + size - 1) % size, in.asLongBuffer().get(0));
  }

  @Test
  @Order(4)
  void splitFormsSubCommunicators() {
    try (Comm sub = comm.split(rank % 2, rank)) {
      assertNotNull(sub);
      assertEquals((size - rank % 2 + 1) / 2, sub.size());
      assertEquals(rank / 2, sub.rank());
      assertTrue(sub.health().ok());
    }
    assertTrue(comm.health().ok());
  }

  /**
   * All-reduce, reduce-scatter and all-gather in registered memory, 512 KiB per rank so that they
   * run in place where the ranks share a host (from 256 KiB), against values computed here. Every
   * rank allocates and frees (try-with-resources) the same buffers in the same order.
   */
  @Test
  @Order(5)
  void collectivesInRegisteredMemory() {
    int n = 1 << 17; // f32 elements per rank
    float total = size * (size + 1) / 2f; // the sum over ranks of (rank + 1)
    try (RegisteredBuffer sums = comm.alloc(n, DType.F32)) {
      float[] values = new float[n];
      sums.get(0, values);
      for (int i = 0; i < n; ++i) assertEquals(0f, values[i], "registered memory starts zeroed");
      for (int i = 0; i < n; ++i) values[i] = (rank + 1) * (i % 13);
      sums.put(0, values);
      try (Work w = comm.allReduce(sums, sums, n, Comm.ReduceOp.SUM)) {
        w.await();
      }
      sums.get(0, values);
      for (int i = 0; i < n; ++i) assertEquals(total * (i % 13), values[i], "all-reduce at " + i);
    }

    try (RegisteredBuffer blocks = comm.alloc((long) size * n, DType.F32);
         RegisteredBuffer part = comm.alloc(n, DType.F32);
         RegisteredBuffer gathered = comm.alloc((long) size * n, DType.F32)) {
      float[] mine = new float[size * n];
      for (int j = 0; j < mine.length; ++j) mine[j] = (rank + 1) * (j % 13);
      blocks.put(0, mine);
      try (Work w = comm.reduceScatter(blocks, part, n, Comm.ReduceOp.SUM)) {
        w.await();
      }
      float[] block = new float[n];
      part.get(0, block);
      for (int i = 0; i < n; ++i) {
        assertEquals(total * ((rank * n + i) % 13), block[i], "reduce-scatter at " + i);
      }
      try (Work w = comm.allGather(part, gathered, n)) {
        w.await();
      }
      gathered.get(0, mine);
      for (int j = 0; j < mine.length; ++j)
        assertEquals(total * (j % 13), mine[j], "all-gather at " + j);
    }

    // i64 maximum from one registered buffer into another, through ByteBuffers.
    int m = n / 2;
    try (RegisteredBuffer in = comm.alloc(m, DType.I64);
         RegisteredBuffer out = comm.alloc(m, DType.I64)) {
      ByteBuffer bytes = direct(m * 8);
      for (int i = 0; i < m; ++i)
        bytes.putLong(i * 8, (long) (rank * m + i) * (i % 2 == 0 ? 1 : -1));
      in.putBytes(0, bytes);
      assertEquals(m * 8, bytes.position());
      try (Work w = comm.allReduce(in, out, m, Comm.ReduceOp.MAX)) {
        w.await();
      }
      long[] top = new long[m];
      out.get(0, top);
      for (int i = 0; i < m; ++i) {
        assertEquals(i % 2 == 0 ? (long) (size - 1) * m + i : -i, top[i], "all-reduce max at " + i);
      }
    }
  }

  @Test
  @Order(7)
  void co2StatisticsReachJava() {
    long batch = 8; // per rank
    PlanOptions o = new PlanOptions().preset(Plan.Preset.CO2).tau(2).outerFragments(2);
    try (Graph g = TestSupport.tinyClassifier(batch);
         Optimizer sgd = new Optimizer(OptimizerOptions.sgd(0.2)); Plan plan = new Plan(o);
         Trainer t = Trainer.createParallel(g, sgd, plan, comm, new TrainerOptions().seed(5))) {
      for (int step = 0; step < 8; ++step) {
        float[] x = TestSupport.features(batch, step * size + rank);
        t.step(Tensor.of("x", x, batch, TestSupport.FEATURES),
            Tensor.of("y", TestSupport.labels(x, batch), batch));
      }
      ParallelStats s = t.parallelStats();
      assertEquals(4, s.rounds());
      assertEquals(2, s.tau());
      assertEquals(1, s.overlapSteps());
      assertEquals(2, s.outerFragments());
      assertEquals(8, s.outerSyncs()); // a fragment's collective a round each
      assertTrue(s.outerSyncBytes() > 0);
      assertTrue(s.outerHiddenFraction() >= 0 && s.outerHiddenFraction() <= 1);
      assertEquals(1, s.shardGroup());
      assertEquals(1.0, s.gradKeep());
      assertTrue(s.outerSharedWaitSeconds() >= 0 && s.outerSharedWaitSeconds() <= s.waitSeconds());
    }
  }

  @Test
  @Order(6)
  void dataParallelTrainingKeepsRanksInStep() {
    long batch = 8; // per rank
    try (Graph g = TestSupport.tinyClassifier(batch);
         Optimizer sgd = new Optimizer(OptimizerOptions.sgd(0.2)); Plan plan = Plan.ddp();
         Trainer t = Trainer.createParallel(g, sgd, plan, comm, new TrainerOptions().seed(5))) {
      float first = 0;
      float last = 0;
      for (int step = 0; step < 20; ++step) {
        float[] x = TestSupport.features(batch, step * size + rank); // this rank's shard
        float loss = t.step(Tensor.of("x", x, batch, TestSupport.FEATURES),
            Tensor.of("y", TestSupport.labels(x, batch), batch));
        if (step == 0) first = loss;
        last = loss;
      }
      assertTrue(Float.isFinite(first) && Float.isFinite(last));
      ParallelStats stats = t.parallelStats();
      assertEquals(20, stats.rounds());
      assertTrue(stats.buckets() >= 1);
      assertEquals(0, stats.parameterGathers()); // no ZeRO 3: parameters are always whole
      t.gatherParameters(); // a no-op here
      assertFalse(t.averageReplicas()); // DDP's replicas are equal: nothing to average

      // Every rank holds the same weights: gather them and compare the blocks.
      int n = TestSupport.CLASSES * TestSupport.FEATURES;
      Tensor w = Tensor.allocate("fc.weight", DType.F32, TestSupport.CLASSES, TestSupport.FEATURES);
      t.getParameter(w);
      FloatBuffer gathered = direct(size * n * 4).asFloatBuffer();
      try (Work work = comm.allGather(w.floatBuffer(), gathered, n, DType.F32)) {
        work.await();
      }
      float[] mine = new float[n];
      w.floatBuffer().get(mine);
      for (int r = 0; r < size; ++r) {
        float[] theirs = new float[n];
        gathered.get(r * n, theirs);
        assertArrayEquals(mine, theirs, "rank " + r + "'s weights");
      }
    }
  }
}
