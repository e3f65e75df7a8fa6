// cohort_op_describe / cohort_op_describe_attr: error paths, and a completeness test that holds
// every public operator's description against what cohort_graph_add_op accepts — a node built
// with exactly the required attributes the description names, the output count it gives, each
// optional attribute set to its described default, each attribute of a wrong type refused.
#include <gtest/gtest.h>

#include <cohort/cohort.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "tests/support/capi_expect.h"

namespace {

using ::cohort::test::last_error;

cohort_op_info describe(const char* op) {
  cohort_op_info info{};
  info.size = sizeof info;
  EXPECT_EQ(cohort_op_describe(op, &info), COHORT_OK) << last_error();
  return info;
}

cohort_op_attr_info describe_attr(const char* op, int32_t index) {
  cohort_op_attr_info a{};
  a.size = sizeof a;
  EXPECT_EQ(cohort_op_describe_attr(op, index, &a), COHORT_OK) << last_error();
  return a;
}

std::vector<std::string> public_ops() {
  size_t need = 0;
  cohort_op_list(nullptr, 0, &need);
  std::string buf(need, '\0');
  EXPECT_EQ(cohort_op_list(buf.data(), buf.size(), nullptr), COHORT_OK);
  std::vector<std::string> names;
  std::stringstream in(buf.c_str());
  for (std::string n; std::getline(in, n, ',');) names.push_back(n);
  return names;
}

TEST(CapiOpDescribe, ErrorPaths) {
  cohort_op_info info{};
  info.size = sizeof info;
  info.name = "untouched";
  EXPECT_STATUS(cohort_op_describe(nullptr, &info), COHORT_ERR_INVALID_ARGUMENT, "cohort_op_describe: op is NULL");
  EXPECT_STATUS(cohort_op_describe("matmul", nullptr), COHORT_ERR_INVALID_ARGUMENT, "info_out is NULL");
  EXPECT_STATUS(cohort_op_describe("no_such_op", &info), COHORT_ERR_NOT_FOUND,
                "cohort_op_describe: no public operator is named 'no_such_op'");
  // Operators that only backward passes add are not described.
  EXPECT_STATUS(cohort_op_describe("sum_to", &info), COHORT_ERR_NOT_FOUND, "'sum_to'");
  info.size = sizeof info - 1;  // a struct smaller than this version's
  EXPECT_STATUS(cohort_op_describe("matmul", &info), COHORT_ERR_INVALID_ARGUMENT, "info_out->size is");
  info.size = 0;
  EXPECT_STATUS(cohort_op_describe("matmul", &info), COHORT_ERR_INVALID_ARGUMENT, "info_out->size is 0");
  EXPECT_STREQ(info.name, "untouched");  // nothing written on failure

  cohort_op_attr_info a{};
  a.size = sizeof a;
  a.name = "untouched";
  EXPECT_STATUS(cohort_op_describe_attr(nullptr, 0, &a), COHORT_ERR_INVALID_ARGUMENT, "op is NULL");
  EXPECT_STATUS(cohort_op_describe_attr("matmul", 0, nullptr), COHORT_ERR_INVALID_ARGUMENT, "attr_out is NULL");
  EXPECT_STATUS(cohort_op_describe_attr("nope", 0, &a), COHORT_ERR_NOT_FOUND, "no public operator is named 'nope'");
  EXPECT_STATUS(cohort_op_describe_attr("matmul", 2, &a), COHORT_ERR_INVALID_ARGUMENT,
                "cohort_op_describe_attr: index 2 is outside 0..1 (matmul has 2 attributes)");
  EXPECT_STATUS(cohort_op_describe_attr("matmul", -1, &a), COHORT_ERR_INVALID_ARGUMENT, "index -1");
  EXPECT_STATUS(cohort_op_describe_attr("relu", 0, &a), COHORT_ERR_INVALID_ARGUMENT, "relu's attributes (it has none)");
  a.size = sizeof a - 1;
  EXPECT_STATUS(cohort_op_describe_attr("matmul", 0, &a), COHORT_ERR_INVALID_ARGUMENT, "attr_out->size is");
  EXPECT_STREQ(a.name, "untouched");
  info.size = sizeof info;
  EXPECT_EQ(cohort_op_describe("matmul", &info), COHORT_OK);  // success clears the message
  EXPECT_STREQ(cohort_last_error(), "");
}

TEST(CapiOpDescribe, DescribesInputsOutputsAndAttributes) {
  cohort_op_info linear = describe("linear");
  EXPECT_EQ(linear.size, sizeof linear);  // the caller's size is kept
  EXPECT_STREQ(linear.name, "linear");
  EXPECT_EQ(linear.min_inputs, 2);
  EXPECT_EQ(linear.max_inputs, 3);
  EXPECT_STREQ(linear.input_names[0], "x");
  EXPECT_STREQ(linear.input_names[2], "bias");
  EXPECT_EQ(linear.num_outputs, 1);
  EXPECT_EQ(linear.outputs_attr, nullptr);

  cohort_op_info ce = describe("cross_entropy");
  ASSERT_EQ(ce.num_outputs, 2);
  EXPECT_STREQ(ce.output_names[0], "loss");
  EXPECT_STREQ(ce.output_names[1], "lse");
  ASSERT_EQ(ce.num_attrs, 2);
  cohort_op_attr_info reduction = describe_attr("cross_entropy", 1);
  EXPECT_STREQ(reduction.name, "reduction");
  EXPECT_EQ(reduction.type, COHORT_ATTR_STRING);
  EXPECT_EQ(reduction.required, 0);
  EXPECT_STREQ(reduction.default_string, "mean");

  cohort_op_info split = describe("split");
  EXPECT_EQ(split.num_outputs, -1);
  EXPECT_STREQ(split.outputs_attr, "sizes");
  EXPECT_STREQ(split.output_names[0], "part");
  cohort_op_info concat = describe("concat");
  EXPECT_EQ(concat.min_inputs, 2);
  EXPECT_GT(concat.max_inputs, 2);

  cohort_op_attr_info heads = describe_attr("attention", 0);
  EXPECT_STREQ(heads.name, "heads");
  EXPECT_EQ(heads.type, COHORT_ATTR_INT);
  EXPECT_NE(heads.required, 0);
  EXPECT_EQ(heads.default_int, 0);  // required: no default
  cohort_op_info conv = describe("conv2d");
  bool saw_stride = false;
  for (int32_t i = 0; i < conv.num_attrs; ++i) {
    cohort_op_attr_info a = describe_attr("conv2d", i);
    if (std::string(a.name) != "stride") continue;
    saw_stride = true;
    EXPECT_EQ(a.type, COHORT_ATTR_INTS);
    ASSERT_EQ(a.default_count, 2);
    EXPECT_EQ(a.default_ints[0], 1);
    EXPECT_EQ(a.default_ints[1], 1);
  }
  EXPECT_TRUE(saw_stride);
}

// ---- completeness -------------------------------------------------------------------------------

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

struct Example {
  std::vector<std::pair<cohort_dtype, std::vector<int64_t>>> inputs;  // max_inputs of them
  std::map<std::string, AttrValue> required;  // a value for each required attribute, nothing else
};

// Inputs every public operator accepts with its defaults; a new operator without an entry here
// fails PublicOperatorsAreDescribedAsAddOpAcceptsThem.
std::map<std::string, Example> examples() {
  using V = std::vector<int64_t>;
  const auto f = [](V s) { return std::make_pair(COHORT_F32, std::move(s)); };
  const auto i = [](V s) { return std::make_pair(COHORT_I32, std::move(s)); };
  std::map<std::string, Example> e;
  for (const char* op : {"add", "sub", "mul"}) e[op] = {{f({2, 3}), f({2, 3})}, {}};
  for (const char* op : {"relu", "gelu", "tanh", "dropout", "softmax", "log_softmax", "sum", "mean"})
    e[op] = {{f({2, 3})}, {}};
  for (const char* op : {"linear", "gelu_linear"}) e[op] = {{f({2, 3}), f({4, 3}), f({4})}, {}};
  e["matmul"] = {{f({2, 3}), f({3, 4})}, {}};
  e["attention"] = {{f({1, 4, 6})}, {{"heads", int64_t{1}}}};
  e["conv2d"] = {{f({1, 1, 4, 4}), f({2, 1, 3, 3}), f({2})}, {}};
  e["max_pool2d"] = e["avg_pool2d"] = {{f({1, 1, 4, 4})}, {}};
  e["cross_entropy"] = {{f({4, 3}), i({4})}, {}};
  e["embedding"] = {{f({5, 3}), i({2})}, {}};
  e["layernorm"] = {{f({2, 3}), f({3}), f({3})}, {}};
  e["rmsnorm"] = {{f({2, 3}), f({3})}, {}};
  e["groupnorm"] = {{f({1, 4, 2, 2}), f({4}), f({4})}, {{"groups", int64_t{2}}}};
  e["reshape"] = {{f({2, 3})}, {{"shape", V{3, 2}}}};
  e["transpose"] = {{f({2, 3})}, {{"perm", V{1, 0}}}};
  e["scale"] = {{f({2, 3})}, {{"factor", 2.0}}};
  e["split"] = {{f({4, 3})}, {{"sizes", V{1, 3}}}};
  Example concat;
  for (int k = 0; k < 16; ++k) concat.inputs.push_back(f({2, 3}));
  e["concat"] = concat;
  return e;
}

cohort_attr_type type_of(const AttrValue& v) { return static_cast<cohort_attr_type>(v.index()); }

void set_attr(cohort_attrs* attrs, const char* name, const AttrValue& v) {
  cohort_status st = COHORT_OK;
  if (auto p = std::get_if<int64_t>(&v)) st = cohort_attrs_set_int(attrs, name, *p);
  if (auto p = std::get_if<double>(&v)) st = cohort_attrs_set_float(attrs, name, *p);
  if (auto p = std::get_if<std::string>(&v)) st = cohort_attrs_set_string(attrs, name, p->c_str());
  if (auto p = std::get_if<std::vector<int64_t>>(&v))
    st = cohort_attrs_set_ints(attrs, name, p->data(), static_cast<int32_t>(p->size()));
  if (auto p = std::get_if<std::vector<double>>(&v))
    st = cohort_attrs_set_floats(attrs, name, p->data(), static_cast<int32_t>(p->size()));
  ASSERT_EQ(st, COHORT_OK) << last_error();
}

// The described default as a value of the described type.
AttrValue default_of(const cohort_op_attr_info& a) {
  switch (a.type) {
    case COHORT_ATTR_INT: return a.default_int;
    case COHORT_ATTR_FLOAT: return a.default_float;
    case COHORT_ATTR_STRING: return std::string(a.default_string ? a.default_string : "<NULL>");
    case COHORT_ATTR_INTS: return std::vector<int64_t>(a.default_ints, a.default_ints + a.default_count);
    case COHORT_ATTR_FLOATS: return std::vector<double>(a.default_floats, a.default_floats + a.default_count);
  }
  return int64_t{0};
}

// A value of a type the attribute does not accept.
AttrValue wrong_type_for(cohort_attr_type t) {
  return t == COHORT_ATTR_STRING ? AttrValue(int64_t{1}) : AttrValue(std::string("wrong"));
}

// One node of `op` over the example's first `num_inputs` inputs: its status, output count and
// output shapes (as text).
struct Built {
  cohort_status status = COHORT_OK;
  std::string message;
  int32_t num_outputs = 0;
  std::string shapes;
};

Built build(const std::string& op, const Example& ex, int32_t num_inputs, const cohort_attrs* attrs) {
  Built b;
  cohort_graph* g = nullptr;
  EXPECT_EQ(cohort_graph_create(&g), COHORT_OK);
  std::vector<int32_t> ids;
  for (int32_t k = 0; k < num_inputs; ++k) {
    const auto& [dtype, shape] = ex.inputs[static_cast<size_t>(k)];
    int32_t id = -1;
    std::string name = "in" + std::to_string(k);
    EXPECT_EQ(cohort_graph_add_input(g, name.c_str(), dtype, shape.data(), static_cast<int32_t>(shape.size()), &id),
              COHORT_OK)
        << last_error();
    ids.push_back(id);
  }
  int32_t outs[32];
  b.status = cohort_graph_add_op(g, op.c_str(), "node", ids.data(), num_inputs, attrs, outs, 32, &b.num_outputs);
  b.message = last_error();
  for (int32_t k = 0; b.status == COHORT_OK && k < b.num_outputs && k < 32; ++k) {
    int64_t shape[8];
    int32_t rank = 0;
    cohort_dtype dtype = COHORT_F32;
    EXPECT_EQ(cohort_graph_value_shape(g, outs[k], shape, 8, &rank, &dtype), COHORT_OK);
    b.shapes += std::to_string(dtype) + ":";
    for (int32_t d = 0; d < rank; ++d) b.shapes += std::to_string(shape[d]) + ",";
    b.shapes += ";";
  }
  cohort_graph_destroy(g);
  return b;
}

cohort_attrs* attrs_with(const std::map<std::string, AttrValue>& values) {
  cohort_attrs* a = nullptr;
  EXPECT_EQ(cohort_attrs_create(&a), COHORT_OK);
  for (const auto& [name, v] : values) set_attr(a, name.c_str(), v);
  return a;
}

TEST(CapiOpDescribe, PublicOperatorsAreDescribedAsAddOpAcceptsThem) {
  const std::map<std::string, Example> all = examples();
  std::set<std::string> listed;
  for (const std::string& op : public_ops()) {
    SCOPED_TRACE(op);
    listed.insert(op);
    auto it = all.find(op);
    ASSERT_NE(it, all.end()) << "operator '" << op << "' has no example in op_describe_test.cpp";
    const Example& ex = it->second;
    const cohort_op_info info = describe(op.c_str());
    EXPECT_EQ(op, info.name);
    ASSERT_GE(info.min_inputs, 0);
    ASSERT_LE(info.min_inputs, info.max_inputs);
    ASSERT_EQ(static_cast<size_t>(info.max_inputs), ex.inputs.size()) << "the example gives every input";
    for (int32_t k = 0; k < info.max_inputs; ++k) EXPECT_GT(std::string(info.input_names[k]).size(), 0u);
    ASSERT_TRUE(info.num_outputs >= 1 || (info.num_outputs == -1 && info.outputs_attr != nullptr));
    for (int32_t k = 0; k < (info.num_outputs == -1 ? 1 : info.num_outputs); ++k)
      EXPECT_GT(std::string(info.output_names[k]).size(), 0u);

    // The required attributes are exactly the ones the example gives, of the described types.
    std::vector<cohort_op_attr_info> attrs;
    std::map<std::string, AttrValue> required;
    for (int32_t k = 0; k < info.num_attrs; ++k) {
      attrs.push_back(describe_attr(op.c_str(), k));
      const cohort_op_attr_info& a = attrs.back();
      if (!a.required) continue;
      auto given = ex.required.find(a.name);
      ASSERT_NE(given, ex.required.end()) << "required attribute '" << a.name << "' has no example value";
      EXPECT_EQ(type_of(given->second), a.type) << a.name;
      required[a.name] = given->second;
    }
    EXPECT_EQ(required.size(), ex.required.size()) << "the example gives an attribute not described as required";

    // Built from the description's required attributes: fewest and most inputs.
    cohort_attrs* base = attrs_with(required);
    const Built built = build(op, ex, info.min_inputs, base);
    ASSERT_EQ(built.status, COHORT_OK) << built.message;
    const Built full = build(op, ex, info.max_inputs, base);
    EXPECT_EQ(full.status, COHORT_OK) << full.message;
    int32_t expected_outputs = info.num_outputs;
    if (expected_outputs == -1) expected_outputs = static_cast<int32_t>(std::get<std::vector<int64_t>>(
                                                       required.at(info.outputs_attr)).size());
    EXPECT_EQ(built.num_outputs, expected_outputs);
    if (info.min_inputs > 0) {
      const Built too_few = build(op, ex, info.min_inputs - 1, base);
      EXPECT_EQ(too_few.status, COHORT_ERR_INVALID_ARGUMENT) << too_few.message;
    }

    for (const cohort_op_attr_info& a : attrs) {
      SCOPED_TRACE(a.name);
      if (a.required) {  // left out: refused by name
        std::map<std::string, AttrValue> without = required;
        without.erase(a.name);
        cohort_attrs* w = attrs_with(without);
        const Built b = build(op, ex, info.min_inputs, w);
        EXPECT_EQ(b.status, COHORT_ERR_INVALID_ARGUMENT);
        EXPECT_NE(b.message.find(std::string("missing required attribute '") + a.name + "'"), std::string::npos)
            << b.message;
        cohort_attrs_destroy(w);
      } else {  // given as its described default: the same node as when left out
        std::map<std::string, AttrValue> with = required;
        with[a.name] = default_of(a);
        cohort_attrs* w = attrs_with(with);
        const Built b = build(op, ex, info.min_inputs, w);
        EXPECT_EQ(b.status, COHORT_OK) << b.message;
        EXPECT_EQ(b.shapes, built.shapes);
        cohort_attrs_destroy(w);
      }
      std::map<std::string, AttrValue> wrong = required;
      wrong[a.name] = wrong_type_for(a.type);
      cohort_attrs* w = attrs_with(wrong);
      const Built b = build(op, ex, info.min_inputs, w);
      EXPECT_EQ(b.status, COHORT_ERR_INVALID_ARGUMENT);
      EXPECT_NE(b.message.find(std::string("attribute '") + a.name + "' is "), std::string::npos) << b.message;
      cohort_attrs_destroy(w);
    }
    // Nothing beyond the described attributes is accepted.
    std::map<std::string, AttrValue> extra = required;
    extra["not_described"] = int64_t{1};
    cohort_attrs* x = attrs_with(extra);
    EXPECT_NE(build(op, ex, info.min_inputs, x).message.find("unknown attribute 'not_described'"), std::string::npos);
    cohort_attrs_destroy(x);
    cohort_attrs_destroy(base);
  }
  for (const auto& [op, ex] : all) EXPECT_TRUE(listed.count(op)) << "example for '" << op << "', not a public op";
}

}  // namespace
