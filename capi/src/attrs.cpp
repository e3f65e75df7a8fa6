// cohort_attrs_*: a typed attribute set built by the caller and copied into each node.
#include "capi/src/handles.h"

using namespace cohort;
using namespace cohort::capi;

namespace {
constexpr const char* kType = "attrs";

template <typename F>
cohort_status set_attr(const char* fn, cohort_attrs* attrs, const char* name, F&& make) {
  return guard(fn, [&] {
    checked(attrs, kType, "attrs");
    std::string n = checked_name(name, "name");
    attrs->attrs.set(n, make());
  });
}
}  // namespace

extern "C" {

COHORT_API cohort_status cohort_attrs_create(cohort_attrs** attrs_out) {
  return guard("cohort_attrs_create", [&] {
    check_not_null(attrs_out, "attrs_out");
    *attrs_out = make_handle<cohort_attrs>(kType);
  });
}

COHORT_API cohort_status cohort_attrs_destroy(cohort_attrs* attrs) {
  return guard("cohort_attrs_destroy", [&] { destroy_handle(attrs, kType, "attrs"); });
}

COHORT_API cohort_status cohort_attrs_set_int(cohort_attrs* attrs, const char* name, int64_t value) {
  return set_attr("cohort_attrs_set_int", attrs, name, [&] { return AttrValue(value); });
}

COHORT_API cohort_status cohort_attrs_set_float(cohort_attrs* attrs, const char* name, double value) {
  return set_attr("cohort_attrs_set_float", attrs, name, [&] { return AttrValue(value); });
}

COHORT_API cohort_status cohort_attrs_set_string(cohort_attrs* attrs, const char* name, const char* value) {
  return set_attr("cohort_attrs_set_string", attrs, name, [&] {
    COHORT_CHECK(value != nullptr, Status::kInvalidArgument, "value is NULL");
    return AttrValue(std::string(value));
  });
}

COHORT_API cohort_status cohort_attrs_set_ints(cohort_attrs* attrs, const char* name, const int64_t* values,
                                               int32_t count) {
  return set_attr("cohort_attrs_set_ints", attrs, name, [&] {
    COHORT_CHECK(count >= 0 && count <= 1024, Status::kInvalidArgument, "count must be 0..1024, got ", count);
    COHORT_CHECK(count == 0 || values != nullptr, Status::kInvalidArgument, "values is NULL with count ", count);
    return AttrValue(std::vector<int64_t>(values, values + count));
  });
}

COHORT_API cohort_status cohort_attrs_set_floats(cohort_attrs* attrs, const char* name, const double* values,
                                                 int32_t count) {
  return set_attr("cohort_attrs_set_floats", attrs, name, [&] {
    COHORT_CHECK(count >= 0 && count <= 1024, Status::kInvalidArgument, "count must be 0..1024, got ", count);
    COHORT_CHECK(count == 0 || values != nullptr, Status::kInvalidArgument, "values is NULL with count ", count);
    return AttrValue(std::vector<double>(values, values + count));
  });
}

}  // extern "C"
