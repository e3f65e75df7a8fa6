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
 * @param tau co2: the current round's length (the plan's, or chosen under overlap auto)
 * @param overlapSteps co2: the steps a round's average travels before its merge
 * @param outerCommSeconds co2 overlap auto: seconds the last average took to arrive (0 without)
 * @param stepSeconds co2 overlap auto: compute seconds per step (0 without)
 * @param outerFragments localsgd, co2: fragments of the outer synchronisation (0 for DDP)
 * @param outerSyncs localsgd, co2: outer collectives this rank launched
 * @param outerSyncBytes localsgd, co2: the most bytes one of them carries from this rank
 * @param outerHiddenFraction localsgd, co2: the outer collectives' time hidden behind local steps
 * @param shardGroup ranks per replica (1 without shard groups)
 * @param gradientSyncBytes DDP: gradient bytes sent a step (top-k messages under gradKeep below 1)
 * @param gradKeep DDP: the kept fraction of each bucket (1 uncompressed)
 * @param outerSharedWaitSeconds co2: the waits every rank shared (per round the least any rank
 *     waited): the transfers' own exposed time; the rest of a rank's waits went to slower ranks
 */
public record ParallelStats(long rounds, double computeSeconds, double commSeconds,
    double waitSeconds, double hiddenFraction, double lastStalenessScale, double lastMomentumNorm,
    long buckets, long parameterBytes, long gradientBytes, long optimizerStateBytes,
    long parameterGathers, long parameterGathersPrefetched, long peakParameterBytes, long tau,
    long overlapSteps, double outerCommSeconds, double stepSeconds, long outerFragments,
    long outerSyncs, long outerSyncBytes, double outerHiddenFraction, long shardGroup,
    long gradientSyncBytes, double gradKeep, double outerSharedWaitSeconds) {}
