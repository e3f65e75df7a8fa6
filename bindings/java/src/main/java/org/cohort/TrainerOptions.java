package org.cohort;

/**
 * Options of a trainer ({@code cohort_trainer_options}): seed 0 and the process's threads by
 * default.
 */
public final class TrainerOptions {
  private long seed;
  private int numThreads;

  public TrainerOptions() {
    cohort_trainer_options d = CohortC.cohort_trainer_options_default();
    try {
      seed = d.getSeed();
      numThreads = d.getNum_threads();
    } finally {
      d.delete();
    }
  }

  /** Seeds parameter initialisation and dropout (an unsigned 64-bit value in a long). */
  public TrainerOptions seed(long value) {
    seed = value;
    return this;
  }

  /** Threads for CPU math; 0 leaves the process setting as it is. */
  public TrainerOptions numThreads(int value) {
    numThreads = value;
    return this;
  }

  public long seed() {
    return seed;
  }

  public int numThreads() {
    return numThreads;
  }

  /** A C copy; the caller deletes it. */
  cohort_trainer_options toNative() {
    cohort_trainer_options o = CohortC.cohort_trainer_options_default();
    o.setSeed(seed);
    o.setNum_threads(numThreads);
    return o;
  }
}
