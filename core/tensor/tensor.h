// Tensor: a typed, shaped view (offset + strides) of shared Storage on one device. Most kernels
// require contiguous tensors; views (transpose, slices) carry strides until made contiguous.
#pragma once

#include <memory>

#include "core/tensor/allocator.h"
#include "core/tensor/dtype.h"
#include "core/tensor/shape.h"

namespace cohort {

class Tensor {
 public:
  Tensor() = default;
  // Allocates a contiguous, uninitialised tensor.
  static Tensor empty(const Shape& shape, DType dtype, Allocator* allocator = cpu_allocator());
  static Tensor zeros(const Shape& shape, DType dtype, Allocator* allocator = cpu_allocator());
  // Wraps a contiguous block of existing storage at byte offset.
  static Tensor view_of(std::shared_ptr<Storage> storage, size_t byte_offset, const Shape& shape,
                        DType dtype);

  // A contiguous tensor over caller memory (not owned; must outlive every use of the tensor).
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device device = Device::kCpu);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim(int64_t i) const { return shape_[static_cast<size_t>(i)]; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::kCpu; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* raw() const { return static_cast<char*>(storage_->data()) + byte_offset_; }
  template <typename T>
  T* data() const { return static_cast<T*>(raw()); }

  // A view with another shape of the same contiguous data (numel must match).
  Tensor reshaped(const Shape& shape) const;
  // A view with dimensions permuted (strided; not contiguous in general).
  Tensor permuted(const std::vector<int64_t>& perm) const;
  // A contiguous copy (or *this when already contiguous).
  Tensor contiguous() const;
  // Copies values from src (same shape; dtype converted between f32 and bf16).
  void copy_from(const Tensor& src);
  void fill(float value);

 private:
  std::shared_ptr<Storage> storage_;
  size_t byte_offset_ = 0;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::kF32;
};

}  // namespace cohort
