package org.cohort;

/**
 * A trainer's counters ({@code cohort_trainer_stats}).
 *
 * @param step completed training steps
 * @param learningRate the learning rate of the last step
 * @param gradNorm global gradient L2 norm of the last step, before clipping
 * @param peakActivationBytes largest live activation memory of any step so far
 * @param parameterBytes parameters + gradients + optimizer state
 * @param lastStepSeconds duration of the last step
 */
public record TrainerStats(long step, double learningRate, double gradNorm,
    long peakActivationBytes, long parameterBytes, double lastStepSeconds) {}
