// Runs the part of a graph needed for a set of target values, in dependency (id) order. Buffers
// of intermediate values come from a pool and go back to it after their last consumer, so peak
// activation memory stays close to the live set; the executor reports that peak.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/graph/graph.h"

namespace cohort {

struct RunOptions {
  int64_t step = 0;
  uint64_t seed = 0;
  bool training = true;
  int num_threads = 1;
  // Called on the running thread right after a node has put output `value` into env (before any
  // buffer is released), so a caller can start work on a result — e.g. DDP launching a
  // gradient bucket's all-reduce while the rest of backward runs. Must not modify env.
  std::function<void(ValueId value)> on_value;
  // Called on the running thread before / after the node at `position` of order() runs — e.g.
  // ZeRO stage 3 gathering a layer's parameters just before it and releasing them after.
  std::function<void(size_t position)> before_node, after_node;
};

class Executor {
 public:
  // targets: values the caller wants back after run(). Values bound in run()'s env (inputs,
  // parameters) are never freed by the executor.
  Executor(const Graph& graph, std::vector<ValueId> targets, Device device = Device::kCpu);

  // env holds the bound values on entry (every input/parameter the plan reads) and the targets
  // on return. Throws kInvalidArgument naming a missing or mis-shaped bound value.
  void run(std::unordered_map<ValueId, Tensor>& env, const RunOptions& options);

  // Values the plan reads that no node produces (inputs and parameters).
  const std::vector<ValueId>& required_values() const { return required_; }
  // The nodes a run executes, in execution order (positions of RunOptions::before_node).
  const std::vector<NodeId>& order() const { return order_; }
  size_t peak_activation_bytes() const { return peak_bytes_; }
  size_t last_activation_bytes() const { return last_peak_bytes_; }

 private:
  Tensor allocate(const TensorType& type);
  void release(Tensor& t);
  void run_node(const Node& node, std::unordered_map<ValueId, Tensor>& env, const RunOptions& o);

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
  size_t live_bytes_ = 0;
  size_t peak_bytes_ = 0;
  size_t last_peak_bytes_ = 0;
};

}  // namespace cohort
