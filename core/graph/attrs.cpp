// Attribute access with precise errors.
#include "core/graph/attrs.h"

#include "core/base/error.h"

namespace cohort {

AttrType attr_type_of(const AttrValue& v) { return static_cast<AttrType>(v.index()); }

const char* attr_type_name(AttrType t) {
  switch (t) {
    case AttrType::kInt: return "int";
    case AttrType::kFloat: return "float";
    case AttrType::kString: return "string";
    case AttrType::kInts: return "int list";
    case AttrType::kFloats: return "float list";
  }
  return "?";
}

const AttrValue& Attrs::at(const std::string& name) const {
  auto it = values_.find(name);
  COHORT_CHECK(it != values_.end(), Status::kInvalidArgument, "missing attribute '", name, "'");
  return it->second;
}

namespace {
[[noreturn]] void wrong_type(const std::string& name, const AttrValue& v, AttrType want) {
  throw_error(Status::kInvalidArgument, str_cat("attribute '", name, "' is ",
                                                attr_type_name(attr_type_of(v)), ", expected ",
                                                attr_type_name(want)));
}
}  // namespace

int64_t Attrs::get_int(const std::string& name) const {
  const AttrValue& v = at(name);
  if (auto p = std::get_if<int64_t>(&v)) return *p;
  wrong_type(name, v, AttrType::kInt);
}

double Attrs::get_float(const std::string& name) const {
  const AttrValue& v = at(name);
  if (auto p = std::get_if<double>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return static_cast<double>(*p);
  wrong_type(name, v, AttrType::kFloat);
}

const std::string& Attrs::get_string(const std::string& name) const {
  const AttrValue& v = at(name);
  if (auto p = std::get_if<std::string>(&v)) return *p;
  wrong_type(name, v, AttrType::kString);
}

const std::vector<int64_t>& Attrs::get_ints(const std::string& name) const {
  const AttrValue& v = at(name);
  if (auto p = std::get_if<std::vector<int64_t>>(&v)) return *p;
  wrong_type(name, v, AttrType::kInts);
}

std::vector<double> Attrs::get_floats(const std::string& name) const {
  const AttrValue& v = at(name);
  if (auto p = std::get_if<std::vector<double>>(&v)) return *p;
  if (auto p = std::get_if<std::vector<int64_t>>(&v)) return std::vector<double>(p->begin(), p->end());
  wrong_type(name, v, AttrType::kFloats);
}

}  // namespace cohort
