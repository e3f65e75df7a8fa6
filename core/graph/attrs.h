// Typed operator attributes (int, float, string, int list, float list), looked up by name.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace cohort {

// Numbers equal the C ABI's cohort_attr_type.
enum class AttrType : int { kInt = 0, kFloat = 1, kString = 2, kInts = 3, kFloats = 4 };
using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

AttrType attr_type_of(const AttrValue& v);
const char* attr_type_name(AttrType t);

class Attrs {
 public:
  void set(const std::string& name, AttrValue value) { values_[name] = std::move(value); }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  const std::map<std::string, AttrValue>& all() const { return values_; }

  // Typed getters; a missing attribute or a wrong type throws kInvalidArgument naming it.
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;  // accepts an int too
  const std::string& get_string(const std::string& name) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  std::vector<double> get_floats(const std::string& name) const;

  bool operator==(const Attrs& o) const { return values_ == o.values_; }

 private:
  const AttrValue& at(const std::string& name) const;
  std::map<std::string, AttrValue> values_;
};

}  // namespace cohort
