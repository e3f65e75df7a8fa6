// Executor: plan (which nodes, in which order, when each buffer dies) and run.
#include "core/exec/executor.h"

#include <algorithm>
#include <chrono>
#include <unordered_set>

#include "core/base/error.h"
#include "core/device/device.h"
#include "core/exec/profile.h"

namespace cohort {

namespace {
// Nodes needed to compute targets, and the values they read that nothing in the plan produces.
std::vector<NodeId> needed_nodes(const Graph& g, const std::vector<ValueId>& targets) {
  std::vector<bool> need_value(g.values().size(), false);
  for (ValueId t : targets) need_value[static_cast<size_t>(t)] = true;
  std::vector<NodeId> order;
  for (size_t k = g.nodes().size(); k-- > 0;) {
    const Node& n = g.nodes()[k];
    bool needed = false;
    for (ValueId o : n.outputs) needed = needed || need_value[static_cast<size_t>(o)];
    if (!needed) continue;
    order.push_back(n.id);
    for (ValueId i : n.inputs) need_value[static_cast<size_t>(i)] = true;
  }
  std::reverse(order.begin(), order.end());
  return order;
}
}  // namespace

Executor::Executor(const Graph& graph, std::vector<ValueId> targets, Device device)
    : graph_(graph), device_(device), targets_(std::move(targets)) {
  for (ValueId t : targets_) (void)graph_.value(t);
  order_ = needed_nodes(graph_, targets_);
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

Tensor Executor::allocate(const TensorType& type) {
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
  last_peak_bytes_ = std::max(last_peak_bytes_, live_bytes_);
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
  live_bytes_ = 0;  // targets of the previous run now belong to the caller
  for (auto& storage : handed_out_)
    if (storage.use_count() == 1) pool_.emplace(storage->bytes(), std::move(storage));
  handed_out_.clear();
  last_peak_bytes_ = 0;
  for (size_t s = 0; s < order_.size(); ++s) {
    const Node& node = graph_.node(order_[s]);
    if (options.before_node) options.before_node(s);
    run_node(node, env, options);
    if (options.after_node) options.after_node(s);
    if (options.on_value)
      for (ValueId o : node.outputs) options.on_value(o);
    for (ValueId v : frees_after_[s]) {
      auto it = env.find(v);
      if (it != env.end()) {
        release(it->second);
        env.erase(it);
      }
    }
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

void Executor::run_node(const Node& node, std::unordered_map<ValueId, Tensor>& env,
                        const RunOptions& o) {
  const OpSchema& op = *node.op;
  KernelContext ctx{node.attrs, {}, {}, o.step, o.seed, o.training, node.id, o.num_threads};
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
    Tensor buf = allocate(t);
    owned_.insert(buf.storage().get());
    ctx.outputs.push_back(buf);
  }
  const bool profile = OpProfile::enabled();
  const auto start = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  kernel(ctx);
  if (profile) device_synchronize(device_);  // a device kernel's time, not its launch's
  if (profile) OpProfile::add(op.name, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    const TensorType& t = graph_.value(node.outputs[k]).type;
    if (ctx.outputs[k].dtype() != t.dtype) {
      Tensor narrow = allocate(t);
      owned_.insert(narrow.storage().get());
      narrow.copy_from(ctx.outputs[k]);
      release(ctx.outputs[k]);
      ctx.outputs[k] = narrow;
    }
    env[node.outputs[k]] = ctx.outputs[k];
  }
}

}  // namespace cohort
