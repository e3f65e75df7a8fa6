package org.cohort;

/** Hidden-layer activation of the built-in MLP ({@code cohort_activation}). */
public enum Activation {
  RELU(cohort_activation.COHORT_ACTIVATION_RELU),
  GELU(cohort_activation.COHORT_ACTIVATION_GELU),
  TANH(cohort_activation.COHORT_ACTIVATION_TANH);

  final int code;

  Activation(int code) {
    this.code = code;
  }

  static Activation of(int code) {
    for (Activation a : values()) {
      if (a.code == code) return a;
    }
    throw new CohortException(Status.INTERNAL, "cohort: unknown activation " + code);
  }
}
