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

  // Throws kInvalidState while the memory is released (below).
  void* data() const {
    if (released_) throw_released();
    return data_;
  }
  size_t bytes() const { return bytes_; }

  // Gives the memory back to the allocator while every Tensor keeps referring to this Storage
  // (ZeRO stage 3 keeps a parameter's memory only while a step reads it); data() throws until
  // reacquire() allocates it again, uninitialised and possibly at another address, or borrow()
  // points it at caller memory of bytes() bytes (a parameter reading its slice of a gathered
  // bucket in place), which must stay valid until the next release(). Only for storage from an
  // allocator; release and reacquire are no-ops when already in that state.
  void release();
  void reacquire();
  void borrow(void* memory);
  bool released() const { return released_; }
  Device device() const { return allocator_ ? allocator_->device() : external_device_; }

 private:
  Allocator* allocator_;
  void* data_;
  size_t bytes_;
  Device external_device_ = Device::kCpu;
  bool released_ = false;
  bool borrowed_ = false;  // data_ is caller memory lent by borrow()
  [[noreturn]] static void throw_released();
};

}  // namespace cohort
