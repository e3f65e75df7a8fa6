// cohort_graph_create_{mlp,cnn,gpt}: the built-in model builders (core/models) behind the C ABI.
#include <cstring>

#include "capi/src/handles.h"
#include "core/models/cnn.h"
#include "core/models/gpt.h"
#include "core/models/mlp.h"

using namespace cohort;
using namespace cohort::capi;

namespace {
const int64_t kDefaultHidden[] = {128};
const int64_t kDefaultWidths[] = {16, 32, 64};

std::vector<int64_t> checked_list(const int64_t* values, int32_t count, int32_t max, const char* arg) {
  COHORT_CHECK(count >= 0 && count <= max, Status::kInvalidArgument, "options->num_", arg, " must be 0..", max,
               ", got ", count);
  COHORT_CHECK(count == 0 || values != nullptr, Status::kInvalidArgument, "options->", arg, " is NULL with ", count,
               " entries");
  return std::vector<int64_t>(values, values + count);
}

std::string activation_name(const cohort_activation& activation) {
  const int a = enum_int(activation);
  switch (a) {
    case COHORT_ACTIVATION_RELU: return "relu";
    case COHORT_ACTIVATION_GELU: return "gelu";
    case COHORT_ACTIVATION_TANH: return "tanh";
  }
  throw_error(Status::kInvalidArgument,
              str_cat("options->activation ", a, " is not a cohort_activation"));
}

models::MlpConfig to_config(const cohort_model_mlp_options& o) {
  check_struct_size(o.size, offsetof(cohort_model_mlp_options, activation) + sizeof(o.activation), "options");
  models::MlpConfig c;
  c.batch = o.batch;
  c.in_features = o.in_features;
  c.hidden = checked_list(o.hidden, o.num_hidden, 64, "hidden");
  c.classes = o.classes;
  c.activation = activation_name(o.activation);
  return c;
}

models::CnnConfig to_config(const cohort_model_cnn_options& o) {
  check_struct_size(o.size, offsetof(cohort_model_cnn_options, eps) + sizeof(o.eps), "options");
  models::CnnConfig c;
  c.batch = o.batch;
  c.channels = o.channels;
  c.height = o.height;
  c.width = o.width;
  c.classes = o.classes;
  c.widths = checked_list(o.widths, o.num_stages, 8, "stages");
  c.blocks_per_stage = o.blocks_per_stage;
  c.groups = o.groups;
  c.eps = o.eps;
  return c;
}

models::GptConfig to_config(const cohort_model_gpt_options& o) {
  check_struct_size(o.size, offsetof(cohort_model_gpt_options, eps) + sizeof(o.eps), "options");
  models::GptConfig c;
  c.batch = o.batch;
  c.context = o.context;
  c.vocab = o.vocab;
  c.layers = o.layers;
  c.width = o.width;
  c.heads = o.heads;
  c.tie_weights = o.tie_weights != 0;
  c.dropout = o.dropout;
  c.eps = o.eps;
  if (o.size >= offsetof(cohort_model_gpt_options, dtype) + sizeof(o.dtype)) {
    const int d = enum_int(o.dtype);
    COHORT_CHECK(d == COHORT_F32 || d == COHORT_BF16, Status::kInvalidArgument, "options->dtype ", d,
                 " is not COHORT_F32 or COHORT_BF16");
    c.dtype = d == COHORT_BF16 ? DType::kBF16 : DType::kF32;
  }
  if (o.size >= offsetof(cohort_model_gpt_options, recompute_gelu) + sizeof(o.recompute_gelu))
    c.recompute_gelu = o.recompute_gelu != 0;
  return c;
}

// Builds with `build` from the caller's options (or the defaults) into a new graph handle.
template <typename Options, typename Build>
void create(const Options* options, Options (*defaults)(), Build build, cohort_graph** graph_out) {
  check_not_null(graph_out, "graph_out");
  const Options o = options ? *options : defaults();
  Graph g = build(to_config(o));
  cohort_graph* h = make_handle<cohort_graph>("graph");
  h->graph = std::move(g);
  *graph_out = h;
}
}  // namespace

extern "C" {

COHORT_API cohort_model_mlp_options cohort_model_mlp_options_default(void) {
  cohort_model_mlp_options o;
  std::memset(&o, 0, sizeof(o));
  o.size = sizeof(o);
  o.batch = 32;
  o.in_features = 784;
  o.hidden = kDefaultHidden;
  o.num_hidden = 1;
  o.classes = 10;
  o.activation = COHORT_ACTIVATION_RELU;
  return o;
}

COHORT_API cohort_model_cnn_options cohort_model_cnn_options_default(void) {
  cohort_model_cnn_options o;
  std::memset(&o, 0, sizeof(o));
  o.size = sizeof(o);
  o.batch = 32;
  o.channels = 1;
  o.height = 28;
  o.width = 28;
  o.classes = 10;
  o.widths = kDefaultWidths;
  o.num_stages = 3;
  o.blocks_per_stage = 1;
  o.groups = 8;
  o.eps = 1e-5;
  return o;
}

COHORT_API cohort_model_gpt_options cohort_model_gpt_options_default(void) {
  cohort_model_gpt_options o;
  std::memset(&o, 0, sizeof(o));
  o.size = sizeof(o);
  o.batch = 8;
  o.context = 128;
  o.vocab = 256;
  o.layers = 4;
  o.width = 256;
  o.heads = 4;
  o.tie_weights = 1;
  o.dropout = 0.0;
  o.eps = 1e-5;
  o.dtype = COHORT_F32;
  o.recompute_gelu = 0;
  return o;
}

COHORT_API cohort_status cohort_graph_create_mlp(const cohort_model_mlp_options* options, cohort_graph** graph_out) {
  return guard("cohort_graph_create_mlp", [&] {
    create(options, cohort_model_mlp_options_default,
           [](const models::MlpConfig& c) { return models::build_mlp(c); }, graph_out);
  });
}

COHORT_API cohort_status cohort_graph_create_cnn(const cohort_model_cnn_options* options, cohort_graph** graph_out) {
  return guard("cohort_graph_create_cnn", [&] {
    create(options, cohort_model_cnn_options_default,
           [](const models::CnnConfig& c) { return models::build_cnn(c); }, graph_out);
  });
}

COHORT_API cohort_status cohort_graph_create_gpt(const cohort_model_gpt_options* options, cohort_graph** graph_out) {
  return guard("cohort_graph_create_gpt", [&] {
    create(options, cohort_model_gpt_options_default,
           [](const models::GptConfig& c) { return models::build_gpt(c); }, graph_out);
  });
}

}  // extern "C"
