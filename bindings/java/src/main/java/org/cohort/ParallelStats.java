package org.cohort;

/**
 * A data-parallel trainer's counters since creation ({@code cohort_parallel_stats}). Seconds are
 * measured on the training thread; bytes are this rank's model state after a step.
 *
 * @param rounds DDP: steps; localsgd / co2: outer rounds completed
 * @param computeSeconds step time outside waits for communication
 * @param commSeconds collectives in flight, launch to observed completion
 * @param waitSeconds time the training thread was blocked on collectives
 * @param hiddenFraction share of communication hidden behind compute: 1 - wait / comm
 * @param lastStalenessScale co2: penalty factor of the last outer step (1 = none)
 * @param lastMomentumNorm outer momentum L2 norm before clipping, last outer step
 * @param buckets DDP: gradient buckets per step
 * @param parameterBytes parameters (plus the fp32 shard copy under ZeRO)
 * @param gradientBytes reduced gradients (only this rank's shard under ZeRO 2)
 * @param optimizerStateBytes optimizer state (only the shard's under ZeRO)
 * @param parameterGathers ZeRO 3: bucket all-gathers of parameters
 * @param parameterGathersPrefetched ZeRO 3: those launched ahead of their first reader
 * @param peakParameterBytes the most bytes of whole parameters held at once in a step
 */
public record ParallelStats(long rounds, double computeSeconds, double commSeconds,
    double waitSeconds, double hiddenFraction, double lastStalenessScale, double lastMomentumNorm,
    long buckets, long parameterBytes, long gradientBytes, long optimizerStateBytes,
    long parameterGathers, long parameterGathersPrefetched, long peakParameterBytes) {}
