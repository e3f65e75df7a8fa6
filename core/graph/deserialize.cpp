// Graph files, reading side. Order of defence: length, file identifier, checksum (every byte),
// FlatBuffers verifier (structure), then meaning (ranges, references, operators), then the rebuild through the Graph
// API so that shape inference checks every node again. Nothing is returned unless all pass.
#include <cmath>

#include "core/base/checksum.h"
#include "core/base/error.h"
#include "core/graph/graph_generated.h"
#include "core/graph/serialize.h"

namespace cohort {

namespace fb = graph_file;

namespace {

constexpr size_t kMaxRank = 8;
constexpr int64_t kMaxDim = int64_t{1} << 40;
constexpr int64_t kMaxNumel = int64_t{1} << 50;
constexpr int32_t kMaxOutputs = 64;

[[noreturn]] void corrupt(const std::string& message) { throw Error(Status::kCorrupt, message); }

// Length, identifier, checksum and structure. Returns the verified root.
const fb::GraphFile* verified_root(const uint8_t* data, size_t size) {
  if (data == nullptr || size == 0) corrupt("not a cohort graph file (empty)");
  // Checked before the verifier, which only asserts this limit.
  if (size >= static_cast<size_t>(FLATBUFFERS_MAX_BUFFER_SIZE))
    corrupt(str_cat("not a cohort graph file (", size, " bytes; the limit is 2 GiB)"));
  // Size prefix, root offset, identifier.
  if (size < 3 * sizeof(flatbuffers::uoffset_t))
    corrupt(str_cat("not a cohort graph file (", size, " bytes, too short)"));
  if (!fb::SizePrefixedGraphFileBufferHasIdentifier(data)) corrupt("not a cohort graph file (wrong file identifier)");
  // The size prefix catches any truncation, even one that only cuts trailing padding.
  const size_t declared = flatbuffers::ReadScalar<flatbuffers::uoffset_t>(data);
  const size_t prefixed = declared + sizeof(flatbuffers::uoffset_t);  // the FlatBuffer's bytes
  if (prefixed == size)
    corrupt("not a verifiable cohort graph file (it ends without the checksum that graph files carry: written "
            "by a cohort build from before graph files had one, or its last 4 bytes are missing); it cannot be "
            "checked for corruption, so it is not loaded: save the graph again");
  if (prefixed + kGraphChecksumBytes != size)
    corrupt(str_cat("not a cohort graph file (truncated or extended: ", size, " bytes, the header says ",
                    prefixed + kGraphChecksumBytes, ")"));
  uint32_t stored = 0;
  for (size_t i = 0; i < kGraphChecksumBytes; ++i) stored |= static_cast<uint32_t>(data[prefixed + i]) << (8 * i);
  if (crc32c(data, prefixed) != stored)
    corrupt("the checksum does not match: the file is corrupted (a changed byte), nothing was loaded");
  size = prefixed;
  flatbuffers::Verifier::Options options;
  options.max_tables = static_cast<flatbuffers::uoffset_t>(size / 4 + 16);  // every table takes >= 4 bytes
  flatbuffers::Verifier verifier(data, size, options);
  if (!fb::VerifySizePrefixedGraphFileBuffer(verifier)) corrupt("not a cohort graph file (verification failed)");
  const fb::GraphFile* root = fb::GetSizePrefixedGraphFile(data);
  if (root->version() == 0) corrupt("format version 0 is not valid");
  if (root->version() > kGraphFormatVersion)
    throw Error(Status::kUnsupported, str_cat("format version ", root->version(),
                                              " is newer than this build reads (", kGraphFormatVersion, ")"));
  return root;
}

std::string value_desc(const fb::Value& v, size_t i) { return str_cat("value ", i, " ('", v.name()->str(), "')"); }

TensorType checked_type(const fb::Value& v, size_t i) {
  TensorType t;
  if (!dtype_from_int(v.dtype(), &t.dtype)) corrupt(str_cat(value_desc(v, i), " has unknown dtype ", v.dtype()));
  const auto* shape = v.shape();
  size_t rank = shape ? shape->size() : 0;
  if (rank > kMaxRank) corrupt(str_cat(value_desc(v, i), " has rank ", rank, ", over the maximum of ", kMaxRank));
  int64_t numel = 1;
  for (size_t k = 0; k < rank; ++k) {
    int64_t d = shape->Get(static_cast<flatbuffers::uoffset_t>(k));
    if (d < 1 || d > kMaxDim) corrupt(str_cat(value_desc(v, i), " has extent ", d, " in dimension ", k));
    if (d > kMaxNumel / numel) corrupt(str_cat(value_desc(v, i), " has more than 2^50 elements"));
    numel *= d;
    t.shape.push_back(d);
  }
  return t;
}

ValueKind checked_kind(const fb::Value& v, size_t i) {
  if (v.kind() < 0 || v.kind() > static_cast<int>(ValueKind::kActivation))
    corrupt(str_cat(value_desc(v, i), " has unknown kind ", v.kind()));
  ValueKind kind = static_cast<ValueKind>(v.kind());
  if (kind == ValueKind::kParameter && !v.init()) corrupt(str_cat(value_desc(v, i), " is a parameter without an initializer"));
  if (kind != ValueKind::kParameter && v.init()) corrupt(str_cat(value_desc(v, i), " is not a parameter but has an initializer"));
  return kind;
}

Initializer checked_init(const fb::Value& v, size_t i) {
  const fb::Initializer& f = *v.init();
  if (f.kind() < 0 || f.kind() > static_cast<int>(InitKind::kKaimingNormal))
    corrupt(str_cat(value_desc(v, i), " has unknown initializer kind ", f.kind()));
  if (!std::isfinite(f.a()) || !std::isfinite(f.b()))
    corrupt(str_cat(value_desc(v, i), " has a non-finite initializer argument"));
  return Initializer{static_cast<InitKind>(f.kind()), f.a(), f.b(), f.seed()};
}

AttrValue decode_attr_value(const fb::Attr& a, const std::string& where) {
  switch (a.value_type()) {
    case fb::AttrValue::IntAttr: return a.value_as_IntAttr()->value();
    case fb::AttrValue::FloatAttr: return a.value_as_FloatAttr()->value();
    case fb::AttrValue::StringAttr: return a.value_as_StringAttr()->value()->str();
    case fb::AttrValue::IntsAttr: {
      const auto* v = a.value_as_IntsAttr()->values();
      return v ? std::vector<int64_t>(v->begin(), v->end()) : std::vector<int64_t>();
    }
    case fb::AttrValue::FloatsAttr: {
      const auto* v = a.value_as_FloatsAttr()->values();
      return v ? std::vector<double>(v->begin(), v->end()) : std::vector<double>();
    }
    default: break;
  }
  corrupt(str_cat(where, ": attribute '", a.name()->str(), "' has no value or an unknown type ",
                  static_cast<int>(a.value_type())));
}

Attrs decode_attrs(const fb::Node& n, const std::string& where) {
  Attrs attrs;
  if (!n.attrs()) return attrs;
  for (const fb::Attr* a : *n.attrs()) {
    // The verifier accepts a union whose type names a table but whose value is missing.
    if (a->value_type() != fb::AttrValue::NONE && a->value() == nullptr)
      corrupt(str_cat(where, ": attribute '", a->name()->str(), "' has no value"));
    if (attrs.has(a->name()->str())) corrupt(str_cat(where, ": attribute '", a->name()->str(), "' appears twice"));
    attrs.set(a->name()->str(), decode_attr_value(*a, where));
  }
  return attrs;
}

std::string node_desc(const fb::Node& n, size_t k) {
  return str_cat("node ", k, " ('", n.name()->str(), "', ", n.op()->str(), ")");
}

// Walks values and nodes in file order and returns each node's first output index. Checks that
// activations are exactly the nodes' outputs and that every input is defined before its node.
std::vector<size_t> check_structure(const fb::GraphFile& f) {
  const size_t nv = f.values() ? f.values()->size() : 0;
  const size_t nn = f.nodes() ? f.nodes()->size() : 0;
  std::vector<size_t> first_output;
  size_t i = 0;
  while (i < nv) {
    const fb::Value& v = *f.values()->Get(static_cast<flatbuffers::uoffset_t>(i));
    if (checked_kind(v, i) != ValueKind::kActivation) { ++i; continue; }
    const size_t k = first_output.size();
    if (k == nn) corrupt(str_cat(value_desc(v, i), " is an activation, but no node is left to produce it"));
    const fb::Node& n = *f.nodes()->Get(static_cast<flatbuffers::uoffset_t>(k));
    if (n.num_outputs() < 1 || n.num_outputs() > kMaxOutputs)
      corrupt(str_cat(node_desc(n, k), " claims ", n.num_outputs(), " outputs"));
    const size_t outs = static_cast<size_t>(n.num_outputs());
    for (size_t o = 0; o < outs; ++o) {
      if (i + o >= nv) corrupt(str_cat(node_desc(n, k), ": output ", o, " is missing from the value list"));
      const fb::Value& ov = *f.values()->Get(static_cast<flatbuffers::uoffset_t>(i + o));
      if (checked_kind(ov, i + o) != ValueKind::kActivation)
        corrupt(str_cat(node_desc(n, k), ": output ", o, " is ", value_desc(ov, i + o), ", which is not an activation"));
    }
    const size_t ni = n.inputs() ? n.inputs()->size() : 0;
    for (size_t in = 0; in < ni; ++in) {
      int32_t ref = n.inputs()->Get(static_cast<flatbuffers::uoffset_t>(in));
      if (ref < 0 || static_cast<size_t>(ref) >= nv)
        corrupt(str_cat(node_desc(n, k), ": input ", in, " refers to value ", ref,
                        ", which does not exist (a dangling edge; the file has ", nv, " values)"));
      if (static_cast<size_t>(ref) >= i)
        corrupt(str_cat(node_desc(n, k), ": input ", in, " refers to ",
                        value_desc(*f.values()->Get(static_cast<flatbuffers::uoffset_t>(ref)), static_cast<size_t>(ref)),
                        ", which is defined after the node (a cycle or a dangling edge)"));
    }
    if (!OpRegistry::global().find(n.op()->str()))
      throw Error(Status::kNotFound, str_cat(node_desc(n, k), ": unknown operator '", n.op()->str(), "'"));
    first_output.push_back(i);
    i += outs;
  }
  if (first_output.size() != nn)
    corrupt(str_cat(node_desc(*f.nodes()->Get(static_cast<flatbuffers::uoffset_t>(first_output.size())),
                              first_output.size()), " has no output values in the file"));
  return first_output;
}

void add_node(Graph& g, const fb::GraphFile& f, size_t k, size_t first) {
  const fb::Node& n = *f.nodes()->Get(static_cast<flatbuffers::uoffset_t>(k));
  const std::string where = node_desc(n, k);
  std::vector<ValueId> inputs;
  if (n.inputs()) for (int32_t ref : *n.inputs()) inputs.push_back(ref);
  std::vector<ValueId> outs = g.add_op(n.op()->str(), n.name()->str(), inputs, decode_attrs(n, where));
  if (outs.size() != static_cast<size_t>(n.num_outputs()))
    corrupt(str_cat(where, " produces ", outs.size(), " outputs, the file says ", n.num_outputs()));
  for (size_t o = 0; o < outs.size(); ++o) {
    const size_t idx = first + o;
    const fb::Value& fv = *f.values()->Get(static_cast<flatbuffers::uoffset_t>(idx));
    if (outs[o] != static_cast<ValueId>(idx))
      corrupt(str_cat(where, ": output ", o, " became value ", outs[o], ", the file says ", idx));
    const Value& made = g.value(outs[o]);
    TensorType want = checked_type(fv, idx);
    if (!(made.type == want))
      throw Error(Status::kShapeMismatch,
                  str_cat(where, ": output ", o, " is ", shape_str(made.type.shape), " ", dtype_name(made.type.dtype),
                          " by shape inference, the file says ", shape_str(want.shape), " ", dtype_name(want.dtype)));
    if (made.name != fv.name()->str())
      corrupt(str_cat(where, ": output ", o, " is named '", made.name, "', the file says '", fv.name()->str(), "'"));
  }
}

Graph rebuild(const fb::GraphFile& f) {
  const std::vector<size_t> first_output = check_structure(f);
  const size_t nv = f.values() ? f.values()->size() : 0;
  Graph g;
  size_t k = 0;
  for (size_t i = 0; i < nv;) {
    const fb::Value& v = *f.values()->Get(static_cast<flatbuffers::uoffset_t>(i));
    ValueKind kind = static_cast<ValueKind>(v.kind());
    if (kind == ValueKind::kActivation) {
      add_node(g, f, k, i);
      i += static_cast<size_t>(f.nodes()->Get(static_cast<flatbuffers::uoffset_t>(k))->num_outputs());
      ++k;
      continue;
    }
    TensorType t = checked_type(v, i);
    ValueId id = kind == ValueKind::kInput ? g.add_input(v.name()->str(), t.dtype, t.shape)
                                           : g.add_parameter(v.name()->str(), t.dtype, t.shape, checked_init(v, i));
    if (id != static_cast<ValueId>(i)) corrupt(str_cat(value_desc(v, i), " became value ", id));
    if (v.shard()) {
      if (kind != ValueKind::kParameter) corrupt(str_cat(value_desc(v, i), " is not a parameter but has shard cuts"));
      std::vector<ShardCut> cuts;
      for (const fb::ShardCut* c : *v.shard()) {
        if (c->dim() < 0 || c->dim() >= 8) corrupt(str_cat(value_desc(v, i), " has a shard cut of dim ", c->dim()));
        cuts.push_back(ShardCut{c->dim(), c->groups(), c->parts(), c->index(), c->axis()->str()});
      }
      g.set_shard(id, std::move(cuts));  // range-checks the rest (kInvalidArgument -> kCorrupt)
    }
    ++i;
  }
  if (f.outputs())
    for (int32_t o : *f.outputs()) {
      if (o < 0 || static_cast<size_t>(o) >= nv)
        corrupt(str_cat("output refers to value ", o, ", which does not exist (the file has ", nv, " values)"));
      g.mark_output(o);
    }
  if (f.loss() != -1) {
    if (f.loss() < 0 || static_cast<size_t>(f.loss()) >= nv)
      corrupt(str_cat("the loss refers to value ", f.loss(), ", which does not exist (the file has ", nv, " values)"));
    g.set_loss(f.loss());
  }
  return g;
}

}  // namespace

Graph deserialize_graph(const uint8_t* data, size_t size, const std::string& what) {
  try {
    return rebuild(*verified_root(data, size));
  } catch (const Error& e) {
    Status s = e.status();
    // The Graph API reports a bad file as a bad argument; for a file that is corruption.
    bool keep = s == Status::kNotFound || s == Status::kShapeMismatch || s == Status::kCorrupt ||
                s == Status::kUnsupported || s == Status::kInternal;
    throw Error(keep ? s : Status::kCorrupt, str_cat(what, ": ", e.what()));
  }
}

}  // namespace cohort
