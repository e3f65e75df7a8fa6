// The communication probe: the latency and bandwidth of each operation the planner prices
// (planner.h, CommTable), measured over the ranks of a job at start-up. For every group size g
// dividing the world (2 .. world), the world is cut into groups of g consecutive ranks, which all
// measure at once (so shared links are measured shared, as training would use them): each
// operation at a small and a large message, a few times; a size's time is the slowest rank's
// median; latency and bandwidth follow from the two sizes (t = latency + bytes / bandwidth).
// Point-to-point is a ping-pong between neighbouring ranks, halved. The large message grows (x4,
// up to max_bytes) while its time stays under 20 ms, so slow links are measured at a size that
// costs them little time and fast ones at one that shows their bandwidth. Where every rank keeps a
// thread busy meanwhile (ProbeOptions::busy) but the ranks do not share cores, the collectives a
// tensor axis waits for are measured again without it (CommCost::caller_waits): a caller blocked on
// them leaves its core to the transport.
//
// It also measures how much slower the ranks compute all at once than one alone
// (CommTable::compute_stretch: shared cores, caches and memory bandwidth, polling progress
// threads), which the planner applies to every layout's compute, with work that resembles a
// step's (ProbeOptions::step: the model's own forward and backward where the caller gives it —
// pure arithmetic on every rank at once ran 1.01x as long as on one here, where a 2-rank step
// computed ~1.3x its calibration); and it reports the cores each rank of the host has
// (CommTable::cores_per_rank), which tells the planner whether a transport can progress on a
// core of its own while the rank computes; where it cannot, the processor time a point-to-point
// message costs its rank (CommTable::message_compute_*, from ping-pongs of two sizes timed in
// process processor time) is what each message of a pipeline takes from the stages' compute.
//
// The one thing to know: the probe is a collective over `world`; every rank calls it at the same
// point, and every rank gets the same table.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/parallel/planner.h"
#include "transport/coll/communicator.h"

namespace cohort::parallel {

// A thread keeping a core busy with arithmetic until destroyed (then joined), as a rank's training
// thread does while its collectives are in flight; `yield`: it gives the core up between rounds,
// as a training thread does whenever it waits. For measuring collectives under load.
class BusyThread {
 public:
  explicit BusyThread(bool yield);
  ~BusyThread();
  BusyThread(const BusyThread&) = delete;
  BusyThread& operator=(const BusyThread&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct ProbeOptions {
  // Measure while every rank keeps one thread computing, as a training step does while its
  // collectives are in flight: where ranks outnumber a host's cores their progress threads then
  // wait for a core (a collective's latency on this 2-core host grows from tens of microseconds
  // to milliseconds), which an idle probe would not see. -1: when the ranks on this host (those
  // that share its host name, by default) times 2 — a training thread and a progress thread
  // each — exceed its cores.
  int busy = -1;
  int ranks_on_host = 0;  // 0: the ranks whose host name is this rank's
  size_t small_bytes = 1024;
  size_t first_large_bytes = 256 << 10;
  size_t max_bytes = 16 << 20;
  int repetitions = 3;  // timed runs per size (after one warm-up)
  // Timed runs of the small message. Its time is the latency, and 3 runs were not enough: 4
  // ranks on 2 cores at 1 Gbit/s read a point-to-point latency of 41-77 us in five probes and
  // 466 us in a sixth, and one such reading costs each message of a pipeline's cuts in every
  // prediction. The small message is cheap, so it gets more runs.
  int small_repetitions = 9;
  // Passes over the whole list of (group, collective), each entry keeping its least time of all
  // passes at each size. A spell of load on the host (a launcher, another job, a namespace's set-up)
  // lasts milliseconds to a second: within one pass it can sit on one entry's every run, and one
  // such entry misprices every plan using it (4 ranks on 2 cores: a 4-rank all_gather read a
  // latency of 2301 us in one probe where six others read 196-259 us, and the sweep's median error
  // went to 39.5%). A second pass, a second or so later, misses the spell.
  int passes = 2;
  // One run of work resembling a training step, for the compute stretch: every rank's own
  // (the same work on each), e.g. make_step_runner (workload.h) of the model at one rank's rows.
  // Empty: a built-in mix of arithmetic and memory traffic over a buffer larger than the caches.
  std::function<void()> step{};
  std::string step_name{};  // what `step` runs, for CommTable::source ("" : "the built-in mix")
  int cores = 0;  // the cores the ranks of this host share; 0: the union of their affinities
};

// The table (CommTable::source says how long it took and over how many ranks). A world of one
// rank measures nothing (an empty table).
CommTable probe_communication(transport::coll::Communicator& world, const ProbeOptions& options = {});

// The links between every pair of ranks (geo-distributed training, fence.h): a round-robin
// tournament of n - 1 rounds (n - 1 when n is even, n when odd: one rank sits each round out), in
// which the disjoint pairs of a round measure at once. A pair's lower rank leads a ping-pong: a
// small message `repetitions` times (its median round trip, halved, is the latency), then a large
// one growing x4 from first_large_bytes while a round trip stays under target_seconds (up to
// max_bytes; never past budget_seconds of the whole probe); then the leader streams six messages
// of a quarter of that size back to back and the peer times their arrivals, leaving the first
// two out (a shaped link's token bucket lets a burst through at line rate after an idle spell,
// and a ping-pong idles each direction half the time): bandwidth = the bytes of the later
// messages over the time between their arrivals, or the round trip's rate where that is lower
// (a fast link whose arrivals the peer sees in a bunch). The leader tells its peer the next size or the end
// before each exchange, so the two never disagree. Every rank gets the whole matrix.
struct LinkProbeOptions {
  size_t small_bytes = 64;
  size_t first_large_bytes = 64 << 10;
  size_t max_bytes = 8 << 20;
  double target_seconds = 0.05;
  int repetitions = 3;
  double budget_seconds = 20;  // the whole probe: past it, pairs measure at the size they reached
};

struct LinkMatrix {
  int ranks = 0;
  // Row-major ranks x ranks, symmetric (a link's two directions averaged); the diagonal 0.
  std::vector<double> latency_seconds;
  std::vector<double> bytes_per_second;
  double seconds = 0;  // how long the probe took
  double latency(int i, int j) const { return latency_seconds[static_cast<size_t>(i * ranks + j)]; }
  double bandwidth(int i, int j) const { return bytes_per_second[static_cast<size_t>(i * ranks + j)]; }
  // latency + bytes / bandwidth between i and j (0 for i == j).
  double transfer_seconds(int i, int j, double bytes) const;
  // Two matrices (bandwidth in Mbit/s, latency in ms), a line per rank.
  std::string describe() const;
};

// A collective over `world` (every rank, the same point, the same options); a world of one rank
// measures nothing (a 1 x 1 matrix). kInvalidArgument for sizes that do not grow or a
// non-positive target or budget.
LinkMatrix probe_links(transport::coll::Communicator& world, const LinkProbeOptions& options = {});

// How long each rank takes for the same fixed arithmetic while every rank computes at once,
// relative to world rank 0 alone (where the workload estimator's timings come from): 1 on
// identical idle hosts with a core per rank; 2 for a rank half as fast, or for ranks sharing a
// core two by two (4 ranks on this 2-core host: stages computing at once take turns). A
// collective; every rank gets the whole vector.
std::vector<double> measure_compute_scales(transport::coll::Communicator& world);

}  // namespace cohort::parallel
