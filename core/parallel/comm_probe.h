// The communication probe: the latency and bandwidth of each operation the planner prices
// (planner.h, CommTable), measured over the ranks of a job at start-up. For every group size g
// dividing the world (2 .. world), the world is cut into groups of g consecutive ranks, which all
// measure at once (so shared links are measured shared, as training would use them): each
// operation at a small and a large message, a few times; a size's time is the slowest rank's
// median; latency and bandwidth follow from the two sizes (t = latency + bytes / bandwidth).
// Point-to-point is a ping-pong between neighbouring ranks, halved. The large message grows (x4,
// up to max_bytes) while its time stays under 20 ms, so slow links are measured at a size that
// costs them little time and fast ones at one that shows their bandwidth.
//
// The one thing to know: the probe is a collective over `world`; every rank calls it at the same
// point, and every rank gets the same table.
#pragma once

#include <cstddef>

#include "core/parallel/planner.h"
#include "transport/coll/communicator.h"

namespace cohort::parallel {

struct ProbeOptions {
  size_t small_bytes = 1024;
  size_t first_large_bytes = 256 << 10;
  size_t max_bytes = 16 << 20;
  int repetitions = 3;  // timed runs per size (after one warm-up)
};

// The table (CommTable::source says how long it took and over how many ranks). A world of one
// rank measures nothing (an empty table).
CommTable probe_communication(transport::coll::Communicator& world, const ProbeOptions& options = {});

}  // namespace cohort::parallel
