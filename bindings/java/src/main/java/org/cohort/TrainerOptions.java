package org.cohort;

import java.util.Objects;

/**
 * Options of a trainer ({@code cohort_trainer_options}): seed 0, the process's threads and the CPU
 * by default.
 */
public final class TrainerOptions {
  private long seed;
  private int numThreads;
  private Device device;

  public TrainerOptions() {
    cohort_trainer_options d = CohortC.cohort_trainer_options_default();
    try {
      seed = d.getSeed();
      numThreads = d.getNum_threads();
      device = Device.of(d.getDevice());
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

  /**
   * Where parameters, gradients, optimizer state and the steps' work live; tensors stay in Java
   * memory either way. Creating a trainer on {@link Device#CUDA} throws UNSUPPORTED naming the
   * reason when the device cannot be used ({@link Cohort#deviceUsable} tells beforehand) or an
   * operator of the graph has no CUDA kernel. Data-parallel trainers on the GPU reduce DDP's
   * gradients over NCCL where every rank has a device of its own, else through host copies.
   */
  public TrainerOptions device(Device value) {
    device = Objects.requireNonNull(value, "device");
    return this;
  }

  public long seed() {
    return seed;
  }

  public int numThreads() {
    return numThreads;
  }

  public Device device() {
    return device;
  }

  /** A C copy; the caller deletes it. */
  cohort_trainer_options toNative() {
    cohort_trainer_options o = CohortC.cohort_trainer_options_default();
    o.setSeed(seed);
    o.setNum_threads(numThreads);
    o.setDevice(device.code);
    return o;
  }
}
