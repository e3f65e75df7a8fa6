// Writing checkpoints: collect the trainer's tensors and the caller's extra section as items,
// lay them out in the data section (each at a multiple of 64), encode the manifest that
// describes them, and stream header, manifest and data into an AtomicFile.
#include <cstring>

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

// One run of bytes in the data section: a tensor (name, dtype, shape) or a blob.
struct Item {
  std::string name;
  Tensor tensor;                             // contiguous host tensor, or undefined for a blob
  const std::vector<uint8_t>* blob = nullptr;
  fb::Extent extent;

  const void* data() const { return blob ? static_cast<const void*>(blob->data()) : tensor.raw(); }
  uint64_t size() const { return blob ? blob->size() : tensor.nbytes(); }
};

Item tensor_item(const std::string& name, const Tensor& t) {
  Item it;
  it.name = name;
  it.tensor = to_device(t, Device::kCpu);  // a contiguous host copy, or t itself
  return it;
}

uint64_t hash_value(uint64_t h, uint64_t v) { return hash64(&v, sizeof(v), h); }

void check_extra(const CheckpointExtra& extra) {
  for (const auto& kv : extra.ints)
    COHORT_CHECK(!kv.first.empty(), Status::kInvalidArgument, "save checkpoint: an extra value has an empty name");
  for (const auto& kv : extra.blobs)
    COHORT_CHECK(!kv.first.empty(), Status::kInvalidArgument, "save checkpoint: an extra blob has an empty name");
  for (const auto& [name, t] : extra.tensors) {
    COHORT_CHECK(!name.empty(), Status::kInvalidArgument, "save checkpoint: an extra tensor has an empty name");
    COHORT_CHECK(t.defined() && t.device() == Device::kCpu, Status::kInvalidArgument,
                 "save checkpoint: extra tensor '", name, "' is not a defined CPU tensor");
  }
}

// Assigns each item its offset (aligned) and checksum; returns the data section's length.
uint64_t lay_out(std::vector<Item>& items) {
  uint64_t end = 0;
  for (Item& it : items) {
    const uint64_t offset = align_up(end);
    it.extent = fb::Extent(offset, it.size(), crc32c(it.data(), it.size()), 0);
    end = offset + it.size();
  }
  return end;
}

flatbuffers::Offset<fb::TensorEntry> encode_tensor(flatbuffers::FlatBufferBuilder& b, const Item& it) {
  const Shape& s = it.tensor.shape();
  std::vector<int64_t> shape(s.begin(), s.end());
  return fb::CreateTensorEntryDirect(b, it.name.c_str(), static_cast<int>(it.tensor.dtype()), &shape,
                                     &it.extent);
}

std::vector<flatbuffers::Offset<fb::TensorEntry>> encode_tensors(flatbuffers::FlatBufferBuilder& b,
                                                                 const std::vector<Item>& items, size_t begin,
                                                                 size_t end) {
  std::vector<flatbuffers::Offset<fb::TensorEntry>> r;
  for (size_t i = begin; i < end; ++i) r.push_back(encode_tensor(b, items[i]));
  return r;
}

// Section boundaries inside the item list: [0, params) [params, state) [state, tensors) [tensors, end).
struct Sections {
  size_t params = 0, state = 0, tensors = 0;
};

flatbuffers::Offset<fb::Extra> encode_extra(flatbuffers::FlatBufferBuilder& b, const CheckpointExtra& extra,
                                            const std::vector<Item>& items, const Sections& s) {
  std::vector<flatbuffers::Offset<fb::IntEntry>> ints;
  for (const auto& [name, value] : extra.ints) ints.push_back(fb::CreateIntEntryDirect(b, name.c_str(), value));
  std::vector<flatbuffers::Offset<fb::BlobEntry>> blobs;
  for (size_t i = s.tensors; i < items.size(); ++i)
    blobs.push_back(fb::CreateBlobEntryDirect(b, items[i].name.c_str(), &items[i].extent));
  auto tensors = encode_tensors(b, items, s.state, s.tensors);
  return fb::CreateExtraDirect(b, &ints, &blobs, &tensors);
}

std::vector<uint8_t> encode_manifest(const Trainer& trainer, const CheckpointExtra& extra,
                                     const std::vector<Item>& items, const Sections& s, bool has_state) {
  flatbuffers::FlatBufferBuilder b(4096);
  auto params = encode_tensors(b, items, 0, s.params);
  auto state = encode_tensors(b, items, s.params, s.state);
  auto ex = encode_extra(b, extra, items, s);
  const std::vector<uint8_t> graph = encode_graph(trainer.model_graph());
  const optim::Optimizer& opt = trainer.optimizer();
  auto root = fb::CreateCheckpointDirect(b, kCheckpointFormatVersion, hash64(graph.data(), graph.size()),
                                         model_fingerprint(trainer), trainer.step_count(), trainer.seed(),
                                         static_cast<int>(opt.config().kind), opt.step_count(), has_state,
                                         &params, &state, ex);
  fb::FinishCheckpointBuffer(b, root);
  COHORT_CHECK(b.GetSize() < static_cast<size_t>(FLATBUFFERS_MAX_BUFFER_SIZE), Status::kInvalidArgument,
               "save checkpoint: the manifest needs ", b.GetSize(), " bytes, over the 2 GiB limit");
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

}  // namespace

uint64_t model_fingerprint(const Trainer& trainer) {
  // The model's, not this rank's part of it (tensor parallelism): whole shapes, the whole graph.
  const std::vector<uint8_t> graph = encode_graph(trainer.model_graph());
  uint64_t h = hash_value(hash64(nullptr, 0), hash64(graph.data(), graph.size()));
  const Graph& model = trainer.model_graph();
  for (ValueId p : model.parameters()) {
    const std::string& name = model.value(p).name;
    const Shape& shape = model.value(p).type.shape;  // the whole model's: whole shapes
    h = hash64(name.c_str(), name.size() + 1, h);  // with the terminator: names cannot run together
    h = hash_value(h, static_cast<uint64_t>(model.value(p).type.dtype));
    h = hash_value(h, shape.size());
    for (int64_t d : shape) h = hash_value(h, static_cast<uint64_t>(d));
  }
  return h;
}

void save_checkpoint(const Trainer& trainer, const std::string& path, const CheckpointExtra& extra) {
  check_extra(extra);
  std::vector<Item> items;
  Sections s;
  // A tensor-parallel or pipeline rank writes the whole model (its blocks gathered over their
  // grid axes, the other stages' parameters broadcast from them: collectives over the model
  // axes): the file is the one a single rank would write, and loads under any layout.
  const Graph& model = trainer.model_graph();
  for (ValueId p : model.parameters()) {
    const std::string& name = model.value(p).name;
    const int64_t i = trainer.local_parameter(name);
    items.push_back(tensor_item(name, trainer.whole_model_tensor(name, i >= 0 ? trainer.parameters()[static_cast<size_t>(i)] : Tensor())));
  }
  s.params = items.size();
  // state() hands out tensors sharing the optimizer's storage and changes nothing; it lacks a
  // const overload, hence the cast. No state bytes: nothing allocated yet (or SGD without
  // momentum on fp32), and a fresh state on load is the same.
  auto& opt = const_cast<optim::Optimizer&>(trainer.optimizer());
  const bool has_state = opt.state_bytes() > 0;
  for (ValueId p : model.parameters()) {
    if (!has_state) break;
    const std::string& name = model.value(p).name;
    for (const auto& [entry, t] : model_state_entries(trainer, opt, name))
      items.push_back(tensor_item(name + "/" + entry, trainer.whole_model_tensor(name, t)));
  }
  s.state = items.size();
  for (const auto& [name, t] : extra.tensors) items.push_back(tensor_item(name, t));
  s.tensors = items.size();
  for (const auto& [name, bytes] : extra.blobs) {
    Item it;
    it.name = name;
    it.blob = &bytes;
    items.push_back(it);
  }
  Header h;
  h.version = kCheckpointFormatVersion;
  h.data_length = lay_out(items);
  const std::vector<uint8_t> manifest = encode_manifest(trainer, extra, items, s, has_state);
  h.manifest_length = static_cast<uint32_t>(manifest.size());
  h.manifest_crc = crc32c(manifest.data(), manifest.size());
  h.data_offset = align_up(kHeaderSize + manifest.size());
  uint8_t header[kHeaderSize];
  encode_header(h, header);

  AtomicFile file(path, "checkpoint");
  file.write(header, kHeaderSize);
  file.write(manifest.data(), manifest.size());
  file.write_zeros(h.data_offset - kHeaderSize - manifest.size());
  uint64_t end = 0;
  for (const Item& it : items) {
    file.write_zeros(it.extent.offset() - end);
    file.write(it.data(), it.size());
    end = it.extent.offset() + it.size();
  }
  file.commit();
}

}  // namespace cohort::checkpoint
