package org.cohort;

/**
 * How a parameter gets its first values ({@code cohort_initializer}). Immutable; the factories
 * name the kind and its constants, {@link #withSeed} fixes the random stream.
 */
public final class Initializer {
  /** {@code cohort_init_kind}. */
  public enum Kind {
    ZEROS(cohort_init_kind.COHORT_INIT_ZEROS),
    ONES(cohort_init_kind.COHORT_INIT_ONES),
    CONSTANT(cohort_init_kind.COHORT_INIT_CONSTANT),
    UNIFORM(cohort_init_kind.COHORT_INIT_UNIFORM),
    NORMAL(cohort_init_kind.COHORT_INIT_NORMAL),
    XAVIER_UNIFORM(cohort_init_kind.COHORT_INIT_XAVIER_UNIFORM),
    KAIMING_UNIFORM(cohort_init_kind.COHORT_INIT_KAIMING_UNIFORM),
    KAIMING_NORMAL(cohort_init_kind.COHORT_INIT_KAIMING_NORMAL);

    final int code;

    Kind(int code) {
      this.code = code;
    }
  }

  private final Kind kind;
  private final double a;
  private final double b;
  private final long seed;

  public Initializer(Kind kind, double a, double b, long seed) {
    this.kind = kind;
    this.a = a;
    this.b = b;
    this.seed = seed;
  }

  public static Initializer zeros() {
    return new Initializer(Kind.ZEROS, 0, 0, 0);
  }

  public static Initializer ones() {
    return new Initializer(Kind.ONES, 0, 0, 0);
  }

  public static Initializer constant(double value) {
    return new Initializer(Kind.CONSTANT, value, 0, 0);
  }

  /** Uniform in [low, high). */
  public static Initializer uniform(double low, double high) {
    return new Initializer(Kind.UNIFORM, low, high, 0);
  }

  public static Initializer normal(double mean, double std) {
    return new Initializer(Kind.NORMAL, mean, std, 0);
  }

  /** Gain 0 means 1. */
  public static Initializer xavierUniform(double gain) {
    return new Initializer(Kind.XAVIER_UNIFORM, gain, 0, 0);
  }

  /** Gain 0 means sqrt(2); fan_in = numel / shape[0]. Gain 1/sqrt(3) is PyTorch's nn.Linear. */
  public static Initializer kaimingUniform(double gain) {
    return new Initializer(Kind.KAIMING_UNIFORM, gain, 0, 0);
  }

  public static Initializer kaimingNormal(double gain) {
    return new Initializer(Kind.KAIMING_NORMAL, gain, 0, 0);
  }

  /** The same initializer with its own seed (0: derived from the trainer seed and the name). */
  public Initializer withSeed(long newSeed) {
    return new Initializer(kind, a, b, newSeed);
  }

  public Kind kind() {
    return kind;
  }

  public double a() {
    return a;
  }

  public double b() {
    return b;
  }

  public long seed() {
    return seed;
  }

  /** A C copy; the caller deletes it. */
  cohort_initializer toNative() {
    cohort_initializer n = CohortC.cohort_initializer_default();
    n.setKind(kind.code);
    n.setA(a);
    n.setB(b);
    n.setSeed(seed);
    return n;
  }
}
