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
 * @param microBatches micro-batches per step (the plan's; 1 otherwise)
 * @param pipelineBusySeconds pipeline stages, the last step: this rank's forward and backward work
 * @param pipelineBubbleFraction the rest of the last step, waiting for other stages, as a fraction of it
 */
public record TrainerStats(long step, double learningRate, double gradNorm,
    long peakActivationBytes, long parameterBytes, double lastStepSeconds, int microBatches,
    double pipelineBusySeconds, double pipelineBubbleFraction) {}
