// Operation graphs through cuDNN's backend API: tensors, the four operation kinds the fused
// attention graphs use (pointwise, reduction, matmul, reshape), and the execution plan found for
// a graph by cuDNN's heuristics. The one thing to know: a graph is only a pattern; which kernel
// runs is whatever engine cuDNN matches to it, and "no engine" is an answer (a refusal with
// cuDNN's reason), not an error — callers fall back to their own kernels.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cudnn_api.h"

namespace cohort::kernels::cuda::cudnn {

using Dims = std::array<int64_t, 4>;

// One backend descriptor, destroyed with it.
class Owned {
 public:
  Owned(const Api& api, DescriptorType type);
  ~Owned();
  Owned(Owned&& other) noexcept : api_(other.api_), desc_(std::exchange(other.desc_, nullptr)) {}
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Owned& operator=(Owned&&) = delete;
  Descriptor get() const { return desc_; }

  void set(Attribute name, AttributeType type, int64_t count, const void* values, const char* what);
  void set_descriptor(Attribute name, Descriptor value, const char* what);
  void finalize(const char* what);

 private:
  const Api* api_;
  Descriptor desc_ = nullptr;
};

// A finalized device-properties descriptor from cuDNN's JSON form (CUDNN_ATTR_DEVICEPROP_JSON_-
// REPRESENTATION): builds plans for a device that is not here (no GPU or driver needed).
Owned device_properties_from_json(const Api& api, const std::string& json);

// Where a plan is built: on this process's device (a handle) or for a described one (offline).
struct Target {
  Handle handle = nullptr;
  Descriptor device_properties = nullptr;
};

// One config tried while building a plan.
struct PlanAttempt {
  int64_t engine = -1;  // cuDNN's global engine index
  Status status = kSuccess;
  std::string message;  // describe(status) when it failed
};

class Plan;

// Collects the tensors and operations of one graph. Tensors the caller binds at execution get
// the caller's ids (1..999); virtual tensors are numbered from 1000. Every call throws
// cohort::Error (via COHORT_CUDNN_CHECK) when cuDNN rejects a descriptor: a malformed graph is a
// bug of the caller, not a refusal.
class GraphBuilder {
 public:
  explicit GraphBuilder(const Api& api) : api_(&api) {}

  // A tensor in device memory, 16-byte aligned, bound by `uid` at execution.
  Descriptor tensor(int64_t uid, DataType type, const Dims& dims, const Dims& strides);
  // A float scalar passed by value (host pointer) at execution, broadcast to any shape.
  Descriptor scalar(int64_t uid);
  // An intermediate the engine keeps on chip (never in memory).
  Descriptor virtual_tensor(DataType type, const Dims& dims, const Dims& strides);

  // y = mode(x[, b[, t]]) elementwise with broadcasting, computed in `precision`; `axis` only
  // for kGenIndex (the index along that dimension).
  void pointwise(PointwiseMode mode, Descriptor x, Descriptor b, Descriptor t, Descriptor y,
                 DataType precision = kFloat, int64_t axis = -1);
  // y = op over the dimensions where y has extent 1 and x does not (fp32 accumulation).
  void reduction(ReduceOp op, Descriptor x, Descriptor y);
  // c = a b over the last two dimensions, batched over the first two (fp32 accumulation).
  void matmul(Descriptor a, Descriptor b, Descriptor c);
  // y = x seen with y's dims and strides (a transposed view, possibly another type).
  void reshape(Descriptor x, Descriptor y);

  size_t operation_count() const { return ops_.size(); }

 private:
  friend class Plan;
  Descriptor make_tensor(int64_t uid, DataType type, const Dims& dims, const Dims& strides,
                         bool is_virtual, bool by_value);
  Owned& make(DescriptorType type);

  const Api* api_;
  std::vector<Owned> owned_;
  std::vector<Descriptor> ops_;
  int64_t next_virtual_uid_ = 1000;
};

// The outcome of plan building: a plan, or the reason there is none (and every config tried).
struct PlanResult {
  std::unique_ptr<Plan> plan;
  std::vector<PlanAttempt> attempts;
  std::string refusal;  // non-empty when plan is null
};

// An execution plan with the descriptors it was built from (kept alive as long as it is).
class Plan {
 public:
  // Finalizes `graph` for `target`, asks cuDNN's heuristics (mode A, then the fallback list) for
  // engine configs and keeps the first whose plan finalizes; at most `max_configs` per mode.
  // Offline (target.device_properties set), a config that compiled but whose module the driver
  // could not load (kExecutionFailedCudaDriver, as with the toolkit's libcuda stub) also ends
  // the search, without a plan: it is recorded in `attempts`. Throws only for a malformed graph.
  static PlanResult build(GraphBuilder&& graph, const Target& target, int max_configs = 8);

  int64_t workspace_bytes() const { return workspace_bytes_; }
  int64_t engine() const { return engine_; }

  // Enqueues the plan on `handle`'s current stream with uids[i] bound to pointers[i] (device
  // memory, or a host float for a by-value scalar). Throws with `what` in the message on failure.
  void execute(Handle handle, const int64_t* uids, void* const* pointers, int count,
               void* workspace, const char* what) const;

 private:
  Plan(GraphBuilder&& graph, Owned op_graph, std::vector<Owned> keep, Owned plan);

  const Api* api_;
  std::vector<Owned> owned_;  // the graph's tensors and operations
  std::vector<Owned> keep_;   // op graph, heuristics, configs
  Owned plan_;
  int64_t workspace_bytes_ = 0;
  int64_t engine_ = -1;
};

}  // namespace cohort::kernels::cuda::cudnn
