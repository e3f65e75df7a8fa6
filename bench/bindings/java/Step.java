/*
 * Step.java — one training step of the built-in MLP timed through the Java binding, the program
 * bench/bindings/README.md describes (step_java). Inputs live in direct ByteBuffers made once, so
 * what is measured beyond C's own step is the binding: the JNI call, the Tensor marshalling and
 * the status check.
 *
 *   step_java --hidden H --batch B --steps N --warmup W   ->   step_us MEDIAN MEAN
 */
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.util.Arrays;
import java.util.Locale;
import org.cohort.Cohort;
import org.cohort.DType;
import org.cohort.Graph;
import org.cohort.MlpOptions;
import org.cohort.Optimizer;
import org.cohort.OptimizerOptions;
import org.cohort.Tensor;
import org.cohort.Trainer;
import org.cohort.TrainerOptions;

public final class Step {
  public static void main(String[] args) {
    long hidden = 256;
    long batch = 128;
    int steps = 200;
    int warmup = 20;
    for (int i = 0; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--hidden":
          hidden = Long.parseLong(args[i + 1]);
          break;
        case "--batch":
          batch = Long.parseLong(args[i + 1]);
          break;
        case "--steps":
          steps = Integer.parseInt(args[i + 1]);
          break;
        case "--warmup":
          warmup = Integer.parseInt(args[i + 1]);
          break;
        default:
          System.err.println("usage: step_java --hidden H --batch B --steps N --warmup W");
          System.exit(2);
      }
    }
    if (steps < 1 || warmup < 0 || hidden < 1 || batch < 1) {
      System.err.println("error: steps, hidden and batch must be >= 1, warmup >= 0");
      System.exit(2);
    }

    Cohort.setNumThreads(1);
    MlpOptions mlp = new MlpOptions().batch(batch).inFeatures(784).hidden(hidden).classes(10);
    try (Graph graph = Graph.mlp(mlp); Optimizer sgd = new Optimizer(new OptimizerOptions());
         Trainer trainer = new Trainer(graph, sgd, new TrainerOptions().seed(1))) {
      Tensor x = Tensor.allocate("x", DType.F32, batch, 784);
      Tensor y = Tensor.allocate("y", DType.I32, batch);
      FloatBuffer xs = x.floatBuffer();
      for (int i = 0; i < xs.capacity(); ++i) xs.put(i, (i % 255) / 255.0f);
      IntBuffer ys = y.intBuffer();
      for (int i = 0; i < ys.capacity(); ++i) ys.put(i, i % 10);

      for (int i = 0; i < warmup; ++i) trainer.step(x, y);
      double[] us = new double[steps];
      for (int i = 0; i < steps; ++i) {
        long t0 = System.nanoTime();
        trainer.step(x, y);
        us[i] = (System.nanoTime() - t0) / 1e3;
      }
      double mean = Arrays.stream(us).sum() / steps;
      Arrays.sort(us);
      double median = steps % 2 == 1 ? us[steps / 2] : (us[steps / 2 - 1] + us[steps / 2]) / 2;
      System.out.printf(Locale.ROOT, "step_us %.2f %.2f%n", median, mean);
    }
  }
}
