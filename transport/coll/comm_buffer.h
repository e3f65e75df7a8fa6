// CommBuffer: floats that an owner hands to a communicator's collectives again and again (DDP
// gradient buckets, the outer optimizers' pseudo-gradient), in the communicator's registered
// memory (Communicator::allocate) where that gains, in ordinary memory elsewhere — the owner's
// code is the same either way.
//
// Registered when the communicator allocates memory and the buffer is large enough to be read
// and written in place (kRegisteredInPlaceBytes); constructing and destroying one is then
// collective: every rank of the communicator does it with the same count, in the same order
// among its other operations. A rank whose allocation fails (out of memory) keeps ordinary
// memory alone; the collectives take any mix.
//
// Freeing after a failure: registered memory stays valid until the communicator is destroyed,
// so a failed collective can never write into freed memory; an ordinary buffer must be handed
// to Communicator::keep_alive as any other (moving the CommBuffer there is enough).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "transport/coll/communicator.h"

namespace cohort::transport::coll {

class CommBuffer {
 public:
  CommBuffer() = default;
  // `count` floats set to `value`. comm null: ordinary memory, nothing collective.
  CommBuffer(const std::shared_ptr<Communicator>& comm, size_t count, float value = 0.0f);
  ~CommBuffer();
  CommBuffer(CommBuffer&& other) noexcept;
  CommBuffer& operator=(CommBuffer&& other) noexcept;
  CommBuffer(const CommBuffer&) = delete;
  CommBuffer& operator=(const CommBuffer&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  float* begin() { return data_; }
  float* end() { return data_ + size_; }
  const float* begin() const { return data_; }
  const float* end() const { return data_ + size_; }
  float& operator[](size_t i) { return data_[i]; }
  float operator[](size_t i) const { return data_[i]; }
  // In the communicator's registered memory.
  bool registered() const { return registered_ != nullptr; }
  // Frees the memory now (collective when registered); the buffer is empty afterwards.
  void reset();
  friend void swap(CommBuffer& a, CommBuffer& b) noexcept;

 private:
  std::weak_ptr<Communicator> comm_;  // not owning: a buffer kept alive by the communicator
  float* registered_ = nullptr;       // from comm_->allocate
  std::vector<float> heap_;           // otherwise
  float* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cohort::transport::coll
