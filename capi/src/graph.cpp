// cohort_graph_*: building, inspecting, saving and loading graphs.
#include <cstring>

#include "capi/src/handles.h"
#include "core/graph/serialize.h"

using namespace cohort;
using namespace cohort::capi;

namespace {
constexpr const char* kType = "graph";

Graph& graph_of(cohort_graph* g) { return checked(g, kType, "graph")->graph; }
const Graph& graph_of(const cohort_graph* g) { return checked(g, kType, "graph")->graph; }

Initializer to_initializer(const cohort_initializer* init) {
  Initializer r;
  if (init == nullptr) return r;
  check_struct_size(init->size, offsetof(cohort_initializer, seed) + sizeof(init->seed), "init");
  int k = enum_int(init->kind);
  COHORT_CHECK(k >= 0 && k <= static_cast<int>(InitKind::kKaimingNormal), Status::kInvalidArgument,
               "init->kind ", k, " is not a cohort_init_kind");
  r.kind = static_cast<InitKind>(k);
  r.a = init->a;
  r.b = init->b;
  r.seed = init->seed;
  return r;
}
}  // namespace

extern "C" {

COHORT_API cohort_initializer cohort_initializer_default(void) {
  cohort_initializer i;
  std::memset(&i, 0, sizeof(i));
  i.size = sizeof(i);
  i.kind = COHORT_INIT_ZEROS;
  return i;
}

COHORT_API cohort_status cohort_graph_create(cohort_graph** graph_out) {
  return guard("cohort_graph_create", [&] {
    check_not_null(graph_out, "graph_out");
    *graph_out = make_handle<cohort_graph>(kType);
  });
}

COHORT_API cohort_status cohort_graph_destroy(cohort_graph* graph) {
  return guard("cohort_graph_destroy", [&] { destroy_handle(graph, kType, "graph"); });
}

COHORT_API cohort_status cohort_graph_add_input(cohort_graph* graph, const char* name, cohort_dtype dtype,
                                                const int64_t* shape, int32_t rank, int32_t* id_out) {
  return guard("cohort_graph_add_input", [&] {
    Graph& g = graph_of(graph);
    std::string n = checked_name(name, "name");
    std::string what = str_cat("input '", n, "'");
    DType t = checked_dtype(dtype, what.c_str());
    Shape s = checked_shape(shape, rank, what.c_str());
    ValueId id = g.add_input(n, t, s);
    if (id_out) *id_out = id;
  });
}

COHORT_API cohort_status cohort_graph_add_parameter(cohort_graph* graph, const char* name, cohort_dtype dtype,
                                                    const int64_t* shape, int32_t rank,
                                                    const cohort_initializer* init, int32_t* id_out) {
  return guard("cohort_graph_add_parameter", [&] {
    Graph& g = graph_of(graph);
    std::string n = checked_name(name, "name");
    std::string what = str_cat("parameter '", n, "'");
    DType t = checked_dtype(dtype, what.c_str());
    Shape s = checked_shape(shape, rank, what.c_str());
    ValueId id = g.add_parameter(n, t, s, to_initializer(init));
    if (id_out) *id_out = id;
  });
}

COHORT_API cohort_status cohort_graph_add_op(cohort_graph* graph, const char* op, const char* name,
                                             const int32_t* inputs, int32_t num_inputs, const cohort_attrs* attrs,
                                             int32_t* outputs_out, int32_t max_outputs, int32_t* num_outputs_out) {
  return guard("cohort_graph_add_op", [&] {
    Graph& g = graph_of(graph);
    std::string op_name = checked_name(op, "op");
    std::string node_name = name ? std::string(name) : std::string();
    COHORT_CHECK(num_inputs >= 0 && num_inputs <= 64, Status::kInvalidArgument, "num_inputs must be 0..64, got ",
                 num_inputs);
    COHORT_CHECK(num_inputs == 0 || inputs != nullptr, Status::kInvalidArgument, "inputs is NULL with num_inputs ",
                 num_inputs);
    COHORT_CHECK(max_outputs >= 0 && (max_outputs == 0 || outputs_out != nullptr), Status::kInvalidArgument,
                 "outputs_out is NULL with max_outputs ", max_outputs);
    Attrs a = attrs ? checked(attrs, "attrs", "attrs")->attrs : Attrs();
    // Add to a copy so a failure leaves the graph unchanged.
    Graph trial = g;
    std::vector<ValueId> outs = trial.add_op(op_name, node_name, std::vector<ValueId>(inputs, inputs + num_inputs), a);
    g = std::move(trial);
    for (size_t k = 0; k < outs.size() && static_cast<int32_t>(k) < max_outputs; ++k) outputs_out[k] = outs[k];
    if (num_outputs_out) *num_outputs_out = static_cast<int32_t>(outs.size());
  });
}

COHORT_API cohort_status cohort_graph_mark_output(cohort_graph* graph, int32_t value) {
  return guard("cohort_graph_mark_output", [&] { graph_of(graph).mark_output(value); });
}

COHORT_API cohort_status cohort_graph_set_loss(cohort_graph* graph, int32_t value) {
  return guard("cohort_graph_set_loss", [&] { graph_of(graph).set_loss(value); });
}

COHORT_API cohort_status cohort_graph_find(const cohort_graph* graph, const char* name, int32_t* id_out) {
  return guard("cohort_graph_find", [&] {
    const Graph& g = graph_of(graph);
    std::string n = checked_name(name, "name");
    check_not_null(id_out, "id_out");
    ValueId id = g.find(n);
    COHORT_CHECK(id >= 0, Status::kNotFound, "the graph has no value named '", n, "'");
    *id_out = id;
  });
}

COHORT_API cohort_status cohort_graph_value_shape(const cohort_graph* graph, int32_t value, int64_t* shape_out,
                                                  int32_t max_rank, int32_t* rank_out, cohort_dtype* dtype_out) {
  return guard("cohort_graph_value_shape", [&] {
    const Value& v = graph_of(graph).value(value);
    COHORT_CHECK(max_rank >= 0 && (max_rank == 0 || shape_out), Status::kInvalidArgument,
                 "shape_out is NULL with max_rank ", max_rank);
    int32_t r = static_cast<int32_t>(v.type.shape.size());
    for (int32_t i = 0; i < r && i < max_rank; ++i) shape_out[i] = v.type.shape[static_cast<size_t>(i)];
    if (rank_out) *rank_out = r;
    if (dtype_out) *dtype_out = static_cast<cohort_dtype>(v.type.dtype);
  });
}

COHORT_API cohort_status cohort_graph_stats(const cohort_graph* graph, int32_t* num_values_out,
                                            int32_t* num_nodes_out, int32_t* num_parameters_out,
                                            int64_t* num_parameter_elements_out) {
  return guard("cohort_graph_stats", [&] {
    const Graph& g = graph_of(graph);
    std::vector<ValueId> params = g.parameters();
    int64_t elements = 0;
    for (ValueId p : params) elements += shape_numel(g.value(p).type.shape);
    if (num_values_out) *num_values_out = static_cast<int32_t>(g.values().size());
    if (num_nodes_out) *num_nodes_out = static_cast<int32_t>(g.nodes().size());
    if (num_parameters_out) *num_parameters_out = static_cast<int32_t>(params.size());
    if (num_parameter_elements_out) *num_parameter_elements_out = elements;
  });
}

COHORT_API cohort_status cohort_graph_save(const cohort_graph* graph, const char* path) {
  return guard("cohort_graph_save", [&] {
    const Graph& g = graph_of(graph);
    check_not_null(path, "path");
    save_graph(g, path);
  });
}

COHORT_API cohort_status cohort_graph_load(const char* path, cohort_graph** graph_out) {
  return guard("cohort_graph_load", [&] {
    check_not_null(path, "path");
    check_not_null(graph_out, "graph_out");
    Graph loaded = load_graph(path);
    cohort_graph* h = make_handle<cohort_graph>(kType);
    h->graph = std::move(loaded);
    *graph_out = h;
  });
}

COHORT_API cohort_status cohort_op_list(char* buf, size_t buf_size, size_t* needed_out) {
  return guard("cohort_op_list", [&] {
    std::string all;
    for (const auto& n : OpRegistry::global().names(false)) all += (all.empty() ? "" : ",") + n;
    if (needed_out) *needed_out = all.size() + 1;
    COHORT_CHECK(buf != nullptr && buf_size >= all.size() + 1, Status::kInvalidArgument, "buf holds ", buf_size,
                 " bytes but the list needs ", all.size() + 1);
    std::memcpy(buf, all.c_str(), all.size() + 1);
  });
}

}  // extern "C"
