package org.cohort;

/**
 * Options of the built-in MLP ({@code cohort_model_mlp_options}; {@link Graph#mlp}). Inputs "x"
 * f32 [batch, inFeatures] and "y" i32 [batch]; output "logits" [batch, classes]; loss "loss".
 * Starts at C's defaults: batch 32, 784 inputs, hidden {128}, 10 classes, relu.
 */
public final class MlpOptions {
  private long batch;
  private long inFeatures;
  private long[] hidden; // null: C's default list
  private long classes;
  private Activation activation;

  public MlpOptions() {
    cohort_model_mlp_options d = CohortC.cohort_model_mlp_options_default();
    try {
      batch = d.getBatch();
      inFeatures = d.getIn_features();
      classes = d.getClasses();
      activation = Activation.of(d.getActivation());
    } finally {
      d.delete();
    }
  }

  public MlpOptions batch(long value) {
    batch = value;
    return this;
  }

  public MlpOptions inFeatures(long value) {
    inFeatures = value;
    return this;
  }

  /** Widths of the hidden layers, 0 to 64 of them. */
  public MlpOptions hidden(long... widths) {
    hidden = widths.clone();
    return this;
  }

  public MlpOptions classes(long value) {
    classes = value;
    return this;
  }

  public MlpOptions activation(Activation value) {
    activation = value;
    return this;
  }

  public long batch() {
    return batch;
  }

  public long inFeatures() {
    return inFeatures;
  }

  /** The hidden widths, or null while C's default ({128}) applies. */
  public long[] hidden() {
    return hidden == null ? null : hidden.clone();
  }

  public long classes() {
    return classes;
  }

  public Activation activation() {
    return activation;
  }

  long build() {
    cohort_model_mlp_options o = CohortC.cohort_model_mlp_options_default();
    try {
      o.setBatch(batch);
      o.setIn_features(inFeatures);
      o.setClasses(classes);
      o.setActivation(activation.code);
      return Handle.create(out -> CohortC.cohortj_graph_create_mlp(o, hidden, out));
    } finally {
      o.delete();
    }
  }
}
