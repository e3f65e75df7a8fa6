// Executor: plan (which nodes, in which order, when each buffer dies) and run.
#include "core/exec/executor.h"

#include <algorithm>
#include <chrono>
#include <unordered_set>

#include "core/base/error.h"
#include "core/device/device.h"
#include "core/exec/profile.h"
#include "transport/coll/work.h"

namespace cohort {

namespace {
// Nodes needed to compute targets, and the values they read that nothing in the plan produces.
std::vector<NodeId> needed_nodes(const Graph& g, const std::vector<ValueId>& targets,
                                 const std::vector<ValueId>& given) {
  std::vector<bool> need_value(g.values().size(), false), is_given(g.values().size(), false);
  for (ValueId t : targets) need_value[static_cast<size_t>(t)] = true;
  for (ValueId v : given) {
    need_value[static_cast<size_t>(v)] = false;
    is_given[static_cast<size_t>(v)] = true;
  }
  std::vector<NodeId> order;
  for (size_t k = g.nodes().size(); k-- > 0;) {
    const Node& n = g.nodes()[k];
    bool needed = false;
    for (ValueId o : n.outputs) needed = needed || need_value[static_cast<size_t>(o)];
    if (!needed) continue;
    order.push_back(n.id);
    for (ValueId i : n.inputs)
      if (!is_given[static_cast<size_t>(i)]) need_value[static_cast<size_t>(i)] = true;
  }
  std::reverse(order.begin(), order.end());
  return order;
}

// The same nodes with every collective moved up to right after the last node producing one of
// its inputs, so that it starts as soon as it can and the compute it does not feed runs while it
// is in flight. A collective reading only bound values (inputs, parameters) stays where it is:
// started at once it would hold its result from the beginning of the run. Every rank of an axis
// runs the same graph, so each computes the same order and starts its collectives alike. A
// backward collective reading only forward's values (one that backward recomputes, autodiff.h)
// stays where autodiff put it too: moved up into forward, its result would live through forward
// again, which is what recomputing it avoids.
std::vector<NodeId> start_collectives_early(const Graph& g, const std::vector<NodeId>& order) {
  std::vector<NodeId> out;
  std::vector<int64_t> position_of_value(g.values().size(), -1);  // position of its producer in out
  int64_t first_backward = -1;                                     // position in out
  for (NodeId id : order) {
    const Node& n = g.node(id);
    int64_t at = static_cast<int64_t>(out.size());
    if (n.op->collective) {
      int64_t last = -1;
      for (ValueId i : n.inputs) last = std::max(last, position_of_value[static_cast<size_t>(i)]);
      const bool recomputed = n.backward && (first_backward < 0 || last < first_backward);
      if (last >= 0 && !recomputed) at = last + 1;
    }
    if (n.backward && first_backward < 0) first_backward = at;
    else if (first_backward >= 0 && at <= first_backward) ++first_backward;
    out.insert(out.begin() + at, id);
    for (size_t p = static_cast<size_t>(at); p < out.size(); ++p)
      for (ValueId o : g.node(out[p]).outputs) position_of_value[static_cast<size_t>(o)] = static_cast<int64_t>(p);
  }
  return out;
}
}  // namespace

Executor::Executor(const Graph& graph, std::vector<ValueId> targets, Device device, const std::vector<ValueId>& given)
    : graph_(graph), device_(device), targets_(std::move(targets)) {
  is_target_.assign(graph_.values().size(), false);
  for (ValueId t : targets_) is_target_[static_cast<size_t>(graph_.value(t).id)] = true;
  for (ValueId v : given) graph_.value(v);  // throws for an unknown id
  order_ = start_collectives_early(graph_, needed_nodes(graph_, targets_, given));
  std::vector<int> last_use(graph_.values().size(), -1);
  std::vector<bool> produced(graph_.values().size(), false);
  for (size_t s = 0; s < order_.size(); ++s) {
    const Node& n = graph_.node(order_[s]);
    for (ValueId i : n.inputs) {
      last_use[static_cast<size_t>(i)] = static_cast<int>(s);
      if (!produced[static_cast<size_t>(i)] &&
          std::find(required_.begin(), required_.end(), i) == required_.end())
        required_.push_back(i);
    }
    for (ValueId o : n.outputs) produced[static_cast<size_t>(o)] = true;
  }
  for (ValueId t : targets_)
    if (!produced[static_cast<size_t>(t)] && std::find(required_.begin(), required_.end(), t) == required_.end())
      required_.push_back(t);
  if (device_ != Device::kCpu) {
    // Refused here, before any run, with every operator that would be missing.
    const std::string why = device_unavailable_reason(device_);
    COHORT_CHECK(why.empty(), Status::kUnsupported, "cannot run on ", device_name(device_), ": ", why);
    std::string missing;
    for (NodeId id : order_) {
      const OpSchema& op = *graph_.node(id).op;
      if (op.alias_input0 || op.kernels[static_cast<int>(device_)]) continue;
      if (missing.find(str_cat(" ", op.name, ",")) == std::string::npos) missing += str_cat(" ", op.name, ",");
    }
    if (!missing.empty()) missing.pop_back();
    COHORT_CHECK(missing.empty(), Status::kUnsupported, "cannot run on ", device_name(device_),
                 ": no ", device_name(device_), " kernel for operator(s)", missing);
  }
  frees_after_.resize(order_.size());
  for (size_t s = 0; s < order_.size(); ++s) {
    const Node& n = graph_.node(order_[s]);
    // Outputs nobody reads die right after their node.
    for (ValueId o : n.outputs)
      if (last_use[static_cast<size_t>(o)] < 0) last_use[static_cast<size_t>(o)] = static_cast<int>(s);
  }
  for (size_t v = 0; v < last_use.size(); ++v) {
    if (last_use[v] < 0 || !produced[v]) continue;
    if (std::find(targets_.begin(), targets_.end(), static_cast<ValueId>(v)) != targets_.end()) continue;
    frees_after_[static_cast<size_t>(last_use[v])].push_back(static_cast<ValueId>(v));
  }
}

Tensor Executor::allocate(const TensorType& type, bool target) {
  size_t bytes = static_cast<size_t>(shape_numel(type.shape)) * dtype_size(type.dtype);
  std::shared_ptr<Storage> storage;
  auto it = pool_.lower_bound(bytes);
  // Of the free buffers of the best-fitting size, take the one freed last: it is the most likely
  // to be still in cache, so writing the new output does not first fetch cold lines from memory.
  if (it != pool_.end()) it = std::prev(pool_.upper_bound(it->first));
  if (it != pool_.end() && it->first <= 2 * bytes + 4096) {
    storage = std::move(it->second);
    pool_.erase(it);
  } else {
    storage = std::make_shared<Storage>(device_allocator(device_), bytes);
  }
  live_bytes_ += storage->bytes();
  if (target) live_target_bytes_ += storage->bytes();
  last_peak_bytes_ = std::max(last_peak_bytes_, live_bytes_ - live_target_bytes_);
  return Tensor::view_of(storage, 0, type.shape, type.dtype);
}

void Executor::release(Tensor& t) {
  if (!t.defined()) return;
  std::shared_ptr<Storage> s = t.storage();
  t = Tensor();
  // Our own buffers are the ones counted live; a view still in use keeps its storage alive.
  if (s.use_count() == 1 && owned_.count(s.get())) {
    live_bytes_ -= s->bytes();
    pool_.emplace(s->bytes(), std::move(s));
  }
}

void Executor::run(std::unordered_map<ValueId, Tensor>& env, const RunOptions& options) {
  for (ValueId v : required_) {
    auto it = env.find(v);
    COHORT_CHECK(it != env.end() && it->second.defined(), Status::kInvalidArgument, "no tensor bound for ",
                 graph_.describe(v));
    const TensorType& want = graph_.value(v).type;
    COHORT_CHECK(it->second.shape() == want.shape && it->second.dtype() == want.dtype,
                 Status::kShapeMismatch, "tensor bound for ", graph_.describe(v), " has shape ",
                 shape_str(it->second.shape()), " ", dtype_name(it->second.dtype()));
    COHORT_CHECK(it->second.device() == device_, Status::kInvalidArgument, "tensor bound for ", graph_.describe(v),
                 " is on ", device_name(it->second.device()), " but the graph runs on ", device_name(device_));
  }
  device_discard_checks(device_);  // left by a run that failed half-way
  live_bytes_ = live_target_bytes_ = 0;  // targets of the previous run now belong to the caller
  for (auto& storage : handed_out_)
    if (storage.use_count() == 1) pool_.emplace(storage->bytes(), std::move(storage));
  handed_out_.clear();
  last_peak_bytes_ = 0;
  try {
    for (size_t s = 0; s < order_.size(); ++s) {
      const Node& node = graph_.node(order_[s]);
      for (ValueId i : node.inputs) wait_for(i, options);
      if (options.before_node) options.before_node(s);
      run_node(node, env, options);
      if (options.after_node) options.after_node(s);
      const bool in_flight = !node.outputs.empty() && flight_of_.count(node.outputs[0]);
      if (in_flight && !options.overlap) wait_for(node.outputs[0], options);
      else if (options.on_value && !in_flight)
        for (ValueId o : node.outputs) options.on_value(o);
      for (ValueId v : frees_after_[s]) {
        auto it = env.find(v);
        if (it != env.end()) {
          release(it->second);
          env.erase(it);
        }
      }
    }
    while (!flights_.empty()) {
      auto it = flights_.begin();
      if (options.unfinished_sends && it->second.op->send && !it->second.on_complete && it->second.work &&
          !it->second.work->test()) {
        detach(it->first, *options.unfinished_sends);
      } else {
        complete(it->first, options);
      }
    }
  } catch (...) {
    settle_in_flight();
    throw;
  }
  peak_bytes_ = std::max(peak_bytes_, last_peak_bytes_);
  for (ValueId t : targets_) {
    auto it = env.find(t);
    if (it != env.end() && it->second.defined() && owned_.count(it->second.storage().get()))
      handed_out_.push_back(it->second.storage());
  }
  // Bad ids or labels the device kernels found: the run fails as on the CPU, before its results
  // are used (a trainer's update has not run).
  device_flush_checks(device_);
}

void Executor::wait_for(ValueId value, const RunOptions& o) {
  auto it = flight_of_.find(value);
  if (it != flight_of_.end()) complete(it->second, o);
}

void Executor::complete(uint64_t flight, const RunOptions& o) {
  auto it = flights_.find(flight);
  COHORT_ASSERT(it != flights_.end(), "collective ", flight, " is not in flight");
  InFlight& f = it->second;
  if (f.work) {
    if (f.work->test()) {
      ++collective_stats_.complete_when_needed;
    } else {
      const auto start = std::chrono::steady_clock::now();
      f.work->wait();  // throws the collective's failure (a lost peer, a timeout) naming it
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      collective_stats_.wait_seconds += waited;
      if (OpProfile::enabled()) OpProfile::add(f.op->name + " (waiting)", waited);
    }
  }
  if (f.on_complete) f.on_complete();
  for (ValueId v : f.outputs) flight_of_.erase(v);
  const std::vector<ValueId> outputs = f.outputs;
  for (Tensor& t : f.held) release(t);
  flights_.erase(it);
  if (o.on_value)
    for (ValueId v : outputs) o.on_value(v);
}

void Executor::detach(uint64_t flight, std::vector<UnfinishedSend>& out) {
  auto it = flights_.find(flight);
  InFlight& f = it->second;
  // The buffers leave the executor's pool for good: the caller frees them after the send.
  for (const Tensor& t : f.held)
    if (t.defined()) owned_.erase(t.storage().get());
  out.push_back(UnfinishedSend{std::move(f.work), std::move(f.held)});
  for (ValueId v : f.outputs) flight_of_.erase(v);
  flights_.erase(it);
}

void Executor::settle_in_flight() noexcept {
  for (auto& [number, f] : flights_) {
    try {
      if (f.work) f.work->wait();
    } catch (...) {
      // The failure is the communicator's sticky error: whoever runs next meets it.
    }
  }
  flights_.clear();  // their buffers leave the pool's count; fresh ones replace them
  flight_of_.clear();
}

void Executor::run_node(const Node& node, std::unordered_map<ValueId, Tensor>& env,
                        const RunOptions& o) {
  const OpSchema& op = *node.op;
  KernelContext ctx{node.attrs, {}, {}, o.step, o.seed, o.training, node.id, o.num_threads};
  ctx.axes = o.axes;
  ctx.micro_batch = o.micro_batch;
  bool convert = false;
  for (ValueId i : node.inputs) {
    Tensor t = env.at(i);
    if (!t.is_contiguous()) t = t.contiguous();
    convert = convert || t.dtype() == DType::kBF16;
    ctx.inputs.push_back(t);
  }
  if (op.alias_input0) {
    const TensorType& type = graph_.value(node.outputs[0]).type;
    env[node.outputs[0]] = ctx.inputs[0].reshaped(type.shape);
    return;
  }
  for (ValueId out : node.outputs) {
    const TensorType& t = graph_.value(out).type;
    convert = convert || t.dtype == DType::kBF16;
  }
  // Device kernels take bf16 themselves (or refuse it); the host widens for fp32-only kernels.
  convert = convert && !op.bf16_kernel && device_ == Device::kCpu;
  const KernelFn& kernel = op.kernels[static_cast<int>(device_)];
  COHORT_CHECK(static_cast<bool>(kernel), Status::kUnsupported, op.name, " '", node.name,
               "' has no kernel for this device");
  if (convert) {
    // bf16 storage, fp32 math: widen inputs, run the fp32 kernel, round the outputs.
    for (Tensor& t : ctx.inputs) {
      if (t.dtype() != DType::kBF16) continue;
      Tensor w = Tensor::empty(t.shape(), DType::kF32);
      w.copy_from(t);
      t = w;
    }
  }
  for (ValueId out : node.outputs) {
    TensorType t = graph_.value(out).type;
    if (convert && t.dtype == DType::kBF16) t.dtype = DType::kF32;
    // A target the kernel writes wide (converted below) is a temporary here: that one counts.
    const bool widened = t.dtype != graph_.value(out).type.dtype;
    Tensor buf = allocate(t, is_target_[static_cast<size_t>(out)] && !widened);
    owned_.insert(buf.storage().get());
    ctx.outputs.push_back(buf);
  }
  const bool profile = OpProfile::enabled();
  const auto start = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  kernel(ctx);
  if (profile) device_synchronize(device_);  // a device kernel's time, not its launch's
  if (profile) OpProfile::add(op.name, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (ctx.pending || ctx.on_complete) {
    // In flight: the outputs are the collective's own buffers (collectives convert no dtype).
    COHORT_ASSERT(op.collective && !convert, op.name, " '", node.name, "' left work in flight but is no collective");
    ++collective_stats_.started;
    const uint64_t number = next_flight_++;
    InFlight& f = flights_[number];
    f.work = std::move(ctx.pending);
    f.on_complete = std::move(ctx.on_complete);
    f.held = ctx.inputs;
    f.held.insert(f.held.end(), ctx.outputs.begin(), ctx.outputs.end());
    // A send's token is final at once (readers need not wait): only its input stays held.
    if (!op.send) f.outputs = node.outputs;
    f.op = &op;
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      env[node.outputs[k]] = ctx.outputs[k];
      if (!op.send) flight_of_[node.outputs[k]] = number;
    }
    return;
  }
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    const TensorType& t = graph_.value(node.outputs[k]).type;
    if (ctx.outputs[k].dtype() != t.dtype) {
      Tensor narrow = allocate(t, is_target_[static_cast<size_t>(node.outputs[k])]);
      owned_.insert(narrow.storage().get());
      narrow.copy_from(ctx.outputs[k]);
      release(ctx.outputs[k]);
      ctx.outputs[k] = narrow;
    }
    env[node.outputs[k]] = ctx.outputs[k];
  }
}

}  // namespace cohort
