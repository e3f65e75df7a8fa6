package org.cohort;

/** Options of a {@link Sampler} ({@code cohort_sampler_options}): seed 0, rank 0 of 1, shuffled. */
public final class SamplerOptions {
  private long seed;
  private int rank;
  private int world;
  private boolean shuffle;

  public SamplerOptions() {
    cohort_sampler_options d = CohortC.cohort_sampler_options_default();
    try {
      seed = d.getSeed();
      rank = d.getRank();
      world = d.getWorld();
      shuffle = d.getShuffle() != 0;
    } finally {
      d.delete();
    }
  }

  /** The same on every rank. */
  public SamplerOptions seed(long value) {
    seed = value;
    return this;
  }

  /** 0..world-1. */
  public SamplerOptions rank(int value) {
    rank = value;
    return this;
  }

  /** >= 1; each rank gets floor(examples / world) examples per epoch. */
  public SamplerOptions world(int value) {
    world = value;
    return this;
  }

  /** false: examples in order (still sharded). */
  public SamplerOptions shuffle(boolean value) {
    shuffle = value;
    return this;
  }

  public long seed() {
    return seed;
  }

  public int rank() {
    return rank;
  }

  public int world() {
    return world;
  }

  public boolean shuffle() {
    return shuffle;
  }

  cohort_sampler_options toNative() {
    cohort_sampler_options o = CohortC.cohort_sampler_options_default();
    o.setSeed(seed);
    o.setRank(rank);
    o.setWorld(world);
    o.setShuffle(shuffle ? 1 : 0);
    return o;
  }
}
