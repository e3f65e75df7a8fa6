// cohort_op_describe*: each public operator's inputs, outputs and attributes, read from the
// operator registry. The registry is built once and never changes, so the descriptions hand out
// pointers into it (and into a table of C string arrays built beside it) that stay valid for the
// life of the library: no buffers, nothing for the caller to free.
#include <cstring>
#include <map>
#include <variant>
#include <vector>

#include "capi/src/handles.h"

using namespace cohort;
using namespace cohort::capi;

namespace {

// One operator's schema plus the C arrays of its input and output names.
struct OpEntry {
  const OpSchema* schema = nullptr;
  std::vector<const char*> inputs;
  std::vector<const char*> outputs;
};

const std::map<std::string, OpEntry>& op_table() {
  // Leaked on purpose, like the registry it points into: no destruction order to get wrong.
  static const std::map<std::string, OpEntry>* table = [] {
    auto* t = new std::map<std::string, OpEntry>();
    const OpRegistry& registry = OpRegistry::global();
    for (const std::string& name : registry.names(false)) {
      OpEntry e;
      e.schema = registry.find(name);
      for (const std::string& s : e.schema->inputs) e.inputs.push_back(s.c_str());
      for (const std::string& s : e.schema->outputs) e.outputs.push_back(s.c_str());
      t->emplace(name, std::move(e));
    }
    return t;
  }();
  return *table;
}

const OpEntry& entry_of(const char* op) {
  check_not_null(op, "op");
  auto it = op_table().find(op);
  COHORT_CHECK(it != op_table().end(), Status::kNotFound, "no public operator is named '", op,
               "' (cohort_op_list names them)");
  return it->second;
}

// Copies `value` over the caller's struct, keeping the caller's size: the fields written are
// the ones both this version and the caller's know.
template <typename T>
void write_sized(const T& value, T* out) {
  const size_t n = out->size < sizeof(T) ? out->size : sizeof(T);
  const size_t caller_size = out->size;
  std::memcpy(out, &value, n);
  out->size = caller_size;
}

cohort_op_attr_info describe_attr(const AttrSpec& spec) {
  cohort_op_attr_info a;
  std::memset(&a, 0, sizeof a);
  a.name = spec.name.c_str();
  a.type = static_cast<cohort_attr_type>(spec.type);
  a.required = spec.required ? 1 : 0;
  if (spec.required) return a;
  const AttrValue& v = spec.default_value;
  const AttrType stored = attr_type_of(v);
  COHORT_ASSERT(stored == spec.type || (spec.type == AttrType::kFloat && stored == AttrType::kInt),
                "attribute '", spec.name, "' has a default of type ", attr_type_name(stored));
  switch (spec.type) {
    case AttrType::kInt: a.default_int = std::get<int64_t>(v); break;
    case AttrType::kFloat:
      a.default_float = stored == AttrType::kInt ? static_cast<double>(std::get<int64_t>(v)) : std::get<double>(v);
      break;
    case AttrType::kString: a.default_string = std::get<std::string>(v).c_str(); break;
    case AttrType::kInts: {
      const auto& list = std::get<std::vector<int64_t>>(v);
      a.default_ints = list.empty() ? nullptr : list.data();
      a.default_count = static_cast<int32_t>(list.size());
      break;
    }
    case AttrType::kFloats: {
      const auto& list = std::get<std::vector<double>>(v);
      a.default_floats = list.empty() ? nullptr : list.data();
      a.default_count = static_cast<int32_t>(list.size());
      break;
    }
  }
  return a;
}

}  // namespace

extern "C" {

COHORT_API cohort_status cohort_op_describe(const char* op, cohort_op_info* info_out) {
  return guard("cohort_op_describe", [&] {
    const OpEntry& e = entry_of(op);
    check_not_null(info_out, "info_out");
    check_struct_size(info_out->size, sizeof(cohort_op_info), "info_out");
    const OpSchema& s = *e.schema;
    cohort_op_info info;
    std::memset(&info, 0, sizeof info);
    info.name = s.name.c_str();
    info.min_inputs = s.min_inputs();
    info.max_inputs = s.max_inputs();
    info.input_names = e.inputs.data();
    info.num_outputs = s.outputs_from.empty() ? static_cast<int32_t>(e.outputs.size()) : -1;
    info.output_names = e.outputs.data();
    info.outputs_attr = s.outputs_from.empty() ? nullptr : s.outputs_from.c_str();
    info.num_attrs = static_cast<int32_t>(s.attrs.size());
    write_sized(info, info_out);
  });
}

COHORT_API cohort_status cohort_op_describe_attr(const char* op, int32_t index, cohort_op_attr_info* attr_out) {
  return guard("cohort_op_describe_attr", [&] {
    const OpEntry& e = entry_of(op);
    check_not_null(attr_out, "attr_out");
    check_struct_size(attr_out->size, sizeof(cohort_op_attr_info), "attr_out");
    const auto& attrs = e.schema->attrs;
    const auto count = static_cast<int32_t>(attrs.size());
    COHORT_CHECK(index >= 0 && index < count, Status::kInvalidArgument, "index ", index, " is outside ",
                 count == 0 ? str_cat(op, "'s attributes (it has none)")
                            : str_cat("0..", count - 1, " (", op, " has ", count, " attributes)"));
    write_sized(describe_attr(attrs[static_cast<size_t>(index)]), attr_out);
  });
}

}  // extern "C"
