// Batch assembly for the in-memory datasets; see dataset.h.
#include "core/data/dataset.h"

#include <algorithm>
#include <cstring>

#include "core/base/error.h"

namespace cohort::data {

void check_batch(const Dataset& d, int slot, const Tensor& t, int64_t batch, const std::string& what) {
  const DType want = d.example_dtype(slot);
  COHORT_CHECK(t.dtype() == want, Status::kShapeMismatch, what, " has dtype ", dtype_name(t.dtype()), ", ",
               d.name(), " gives ", dtype_name(want));
  const Shape example = d.example_shape(slot);
  COHORT_CHECK(t.rank() >= 1 && t.dim(0) == batch, Status::kShapeMismatch, what, " has shape ",
               shape_str(t.shape()), ", expected dimension 0 to be the batch size ", batch);
  COHORT_CHECK(t.numel() == batch * shape_numel(example), Status::kShapeMismatch, what, " has shape ",
               shape_str(t.shape()), ", but ", batch, " examples of ", d.name(), " have shape ",
               shape_str(example), " each");
}

ImageDataset::ImageDataset(std::string name, Shape image_shape, std::vector<float> pixels,
                           std::vector<int32_t> labels)
    : name_(std::move(name)), image_shape_(std::move(image_shape)), pixels_(std::move(pixels)),
      labels_(std::move(labels)) {
  image_numel_ = shape_numel(image_shape_);
  COHORT_CHECK(static_cast<int64_t>(pixels_.size()) == image_numel_ * size(), Status::kInvalidArgument, name_,
               ": ", pixels_.size(), " pixels do not make ", size(), " images of shape ", shape_str(image_shape_));
}

Shape ImageDataset::example_shape(int slot) const { return slot == 0 ? image_shape_ : Shape{}; }

void ImageDataset::gather(const std::vector<SampleId>& ids, void* features, void* labels) const {
  auto* x = static_cast<float*>(features);
  auto* y = static_cast<int32_t*>(labels);
  const auto n = static_cast<size_t>(image_numel_);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto k = static_cast<size_t>(ids[i].example);
    std::memcpy(x + i * n, pixels_.data() + k * n, n * sizeof(float));
    y[i] = labels_[k];
  }
}

TokenWindowDataset::TokenWindowDataset(std::string name, std::vector<uint8_t> stream, int64_t context)
    : name_(std::move(name)), stream_(std::move(stream)), context_(context) {
  const auto n = static_cast<int64_t>(stream_.size());
  COHORT_CHECK(context_ >= 1, Status::kInvalidArgument, name_, ": context (", context_, ") must be >= 1");
  COHORT_CHECK(n >= 2 * context_, Status::kInvalidArgument, name_, " has ", n,
               " tokens, too few for windows of context ", context_, " (needs at least ", 2 * context_, ")");
  // The last window of an epoch shifted by T - 1 ends at (windows - 1) T + (T - 1) + T <= n - 1.
  windows_ = (n - context_) / context_;
}

int64_t TokenWindowDataset::window_start(const SampleId& id) const {
  const auto shift = static_cast<int64_t>(mix64(static_cast<uint64_t>(id.epoch) ^ 0x77696e646f77ULL) %
                                          static_cast<uint64_t>(context_));
  return id.example * context_ + shift;
}

void TokenWindowDataset::gather(const std::vector<SampleId>& ids, void* tokens, void* targets) const {
  auto* in = static_cast<int32_t*>(tokens);
  auto* out = static_cast<int32_t*>(targets);
  const auto T = static_cast<size_t>(context_);
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint8_t* w = stream_.data() + window_start(ids[i]);
    for (size_t t = 0; t < T; ++t) {
      in[i * T + t] = w[t];
      out[i * T + t] = w[t + 1];
    }
  }
}

}  // namespace cohort::data
