// Devices tensors live on: the host (always) and, in a build with the CUDA backend, the current
// CUDA device. This is the one place core asks which devices exist, gets their allocator and
// moves bytes between them; nothing here needs CUDA headers.
//
// The CUDA device has one compute stream for the whole process: kernels of every operator, the
// optimizer's update and copies to and from the host are queued on it in order, so nothing
// between them needs an event. Host code sees the results only through device_copy (which
// returns when the bytes have arrived) or device_synchronize.
#pragma once

#include <cstddef>
#include <string>

#include "core/tensor/tensor.h"

namespace cohort {

// "cpu" or "cuda", for messages.
const char* device_name(Device device);

// True when this build has the CUDA backend (nvcc was found at configure time).
bool cuda_built();
// Visible CUDA devices: 0 (never an error) without the backend, a driver or a device.
int cuda_device_count();
// Why device `device` cannot be used ("" when it can): "this build has no CUDA backend", the
// driver's message, or "no CUDA device visible".
std::string device_unavailable_reason(Device device);

// The allocator of tensors on `device` (cpu_allocator() for the host). Throws kUnsupported with
// device_unavailable_reason when the device cannot be used.
Allocator* device_allocator(Device device);

// Copies `bytes` bytes from src on src_device to dst on dst_device (any pair of devices), after
// the work already queued on the compute stream; returns when dst holds them.
void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

// Copies `bytes` bytes between two buffers that are both on `device`, queued after the work
// already on the compute stream; returns at once (the host copies before returning). For
// staging that later device work reads in order, with no wait on the host.
void device_copy_queued(void* dst, const void* src, Device device, size_t bytes);

// A contiguous tensor on `device` holding t's values: t itself when it is already a contiguous
// tensor there, else a copy (returns when the copy is complete). Throws as device_allocator.
Tensor to_device(const Tensor& t, Device device);

// Sets `bytes` bytes at ptr on `device` to zero (queued on the compute stream for the CUDA device).
void device_memset_zero(void* ptr, Device device, size_t bytes);

// fp32 products on the CUDA device may round their inputs to TF32 on the tensor cores (about
// 1e-3 relative; off by default). No-op without the backend.
void set_cuda_allow_tf32(bool allow);

// Waits until everything queued on the device has finished (no-op for the host). A kernel's
// asynchronous failure surfaces here (or at the next copy) as an Error naming the CUDA error.
void device_synchronize(Device device);

// The checks device kernels queued for later (bad ids or labels, found on the device): flush
// reads them all after the queued work (one copy; nothing when none is pending) and throws the
// first one's error, as the CPU kernel would have; discard forgets those of a run that failed.
// No-ops for the host, whose kernels check at once.
void device_flush_checks(Device device);
void device_discard_checks(Device device);

}  // namespace cohort
