// cohort_trainer_*: training steps, evaluation and parameter access on caller buffers.
#include <cstring>

#include "capi/src/handles.h"
#include "core/parallel/data_parallel.h"

using namespace cohort;
using namespace cohort::capi;

namespace {
constexpr const char* kType = "trainer";

Trainer& trainer_of(cohort_trainer* t) { return *checked(t, kType, "trainer")->trainer; }
const Trainer& trainer_of(const cohort_trainer* t) { return *checked(t, kType, "trainer")->trainer; }

// A caller's buffer for parameter `name`: its shape, and a dtype that copy_from converts (the same,
// or f32 for bf16 and back), checked before anything is copied.
void check_parameter_buffer(const char* name, const Tensor& parameter, const Tensor& buffer) {
  COHORT_CHECK(buffer.shape() == parameter.shape(), Status::kShapeMismatch, "parameter '", name, "' has shape ",
               shape_str(parameter.shape()), ", the buffer ", shape_str(buffer.shape()));
  auto f32_or_bf16 = [](DType d) { return d == DType::kF32 || d == DType::kBF16; };
  COHORT_CHECK(buffer.dtype() == parameter.dtype() || (f32_or_bf16(buffer.dtype()) && f32_or_bf16(parameter.dtype())),
               Status::kShapeMismatch, "parameter '", name, "' is ", dtype_name(parameter.dtype()),
               ", but the buffer has dtype ", dtype_name(buffer.dtype()), " (f32 and bf16 convert to each other)");
}
}  // namespace

namespace cohort::capi {

TrainerOptions trainer_options_from(const cohort_trainer_options* options) {
  TrainerOptions o;
  if (options == nullptr) return o;
  check_struct_size(options->size, offsetof(cohort_trainer_options, num_threads) + sizeof(int32_t), "options");
  COHORT_CHECK(options->num_threads >= 0, Status::kInvalidArgument, "options->num_threads must be >= 0, got ",
               options->num_threads);
  o.seed = options->seed;
  o.num_threads = options->num_threads;
  if (options->size >= offsetof(cohort_trainer_options, device) + sizeof(int32_t))
    o.device = checked_device(options->device, "options->device");
  return o;
}

cohort_trainer* make_trainer_handle(std::unique_ptr<Trainer> trainer) {
  cohort_trainer* h = make_handle<cohort_trainer>(kType);
  h->trainer = std::move(trainer);
  return h;
}

}  // namespace cohort::capi

extern "C" {

COHORT_API cohort_trainer_options cohort_trainer_options_default(void) {
  cohort_trainer_options o;
  std::memset(&o, 0, sizeof(o));
  o.size = sizeof(o);
  return o;
}

COHORT_API cohort_status cohort_trainer_create(const cohort_graph* graph, const cohort_optimizer* optimizer,
                                               const cohort_trainer_options* options,
                                               cohort_trainer** trainer_out) {
  return guard("cohort_trainer_create", [&] {
    const Graph& g = checked(graph, "graph", "graph")->graph;
    const optim::OptimizerConfig& c = checked(optimizer, "optimizer", "optimizer")->config;
    check_not_null(trainer_out, "trainer_out");
    TrainerOptions o = trainer_options_from(options);
    *trainer_out = make_trainer_handle(std::make_unique<Trainer>(g, c, o));
  });
}

COHORT_API cohort_status cohort_trainer_destroy(cohort_trainer* trainer) {
  return guard("cohort_trainer_destroy", [&] { destroy_handle(trainer, kType, "trainer"); });
}

COHORT_API cohort_status cohort_trainer_step(cohort_trainer* trainer, const cohort_tensor_ref* inputs,
                                             int32_t num_inputs, float* loss_out) {
  return guard("cohort_trainer_step", [&] {
    Trainer& t = trainer_of(trainer);
    std::map<std::string, Tensor> in = wrap_refs(inputs, num_inputs, "inputs");
    float loss = t.step(in);
    if (loss_out) *loss_out = loss;
  });
}

COHORT_API cohort_status cohort_trainer_evaluate(cohort_trainer* trainer, const cohort_tensor_ref* inputs,
                                                 int32_t num_inputs, cohort_tensor_ref* outputs,
                                                 int32_t num_outputs) {
  return guard("cohort_trainer_evaluate", [&] {
    Trainer& t = trainer_of(trainer);
    std::map<std::string, Tensor> in = wrap_refs(inputs, num_inputs, "inputs");
    std::map<std::string, Tensor> out = wrap_refs(outputs, num_outputs, "outputs");
    // Results go to temporaries first: outputs are written only when every one succeeded.
    std::map<std::string, Tensor> tmp;
    for (const auto& [name, dst] : out) tmp.emplace(name, Tensor::empty(dst.shape(), dst.dtype()));
    t.evaluate(in, tmp);
    for (auto& [name, dst] : out) dst.copy_from(tmp.at(name));
  });
}

COHORT_API cohort_status cohort_trainer_get_parameter(cohort_trainer* trainer, cohort_tensor_ref* parameter) {
  return guard("cohort_trainer_get_parameter", [&] {
    Trainer& t = trainer_of(trainer);
    check_not_null(parameter, "parameter");
    Tensor dst = wrap_ref(*parameter, "parameter");
    const Tensor& p = t.parameter_value(parameter->name);
    if (dst.shape() != p.shape() && dst.shape() == t.whole_parameter_shape(parameter->name)) {
      // Tensor parallelism: the whole parameter, gathered from the ranks holding its blocks.
      const Tensor whole = t.whole_parameter(parameter->name);
      check_parameter_buffer(parameter->name, whole, dst);
      dst.copy_from(whole);
      return;
    }
    check_parameter_buffer(parameter->name, p, dst);
    dst.copy_from(p);
  });
}

COHORT_API cohort_status cohort_trainer_gather_parameters(cohort_trainer* trainer) {
  return guard("cohort_trainer_gather_parameters", [&] { trainer_of(trainer).gather_parameters(); });
}

COHORT_API cohort_status cohort_trainer_average_replicas(cohort_trainer* trainer, int32_t* averaged_out) {
  return guard("cohort_trainer_average_replicas", [&] {
    const bool averaged = trainer_of(trainer).average_replicas();
    if (averaged_out != nullptr) *averaged_out = averaged ? 1 : 0;
  });
}

COHORT_API cohort_status cohort_trainer_set_parameter(cohort_trainer* trainer, const cohort_tensor_ref* parameter) {
  return guard("cohort_trainer_set_parameter", [&] {
    Trainer& t = trainer_of(trainer);
    check_not_null(parameter, "parameter");
    Tensor src = wrap_ref(*parameter, "parameter");
    Tensor& p = t.parameter(parameter->name);
    // Local updating measures each round from its anchor: a written parameter moves it too.
    auto* dp = dynamic_cast<parallel::DataParallel*>(t.step_hook().get());
    const int64_t index = t.local_parameter(parameter->name);
    if (dp) dp->check_parameter_write();
    if (src.shape() != p.shape() && src.shape() == t.whole_parameter_shape(parameter->name)) {
      // Tensor parallelism: the whole parameter given; this rank keeps its block.
      Tensor whole = Tensor::empty(src.shape(), p.dtype());
      check_parameter_buffer(parameter->name, whole, src);
      whole.copy_from(src);
      t.set_whole_parameter(parameter->name, whole);
    } else {
      check_parameter_buffer(parameter->name, p, src);
      p.copy_from(src);
    }
    if (dp && index >= 0) dp->parameter_written(t.mutable_parameters(), static_cast<size_t>(index));
  });
}

COHORT_API cohort_status cohort_trainer_get_stats(const cohort_trainer* trainer, cohort_trainer_stats* stats_out) {
  return guard("cohort_trainer_get_stats", [&] {
    const Trainer& t = trainer_of(trainer);
    check_not_null(stats_out, "stats_out");
    check_struct_size(stats_out->size, offsetof(cohort_trainer_stats, last_step_seconds) + sizeof(double),
                      "stats_out");
    TrainerStats s = t.stats();
    stats_out->step = s.step;
    stats_out->learning_rate = s.learning_rate;
    stats_out->grad_norm = s.grad_norm;
    stats_out->peak_activation_bytes = static_cast<int64_t>(s.peak_activation_bytes);
    stats_out->parameter_bytes = static_cast<int64_t>(s.parameter_bytes);
    stats_out->last_step_seconds = s.last_step_seconds;
    if (stats_out->size >= offsetof(cohort_trainer_stats, optimizer_state_bytes) + sizeof(int64_t)) {
      stats_out->parameter_value_bytes = static_cast<int64_t>(s.parameter_value_bytes);
      stats_out->gradient_bytes = static_cast<int64_t>(s.gradient_bytes);
      stats_out->optimizer_state_bytes = static_cast<int64_t>(s.optimizer_state_bytes);
    }
    if (stats_out->size >= offsetof(cohort_trainer_stats, pipeline_bubble_fraction) + sizeof(double)) {
      stats_out->micro_batches = s.micro_batches;
      stats_out->pipeline_busy_seconds = s.pipeline_busy_seconds;
      stats_out->pipeline_bubble_fraction = s.pipeline_bubble_fraction;
    }
  });
}

}  // extern "C"
