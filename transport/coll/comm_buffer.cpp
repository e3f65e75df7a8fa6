// CommBuffer (comm_buffer.h).
#include "transport/coll/comm_buffer.h"

#include <algorithm>
#include <utility>

#include "core/base/error.h"

namespace cohort::transport::coll {

CommBuffer::CommBuffer(const std::shared_ptr<Communicator>& comm, size_t count, float value) : size_(count) {
  if (comm && count * sizeof(float) >= kRegisteredInPlaceBytes) {
    try {
      registered_ = static_cast<float*>(comm->allocate(count * sizeof(float)));
      comm_ = comm;
    } catch (const Error& e) {
      // kUnsupported: the backend has no registered memory; kOutOfMemory: this rank could not
      // map a region (its peers go on with theirs). Ordinary memory serves either way.
      if (e.status() != Status::kUnsupported && e.status() != Status::kOutOfMemory) throw;
    }
  }
  if (registered_) {
    data_ = registered_;
    std::fill(data_, data_ + size_, value);
  } else {
    heap_.assign(count, value);
    data_ = heap_.data();
  }
}

CommBuffer::~CommBuffer() { reset(); }

CommBuffer::CommBuffer(CommBuffer&& other) noexcept { swap(*this, other); }

CommBuffer& CommBuffer::operator=(CommBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    swap(*this, other);
  }
  return *this;
}

void swap(CommBuffer& a, CommBuffer& b) noexcept {
  std::swap(a.comm_, b.comm_);
  std::swap(a.registered_, b.registered_);
  std::swap(a.heap_, b.heap_);
  std::swap(a.data_, b.data_);
  std::swap(a.size_, b.size_);
}

void CommBuffer::reset() {
  if (registered_) {
    // After a failure the memory is left to the communicator, which frees it when destroyed
    // (a cancelled transfer may still write into it until then); so is memory of a
    // communicator already gone.
    std::shared_ptr<Communicator> comm = comm_.lock();
    if (comm && comm->status() == Status::kOk) {
      try {
        comm->deallocate(registered_);
      } catch (const Error&) {
      }
    }
  }
  registered_ = nullptr;
  comm_.reset();
  std::vector<float>().swap(heap_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace cohort::transport::coll
