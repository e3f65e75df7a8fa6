package org.cohort;

/**
 * Options of the built-in small ResNet ({@code cohort_model_cnn_options}; {@link Graph#cnn}).
 * Inputs "x" f32 [batch, channels, height, width] and "y" i32 [batch]; output "logits"
 * [batch, classes]. Starts at C's defaults (Fashion-MNIST: batch 32, [1, 28, 28], 10 classes,
 * widths {16, 32, 64}, 1 block per stage, 8 groups, eps 1e-5).
 */
public final class CnnOptions {
  private long batch;
  private long channels;
  private long height;
  private long width;
  private long classes;
  private long[] widths; // null: C's default list
  private long blocksPerStage;
  private long groups;
  private double eps;

  public CnnOptions() {
    cohort_model_cnn_options d = CohortC.cohort_model_cnn_options_default();
    try {
      batch = d.getBatch();
      channels = d.getChannels();
      height = d.getHeight();
      width = d.getWidth();
      classes = d.getClasses();
      blocksPerStage = d.getBlocks_per_stage();
      groups = d.getGroups();
      eps = d.getEps();
    } finally {
      d.delete();
    }
  }

  public CnnOptions batch(long value) {
    batch = value;
    return this;
  }

  public CnnOptions channels(long value) {
    channels = value;
    return this;
  }

  public CnnOptions height(long value) {
    height = value;
    return this;
  }

  public CnnOptions width(long value) {
    width = value;
    return this;
  }

  public CnnOptions classes(long value) {
    classes = value;
    return this;
  }

  /** Channels of each stage, 1 to 8 stages. */
  public CnnOptions widths(long... stageWidths) {
    widths = stageWidths.clone();
    return this;
  }

  public CnnOptions blocksPerStage(long value) {
    blocksPerStage = value;
    return this;
  }

  /** Groupnorm groups; must divide every width. */
  public CnnOptions groups(long value) {
    groups = value;
    return this;
  }

  public CnnOptions eps(double value) {
    eps = value;
    return this;
  }

  public long batch() {
    return batch;
  }

  public long channels() {
    return channels;
  }

  public long height() {
    return height;
  }

  public long width() {
    return width;
  }

  public long classes() {
    return classes;
  }

  /** The stage widths, or null while C's default ({16, 32, 64}) applies. */
  public long[] widths() {
    return widths == null ? null : widths.clone();
  }

  public long blocksPerStage() {
    return blocksPerStage;
  }

  public long groups() {
    return groups;
  }

  public double eps() {
    return eps;
  }

  long build() {
    cohort_model_cnn_options o = CohortC.cohort_model_cnn_options_default();
    try {
      o.setBatch(batch);
      o.setChannels(channels);
      o.setHeight(height);
      o.setWidth(width);
      o.setClasses(classes);
      o.setBlocks_per_stage(blocksPerStage);
      o.setGroups(groups);
      o.setEps(eps);
      return Handle.create(out -> CohortC.cohortj_graph_create_cnn(o, widths, out));
    } finally {
      o.delete();
    }
  }
}
