// In-memory datasets that a Sampler draws from and that assemble batches into caller buffers:
// ImageDataset (float images with i32 labels) and TokenWindowDataset (windows of T + 1 tokens
// cut from one token stream, split into inputs and next-token targets). Gathering never
// allocates: batches go straight into the caller's memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/data/sampler.h"
#include "core/tensor/tensor.h"

namespace cohort::data {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;                // examples
  virtual const std::string& name() const = 0;     // for messages: "fashion-mnist train"
  // Per example, without the batch dimension: features (slot 0) and labels/targets (slot 1).
  virtual Shape example_shape(int slot) const = 0;
  virtual DType example_dtype(int slot) const = 0;
  // Writes examples `ids` (in order) into features and labels, each holding ids.size() examples
  // contiguously. Callers check sizes first (check_batch); this does not fail.
  virtual void gather(const std::vector<SampleId>& ids, void* features, void* labels) const = 0;
};

// Throws unless `t` can receive `batch` examples of `slot`: dtype equal, dimension 0 = batch
// and the remaining elements equal the example's (so [B, 784] and [B, 1, 28, 28] both take a
// 28x28 image). `what` names the buffer in messages.
void check_batch(const Dataset& d, int slot, const Tensor& t, int64_t batch, const std::string& what);

class ImageDataset : public Dataset {
 public:
  // pixels: count * C * H * W floats; labels: count values in 0..classes-1.
  ImageDataset(std::string name, Shape image_shape, std::vector<float> pixels, std::vector<int32_t> labels);
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  const std::string& name() const override { return name_; }
  Shape example_shape(int slot) const override;
  DType example_dtype(int slot) const override { return slot == 0 ? DType::kF32 : DType::kI32; }
  void gather(const std::vector<SampleId>& ids, void* features, void* labels) const override;
  const std::vector<float>& pixels() const { return pixels_; }
  const std::vector<int32_t>& labels() const { return labels_; }

 private:
  std::string name_;
  Shape image_shape_;
  int64_t image_numel_;
  std::vector<float> pixels_;
  std::vector<int32_t> labels_;
};

// Example k of epoch e is the window stream[s, s + T] with s = k * T + shift(e), shift(e) in
// [0, T) drawn from the epoch number: tokens = stream[s, s + T), targets = stream[s + 1, s + T].
// Every epoch covers the stream once in non-overlapping windows, cut at different places.
class TokenWindowDataset : public Dataset {
 public:
  // Throws kInvalidArgument when the stream is too short for one window (needs 2T tokens).
  TokenWindowDataset(std::string name, std::vector<uint8_t> stream, int64_t context);
  int64_t size() const override { return windows_; }
  const std::string& name() const override { return name_; }
  Shape example_shape(int slot) const override { return {context_}; }
  DType example_dtype(int slot) const override { return DType::kI32; }
  void gather(const std::vector<SampleId>& ids, void* tokens, void* targets) const override;
  int64_t window_start(const SampleId& id) const;
  const std::vector<uint8_t>& stream() const { return stream_; }
  int64_t context() const { return context_; }

 private:
  std::string name_;
  std::vector<uint8_t> stream_;
  int64_t context_;
  int64_t windows_;
};

}  // namespace cohort::data
