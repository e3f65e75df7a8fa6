/*
 * Fashion-MNIST with a two-layer MLP through the Java binding (package org.cohort): the program a
 * Java user copies from. Step for step the same as examples/c/fashion_mnist.c and the Python and
 * Rust versions (examples/README.md), so the same arguments print the same test accuracy. Started
 * alone it trains on one rank; under `cohort-run -n 2` every rank trains its share with DDP.
 *
 *   run_fashion_mnist_java [--data DIR] [--steps N] [--epochs E] [--batch B] [--hidden H] [--lr LR]
 *                          [--seed S] [--threads T]
 */
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.util.Locale;
import org.cohort.Cohort;
import org.cohort.CohortException;
import org.cohort.Comm;
import org.cohort.DType;
import org.cohort.Dataset;
import org.cohort.Graph;
import org.cohort.Initializer;
import org.cohort.Optimizer;
import org.cohort.OptimizerOptions;
import org.cohort.Plan;
import org.cohort.Sampler;
import org.cohort.SamplerOptions;
import org.cohort.Tensor;
import org.cohort.Trainer;
import org.cohort.TrainerOptions;

public final class FashionMnist {
  private static final String USAGE =
      "usage: fashion_mnist [--data DIR] [--steps N] [--epochs E] [--batch B] "
      + "[--hidden H] [--lr LR] [--seed S] [--threads T]";
  private static final int PIXELS = 784;
  private static final int CLASSES = 10;
  private static final int TEST_BATCH = 1000;
  private static final int TEST_BATCHES = 10;

  /** Command-line options, with the defaults of examples/README.md. */
  static final class Options {
    String data = "/usr/share/datasets/fashion-mnist";
    long steps = 0; // 0: epochs x (train examples / world / batch)
    long epochs = 1;
    long batch = 64;
    long hidden = 256;
    double lr = 1e-3;
    long seed = 1;
    int threads = 0;
  }

  public static void main(String[] args) {
    Options o = parse(args);
    try {
      run(o);
    } catch (CohortException e) {
      System.out.flush();
      System.err.println("error: " + e.getMessage() + " (" + e.status().cName() + ")");
      System.exit(1);
    }
  }

  /** x: (B, 784) -> fc1 -> relu -> logits (B, 10); loss = cross_entropy(logits, y). */
  static Graph buildGraph(long batch, long hidden) {
    Graph g = new Graph();
    int x = g.addInput("x", DType.F32, batch, PIXELS);
    int y = g.addInput("y", DType.I32, batch);
    int h = linear(g, "fc1", x, PIXELS, hidden);
    int r = g.addOp("relu", "act1", h);
    int logits = linear(g, "logits", r, hidden, CLASSES);
    int loss = g.addOp("cross_entropy", "loss", logits, y);
    g.markOutput(logits);
    g.setLoss(loss);
    return g;
  }

  /**
   * A linear layer as PyTorch's nn.Linear initialises it: kaiming-uniform gain 1/sqrt(3), zero
   * bias.
   */
  static int linear(Graph g, String name, int input, long in, long out) {
    int w = g.addParameter(
        name + ".weight", DType.F32, Initializer.kaimingUniform(1.0 / Math.sqrt(3.0)), out, in);
    int b = g.addParameter(name + ".bias", DType.F32, Initializer.zeros(), out);
    return g.addOp("linear", name, input, w, b);
  }

  static void run(Options o) {
    if (o.threads > 0) Cohort.setNumThreads(o.threads);
    try (Comm comm = Comm.fromEnv();
         Dataset train = Dataset.fashionMnist(o.data, Dataset.Split.TRAIN);
         Dataset test = Dataset.fashionMnist(o.data, Dataset.Split.VALIDATION);
         Sampler trainOrder = new Sampler(train,
             new SamplerOptions().seed(o.seed).rank(comm.rank()).world(comm.size()).shuffle(true));
         Sampler testOrder =
             new Sampler(test, new SamplerOptions().seed(0).rank(0).world(1).shuffle(false));
         Graph graph = buildGraph(o.batch, o.hidden)) {
      int rank = comm.rank();
      int world = comm.size();
      long stepsPerEpoch = train.size() / world / o.batch;
      long total = o.steps > 0 ? o.steps : o.epochs * stepsPerEpoch;
      if (total < 1) usage("no steps: the batch is larger than this rank's share of the data");
      OptimizerOptions adamw = OptimizerOptions.adamw(o.lr)
                                   .schedule(Optimizer.Schedule.WARMUP_COSINE)
                                   .warmupSteps(total / 20)
                                   .totalSteps(total)
                                   .minLr(o.lr / 10);
      TrainerOptions trainerOptions = new TrainerOptions().seed(o.seed);
      // Alone: a plain trainer. Several ranks: DDP over the communicator (plan is null alone).
      try (Optimizer optimizer = new Optimizer(adamw);
           Plan plan = world > 1 ? Plan.ddp() : null;
           Trainer trainer = world > 1
               ? Trainer.createParallel(graph, optimizer, plan, comm, trainerOptions)
               : new Trainer(graph, optimizer, trainerOptions)) {
        // The program's own arrays: direct buffers, refilled in place every step.
        Tensor x = Tensor.allocate("x", DType.F32, o.batch, PIXELS);
        Tensor y = Tensor.allocate("y", DType.I32, o.batch);
        if (rank == 0) {
          System.out.printf(Locale.ROOT,
              "cohort %s | Fashion-MNIST MLP 784-%d-10 | %d rank(s) | %d steps of batch %d%n",
              Cohort.version(), o.hidden, world, total, o.batch);
        }
        long start = System.nanoTime();
        double smooth = 0;
        for (long step = 0; step < total; ++step) {
          train.nextBatch(trainOrder, x, y);
          float loss = trainer.step(x, y);
          smooth = step == 0 ? loss : 0.95 * smooth + 0.05 * loss;
          if (rank == 0 && (step % 20 == 0 || step + 1 == total)) {
            double elapsed = seconds(start);
            double rate = (step + 1) * o.batch * world / elapsed;
            long eta = (long) ((total - step - 1) * elapsed / (step + 1));
            System.out.printf(Locale.ROOT,
                "\rstep %d/%d | loss %.4f | %.0f samples/s | ETA %02d:%02d   ", step + 1, total,
                smooth, rate, eta / 60, eta % 60);
            System.out.flush();
          }
        }
        if (rank == 0) System.out.println();
        double accuracy = testAccuracy(trainer, test, testOrder);
        System.out.printf(Locale.ROOT, "done in %.1f s | test accuracy %.2f%% | final loss %.4f%n",
            seconds(start), 100.0 * accuracy, smooth);
      }
    }
  }

  /** 10 batches of 1000 test images in order; the first maximum of each row of logits wins. */
  static double testAccuracy(Trainer trainer, Dataset test, Sampler order) {
    Tensor x = Tensor.allocate("x", DType.F32, TEST_BATCH, PIXELS);
    Tensor labels = Tensor.allocate("y", DType.I32, TEST_BATCH);
    Tensor logits = Tensor.allocate("logits", DType.F32, TEST_BATCH, CLASSES);
    FloatBuffer l = logits.floatBuffer();
    IntBuffer y = labels.intBuffer();
    long correct = 0;
    for (int b = 0; b < TEST_BATCHES; ++b) {
      test.nextBatch(order, x, labels);
      trainer.evaluate(new Tensor[] {x}, logits);
      for (int i = 0; i < TEST_BATCH; ++i) {
        int best = 0;
        for (int k = 1; k < CLASSES; ++k) {
          if (l.get(i * CLASSES + k) > l.get(i * CLASSES + best)) best = k;
        }
        if (best == y.get(i)) ++correct;
      }
    }
    return (double) correct / (TEST_BATCH * TEST_BATCHES);
  }

  static double seconds(long startNanos) {
    return (System.nanoTime() - startNanos) / 1e9;
  }

  static Options parse(String[] args) {
    Options o = new Options();
    for (int i = 0; i < args.length; i += 2) {
      String flag = args[i];
      if (i + 1 >= args.length) usage("missing value after " + flag);
      String v = args[i + 1];
      try {
        switch (flag) {
          case "--data":
            o.data = v;
            break;
          case "--steps":
            o.steps = Long.parseLong(v);
            break;
          case "--epochs":
            o.epochs = Long.parseLong(v);
            break;
          case "--batch":
            o.batch = Long.parseLong(v);
            break;
          case "--hidden":
            o.hidden = Long.parseLong(v);
            break;
          case "--lr":
            o.lr = Double.parseDouble(v);
            break;
          case "--seed":
            o.seed = Long.parseUnsignedLong(v);
            break;
          case "--threads":
            o.threads = Integer.parseInt(v);
            break;
          default:
            usage("unknown option " + flag);
        }
      } catch (NumberFormatException e) {
        usage("not a number: " + v);
      }
    }
    if (o.epochs < 1 || o.batch < 1 || o.hidden < 1 || o.threads < 0 || o.steps < 0
        || !(o.lr > 0)) {
      usage("epochs, batch and hidden must be >= 1, lr > 0, steps and threads >= 0");
    }
    return o;
  }

  static void usage(String message) {
    System.err.println("error: " + message);
    System.err.println(USAGE);
    System.exit(2);
  }
}
