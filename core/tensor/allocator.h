// The allocator interface every device backend implements. Storage owns one allocation and
// returns it to its allocator when the last Tensor referring to it goes away.
#pragma once

#include <cstddef>
#include <memory>

#include "core/tensor/dtype.h"

namespace cohort {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory aligned to at least 64 bytes; throws Error(kOutOfMemory) on failure.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
};

// The process-wide host allocator (64-byte aligned, never returns nullptr).
Allocator* cpu_allocator();

class Storage {
 public:
  Storage(Allocator* allocator, size_t bytes);
  // Borrows caller memory: never freed here; the caller keeps it alive while the Storage lives.
  Storage(void* external, size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return allocator_ ? allocator_->device() : external_device_; }

 private:
  Allocator* allocator_;
  void* data_;
  size_t bytes_;
  Device external_device_ = Device::kCpu;
};

}  // namespace cohort
