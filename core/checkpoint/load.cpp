// Reading checkpoints, in the order that keeps a bad file from changing anything: header and
// lengths, manifest checksum, FlatBuffers verifier, every field's range, the model and optimizer
// match, then the data section (canonical layout, zero padding, every CRC) into staged tensors,
// and only then one commit into the trainer (Trainer::restore_state) and into extra_out.
#include <algorithm>
#include <set>

#include "core/base/error.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/checkpoint_generated.h"
#include "core/base/file_io.h"
#include "core/checkpoint/format.h"
#include "core/checkpoint/manifest_check.h"
#include "core/device/device.h"
#include "core/graph/serialize.h"

namespace cohort::checkpoint {

namespace fb = checkpoint_file;

namespace {

// Reads and verifies the header and the manifest; the returned root points into buffer.
const fb::Checkpoint* read_manifest(const FileReader& file, const std::string& what, Header* h,
                                    std::vector<uint8_t>& buffer) {
  COHORT_CHECK(file.size() >= kHeaderSize, Status::kCorrupt, what, ": truncated (", file.size(),
               " bytes; a checkpoint has at least ", kHeaderSize, ")");
  uint8_t header[kHeaderSize];
  file.read_at(0, header, kHeaderSize);
  std::string reason;
  COHORT_CHECK(decode_header(header, h, &reason), Status::kCorrupt, what, ": ", reason);
  COHORT_CHECK(h->version <= kCheckpointFormatVersion, Status::kUnsupported, what, ": format version ",
               h->version, " is newer than this build's ", kCheckpointFormatVersion);
  COHORT_CHECK(h->version >= 1, Status::kCorrupt, what, ": format version 0 is not valid");
  COHORT_CHECK(h->manifest_length >= 8 && h->manifest_length < FLATBUFFERS_MAX_BUFFER_SIZE &&
                   h->data_offset == align_up(kHeaderSize + h->manifest_length),
               Status::kCorrupt, what, ": the header's manifest length ", h->manifest_length, " or data offset ",
               h->data_offset, " is not valid");
  const uint64_t expected = h->data_offset + h->data_length;  // no overflow: both < 2^63 below
  COHORT_CHECK(h->data_length < (uint64_t{1} << 62) && file.size() >= expected, Status::kCorrupt, what,
               ": truncated (", file.size(), " bytes; the header announces ", expected, ")");
  COHORT_CHECK(file.size() == expected, Status::kCorrupt, what, ": ", file.size() - expected,
               " unexpected bytes after the end of the checkpoint");
  buffer.resize(h->data_offset - kHeaderSize);
  file.read_at(kHeaderSize, buffer.data(), buffer.size());
  COHORT_CHECK(crc32c(buffer.data(), h->manifest_length) == h->manifest_crc, Status::kCorrupt, what,
               ": the manifest checksum does not match (corrupted manifest)");
  COHORT_CHECK(std::all_of(buffer.begin() + h->manifest_length, buffer.end(), [](uint8_t b) { return b == 0; }),
               Status::kCorrupt, what, ": the padding after the manifest is not zero");
  flatbuffers::Verifier verifier(buffer.data(), h->manifest_length);
  COHORT_CHECK(fb::VerifyCheckpointBuffer(verifier), Status::kCorrupt, what,
               ": the manifest failed verification");
  const fb::Checkpoint* m = fb::GetCheckpoint(buffer.data());
  COHORT_CHECK(m->format_version() == h->version, Status::kCorrupt, what, ": the manifest's format version ",
               m->format_version(), " differs from the header's ", h->version);
  return m;
}

// Where one extent of the data section goes.
struct Target {
  const fb::Extent* extent;
  void* dest;
  std::string label;
};

// Reads every target, in offset order. The layout must be the canonical one the writer makes
// (each extent at the next multiple of 64, data ending with the last one) and gaps must be zero:
// then every byte of the data section is covered by a check.
void read_targets(const FileReader& file, const Header& h, std::vector<Target> targets, const std::string& what) {
  std::stable_sort(targets.begin(), targets.end(),
                   [](const Target& a, const Target& b) { return a.extent->offset() < b.extent->offset(); });
  uint64_t end = 0;
  uint8_t gap[kAlignment];
  for (const Target& t : targets) {
    const fb::Extent& e = *t.extent;
    COHORT_CHECK(e.offset() == align_up(end) && e.offset() <= h.data_length &&
                     e.length() <= h.data_length - e.offset(),
                 Status::kCorrupt,
                 what, ": ", t.label, " lies at bytes [", e.offset(), ", +", e.length(),
                 ") of the data section, not where the layout puts it");
    file.read_at(h.data_offset + end, gap, e.offset() - end);
    COHORT_CHECK(std::all_of(gap, gap + (e.offset() - end), [](uint8_t b) { return b == 0; }), Status::kCorrupt,
                 what, ": the padding before ", t.label, " is not zero");
    file.read_at(h.data_offset + e.offset(), t.dest, e.length());
    COHORT_CHECK(crc32c(t.dest, e.length()) == e.crc32c(), Status::kCorrupt, what, ": the checksum of ", t.label,
                 " does not match (corrupted data)");
    end = e.offset() + e.length();
  }
  COHORT_CHECK(end == h.data_length, Status::kCorrupt, what, ": the data section has ", h.data_length - end,
               " bytes that no entry describes");
}

// Tensors of the extra section, allocated to receive their data.
void stage_extra(const fb::Extra* ex, const std::string& what, CheckpointExtra& staged, std::vector<Target>& targets) {
  for (const fb::IntEntry* e : *ex->ints()) staged.ints[e->name()->str()] = e->value();
  for (const fb::BlobEntry* e : *ex->blobs()) {
    std::vector<uint8_t>& bytes = staged.blobs[e->name()->str()];
    bytes.resize(e->extent()->length());
    targets.push_back({e->extent(), bytes.data(), str_cat("extra blob '", e->name()->str(), "'")});
  }
  for (const fb::TensorEntry* e : *ex->tensors()) {
    const EntryType type = entry_type(e, what, "extra tensor");
    Tensor& t = staged.tensors[e->name()->str()];
    t = Tensor::empty(type.shape, type.dtype);
    targets.push_back({e->extent(), t.raw(), str_cat("extra tensor '", e->name()->str(), "'")});
  }
}

// A whole tensor read from the file whose block (tensor parallelism) goes into `dest` after.
struct Reshard {
  size_t param;
  Tensor whole, dest;
};

// Points each optimizer state entry at the matching tensor of the staged optimizer — or, for a
// parameter this rank holds a block of, at a whole staging tensor cut into it after the read; for
// another pipeline stage's parameter, at scratch (read and checked all the same: every byte of
// the file is).
void stage_state(const fb::Checkpoint* m, const Trainer& trainer, optim::Optimizer& opt,
                 const std::string& what, std::vector<Target>& targets, std::vector<Reshard>& reshards) {
  std::vector<std::pair<std::string, Tensor>> expected;
  std::vector<int64_t> owner;  // this rank's parameter index, or -1
  const Graph& model = trainer.model_graph();
  for (ValueId p : model.parameters()) {
    if (!m->has_optimizer_state()) break;
    const std::string& name = model.value(p).name;
    for (auto& [entry, t] : model_state_entries(trainer, opt, name)) {
      expected.emplace_back(name + "/" + entry, t);
      owner.push_back(trainer.local_parameter(name));
    }
  }
  check_state_names(m, expected, what);
  for (size_t k = 0; k < expected.size(); ++k) {
    const fb::TensorEntry* e = m->optimizer_state()->Get(static_cast<flatbuffers::uoffset_t>(k));
    const EntryType type = entry_type(e, what, "optimizer state");
    if (owner[k] < 0) {
      reshards.push_back({0, Tensor::empty(type.shape, type.dtype), Tensor()});
      targets.push_back({e->extent(), reshards.back().whole.raw(), str_cat("optimizer state '", expected[k].first, "'")});
      continue;
    }
    const size_t i = static_cast<size_t>(owner[k]);
    const Tensor& t = expected[k].second;
    const bool block = trainer.is_sharded(i);
    const Shape want = block ? trainer.whole_shape(i) : t.shape();
    COHORT_CHECK(type.dtype == t.dtype() && type.shape == want, Status::kCorrupt, what, ": optimizer state '",
                 expected[k].first, "' is ", shape_str(type.shape), " ", dtype_name(type.dtype), " there, ",
                 shape_str(want), " ", dtype_name(t.dtype()), " here");
    void* dest = t.raw();
    if (block) {
      reshards.push_back({i, Tensor::empty(want, t.dtype()), t});
      dest = reshards.back().whole.raw();
    }
    targets.push_back({e->extent(), dest, str_cat("optimizer state '", expected[k].first, "'")});
  }
}

}  // namespace

void load_checkpoint(Trainer& trainer, const std::string& path, CheckpointExtra* extra_out) {
  const std::string what = str_cat("checkpoint '", path, "'");
  FileReader file(path, "checkpoint");
  Header h;
  std::vector<uint8_t> buffer;
  const fb::Checkpoint* m = read_manifest(file, what, &h, buffer);
  check_fields(m, h.data_length, what);
  check_model(m, trainer, what);

  // Stage: new tensors for the parameters, a new optimizer for the state, new extra values.
  // The file holds whole parameters; a tensor-parallel rank keeps its blocks (Reshard).
  // A pipeline rank reads the other stages' parameters into scratch (Reshard without a dest).
  std::vector<Target> targets;
  std::vector<Tensor> params;
  std::vector<Reshard> reshards;
  for (size_t i = 0; i < trainer.parameters().size(); ++i) {
    const Tensor& p = trainer.parameters()[i];
    params.push_back(Tensor::zeros(p.shape(), p.dtype()));
  }
  for (flatbuffers::uoffset_t k = 0; k < m->parameters()->size(); ++k) {
    const fb::TensorEntry* e = m->parameters()->Get(k);
    const int64_t local = trainer.local_parameter(e->name()->str());
    void* dest = nullptr;
    if (local < 0) {
      const EntryType type = entry_type(e, what, "parameter");
      reshards.push_back({0, Tensor::empty(type.shape, type.dtype), Tensor()});
      dest = reshards.back().whole.raw();
    } else {
      const size_t i = static_cast<size_t>(local);
      dest = params[i].raw();
      if (trainer.is_sharded(i)) {
        reshards.push_back({i, Tensor::empty(trainer.whole_shape(i), params[i].dtype()), params[i]});
        dest = reshards.back().whole.raw();
      }
    }
    targets.push_back({e->extent(), dest, str_cat("parameter '", e->name()->str(), "'")});
  }
  auto opt = std::make_unique<optim::Optimizer>(trainer.optimizer().config());
  if (m->has_optimizer_state()) opt->init_state(params);
  stage_state(m, trainer, *opt, what, targets, reshards);
  CheckpointExtra extra;
  stage_extra(m->extra(), what, extra, targets);
  read_targets(file, h, std::move(targets), what);
  for (Reshard& r : reshards) {
    if (!r.dest.defined()) continue;  // another stage's
    const Tensor block = trainer.block_of(r.param, r.whole);
    device_copy(r.dest.raw(), r.dest.device(), block.raw(), Device::kCpu, block.nbytes());
  }
  // Without saved state the optimizer starts fresh from the loaded parameters (bf16 masters).
  if (!m->has_optimizer_state()) opt->init_state(params);
  opt->set_step_count(m->optimizer_step_count());

  // Commit: nothing below fails for a verified file.
  trainer.restore_state(params, std::move(opt), m->trainer_step(), m->seed());
  if (extra_out) *extra_out = std::move(extra);
}

}  // namespace cohort::checkpoint
