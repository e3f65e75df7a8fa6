// Runs the part of a graph needed for a set of target values, in dependency (id) order. Buffers
// of intermediate values come from a pool and go back to it after their last consumer, so peak
// activation memory stays close to the live set; the executor reports that peak.
//
// Collective operators (OpSchema::collective, core/ops/collective.h) run asynchronously: each is
// moved as early in the order as its inputs allow (right after the last node producing one), its
// kernel starts the collective and returns, and the executor waits for it just before the first
// node that reads its result — so whatever runs in between (in backward, the weight-gradient
// product next to a data-gradient all-reduce) overlaps the communication. Until then the node's
// buffers stay alive and out of the pool. RunOptions::overlap = false waits right after the start
// instead (the same order, for comparison).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/graph/graph.h"
#include "core/ops/collective.h"

namespace cohort {

// A send a run left in flight (RunOptions::unfinished_sends): the caller waits for `work` before
// letting go of `buffers` (the tensor being sent and the node's token).
struct UnfinishedSend {
  std::shared_ptr<transport::coll::Work> work;
  std::vector<Tensor> buffers;
};

struct RunOptions {
  int64_t step = 0;
  uint64_t seed = 0;
  int micro_batch = 0;  // KernelContext::micro_batch
  bool training = true;
  int num_threads = 1;
  // Called on the running thread right after a node has put output `value` into env (before any
  // buffer is released), so a caller can start work on a result — e.g. DDP launching a
  // gradient bucket's all-reduce while the rest of backward runs. Must not modify env.
  std::function<void(ValueId value)> on_value;
  // Called on the running thread before / after the node at `position` of order() runs — e.g.
  // ZeRO stage 3 gathering a layer's parameters just before it and releasing them after.
  std::function<void(size_t position)> before_node, after_node;
  // The communicators of the grid axes the graph's collective operators name (not owned; must
  // outlive the run). nullptr: a collective fails naming its axis.
  const CommAxes* axes = nullptr;
  // Collectives overlap the compute that does not need their results (see above); false waits
  // for each right after starting it. on_value reports a collective's output once it is complete.
  bool overlap = true;
  // Not null: sends (OpSchema::send) still in flight when the run ends are appended here instead
  // of waited for — a pipeline stage goes on to its next micro-batch while the peer has not yet
  // posted the receive (both waiting would deadlock two stages that send to each other).
  std::vector<UnfinishedSend>* unfinished_sends = nullptr;
};

// What a run did with its collectives (cumulative over runs).
struct CollectiveStats {
  int64_t started = 0;
  // Found already complete when the first reader of their result came (or at the end of the run):
  // their communication was hidden entirely behind compute.
  int64_t complete_when_needed = 0;
  double wait_seconds = 0;  // the running thread blocked on collectives
};

class Executor {
 public:
  // targets: values the caller wants back after run(). Values bound in run()'s env (inputs,
  // parameters) are never freed by the executor. given: values the caller binds although a node
  // of the graph produces them (a pipeline stage's backward binds what its forward kept); their
  // producers do not run.
  Executor(const Graph& graph, std::vector<ValueId> targets, Device device = Device::kCpu,
           const std::vector<ValueId>& given = {});

  // env holds the bound values on entry (every input/parameter the plan reads) and the targets
  // on return. Throws kInvalidArgument naming a missing or mis-shaped bound value.
  void run(std::unordered_map<ValueId, Tensor>& env, const RunOptions& options);

  // Values the plan reads that no node produces (inputs and parameters).
  const std::vector<ValueId>& required_values() const { return required_; }
  // The nodes a run executes, in execution order (positions of RunOptions::before_node).
  const std::vector<NodeId>& order() const { return order_; }
  // The peak (above) over every run so far, and that of the last run.
  size_t peak_activation_bytes() const { return peak_bytes_; }
  size_t last_activation_bytes() const { return last_peak_bytes_; }
  const CollectiveStats& collective_stats() const { return collective_stats_; }

 private:
  // A collective started and not yet waited for: its Work, what to run after it, the buffers it
  // reads and writes (kept out of the pool meanwhile) and the outputs no node may read before.
  struct InFlight {
    std::shared_ptr<transport::coll::Work> work;
    std::function<void()> on_complete;
    std::vector<Tensor> held;
    std::vector<ValueId> outputs;
    const OpSchema* op = nullptr;
  };
  // target: the buffer holds a target value (kept by the caller; not counted as activation).
  Tensor allocate(const TensorType& type, bool target);
  void release(Tensor& t);
  // Runs one node; a collective's node leaves its collective in flight_ (keyed by its outputs).
  void run_node(const Node& node, std::unordered_map<ValueId, Tensor>& env, const RunOptions& o);
  // Waits for the collective producing `value` (if one is in flight), then completes it.
  void wait_for(ValueId value, const RunOptions& o);
  void complete(uint64_t flight, const RunOptions& o);
  // Hands a send still in flight to the caller (RunOptions::unfinished_sends).
  void detach(uint64_t flight, std::vector<UnfinishedSend>& out);
  // After a failure: waits out every collective in flight without throwing, so that no buffer
  // they use is reused or freed while the transport may still touch it.
  void settle_in_flight() noexcept;

  const Graph& graph_;
  Device device_;
  std::vector<ValueId> targets_;
  std::vector<NodeId> order_;
  std::vector<ValueId> required_;
  // For each step in order_, the values whose last consumer it is.
  std::vector<std::vector<ValueId>> frees_after_;
  std::multimap<size_t, std::shared_ptr<Storage>> pool_;
  std::unordered_set<const Storage*> owned_;
  // Buffers handed to the caller as targets by the last run; the next run takes back into the
  // pool those the caller no longer holds, so a training loop does not allocate every step.
  std::vector<std::shared_ptr<Storage>> handed_out_;
  std::vector<bool> is_target_;  // by value id
  size_t live_bytes_ = 0;         // every buffer of this run still held
  size_t live_target_bytes_ = 0;  // of them, the targets' (never released during a run)
  size_t peak_bytes_ = 0;
  size_t last_peak_bytes_ = 0;
  std::map<uint64_t, InFlight> flights_;            // by start number; completed ones erased
  std::unordered_map<ValueId, uint64_t> flight_of_;  // output value -> its collective's start number
  uint64_t next_flight_ = 0;
  CollectiveStats collective_stats_;
};

}  // namespace cohort
