package org.cohort;

/**
 * Draws a dataset's examples in a seeded, shuffled order per epoch, rank r of w taking a disjoint
 * 1/w share ({@code cohort_sampler}). Its position can be saved and restored to resume exactly.
 * Keeps only the dataset's size: the dataset may be closed first. One thread at a time.
 */
public final class Sampler extends Handle {
  /** Where the sampler stands: the next example is the index-th of this rank's share of epoch. */
  public record Position(long epoch, long index) {}

  public Sampler(Dataset dataset, SamplerOptions options) {
    super(createFor(dataset, options));
  }

  private static long createFor(Dataset dataset, SamplerOptions options) {
    cohort_sampler_options o = options.toNative();
    try {
      return create(out -> CohortC.cohort_sampler_create(required(dataset), o, out));
    } finally {
      o.delete();
    }
  }

  @Override
  int destroy(long ptr) {
    return CohortC.cohort_sampler_destroy(ptr);
  }

  public Position position() {
    long[] epoch = new long[1];
    long[] index = new long[1];
    CohortException.check(CohortC.cohort_sampler_get_position(ptr(), epoch, index));
    return new Position(epoch[0], index[0]);
  }

  /** INVALID_ARGUMENT (sampler unchanged) for epoch &lt; 0 or an index outside this rank's share. */
  public void setPosition(long epoch, long index) {
    CohortException.check(CohortC.cohort_sampler_set_position(ptr(), epoch, index));
  }

  public void setPosition(Position p) {
    setPosition(p.epoch(), p.index());
  }
}
