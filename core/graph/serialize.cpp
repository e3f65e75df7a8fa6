// Graph files, writing side: encoding the forward graph into a FlatBuffer and sealing it with its
// checksum, and the file I/O of both directions (atomic write: temporary file, fsync, rename,
// fsync of the directory).
#include "core/graph/serialize.h"

#include "core/base/checksum.h"
#include "core/base/error.h"
#include "core/base/file_io.h"
#include "core/graph/graph_generated.h"

namespace cohort {

namespace fb = graph_file;

namespace {

flatbuffers::Offset<fb::Attr> encode_attr(flatbuffers::FlatBufferBuilder& b, const std::string& name,
                                          const AttrValue& v) {
  auto n = b.CreateString(name);
  fb::AttrValue type = fb::AttrValue::NONE;
  flatbuffers::Offset<void> value;
  switch (attr_type_of(v)) {
    case AttrType::kInt:
      type = fb::AttrValue::IntAttr;
      value = fb::CreateIntAttr(b, std::get<int64_t>(v)).Union();
      break;
    case AttrType::kFloat:
      type = fb::AttrValue::FloatAttr;
      value = fb::CreateFloatAttr(b, std::get<double>(v)).Union();
      break;
    case AttrType::kString:
      type = fb::AttrValue::StringAttr;
      value = fb::CreateStringAttrDirect(b, std::get<std::string>(v).c_str()).Union();
      break;
    case AttrType::kInts:
      type = fb::AttrValue::IntsAttr;
      value = fb::CreateIntsAttrDirect(b, &std::get<std::vector<int64_t>>(v)).Union();
      break;
    case AttrType::kFloats:
      type = fb::AttrValue::FloatsAttr;
      value = fb::CreateFloatsAttrDirect(b, &std::get<std::vector<double>>(v)).Union();
      break;
  }
  return fb::CreateAttr(b, n, type, value);
}

flatbuffers::Offset<fb::Value> encode_value(flatbuffers::FlatBufferBuilder& b, const Value& v) {
  flatbuffers::Offset<fb::Initializer> init;
  if (v.kind == ValueKind::kParameter)
    init = fb::CreateInitializer(b, static_cast<int>(v.init.kind), v.init.a, v.init.b, v.init.seed);
  std::vector<int64_t> shape(v.type.shape.begin(), v.type.shape.end());
  // Written only when present, so the bytes of an unsharded graph (which checkpoints hash) stay
  // what they were before shards existed.
  std::vector<flatbuffers::Offset<fb::ShardCut>> cuts;
  for (const ShardCut& c : v.shard)
    cuts.push_back(fb::CreateShardCutDirect(b, c.dim, c.groups, c.parts, c.index, c.axis.c_str()));
  return fb::CreateValueDirect(b, v.name.c_str(), static_cast<int>(v.type.dtype), &shape,
                               static_cast<int>(v.kind), init, cuts.empty() ? nullptr : &cuts);
}

// A value belongs to the forward graph when no backward node produced it.
bool is_forward(const Graph& g, ValueId v) {
  NodeId p = g.value(v).producer;
  return p < 0 || !g.node(p).backward;
}

// Maps graph value ids to file indices (-1 for values of the backward pass).
std::vector<int32_t> forward_index(const Graph& g) {
  std::vector<int32_t> index(g.values().size(), -1);
  int32_t next = 0;
  for (const Value& v : g.values())
    if (is_forward(g, v.id)) index[static_cast<size_t>(v.id)] = next++;
  return index;
}

}  // namespace

std::vector<uint8_t> encode_graph(const Graph& g) {
  flatbuffers::FlatBufferBuilder b(1024);
  const std::vector<int32_t> index = forward_index(g);
  std::vector<flatbuffers::Offset<fb::Value>> values;
  for (const Value& v : g.values())
    if (index[static_cast<size_t>(v.id)] >= 0) values.push_back(encode_value(b, v));
  std::vector<flatbuffers::Offset<fb::Node>> nodes;
  for (const Node& n : g.nodes()) {
    if (n.backward) continue;
    std::vector<int32_t> inputs;
    for (ValueId in : n.inputs) {
      COHORT_CHECK(index[static_cast<size_t>(in)] >= 0, Status::kInvalidArgument, "save graph: ",
                   n.op->name, " '", n.name, "' reads ", g.describe(in),
                   ", a value of the backward pass, which graph files do not hold");
      inputs.push_back(index[static_cast<size_t>(in)]);
    }
    std::vector<flatbuffers::Offset<fb::Attr>> attrs;
    for (const auto& [name, value] : n.attrs.all()) attrs.push_back(encode_attr(b, name, value));
    nodes.push_back(fb::CreateNodeDirect(b, n.op->name.c_str(), n.name.c_str(), &inputs,
                                         static_cast<int32_t>(n.outputs.size()), &attrs));
  }
  std::vector<int32_t> outputs;
  for (ValueId o : g.outputs())
    if (index[static_cast<size_t>(o)] >= 0) outputs.push_back(index[static_cast<size_t>(o)]);
  int32_t loss = g.loss() >= 0 ? index[static_cast<size_t>(g.loss())] : -1;
  fb::FinishSizePrefixedGraphFileBuffer(b, fb::CreateGraphFileDirect(b, kGraphFormatVersion, &values, &nodes,
                                                                     &outputs, loss));
  COHORT_CHECK(b.GetSize() + kGraphChecksumBytes < static_cast<size_t>(FLATBUFFERS_MAX_BUFFER_SIZE),
               Status::kInvalidArgument,
               "save graph: the graph needs ", b.GetSize(), " bytes, over the 2 GiB limit of a graph file");
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

void append_graph_checksum(std::vector<uint8_t>& bytes) {
  const uint32_t crc = crc32c(bytes.data(), bytes.size());
  for (size_t i = 0; i < kGraphChecksumBytes; ++i) bytes.push_back(static_cast<uint8_t>(crc >> (8 * i)));
}

std::vector<uint8_t> serialize_graph(const Graph& g) {
  std::vector<uint8_t> bytes = encode_graph(g);
  append_graph_checksum(bytes);
  return bytes;
}

void save_graph(const Graph& g, const std::string& path) {
  const std::vector<uint8_t> bytes = serialize_graph(g);
  AtomicFile file(path, "graph file");
  file.write(bytes.data(), bytes.size());
  file.commit();
}

Graph load_graph(const std::string& path) {
  FileReader file(path, "graph file");
  // Refuse to read a file that cannot be a graph file; the limit comes from 32-bit offsets.
  COHORT_CHECK(file.size() < static_cast<uint64_t>(FLATBUFFERS_MAX_BUFFER_SIZE), Status::kCorrupt, "graph file '",
               path, "': not a cohort graph file (", file.size(), " bytes; the limit is 2 GiB)");
  std::vector<uint8_t> bytes(static_cast<size_t>(file.size()));
  file.read_at(0, bytes.data(), bytes.size());
  return deserialize_graph(bytes.data(), bytes.size(), str_cat("graph file '", path, "'"));
}

}  // namespace cohort
