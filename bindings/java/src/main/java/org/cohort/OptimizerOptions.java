package org.cohort;

/**
 * An optimizer configuration ({@code cohort_optimizer_options}), validated by
 * {@link Optimizer#Optimizer(OptimizerOptions)}. Starts at C's defaults: SGD, lr 0.01, no
 * momentum, constant schedule, no clipping; AdamW betas 0.9/0.999, eps 1e-8. Setters chain.
 */
public final class OptimizerOptions {
  private Optimizer.Kind kind;
  private double lr;
  private double momentum;
  private boolean nesterov;
  private double weightDecay;
  private double beta1;
  private double beta2;
  private double eps;
  private Optimizer.Schedule schedule;
  private long warmupSteps;
  private long totalSteps;
  private double minLr;
  private double clipNorm;

  public OptimizerOptions() {
    cohort_optimizer_options d = CohortC.cohort_optimizer_options_default();
    try {
      kind = Optimizer.Kind.of(d.getKind());
      lr = d.getLr();
      momentum = d.getMomentum();
      nesterov = d.getNesterov() != 0;
      weightDecay = d.getWeight_decay();
      beta1 = d.getBeta1();
      beta2 = d.getBeta2();
      eps = d.getEps();
      schedule = Optimizer.Schedule.of(d.getSchedule());
      warmupSteps = d.getWarmup_steps();
      totalSteps = d.getTotal_steps();
      minLr = d.getMin_lr();
      clipNorm = d.getClip_norm();
    } finally {
      d.delete();
    }
  }

  /** SGD with learning rate {@code lr}, otherwise the defaults. */
  public static OptimizerOptions sgd(double lr) {
    return new OptimizerOptions().kind(Optimizer.Kind.SGD).lr(lr);
  }

  /** AdamW with learning rate {@code lr}, otherwise the defaults. */
  public static OptimizerOptions adamw(double lr) {
    return new OptimizerOptions().kind(Optimizer.Kind.ADAMW).lr(lr);
  }

  public OptimizerOptions kind(Optimizer.Kind value) {
    kind = value;
    return this;
  }

  public OptimizerOptions lr(double value) {
    lr = value;
    return this;
  }

  /** SGD momentum. */
  public OptimizerOptions momentum(double value) {
    momentum = value;
    return this;
  }

  /** SGD Nesterov momentum; needs momentum > 0. */
  public OptimizerOptions nesterov(boolean value) {
    nesterov = value;
    return this;
  }

  /** SGD: L2 added to the gradient; AdamW: decoupled. */
  public OptimizerOptions weightDecay(double value) {
    weightDecay = value;
    return this;
  }

  public OptimizerOptions beta1(double value) {
    beta1 = value;
    return this;
  }

  public OptimizerOptions beta2(double value) {
    beta2 = value;
    return this;
  }

  public OptimizerOptions eps(double value) {
    eps = value;
    return this;
  }

  public OptimizerOptions schedule(Optimizer.Schedule value) {
    schedule = value;
    return this;
  }

  /** Linear warmup from 0 to lr over this many steps. */
  public OptimizerOptions warmupSteps(long value) {
    warmupSteps = value;
    return this;
  }

  /** Where the cosine decay ends. */
  public OptimizerOptions totalSteps(long value) {
    totalSteps = value;
    return this;
  }

  /** The cosine floor. */
  public OptimizerOptions minLr(double value) {
    minLr = value;
    return this;
  }

  /** Global L2 gradient-norm clip; 0 = off. */
  public OptimizerOptions clipNorm(double value) {
    clipNorm = value;
    return this;
  }

  public Optimizer.Kind kind() {
    return kind;
  }

  public double lr() {
    return lr;
  }

  public double momentum() {
    return momentum;
  }

  public boolean nesterov() {
    return nesterov;
  }

  public double weightDecay() {
    return weightDecay;
  }

  public double beta1() {
    return beta1;
  }

  public double beta2() {
    return beta2;
  }

  public double eps() {
    return eps;
  }

  public Optimizer.Schedule schedule() {
    return schedule;
  }

  public long warmupSteps() {
    return warmupSteps;
  }

  public long totalSteps() {
    return totalSteps;
  }

  public double minLr() {
    return minLr;
  }

  public double clipNorm() {
    return clipNorm;
  }

  /** A C copy; the caller deletes it. */
  cohort_optimizer_options toNative() {
    cohort_optimizer_options o = CohortC.cohort_optimizer_options_default();
    o.setKind(kind.code);
    o.setLr(lr);
    o.setMomentum(momentum);
    o.setNesterov(nesterov ? 1 : 0);
    o.setWeight_decay(weightDecay);
    o.setBeta1(beta1);
    o.setBeta2(beta2);
    o.setEps(eps);
    o.setSchedule(schedule.code);
    o.setWarmup_steps(warmupSteps);
    o.setTotal_steps(totalSteps);
    o.setMin_lr(minLr);
    o.setClip_norm(clipNorm);
    return o;
  }
}
