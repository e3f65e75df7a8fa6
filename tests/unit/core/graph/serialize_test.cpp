// Graph file tests: lossless round trips, and rejection (right status, clear message, no crash)
// of truncated, bit-flipped, empty, random, unchecksummed, forward-referencing and
// unknown-operator files.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/graph/autodiff.h"
#include "core/graph/graph_generated.h"
#include "core/graph/serialize.h"
#include "tests/support/expect_error.h"

namespace cohort {
namespace {

namespace fb = graph_file;

// An internal test-only operator carrying one attribute of each of the five types; no built-in
// operator has string or float-list attributes yet. Registered once into the process registry.
const char* attr_test_op() {
  static const char* name = [] {
    auto& registry = const_cast<OpRegistry&>(OpRegistry::global());  // created non-const; see report
    const char* n = "test.serialize_all_attr_types";
    if (!registry.find(n)) {
      OpSchema s;
      s.name = n;
      s.inputs = {"x"};
      s.internal = true;
      s.attrs = {{"i", AttrType::kInt, true, int64_t{0}},
                 {"f", AttrType::kFloat, false, 0.5},
                 {"s", AttrType::kString, false, std::string("default")},
                 {"is", AttrType::kInts, false, std::vector<int64_t>{}},
                 {"fs", AttrType::kFloats, false, std::vector<double>{}}};
      s.infer = [](const ShapeContext& c) { return std::vector<TensorType>{c.inputs[0]}; };
      s.backward = [](BackwardContext& b) { b.set_grad_input(0, b.grad_output(0)); };
      registry.add(s);
    }
    return n;
  }();
  return name;
}

Attrs attrs_of(std::initializer_list<std::pair<const char*, AttrValue>> list) {
  Attrs a;
  for (const auto& [k, v] : list) a.set(k, v);
  return a;
}

// A graph using every op of the element-wise family that exists today, attributes of all five
// types, parameters with several initializers, an unused i32 input, outputs and a loss.
Graph sample_graph() {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {2, 3});
  ValueId labels = g.add_input("labels", DType::kI32, {2});
  (void)labels;
  ValueId w = g.add_parameter("w", DType::kF32, {2, 3}, Initializer{InitKind::kNormal, 0.0, 0.02, 42});
  ValueId b = g.add_parameter("b", DType::kF32, {3}, Initializer{InitKind::kUniform, -0.1, 0.1, 7});
  ValueId h = g.add_op("mul", "h", {x, w}, Attrs()).at(0);
  ValueId a = g.add_op("add", "a", {h, b}, Attrs()).at(0);
  ValueId r = g.add_op("relu", "r", {a}, Attrs()).at(0);
  ValueId e = g.add_parameter("e", DType::kBF16, {2, 3}, Initializer{InitKind::kKaimingUniform, 1.0, 0.0, 3});
  (void)e;
  ValueId s1 = g.add_op("scale", "s1", {r}, attrs_of({{"factor", int64_t{2}}})).at(0);  // an int attr
  ValueId gl = g.add_op("gelu", "gl", {s1}, Attrs()).at(0);
  ValueId t = g.add_op("tanh", "t", {gl}, Attrs()).at(0);
  ValueId s2 = g.add_op("scale", "", {t}, attrs_of({{"factor", 0.25}})).at(0);  // auto name
  ValueId all = g.add_op(attr_test_op(), "all_attrs", {s2},
                         attrs_of({{"i", int64_t{-5}},
                                   {"f", 1.5e-300},
                                   {"s", std::string("hello \"graph\"")},
                                   {"is", std::vector<int64_t>{1, -2, int64_t{1} << 40}},
                                   {"fs", std::vector<double>{0.1, -2.5, 1e300}}})).at(0);
  ValueId bc = g.add_op("broadcast_to", "bc", {all}, attrs_of({{"shape", std::vector<int64_t>{4, 2, 3}}})).at(0);
  ValueId total = g.add_op("sum", "total", {bc}, Attrs()).at(0);
  ValueId loss = g.add_op("mean", "loss", {bc}, Attrs()).at(0);
  g.mark_output(t);
  g.mark_output(total);
  g.set_loss(loss);
  return g;
}

void expect_same_graph(const Graph& want, const Graph& got) {
  ASSERT_EQ(got.values().size(), want.values().size());
  for (size_t i = 0; i < want.values().size(); ++i) {
    const Value& a = want.values()[i];
    const Value& b = got.values()[i];
    SCOPED_TRACE(a.name);
    EXPECT_EQ(b.id, a.id);
    EXPECT_EQ(b.name, a.name);
    EXPECT_TRUE(b.type == a.type);
    EXPECT_EQ(b.kind, a.kind);
    EXPECT_EQ(b.producer, a.producer);
    EXPECT_EQ(b.output_index, a.output_index);
    EXPECT_EQ(b.init.kind, a.init.kind);
    EXPECT_EQ(b.init.a, a.init.a);
    EXPECT_EQ(b.init.b, a.init.b);
    EXPECT_EQ(b.init.seed, a.init.seed);
  }
  ASSERT_EQ(got.nodes().size(), want.nodes().size());
  for (size_t k = 0; k < want.nodes().size(); ++k) {
    const Node& a = want.nodes()[k];
    const Node& b = got.nodes()[k];
    SCOPED_TRACE(a.name);
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.op, a.op);
    EXPECT_TRUE(b.attrs == a.attrs);
    EXPECT_EQ(b.inputs, a.inputs);
    EXPECT_EQ(b.outputs, a.outputs);
    EXPECT_FALSE(b.backward);
  }
  EXPECT_EQ(got.outputs(), want.outputs());
  EXPECT_EQ(got.loss(), want.loss());
}

// A fresh directory for files of one test; removed (with its files) at the end.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/cohort_serialize_test_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() {
    for (const std::string& f : files()) std::remove((path_ + "/" + f).c_str());
    ::rmdir(path_.c_str());
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::vector<std::string> files() const {
    std::vector<std::string> r;
    if (DIR* d = opendir(path_.c_str())) {
      while (dirent* e = readdir(d))
        if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") r.push_back(e->d_name);
      closedir(d);
    }
    return r;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

using ::cohort::test::expect_error;

TEST(GraphFile, RoundTripPreservesEverything) {
  Graph g = sample_graph();
  std::vector<uint8_t> bytes = serialize_graph(g);
  Graph back = deserialize_graph(bytes.data(), bytes.size(), "test");
  expect_same_graph(g, back);
  EXPECT_EQ(serialize_graph(back), bytes);  // deterministic
  const Node& n = back.node(back.value(back.find("all_attrs")).producer);
  EXPECT_EQ(n.attrs.get_string("s"), "hello \"graph\"");
  EXPECT_EQ(n.attrs.get_ints("is").back(), int64_t{1} << 40);
  EXPECT_EQ(n.attrs.get_floats("fs").back(), 1e300);
  EXPECT_EQ(n.attrs.get_int("i"), -5);
  EXPECT_EQ(std::get<int64_t>(back.node(back.value(back.find("s1")).producer).attrs.all().at("factor")), 2);
}

TEST(GraphFile, SaveAndLoadThroughAFile) {
  TempDir dir;
  Graph g = sample_graph();
  const std::string path = dir.file("model.cgraph");
  save_graph(g, path);
  expect_same_graph(g, load_graph(path));
  EXPECT_EQ(dir.files(), std::vector<std::string>{"model.cgraph"});  // no temporary left behind
  // Overwriting replaces the whole file.
  Graph small;
  small.add_input("only", DType::kF32, {1});
  save_graph(small, path);
  expect_same_graph(small, load_graph(path));
  EXPECT_EQ(dir.files().size(), 1u);
}

TEST(GraphFile, BackwardNodesAreNotSaved) {
  Graph forward = sample_graph();
  Graph trained = sample_graph();
  std::vector<ValueId> params = trained.parameters();
  std::vector<ValueId> grads = build_backward(trained, trained.loss(), params);
  ASSERT_GT(trained.nodes().size(), forward.nodes().size());
  trained.mark_output(grads[0]);  // a gradient output is dropped with the backward pass
  std::vector<uint8_t> bytes = serialize_graph(trained);
  expect_same_graph(forward, deserialize_graph(bytes.data(), bytes.size(), "test"));
}

TEST(GraphFile, ForwardNodeReadingAGradientCannotBeSaved) {
  Graph g;
  ValueId w = g.add_parameter("w", DType::kF32, {3}, Initializer{});
  ValueId loss = g.add_op("sum", "loss", {w}, Attrs()).at(0);
  ValueId gw = build_backward(g, loss, {w}).at(0);
  g.add_op("relu", "uses_grad", {gw}, Attrs());
  expect_error([&] { serialize_graph(g); }, Status::kInvalidArgument, {"uses_grad", "backward pass"});
}

TEST(GraphFile, MissingFileAndUnwritableDirectory) {
  TempDir dir;
  const std::string missing = dir.file("nope.cgraph");
  expect_error([&] { load_graph(missing); }, Status::kIo, {missing, "No such file or directory"});
  const std::string bad = dir.file("no_such_dir/model.cgraph");
  expect_error([&] { save_graph(sample_graph(), bad); }, Status::kIo, {bad, "No such file or directory"});
  expect_error([&] { load_graph(dir.path()); }, Status::kIo, {dir.path(), "not a regular file"});
}

TEST(GraphFile, EmptyFile) {
  TempDir dir;
  const std::string path = dir.file("empty.cgraph");
  write_bytes(path, {});
  expect_error([&] { load_graph(path); }, Status::kCorrupt,
               {"graph file '" + path + "': not a cohort graph file (empty)"});
  expect_error([&] { deserialize_graph(nullptr, 0, "buffer"); }, Status::kCorrupt, {"buffer: not a cohort graph file"});
}

TEST(GraphFile, EveryTruncationIsRejected) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {2, 3});
  ValueId w = g.add_parameter("w", DType::kF32, {2, 3}, Initializer{InitKind::kOnes, 0, 0, 1});
  ValueId s = g.add_op("scale", "s", {g.add_op("mul", "m", {x, w}, Attrs()).at(0)}, attrs_of({{"factor", 0.5}})).at(0);
  g.set_loss(g.add_op("sum", "loss", {s}, Attrs()).at(0));
  std::vector<uint8_t> bytes = serialize_graph(g);
  for (size_t len = 0; len < bytes.size(); ++len) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len));
    SCOPED_TRACE(len);
    expect_error([&] { deserialize_graph(cut.data(), cut.size(), "cut"); }, Status::kCorrupt,
                 {len + kGraphChecksumBytes == bytes.size() ? "cut: not a verifiable cohort graph file"
                                                             : "cut: not a cohort graph file"});
  }
}

// Flips bits at every position of bytes; each result is a clean error or a graph that
// serializes again. With reseal, the checksum is made to match the flipped bytes first, so that
// the checks behind it (verifier, ranges, shape inference) meet the damage. Returns {rejected,
// loaded}.
std::pair<int, int> flip_everywhere(const std::vector<uint8_t>& bytes, bool reseal) {
  int rejected = 0, loaded = 0;
  const size_t body = bytes.size() - kGraphChecksumBytes;
  for (size_t pos = 0; pos < (reseal ? body : bytes.size()); ++pos) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x10}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> bad = bytes;
      bad[pos] ^= mask;
      if (reseal) {
        bad.resize(body);
        append_graph_checksum(bad);
      }
      try {
        Graph back = deserialize_graph(bad.data(), bad.size(), "flipped");
        (void)serialize_graph(back);
        ++loaded;
      } catch (const Error& e) {
        ++rejected;
        Status s = e.status();
        EXPECT_TRUE(s == Status::kCorrupt || s == Status::kNotFound || s == Status::kShapeMismatch ||
                    s == Status::kUnsupported)
            << "byte " << pos << " mask " << int(mask) << ": " << e.what();
        EXPECT_EQ(std::string(e.what()).rfind("flipped: ", 0), 0u) << e.what();
      }
    }
  }
  return {rejected, loaded};
}

Graph relu_graph() {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {2, 3});
  ValueId r = g.add_op("relu", "r", {x}, Attrs()).at(0);
  g.set_loss(g.add_op("mean", "loss", {g.add_op("scale", "s", {r}, attrs_of({{"factor", 2.0}})).at(0)}, Attrs()).at(0));
  return g;
}

// Issue #25, item 7: without a checksum, 49 of 1104 single-byte changes of a small graph file
// loaded as a different model (a renamed parameter, another ignore_index). Every one is refused now.
TEST(GraphFile, EveryChangedByteIsRefusedAsCorrupt) {
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {4, 6});
  ValueId y = g.add_input("y", DType::kI32, {4});
  ValueId w = g.add_parameter("fc.weight", DType::kF32, {6, 5}, Initializer{InitKind::kNormal, 0, 0.02, 0});
  ValueId logits = g.add_op("matmul", "fc", {x, w}, Attrs()).at(0);
  g.set_loss(g.add_op("cross_entropy", "loss", {logits, y}, attrs_of({{"ignore_index", int64_t{-100}}})).at(0));
  for (const std::vector<uint8_t>& bytes : {serialize_graph(g), serialize_graph(relu_graph())}) {
    for (size_t pos = 0; pos < bytes.size(); ++pos)
      for (int mask = 1; mask < 256; ++mask) {  // every other value of the byte
        std::vector<uint8_t> bad = bytes;
        bad[pos] ^= static_cast<uint8_t>(mask);
        SCOPED_TRACE(::testing::Message() << "byte " << pos << " xor " << mask);
        expect_error([&] { deserialize_graph(bad.data(), bad.size(), "flipped"); }, Status::kCorrupt, {"flipped: "});
      }
  }
}

TEST(GraphFile, FlippedBytesNeverCrash) {
  for (const std::vector<uint8_t>& bytes : {serialize_graph(relu_graph()), serialize_graph(sample_graph())}) {
    auto [rejected, loaded] = flip_everywhere(bytes, false);
    EXPECT_EQ(rejected, 4 * static_cast<int>(bytes.size()));  // the checksum catches every one
    EXPECT_EQ(loaded, 0);
    // Damage that comes with a matching checksum (made on purpose) meets the structural checks.
    std::tie(rejected, loaded) = flip_everywhere(bytes, true);
    EXPECT_GT(rejected, 0);
    EXPECT_GT(loaded, 0);  // e.g. flips inside a float attribute, a seed or padding
  }
}

TEST(GraphFile, FileWithoutChecksumIsRefusedWithTheReason) {
  // The bytes a build before the checksum wrote: the FlatBuffer alone.
  const std::vector<uint8_t> old = encode_graph(sample_graph());
  TempDir dir;
  const std::string path = dir.file("old.cgraph");
  write_bytes(path, old);
  expect_error([&] { load_graph(path); }, Status::kCorrupt,
               {"graph file '" + path + "': not a verifiable cohort graph file", "without the checksum",
                "save the graph again"});
  std::vector<uint8_t> sealed = old;
  append_graph_checksum(sealed);
  EXPECT_EQ(sealed, serialize_graph(sample_graph()));
  write_bytes(path, sealed);
  expect_same_graph(sample_graph(), load_graph(path));
}

TEST(GraphFile, OversizedLengthIsRejectedBeforeReading) {
  // Only the first bytes exist: the length check must come before any access.
  std::vector<uint8_t> small(16, 0);
  expect_error([&] { deserialize_graph(small.data(), size_t{1} << 31, "huge"); }, Status::kCorrupt,
               {"huge: not a cohort graph file (2147483648 bytes; the limit is 2 GiB)"});
}

TEST(GraphFile, RandomGarbageIsRejected) {
  const uint32_t seed = 20261123;
  std::mt19937 rng(seed);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> junk(rng() % 512);
    for (uint8_t& b : junk) b = static_cast<uint8_t>(rng());
    if (trial % 3 != 0 && junk.size() >= 12) std::memcpy(junk.data() + 8, "CHGF", 4);  // past the identifier
    if (trial % 3 == 2 && junk.size() >= 16) {  // and past the length and checksum, on to the verifier
      const uint32_t n = static_cast<uint32_t>(junk.size() - 8);
      std::memcpy(junk.data(), &n, 4);
      junk.resize(junk.size() - kGraphChecksumBytes);
      append_graph_checksum(junk);
    }
    expect_error([&] { deserialize_graph(junk.data(), junk.size(), "junk"); }, Status::kCorrupt,
                 {"junk: not a "});
  }
  std::vector<uint8_t> other(64, 0);
  std::memcpy(other.data() + 8, "XXXX", 4);
  expect_error([&] { deserialize_graph(other.data(), other.size(), "junk"); }, Status::kCorrupt,
               {"wrong file identifier"});
}

// Builds graph files by hand, including ones the writer never produces.
struct FileBuilder {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<fb::Value>> values;
  std::vector<flatbuffers::Offset<fb::Node>> nodes;
  void value(const char* name, std::vector<int64_t> shape, ValueKind kind, int dtype = 0) {
    flatbuffers::Offset<fb::Initializer> init;
    if (kind == ValueKind::kParameter) init = fb::CreateInitializer(b, 0, 0, 0, 0);
    values.push_back(fb::CreateValueDirect(b, name, dtype, &shape, static_cast<int>(kind), init));
  }
  void node(const char* op, const char* name, std::vector<int32_t> inputs, int outputs = 1) {
    nodes.push_back(fb::CreateNodeDirect(b, op, name, &inputs, outputs));
  }
  std::vector<uint8_t> finish(uint32_t version = kGraphFormatVersion, int32_t loss = -1) {
    std::vector<int32_t> outputs;
    fb::FinishSizePrefixedGraphFileBuffer(b, fb::CreateGraphFileDirect(b, version, &values, &nodes, &outputs, loss));
    std::vector<uint8_t> bytes(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
    append_graph_checksum(bytes);
    return bytes;
  }
};

TEST(GraphFile, ForwardReferenceIsRejected) {
  FileBuilder f;
  f.value("x", {3}, ValueKind::kInput);
  f.value("r1", {3}, ValueKind::kActivation);
  f.value("r2", {3}, ValueKind::kActivation);
  f.node("relu", "r1", {2});  // reads r2, defined after it: a cycle r1 -> r2 -> r1
  f.node("relu", "r2", {1});
  std::vector<uint8_t> bytes = f.finish();
  TempDir dir;
  const std::string path = dir.file("cycle.cgraph");
  write_bytes(path, bytes);
  expect_error([&] { load_graph(path); }, Status::kCorrupt,
               {"graph file '" + path + "': ", "node 0 ('r1', relu): input 0", "value 2 ('r2')",
                "defined after the node"});
  FileBuilder d;
  d.value("x", {3}, ValueKind::kInput);
  d.value("r", {3}, ValueKind::kActivation);
  d.node("relu", "r", {99});
  std::vector<uint8_t> dangling = d.finish();
  expect_error([&] { deserialize_graph(dangling.data(), dangling.size(), "g"); }, Status::kCorrupt,
               {"node 0 ('r', relu): input 0 refers to value 99", "dangling"});
}

TEST(GraphFile, UnknownOperatorIsNotFound) {
  FileBuilder f;
  f.value("x", {3}, ValueKind::kInput);
  f.value("y", {3}, ValueKind::kActivation);
  f.node("no_such_op", "y", {0});
  std::vector<uint8_t> bytes = f.finish();
  expect_error([&] { deserialize_graph(bytes.data(), bytes.size(), "graph file 'u'"); }, Status::kNotFound,
               {"graph file 'u': ", "unknown operator 'no_such_op'"});
}

TEST(GraphFile, ShapeInferenceRunsAgain) {
  FileBuilder f;
  f.value("a", {2, 3}, ValueKind::kInput);
  f.value("b", {4}, ValueKind::kInput);
  f.value("c", {2, 3}, ValueKind::kActivation);
  f.node("add", "c", {0, 1});
  std::vector<uint8_t> bytes = f.finish();
  expect_error([&] { deserialize_graph(bytes.data(), bytes.size(), "graph file 's'"); }, Status::kShapeMismatch,
               {"graph file 's': add 'c'"});
  FileBuilder w;  // a claimed output type that shape inference disagrees with
  w.value("a", {2, 3}, ValueKind::kInput);
  w.value("r", {3, 3}, ValueKind::kActivation);
  w.node("relu", "r", {0});
  bytes = w.finish();
  expect_error([&] { deserialize_graph(bytes.data(), bytes.size(), "g"); }, Status::kShapeMismatch,
               {"output 0 is [2, 3] f32 by shape inference, the file says [3, 3] f32"});
}

TEST(GraphFile, SemanticChecks) {
  auto reject = [](FileBuilder& f, Status s, std::initializer_list<std::string> parts, uint32_t version = kGraphFormatVersion,
                   int32_t loss = -1) {
    std::vector<uint8_t> bytes = f.finish(version, loss);
    expect_error([&] { deserialize_graph(bytes.data(), bytes.size(), "g"); }, s, parts);
  };
  { FileBuilder f; f.value("x", {3}, ValueKind::kInput, 17); reject(f, Status::kCorrupt, {"value 0 ('x') has unknown dtype 17"}); }
  { FileBuilder f; f.value("x", {3, 0}, ValueKind::kInput); reject(f, Status::kCorrupt, {"extent 0 in dimension 1"}); }
  { FileBuilder f; f.value("x", {1, 1, 1, 1, 1, 1, 1, 1, 1}, ValueKind::kInput); reject(f, Status::kCorrupt, {"rank 9"}); }
  { FileBuilder f; f.value("x", {int64_t{1} << 40, int64_t{1} << 40}, ValueKind::kInput);  // no overflow
    reject(f, Status::kCorrupt, {"more than 2^50 elements"}); }
  { FileBuilder f; f.value("x", {3}, static_cast<ValueKind>(7)); reject(f, Status::kCorrupt, {"unknown kind 7"}); }
  { FileBuilder f; f.value("x", {3}, ValueKind::kInput); f.value("x", {3}, ValueKind::kInput);
    reject(f, Status::kCorrupt, {"'x' is already used"}); }
  { FileBuilder f; f.value("x", {3}, ValueKind::kActivation); reject(f, Status::kCorrupt, {"no node is left"}); }
  { FileBuilder f; f.value("x", {3}, ValueKind::kInput); f.node("relu", "r", {0});
    reject(f, Status::kCorrupt, {"node 0 ('r', relu) has no output values"}); }
  { FileBuilder f; f.value("x", {3}, ValueKind::kInput); reject(f, Status::kUnsupported, {"format version 9"}, 9); }
  { FileBuilder f; f.value("x", {3}, ValueKind::kInput); reject(f, Status::kCorrupt, {"format version 0"}, 0); }
  { FileBuilder f; f.value("x", {3}, ValueKind::kInput); reject(f, Status::kShapeMismatch, {"float scalar"}, kGraphFormatVersion, 0); }
  { FileBuilder f; f.value("x", {3}, ValueKind::kInput); reject(f, Status::kCorrupt, {"loss refers to value 5"}, kGraphFormatVersion, 5); }
  { FileBuilder f; f.value("x", {3}, ValueKind::kInput); f.value("r", {3}, ValueKind::kActivation); f.node("relu", "r", {0}, 2);
    reject(f, Status::kCorrupt, {"output 1 is missing"}); }
  { FileBuilder f; f.value("x", {3}, ValueKind::kInput); f.value("r", {3}, ValueKind::kActivation); f.node("relu", "r", {0, 0});
    reject(f, Status::kCorrupt, {"takes 1 inputs, got 2"}); }
  { FileBuilder f;
    std::vector<int64_t> shape = {3};
    auto init = fb::CreateInitializer(f.b, 99, 0, 0, 0);
    f.values.push_back(fb::CreateValueDirect(f.b, "w", 0, &shape, 1, init));
    reject(f, Status::kCorrupt, {"unknown initializer kind 99"}); }
  { FileBuilder f; f.value("w", {3}, ValueKind::kParameter, 2); reject(f, Status::kShapeMismatch, {"not a float type"}); }
}

}  // namespace
}  // namespace cohort
