// Meaning checks of a checkpoint manifest, after the verifier accepted its structure: ranges,
// extents and names (kCorrupt), then the match with the trainer's model (kInvalidArgument).
#include "core/checkpoint/manifest_check.h"

#include <limits>
#include <set>

#include "core/base/error.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/format.h"
#include "core/graph/serialize.h"

namespace cohort::checkpoint {

namespace fb = checkpoint_file;

namespace {

constexpr size_t kMaxRank = 16;

void check_extent(const fb::Extent* e, uint64_t data_length, const std::string& what, const char* kind,
                  const std::string& name) {
  COHORT_CHECK(e->offset() <= data_length && e->length() <= data_length - e->offset(), Status::kCorrupt, what,
               ": ", kind, " '", name, "' lies at bytes [", e->offset(), ", +", e->length(),
               "), beyond the data section's ", data_length, " bytes");
}

void check_name(std::set<std::string>& seen, const flatbuffers::String* name, const std::string& what,
                const char* kind) {
  COHORT_CHECK(name->size() > 0, Status::kCorrupt, what, ": a ", kind, " has an empty name");
  COHORT_CHECK(seen.insert(name->str()).second, Status::kCorrupt, what, ": ", kind, " '", name->str(),
               "' appears twice");
}

void check_tensors(const flatbuffers::Vector<flatbuffers::Offset<fb::TensorEntry>>* entries, uint64_t data_length,
                   const std::string& what, const char* kind) {
  std::set<std::string> seen;
  for (const fb::TensorEntry* e : *entries) {
    check_name(seen, e->name(), what, kind);
    check_extent(e->extent(), data_length, what, kind, e->name()->str());
    entry_type(e, what, kind);
  }
}

const char* optimizer_name(int kind) { return kind == 0 ? "sgd" : kind == 1 ? "adamw" : "unknown"; }

[[noreturn]] void other_model(const std::string& what, const std::string& detail) {
  throw_error(Status::kInvalidArgument, str_cat(what, " is for another model: ", detail));
}

}  // namespace

EntryType entry_type(const fb::TensorEntry* e, const std::string& what, const char* kind) {
  const std::string name = e->name()->str();
  EntryType t;
  COHORT_CHECK(dtype_from_int(e->dtype(), &t.dtype), Status::kCorrupt, what, ": ", kind, " '", name,
               "' has an unknown dtype ", e->dtype());
  COHORT_CHECK(e->shape()->size() <= kMaxRank, Status::kCorrupt, what, ": ", kind, " '", name, "' has rank ",
               e->shape()->size(), " (at most ", kMaxRank, ")");
  const int64_t elem = static_cast<int64_t>(dtype_size(t.dtype));
  int64_t numel = 1;
  for (int64_t d : *e->shape()) {
    COHORT_CHECK(d >= 0 && (d == 0 || numel <= std::numeric_limits<int64_t>::max() / elem / d), Status::kCorrupt,
                 what, ": ", kind, " '", name, "' has an invalid dimension ", d);
    numel *= d;
    t.shape.push_back(d);
  }
  COHORT_CHECK(e->extent()->length() == static_cast<uint64_t>(numel * elem), Status::kCorrupt, what, ": ", kind,
               " '", name, "' is ", shape_str(t.shape), " ", dtype_name(t.dtype), " but holds ",
               e->extent()->length(), " bytes");
  return t;
}

void check_fields(const fb::Checkpoint* m, uint64_t data_length, const std::string& what) {
  COHORT_CHECK(m->trainer_step() >= 0 && m->optimizer_step_count() >= 0, Status::kCorrupt, what,
               ": negative step (trainer ", m->trainer_step(), ", optimizer ", m->optimizer_step_count(), ")");
  COHORT_CHECK(m->optimizer_kind() == 0 || m->optimizer_kind() == 1, Status::kCorrupt, what,
               ": unknown optimizer kind ", m->optimizer_kind());
  COHORT_CHECK(m->has_optimizer_state() || m->optimizer_state()->size() == 0, Status::kCorrupt, what,
               ": optimizer state entries without the has_optimizer_state flag");
  check_tensors(m->parameters(), data_length, what, "parameter");
  check_tensors(m->optimizer_state(), data_length, what, "optimizer state");
  const fb::Extra* ex = m->extra();
  COHORT_CHECK(ex->ints() && ex->blobs() && ex->tensors(), Status::kCorrupt, what,
               ": the extra section lacks a list");
  std::set<std::string> ints, blobs;
  for (const fb::IntEntry* e : *ex->ints()) check_name(ints, e->name(), what, "extra value");
  for (const fb::BlobEntry* e : *ex->blobs()) {
    check_name(blobs, e->name(), what, "extra blob");
    check_extent(e->extent(), data_length, what, "extra blob", e->name()->str());
  }
  check_tensors(ex->tensors(), data_length, what, "extra tensor");
}

void check_model(const fb::Checkpoint* m, const Trainer& trainer, const std::string& what) {
  // The whole model's parameters (a tensor-parallel or pipeline rank's file holds them all, whole).
  const auto& entries = *m->parameters();
  const Graph& model = trainer.model_graph();
  const std::vector<ValueId> params = model.parameters();
  for (size_t i = 0; i < params.size() && i < entries.size(); ++i) {
    const fb::TensorEntry* e = entries.Get(static_cast<flatbuffers::uoffset_t>(i));
    const EntryType t = entry_type(e, what, "parameter");
    const Value& v = model.value(params[i]);
    if (e->name()->str() != v.name)
      other_model(what, str_cat("parameter ", i, " is '", e->name()->str(), "' there, '", v.name, "' here"));
    if (t.dtype != v.type.dtype)
      other_model(what, str_cat("parameter '", v.name, "' has dtype ", dtype_name(t.dtype), " there, ",
                                dtype_name(v.type.dtype), " here"));
    if (t.shape != v.type.shape)
      other_model(what, str_cat("parameter '", v.name, "' has shape ", shape_str(t.shape), " there, ",
                                shape_str(v.type.shape), " here"));
  }
  if (entries.size() != params.size())
    other_model(what, str_cat("it has ", entries.size(), " parameters, this model ", params.size()));
  const std::vector<uint8_t> graph = encode_graph(trainer.model_graph());
  if (m->graph_hash() != hash64(graph.data(), graph.size()))
    other_model(what, "the parameters agree but the forward graph differs (operators, attributes or inputs)");
  if (m->fingerprint() != model_fingerprint(trainer)) other_model(what, "the model fingerprint differs");
  const int kind = static_cast<int>(trainer.optimizer().config().kind);
  COHORT_CHECK(m->optimizer_kind() == kind, Status::kInvalidArgument, what, " was written with the ",
               optimizer_name(m->optimizer_kind()), " optimizer, this trainer uses ", optimizer_name(kind));
}

std::vector<std::pair<std::string, Tensor>> model_state_entries(const Trainer& trainer, optim::Optimizer& opt,
                                                                const std::string& name) {
  const int64_t i = trainer.local_parameter(name);
  if (i >= 0) return opt.state(static_cast<size_t>(i));
  // Another stage's parameter: the entries one of this rank's parameters of its dtype has (the
  // optimizer gives every parameter of a dtype the same ones), as dtype hints.
  const DType dtype = trainer.model_graph().value(trainer.model_graph().find(name)).type.dtype;
  for (size_t k = 0; k < trainer.parameters().size(); ++k)
    if (trainer.parameters()[k].dtype() == dtype) {
      std::vector<std::pair<std::string, Tensor>> hints;
      for (const auto& [entry, t] : opt.state(k)) hints.emplace_back(entry, Tensor::empty({}, t.dtype()));
      return hints;
    }
  throw Error(Status::kUnsupported, str_cat("checkpoint: parameter '", name, "' is ", dtype_name(dtype),
                                            " and this pipeline stage holds no parameter of that dtype to take the "
                                            "optimizer state's layout from"));
}

void check_state_names(const fb::Checkpoint* m, const std::vector<std::pair<std::string, Tensor>>& expected,
                       const std::string& what) {
  const auto& entries = *m->optimizer_state();
  for (size_t k = 0; k < expected.size() || k < entries.size(); ++k) {
    const std::string there =
        k < entries.size() ? entries.Get(static_cast<flatbuffers::uoffset_t>(k))->name()->str() : "";
    const std::string here = k < expected.size() ? expected[k].first : "";
    COHORT_CHECK(there == here, Status::kInvalidArgument, what, " holds optimizer state ",
                 there.empty() ? "(none)" : "'" + there + "'", " where this trainer's optimizer has ",
                 here.empty() ? "(none)" : "'" + here + "'", " (another optimizer configuration, e.g. momentum)");
  }
}

}  // namespace cohort::checkpoint
