// Tensor, Storage, the host allocator and dtype helpers.
#include "core/tensor/tensor.h"

#include <sys/mman.h>

#include <cmath>
#include <cstdlib>
#include <new>

#include "core/base/error.h"
#include "core/device/device.h"

namespace cohort {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kF16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kF16: return "f16";
  }
  return "?";
}

bool dtype_is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

bool dtype_from_int(int value, DType* out) {
  if (value < 0 || value > 4) return false;
  *out = static_cast<DType>(value);
  return true;
}

void bf16_to_f32_n(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}
void f32_to_bf16_n(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

std::string shape_str(const Shape& s) { return str_cat(s); }

int64_t outer_numel(const Shape& s, int64_t axis) {
  int64_t n = 1;
  for (int64_t d = 0; d < axis; ++d) n *= s[static_cast<size_t>(d)];
  return n;
}

int64_t inner_numel(const Shape& s, int64_t axis) {
  int64_t n = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < s.size(); ++d) n *= s[d];
  return n;
}

Shape unravel_index(const Shape& s, int64_t flat) {
  Shape pos(s.size());
  for (size_t d = pos.size(); d-- > 0;) {
    pos[d] = s[d] > 0 ? flat % s[d] : 0;
    flat = s[d] > 0 ? flat / s[d] : 0;
  }
  return pos;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* what) {
  int64_t a = axis < 0 ? axis + rank : axis;
  COHORT_CHECK(a >= 0 && a < rank, Status::kInvalidArgument, what, " ", axis,
               " is out of range for rank ", rank);
  return a;
}

namespace {
// Transparent huge pages, opt-in (COHORT_HUGE_PAGES=1, read once a process): buffers of at least
// a huge page then start on a huge-page boundary and ask the kernel for them (where it is set to
// "madvise", as on Debian). On a 2-core Xeon guest the products, which stream matrices of several
// MiB, ran 2-5% faster on them (oneDNN sgemm on rotating 4 MiB operands, 1 thread; the GPT step
// +1.7%). On a 2-core Zen 5 guest (a PVM virtual machine, 2026-11-29) a cold pass over a 3 MiB
// tensor took 2.09 ms on huge pages against 0.31 ms on 4 KiB ones (an add over 58 rotating
// buffers), the products were no faster, and `bench_compute --scaling --sizes gpt:4x768x128
// --threads 1` read 724-803 tokens/s on huge pages against 946-1020 without (three alternating
// pairs; the default GPT in `cohort train`: 6626-6768 against 7438-7737). So the default is 4 KiB
// pages. The advice only affects whole 2 MiB ranges inside the buffer, so the size is rounded to
// 4 KiB pages only, and a failed madvise (THP off) just leaves normal pages.
constexpr size_t kHugePage = size_t{2} << 20;
bool huge_pages_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("COHORT_HUGE_PAGES");
    return v != nullptr && v[0] == '1' && v[1] == '\0';
  }();
  return wanted;
}

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    const bool huge = rounded >= kHugePage && huge_pages_wanted();
    if (huge) rounded = (rounded + 4095) / 4096 * 4096;
    // posix_memalign: aligned_alloc wants a size that is a multiple of the alignment
    void* p = nullptr;
    if (posix_memalign(&p, huge ? kHugePage : 64, rounded) != 0) p = nullptr;
    COHORT_CHECK(p != nullptr, Status::kOutOfMemory, "host allocation of ", bytes, " bytes failed");
    if (huge) madvise(p, rounded, MADV_HUGEPAGE);
    return p;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
  Device device() const override { return Device::kCpu; }
};
}  // namespace

Allocator* cpu_allocator() {
  static CpuAllocator allocator;
  return &allocator;
}

Storage::Storage(Allocator* allocator, size_t bytes)
    : allocator_(allocator), data_(allocator->allocate(bytes)), bytes_(bytes) {}
Storage::Storage(void* external, size_t bytes, Device device)
    : allocator_(nullptr), data_(external), bytes_(bytes), external_device_(device) {}
Storage::~Storage() {
  if (allocator_ && !released_ && !borrowed_) allocator_->deallocate(data_, bytes_);
}

void Storage::release() {
  COHORT_CHECK(allocator_ != nullptr, Status::kInvalidState, "cannot release memory the caller owns");
  if (released_) return;
  if (!borrowed_) allocator_->deallocate(data_, bytes_);
  data_ = nullptr;
  released_ = true;
  borrowed_ = false;
}

void Storage::reacquire() {
  if (!released_) return;
  data_ = allocator_->allocate(bytes_);  // throws kOutOfMemory, leaving it released
  released_ = false;
}

void Storage::borrow(void* memory) {
  COHORT_CHECK(released_ && memory != nullptr, Status::kInvalidState,
               "only released storage can borrow memory, and not a null pointer");
  data_ = memory;
  released_ = false;
  borrowed_ = true;
}

void Storage::throw_released() {
  throw Error(Status::kInvalidState,
              "the tensor's memory is released: it is a parameter sharded across ranks between steps (ZeRO stage 3); "
              "gather the parameters first (Trainer::gather_parameters, or any C ABI parameter or evaluate call)");
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device device) {
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return view_of(std::make_shared<Storage>(data, bytes, device), 0, shape, dtype);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Allocator* allocator) {
  for (int64_t d : shape) COHORT_CHECK(d >= 0, Status::kInvalidArgument, "negative extent in shape ", shape);
  Tensor t;
  t.storage_ = std::make_shared<Storage>(allocator, static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Allocator* allocator) {
  Tensor t = empty(shape, dtype, allocator);
  device_memset_zero(t.raw(), t.device(), t.nbytes());  // a plain memset on the host
  return t;
}

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, size_t byte_offset, const Shape& shape,
                       DType dtype) {
  size_t need = byte_offset + static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  COHORT_ASSERT(storage && need <= storage->bytes(), "view exceeds its storage");
  Tensor t;
  t.storage_ = std::move(storage);
  t.byte_offset_ = byte_offset;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

Tensor Tensor::reshaped(const Shape& shape) const {
  COHORT_CHECK(shape_numel(shape) == numel(), Status::kShapeMismatch, "cannot reshape ",
               shape_str(shape_), " to ", shape_str(shape));
  COHORT_ASSERT(is_contiguous(), "reshape of a strided view");
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::permuted(const std::vector<int64_t>& perm) const {
  COHORT_CHECK(static_cast<int64_t>(perm.size()) == rank(), Status::kInvalidArgument,
               "permutation ", perm, " does not match rank ", rank());
  Tensor t = *this;
  for (size_t i = 0; i < perm.size(); ++i) {
    t.shape_[i] = shape_[static_cast<size_t>(perm[i])];
    t.strides_[i] = strides_[static_cast<size_t>(perm[i])];
  }
  return t;
}

namespace {
// Copies a strided tensor element by element into contiguous dst (same dtype size).
void gather_strided(const Tensor& src, char* dst) {
  const size_t es = dtype_size(src.dtype());
  const int64_t n = src.numel();
  const auto& shape = src.shape();
  const auto& strides = src.strides();
  const char* base = static_cast<const char*>(src.raw());
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * strides[d];
    std::memcpy(dst + static_cast<size_t>(i) * es, base + off * static_cast<int64_t>(es), es);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}
}  // namespace

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  COHORT_CHECK(device() == Device::kCpu, Status::kUnsupported, "a strided view of a device tensor (shape ",
               shape_str(shape_), ") cannot be made contiguous; device tensors must be contiguous");
  Tensor t = empty(shape_, dtype_, cpu_allocator());
  gather_strided(*this, static_cast<char*>(t.raw()));
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  COHORT_CHECK(src.shape() == shape_, Status::kShapeMismatch, "copy from ", shape_str(src.shape()),
               " into ", shape_str(shape_));
  Tensor s = src.contiguous();
  COHORT_ASSERT(is_contiguous(), "copy into a strided view");
  const size_t n = static_cast<size_t>(numel());
  if (s.device() != Device::kCpu || device() != Device::kCpu) {
    // Between devices the bytes move as they are; a dtype change happens on the host.
    if (s.dtype() == dtype_) {
      device_copy(raw(), device(), s.raw(), s.device(), nbytes());
      return;
    }
    const Tensor host_src = to_device(s, Device::kCpu);
    if (device() == Device::kCpu) {
      copy_from(host_src);
    } else {
      Tensor host_dst = empty(shape_, dtype_);
      host_dst.copy_from(host_src);
      copy_from(host_dst);
    }
    return;
  }
  if (s.dtype() == dtype_) {
    std::memcpy(raw(), s.raw(), nbytes());
  } else if (s.dtype() == DType::kF32 && dtype_ == DType::kBF16) {
    f32_to_bf16_n(s.data<float>(), data<uint16_t>(), n);
  } else if (s.dtype() == DType::kBF16 && dtype_ == DType::kF32) {
    bf16_to_f32_n(s.data<uint16_t>(), data<float>(), n);
  } else {
    throw_error(Status::kUnsupported, str_cat("copy from ", dtype_name(s.dtype()), " to ", dtype_name(dtype_)));
  }
}

void Tensor::fill(float value) {
  const size_t n = static_cast<size_t>(numel());
  COHORT_ASSERT(is_contiguous(), "fill of a strided view");
  if (device() != Device::kCpu) {
    // +0 is all-zero bits in every dtype fill takes: set on the device (a gradient of zeros
    // every step must not cost a host buffer and a copy). Other values: on the host, then copied.
    const bool fillable = dtype_ == DType::kF32 || dtype_ == DType::kBF16 || dtype_ == DType::kI32 ||
                          dtype_ == DType::kI64;
    if (fillable && value == 0.0f && !std::signbit(value)) {
      device_memset_zero(raw(), device(), nbytes());
      return;
    }
    Tensor host = empty(shape_, dtype_);
    host.fill(value);
    copy_from(host);
    return;
  }
  switch (dtype_) {
    case DType::kF32: for (size_t i = 0; i < n; ++i) data<float>()[i] = value; break;
    case DType::kBF16: {
      uint16_t b = f32_to_bf16(value);
      for (size_t i = 0; i < n; ++i) data<uint16_t>()[i] = b;
      break;
    }
    case DType::kI32: for (size_t i = 0; i < n; ++i) data<int32_t>()[i] = static_cast<int32_t>(value); break;
    case DType::kI64: for (size_t i = 0; i < n; ++i) data<int64_t>()[i] = static_cast<int64_t>(value); break;
    default: throw_error(Status::kUnsupported, str_cat("fill of ", dtype_name(dtype_)));
  }
}

}  // namespace cohort
