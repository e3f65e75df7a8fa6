// Graph building and plan search over cuDNN's backend API (see cudnn_graph.h).
#include "kernels/cuda/cudnn_graph.h"

#include <algorithm>

#include "core/base/error.h"

namespace cohort::kernels::cuda::cudnn {

// ---- Owned ----

Owned::Owned(const Api& api, DescriptorType type) : api_(&api) {
  check(api.create_descriptor(type, &desc_), "cudnnBackendCreateDescriptor", __FILE__, __LINE__);
}

Owned::~Owned() {
  if (desc_) (void)api_->destroy_descriptor(desc_);
}

void Owned::set(Attribute name, AttributeType type, int64_t count, const void* values,
                const char* what) {
  check(api_->set_attribute(desc_, name, type, count, values), what, __FILE__, __LINE__);
}

void Owned::set_descriptor(Attribute name, Descriptor value, const char* what) {
  set(name, kTypeBackendDescriptor, 1, &value, what);
}

void Owned::finalize(const char* what) { check(api_->finalize(desc_), what, __FILE__, __LINE__); }

Owned device_properties_from_json(const Api& api, const std::string& json) {
  Owned d(api, kDevicePropDescriptor);
  d.set(kDevicePropJsonRepresentation, kTypeChar, static_cast<int64_t>(json.size()), json.data(),
        "set CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION");
  d.finalize("finalize the device properties");
  return d;
}

// ---- GraphBuilder ----

Owned& GraphBuilder::make(DescriptorType type) {
  owned_.emplace_back(*api_, type);
  return owned_.back();
}

Descriptor GraphBuilder::make_tensor(int64_t uid, DataType type, const Dims& dims,
                                     const Dims& strides, bool is_virtual, bool by_value) {
  Owned& t = make(kTensorDescriptor);
  const int64_t alignment = 16;
  t.set(kTensorDataType, kTypeDataType, 1, &type, "set CUDNN_ATTR_TENSOR_DATA_TYPE");
  t.set(kTensorDimensions, kTypeInt64, 4, dims.data(), "set CUDNN_ATTR_TENSOR_DIMENSIONS");
  t.set(kTensorStrides, kTypeInt64, 4, strides.data(), "set CUDNN_ATTR_TENSOR_STRIDES");
  t.set(kTensorUniqueId, kTypeInt64, 1, &uid, "set CUDNN_ATTR_TENSOR_UNIQUE_ID");
  t.set(kTensorByteAlignment, kTypeInt64, 1, &alignment, "set CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT");
  t.set(kTensorIsVirtual, kTypeBoolean, 1, &is_virtual, "set CUDNN_ATTR_TENSOR_IS_VIRTUAL");
  if (by_value)
    t.set(kTensorIsByValue, kTypeBoolean, 1, &by_value, "set CUDNN_ATTR_TENSOR_IS_BY_VALUE");
  t.finalize("finalize a tensor descriptor");
  return t.get();
}

Descriptor GraphBuilder::tensor(int64_t uid, DataType type, const Dims& dims, const Dims& strides) {
  COHORT_ASSERT(uid > 0 && uid < 1000, "uid ", uid);
  return make_tensor(uid, type, dims, strides, false, false);
}

Descriptor GraphBuilder::scalar(int64_t uid) {
  COHORT_ASSERT(uid > 0 && uid < 1000, "uid ", uid);
  return make_tensor(uid, kFloat, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
}

Descriptor GraphBuilder::virtual_tensor(DataType type, const Dims& dims, const Dims& strides) {
  return make_tensor(next_virtual_uid_++, type, dims, strides, true, false);
}

void GraphBuilder::pointwise(PointwiseMode mode, Descriptor x, Descriptor b, Descriptor t,
                             Descriptor y, DataType precision, int64_t axis) {
  Owned& pw = make(kPointwiseDescriptor);
  pw.set(kPointwiseMode, kTypePointwiseMode, 1, &mode, "set CUDNN_ATTR_POINTWISE_MODE");
  pw.set(kPointwiseMathPrec, kTypeDataType, 1, &precision, "set CUDNN_ATTR_POINTWISE_MATH_PREC");
  if (mode == kGenIndex)
    pw.set(kPointwiseAxis, kTypeInt64, 1, &axis, "set CUDNN_ATTR_POINTWISE_AXIS");
  pw.finalize("finalize a pointwise descriptor");
  Owned& op = make(kOperationPointwiseDescriptor);
  op.set_descriptor(kOperationPointwisePwDescriptor, pw.get(),
                    "set CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR");
  op.set_descriptor(kOperationPointwiseXDesc, x, "set CUDNN_ATTR_OPERATION_POINTWISE_XDESC");
  if (b) op.set_descriptor(kOperationPointwiseBDesc, b, "set CUDNN_ATTR_OPERATION_POINTWISE_BDESC");
  if (t) op.set_descriptor(kOperationPointwiseTDesc, t, "set CUDNN_ATTR_OPERATION_POINTWISE_TDESC");
  op.set_descriptor(kOperationPointwiseYDesc, y, "set CUDNN_ATTR_OPERATION_POINTWISE_YDESC");
  op.finalize("finalize a pointwise operation");
  ops_.push_back(op.get());
}

void GraphBuilder::reduction(ReduceOp op_kind, Descriptor x, Descriptor y) {
  const DataType f32 = kFloat;
  Owned& rd = make(kReductionDescriptor);
  rd.set(kReductionOperator, kTypeReductionOperator, 1, &op_kind,
         "set CUDNN_ATTR_REDUCTION_OPERATOR");
  rd.set(kReductionCompType, kTypeDataType, 1, &f32, "set CUDNN_ATTR_REDUCTION_COMP_TYPE");
  rd.finalize("finalize a reduction descriptor");
  Owned& op = make(kOperationReductionDescriptor);
  op.set_descriptor(kOperationReductionDesc, rd.get(), "set CUDNN_ATTR_OPERATION_REDUCTION_DESC");
  op.set_descriptor(kOperationReductionXDesc, x, "set CUDNN_ATTR_OPERATION_REDUCTION_XDESC");
  op.set_descriptor(kOperationReductionYDesc, y, "set CUDNN_ATTR_OPERATION_REDUCTION_YDESC");
  op.finalize("finalize a reduction operation");
  ops_.push_back(op.get());
}

void GraphBuilder::matmul(Descriptor a, Descriptor b, Descriptor c) {
  const DataType f32 = kFloat;
  Owned& mm = make(kMatmulDescriptor);
  mm.set(kMatmulCompType, kTypeDataType, 1, &f32, "set CUDNN_ATTR_MATMUL_COMP_TYPE");
  mm.finalize("finalize a matmul descriptor");
  Owned& op = make(kOperationMatmulDescriptor);
  op.set_descriptor(kOperationMatmulADesc, a, "set CUDNN_ATTR_OPERATION_MATMUL_ADESC");
  op.set_descriptor(kOperationMatmulBDesc, b, "set CUDNN_ATTR_OPERATION_MATMUL_BDESC");
  op.set_descriptor(kOperationMatmulCDesc, c, "set CUDNN_ATTR_OPERATION_MATMUL_CDESC");
  op.set_descriptor(kOperationMatmulDesc, mm.get(), "set CUDNN_ATTR_OPERATION_MATMUL_DESC");
  op.finalize("finalize a matmul operation");
  ops_.push_back(op.get());
}

void GraphBuilder::reshape(Descriptor x, Descriptor y) {
  Owned& op = make(kOperationReshapeDescriptor);
  op.set_descriptor(kOperationReshapeXDesc, x, "set CUDNN_ATTR_OPERATION_RESHAPE_XDESC");
  op.set_descriptor(kOperationReshapeYDesc, y, "set CUDNN_ATTR_OPERATION_RESHAPE_YDESC");
  op.finalize("finalize a reshape operation");
  ops_.push_back(op.get());
}

// ---- Plan ----

namespace {

// cuDNN's global index of the engine an engine config names (-1 when it cannot be read).
int64_t engine_of(const Api& api, Descriptor config) {
  try {
    Owned engine(api, kEngineDescriptor);
    Descriptor e = engine.get();
    int64_t n = 0, index = -1;
    if (api.get_attribute(config, kEngineCfgEngine, kTypeBackendDescriptor, 1, &n, &e) != kSuccess)
      return -1;
    if (api.get_attribute(e, kEngineGlobalIndex, kTypeInt64, 1, &n, &index) != kSuccess) return -1;
    return index;
  } catch (const Error&) {
    return -1;
  }
}

const char* mode_name(HeurMode m) { return m == kHeurA ? "heuristics mode A" : "fallback list"; }

}  // namespace

Plan::Plan(GraphBuilder&& graph, Owned op_graph, std::vector<Owned> keep, Owned plan)
    : api_(graph.api_),
      owned_(std::move(graph.owned_)),
      keep_(std::move(keep)),
      plan_(std::move(plan)) {
  keep_.push_back(std::move(op_graph));
  int64_t n = 0;
  COHORT_CUDNN_CHECK(api_->get_attribute(plan_.get(), kExecutionPlanWorkspaceSize, kTypeInt64, 1,
                                         &n, &workspace_bytes_));
}

PlanResult Plan::build(GraphBuilder&& graph, const Target& target, int max_configs) {
  const Api& api = *graph.api_;
  const bool offline = target.device_properties != nullptr;
  COHORT_ASSERT(offline != (target.handle != nullptr),
                "exactly one of handle and device properties");
  COHORT_ASSERT(max_configs > 0 && graph.operation_count() > 0, "an empty search");
  PlanResult r;
  Owned op_graph(api, kOperationGraphDescriptor);
  op_graph.set(kOperationGraphOps, kTypeBackendDescriptor, static_cast<int64_t>(graph.ops_.size()),
               graph.ops_.data(), "set CUDNN_ATTR_OPERATIONGRAPH_OPS");
  if (!offline)
    op_graph.set(kOperationGraphHandle, kTypeHandle, 1, &target.handle,
                 "set CUDNN_ATTR_OPERATIONGRAPH_HANDLE");
  if (const Status st = api.finalize(op_graph.get()); st != kSuccess) {
    r.refusal = str_cat("the operation graph was refused: ", describe(st));
    return r;
  }
  std::string reasons;
  for (const HeurMode mode : {kHeurA, kHeurFallback}) {
    Owned heur(api, kEngineHeurDescriptor);
    heur.set_descriptor(kEngineHeurOperationGraph, op_graph.get(),
                        "set CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH");
    heur.set(kEngineHeurMode, kTypeHeurMode, 1, &mode, "set CUDNN_ATTR_ENGINEHEUR_MODE");
    if (offline)
      heur.set_descriptor(kEngineHeurDeviceProp, target.device_properties,
                          "set CUDNN_ATTR_ENGINEHEUR_DEVICEPROP");
    if (const Status st = api.finalize(heur.get()); st != kSuccess) {
      reasons += str_cat("; ", mode_name(mode), ": ", describe(st));
      continue;
    }
    int64_t available = 0;
    COHORT_CUDNN_CHECK(api.get_attribute(heur.get(), kEngineHeurResults, kTypeBackendDescriptor, 0,
                                         &available, nullptr));
    const int64_t wanted = std::min<int64_t>(available, max_configs);
    std::vector<Owned> keep;  // the heuristics and its configs, kept with a plan built from them
    keep.reserve(static_cast<size_t>(wanted) + 1);
    std::vector<Descriptor> configs;
    for (int64_t i = 0; i < wanted; ++i) {
      keep.emplace_back(api, kEngineCfgDescriptor);
      configs.push_back(keep.back().get());
    }
    int64_t viable = 0;
    if (wanted > 0) {
      COHORT_CUDNN_CHECK(api.get_attribute(heur.get(), kEngineHeurResults, kTypeBackendDescriptor,
                                           wanted, &viable, configs.data()));
    }
    if (viable <= 0) {
      const std::string why = last_error_text();
      reasons += str_cat("; ", mode_name(mode), ": no viable engine config among ", available,
                         why.empty() ? "" : str_cat(" (", why, ")"));
      continue;
    }
    for (int64_t i = 0; i < std::min(viable, wanted); ++i) {
      Owned plan(api, kExecutionPlanDescriptor);
      plan.set_descriptor(kExecutionPlanEngineConfig, configs[static_cast<size_t>(i)],
                          "set CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG");
      if (offline) {
        plan.set_descriptor(kExecutionPlanDeviceProp, target.device_properties,
                            "set CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP");
      } else {
        plan.set(kExecutionPlanHandle, kTypeHandle, 1, &target.handle,
                 "set CUDNN_ATTR_EXECUTION_PLAN_HANDLE");
      }
      PlanAttempt attempt;
      attempt.engine = engine_of(api, configs[static_cast<size_t>(i)]);
      attempt.status = api.finalize(plan.get());
      if (attempt.status != kSuccess) attempt.message = describe(attempt.status);
      r.attempts.push_back(attempt);
      if (attempt.status == kSuccess) {
        keep.push_back(std::move(heur));
        r.plan.reset(
            new Plan(std::move(graph), std::move(op_graph), std::move(keep), std::move(plan)));
        r.plan->engine_ = attempt.engine;
        return r;
      }
      reasons += str_cat("; engine ", attempt.engine, ": ", attempt.message);
      if (offline && attempt.status == kExecutionFailedCudaDriver) {
        r.refusal = str_cat("engine ", attempt.engine,
                            " compiled the graph for the described device; this machine's driver "
                            "could not load it: ",
                            attempt.message);
        return r;
      }
    }
  }
  r.refusal = str_cat("no engine took the graph", reasons);
  return r;
}

void Plan::execute(Handle handle, const int64_t* uids, void* const* pointers, int count,
                   void* workspace, const char* what) const {
  Owned pack(*api_, kVariantPackDescriptor);
  pack.set(kVariantPackUniqueIds, kTypeInt64, count, uids,
           "set CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS");
  pack.set(kVariantPackDataPointers, kTypeVoidPtr, count, pointers,
           "set CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS");
  pack.set(kVariantPackWorkspace, kTypeVoidPtr, 1, &workspace,
           "set CUDNN_ATTR_VARIANT_PACK_WORKSPACE");
  pack.finalize("finalize the variant pack");
  const Status st = api_->execute(handle, plan_.get(), pack.get());
  if (st != kSuccess)
    throw_error(to_status(st), str_cat(what, ": cudnnBackendExecute failed: ", describe(st)));
}

}  // namespace cohort::kernels::cuda::cudnn
