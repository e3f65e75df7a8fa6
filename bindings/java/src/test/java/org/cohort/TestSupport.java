package org.cohort;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.function.Executable;

/** Helpers shared by the Java binding's tests. */
final class TestSupport {
  static final int FEATURES = 16;
  static final int CLASSES = 4;

  private TestSupport() {}

  /** Fashion-MNIST's folder (Debian's dataset-fashion-mnist), or -Dcohort.data. */
  static String dataDir() {
    return System.getProperty("cohort.data", "/usr/share/datasets/fashion-mnist");
  }

  /**
   * Runs {@code call}, expects a CohortException with {@code status} whose message (the C text)
   * contains every fragment, and returns it.
   */
  static CohortException expectError(Status status, Executable call, String... fragments) {
    CohortException e = assertThrows(CohortException.class, call);
    assertEquals(status, e.status(), () -> "status of: " + e.getMessage());
    for (String f : fragments) {
      assertTrue(
          e.getMessage().contains(f), () -> "message '" + e.getMessage() + "' lacks '" + f + "'");
    }
    return e;
  }

  /** x f32 [batch, 16] -> linear "fc" -> logits [batch, 4]; loss = cross_entropy(logits, y). */
  static Graph tinyClassifier(long batch) {
    Graph g = new Graph();
    int x = g.addInput("x", DType.F32, batch, FEATURES);
    int y = g.addInput("y", DType.I32, batch);
    int w = g.addParameter(
        "fc.weight", DType.F32, Initializer.kaimingUniform(1 / Math.sqrt(3)), CLASSES, FEATURES);
    int b = g.addParameter("fc.bias", DType.F32, Initializer.zeros(), CLASSES);
    int logits = g.addOp("linear", "logits", x, w, b);
    int loss = g.addOp("cross_entropy", "loss", logits, y);
    g.markOutput(logits);
    g.setLoss(loss);
    return g;
  }

  /**
   * A learnable batch: x[i][j] in [0, 1) from a fixed generator, y[i] = the feature block
   * (of 4 features) with the largest sum.
   */
  static float[] features(long batch, long seed) {
    float[] x = new float[(int) batch * FEATURES];
    long s = seed * 0x9E3779B97F4A7C15L + 1;
    for (int i = 0; i < x.length; ++i) {
      s = s * 6364136223846793005L + 1442695040888963407L;
      x[i] = (s >>> 40) / (float) (1L << 24);
    }
    return x;
  }

  static int[] labels(float[] x, long batch) {
    int[] y = new int[(int) batch];
    for (int i = 0; i < batch; ++i) {
      double best = -1;
      for (int c = 0; c < CLASSES; ++c) {
        double sum = 0;
        for (int j = 0; j < FEATURES / CLASSES; ++j)
          sum += x[i * FEATURES + c * (FEATURES / CLASSES) + j];
        if (sum > best) {
          best = sum;
          y[i] = c;
        }
      }
    }
    return y;
  }

  /** Resident memory of this process, from /proc/self/status. */
  static long rssBytes() throws IOException {
    for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
      if (line.startsWith("VmRSS:")) return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
    }
    throw new IOException("no VmRSS in /proc/self/status");
  }
}
