// The host emulation of warp_emulator.h: one ucontext fiber per thread, barriers that yield
// until the last participant arrives, warp collectives (mma, ldmatrix, quad shuffles) as an
// exchange through a per-warp slot area between two warp barriers, and a scheduler that resumes
// the unfinished fibers (all of them, or the threads of a random subset of the warps) in a fresh
// random order every pass and reports a pass over all of them in which nothing moved as a
// deadlock. Single-threaded: one emulated block at a time.
#include "tests/gpu/warp_emulator.h"

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace cohort::gpu_test::emu {

namespace {

constexpr size_t kStackBytes = 256 * 1024;

struct Copy {
  void* dst;
  const void* src;
  int bytes;
  bool valid;
};

struct Fiber {
  ucontext_t ctx{};
  std::unique_ptr<unsigned char[]> stack;
  int tid = 0;
  bool done = false;
  const char* waiting = nullptr;         // the barrier it waits at, for deadlock reports
  std::vector<Copy> open;                // cp.async issued since the last commit
  std::deque<std::vector<Copy>> groups;  // committed, not landed yet
};

struct Barrier {
  int expected = 0, arrived = 0;
  uint64_t generation = 0;
};

struct Slots {  // one warp's exchange area
  uint32_t a[32][4];
  uint32_t b[32][2];
  const void* p[32];
  float f[32];
};

struct FreeDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};

struct State {
  const std::function<void(int, int, int, unsigned char*)>* body = nullptr;
  int bx = 0, by = 0, threads = 0;
  std::unique_ptr<unsigned char, FreeDeleter> smem;
  size_t smem_bytes = 0;
  std::vector<Fiber> fibers;
  Barrier block_bar;
  std::vector<Barrier> warp_bar;
  std::vector<Slots> slots;
  ucontext_t main_ctx{};
  Fiber* current = nullptr;
  uint64_t progress = 0, switches = 0;
  std::mt19937_64 rng;
  std::string error;
  std::vector<std::pair<const unsigned char*, size_t>> globals;
};

State& st() {
  static State s;
  return s;
}

[[noreturn]] void fail(const std::string& what) {
  State& s = st();
  std::ostringstream m;
  m << "block (" << s.bx << ", " << s.by << ") thread " << (s.current ? s.current->tid : -1) << ": "
    << what;
  throw std::runtime_error(m.str());
}

std::string hex(const void* p) {
  std::ostringstream m;
  m << p;
  return m.str();
}

void yield() {
  State& s = st();
  ++s.switches;
  swapcontext(&s.current->ctx, &s.main_ctx);
}

void arrive(Barrier& b, const char* what) {
  State& s = st();
  const uint64_t gen = b.generation;
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    ++b.generation;
    ++s.progress;
    return;
  }
  s.current->waiting = what;
  while (b.generation == gen) yield();
  s.current->waiting = nullptr;
  ++s.progress;
}

int tid() { return st().current->tid; }
int lane() { return tid() & 31; }
Slots& slots() { return st().slots[static_cast<size_t>(tid() >> 5)]; }
void warp_barrier() { arrive(st().warp_bar[static_cast<size_t>(tid() >> 5)], "a warp collective"); }

void check_smem(const void* p, size_t bytes, size_t align, const char* what) {
  State& s = st();
  const auto* c = static_cast<const unsigned char*>(p);
  const unsigned char* base = s.smem.get();
  if (c < base || c + bytes > base + s.smem_bytes)
    fail(std::string(what) + ": shared address " + hex(p) + " (" + std::to_string(bytes) +
         " bytes) outside the block's " + std::to_string(s.smem_bytes) + " bytes (offset " +
         std::to_string(c - base) + ")");
  if (static_cast<size_t>(c - base) % align != 0)
    fail(std::string(what) + ": shared offset " + std::to_string(c - base) + " not " +
         std::to_string(align) + "-byte aligned");
}

void check_global(const void* p, size_t bytes, size_t align, const char* what) {
  const auto* c = static_cast<const unsigned char*>(p);
  if (reinterpret_cast<uintptr_t>(c) % align != 0)
    fail(std::string(what) + ": global address " + hex(p) + " not " + std::to_string(align) +
         "-byte aligned");
  for (const auto& [base, n] : st().globals)
    if (c >= base && c + bytes <= base + n) return;
  fail(std::string(what) + ": global address " + hex(p) + " (" + std::to_string(bytes) +
       " bytes) outside every registered buffer");
}

void land(const std::vector<Copy>& group) {
  for (const Copy& c : group) {
    if (c.valid)
      std::memcpy(c.dst, c.src, static_cast<size_t>(c.bytes));
    else
      std::memset(c.dst, 0, static_cast<size_t>(c.bytes));
  }
}

void fiber_main() {
  State& s = st();
  Fiber& f = *s.current;
  try {
    (*s.body)(s.bx, s.by, f.tid, s.smem.get());
  } catch (const std::exception& e) {
    if (s.error.empty()) s.error = e.what();
  }
  f.done = true;
  ++s.progress;
}

std::string deadlock_report() {
  State& s = st();
  int done = 0, block = 0, warp = 0;
  for (const Fiber& f : s.fibers) {
    if (f.done)
      ++done;
    else if (f.waiting && std::strcmp(f.waiting, "block_sync") == 0)
      ++block;
    else
      ++warp;
  }
  std::ostringstream m;
  m << "deadlock in block (" << s.bx << ", " << s.by << "): " << block
    << " threads wait at block_sync, " << warp << " at a warp collective, " << done << " finished";
  return m.str();
}

void run_block() {
  State& s = st();
  std::memset(s.smem.get(), 0xFF, s.smem_bytes);  // NaN in fp32 and bf16: unwritten reads show
  s.block_bar = Barrier{s.threads, 0, 0};
  for (Barrier& b : s.warp_bar) b = Barrier{32, 0, 0};
  for (int t = 0; t < s.threads; ++t) {
    Fiber& f = s.fibers[static_cast<size_t>(t)];
    f.tid = t;
    f.done = false;
    f.waiting = nullptr;
    f.open.clear();
    f.groups.clear();
    if (!f.stack) f.stack.reset(new unsigned char[kStackBytes]);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.get();
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = &s.main_ctx;
    makecontext(&f.ctx, fiber_main, 0);
  }
  std::vector<int> order(static_cast<size_t>(s.threads));
  std::iota(order.begin(), order.end(), 0);
  // Half the passes resume every fiber; the other half only a random subset of the warps, so
  // warps drift apart as they may on hardware (a race between warps then shows in the result).
  std::vector<char> runs(s.warp_bar.size(), 1);
  for (;;) {
    const uint64_t before = s.progress;
    bool all_done = true;
    const bool full = s.rng() & 1;
    for (char& r : runs) r = full || (s.rng() & 1);
    std::shuffle(order.begin(), order.end(), s.rng);
    for (int t : order) {
      Fiber& f = s.fibers[static_cast<size_t>(t)];
      if (f.done) continue;
      all_done = false;
      if (!runs[static_cast<size_t>(t >> 5)]) continue;
      s.current = &f;
      ++s.switches;
      swapcontext(&s.main_ctx, &f.ctx);
      s.current = nullptr;
      if (!s.error.empty()) throw std::runtime_error(s.error);
    }
    if (all_done) return;
    if (full && s.progress == before) throw std::runtime_error(deadlock_report());
  }
}

}  // namespace

void run(const Launch& launch,
         const std::function<void(int bx, int by, int tid, unsigned char* smem)>& body) {
  State& s = st();
  if (launch.threads <= 0 || launch.threads % 32 != 0 || launch.threads > 1024)
    throw std::runtime_error("emu::run: threads must be a multiple of 32 up to 1024");
  s.body = &body;
  s.threads = launch.threads;
  s.smem_bytes = std::max<size_t>(launch.smem_bytes, 16);
  s.smem.reset(
      static_cast<unsigned char*>(std::aligned_alloc(128, (s.smem_bytes + 127) / 128 * 128)));
  s.fibers.resize(static_cast<size_t>(launch.threads));
  s.warp_bar.resize(static_cast<size_t>(launch.threads / 32));
  s.slots.resize(static_cast<size_t>(launch.threads / 32));
  s.rng.seed(launch.seed);
  s.error.clear();
  s.switches = 0;
  for (int y = 0; y < launch.grid_y; ++y)
    for (int x = 0; x < launch.grid_x; ++x) {
      s.bx = x;
      s.by = y;
      run_block();
    }
  s.body = nullptr;
}

void register_global(const void* p, size_t bytes) {
  st().globals.emplace_back(static_cast<const unsigned char*>(p), bytes);
}
void clear_globals() { st().globals.clear(); }
uint64_t switches() { return st().switches; }

}  // namespace cohort::gpu_test::emu

namespace cohort::kernels::cuda::detail::mma {

namespace emu = cohort::gpu_test::emu;
using emu::arrive;
using emu::check_global;
using emu::check_smem;
using emu::fail;
using emu::lane;
using emu::Slots;
using emu::slots;
using emu::warp_barrier;

namespace {
uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float tf32_operand(uint32_t u, const char* what) {
  if ((u & 0x1FFFu) != 0 && (u & 0x7F800000u) != 0x7F800000u) {
    std::ostringstream m;
    m << what << ": operand 0x" << std::hex << u << " not rounded to TF32 (low 13 bits set)";
    fail(m.str());
  }
  return bits_to_float(u);
}
float bf16_half(uint32_t reg, int high) {
  return bits_to_float((high ? reg >> 16 : reg & 0xFFFFu) << 16);
}
}  // namespace

void block_sync() { arrive(emu::st().block_bar, "block_sync"); }

float bits_to_float(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

float quad_max(float v) {
  Slots& w = slots();
  const int l = lane(), q = l & ~3;
  w.f[l] = v;
  warp_barrier();
  const float r = std::fmax(std::fmax(w.f[q], w.f[q + 1]), std::fmax(w.f[q + 2], w.f[q + 3]));
  warp_barrier();
  return r;
}

float quad_sum(float v) {
  Slots& w = slots();
  const int l = lane(), q = l & ~3;
  w.f[l] = v;
  warp_barrier();
  const float r = (w.f[q] + w.f[q + 1]) + (w.f[q + 2] + w.f[q + 3]);  // the xor-1-then-2 order
  warp_barrier();
  return r;
}

float exp2_approx(float x) { return std::exp2(x); }

uint32_t to_tf32(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7F800000u) == 0x7F800000u) return u;  // inf and NaN unchanged
  u += 0x1000u;                                    // half an ulp of TF32: ties away from zero
  return u & ~0x1FFFu;
}

uint32_t pack_bf16(float lo, float hi) {
  auto round = [](float x) -> uint32_t {
    const uint32_t u = float_bits(x);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu)) return 0x7FC0u;
    return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  };
  return round(lo) | (round(hi) << 16);
}

// PTX ISA, m16n8k8 .tf32: A (row, k) in lane 4 (row % 8) + k % 4, register (row >= 8) +
// 2 (k >= 4); B (k, col) in lane 4 col + k % 4, register (k >= 4); D (row, col) in lane
// 4 (row % 8) + col / 2, register 2 (row >= 8) + col % 2.
void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Slots& w = slots();
  const int l = lane(), g = l >> 2, t = l & 3;
  for (int i = 0; i < 4; ++i) w.a[l][i] = a[i];
  w.b[l][0] = b0;
  w.b[l][1] = b1;
  warp_barrier();
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 8; ++k) {
      const float av =
          tf32_operand(w.a[4 * (row % 8) + k % 4][(row >= 8) + 2 * (k >= 4)], "mma_tf32 A");
      const float bv = tf32_operand(w.b[4 * col + k % 4][k >= 4], "mma_tf32 B");
      acc += av * bv;
    }
    out[i] = acc;
  }
  warp_barrier();
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

// m16n8k16 .bf16: A (row, k) in lane 4 (row % 8) + (k % 8) / 2, register (row >= 8) +
// 2 (k >= 8), half k % 2; B (k, col) in lane 4 col + (k % 8) / 2, register (k >= 8), half k % 2.
void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Slots& w = slots();
  const int l = lane(), g = l >> 2, t = l & 3;
  for (int i = 0; i < 4; ++i) w.a[l][i] = a[i];
  w.b[l][0] = b0;
  w.b[l][1] = b1;
  warp_barrier();
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 16; ++k) {
      const float av =
          bf16_half(w.a[4 * (row % 8) + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k & 1);
      const float bv = bf16_half(w.b[4 * col + (k % 8) / 2][k >= 8], k & 1);
      acc += av * bv;
    }
    out[i] = acc;
  }
  warp_barrier();
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

// ldmatrix .x4: lanes 8m..8m+7 give the rows of matrix m; lane 4g+t receives row g, bytes
// 4t..4t+3 (non-transposed) or the 16-bit elements (2t, g) and (2t+1, g) (.trans).
static void ldmatrix(uint32_t (&r)[4], const void* row, bool trans) {
  check_smem(row, 16, 16, trans ? "ldmatrix.trans" : "ldmatrix");
  Slots& w = slots();
  const int l = lane(), g = l >> 2, t = l & 3;
  w.p[l] = row;
  warp_barrier();
  uint32_t out[4];
  for (int m = 0; m < 4; ++m) {
    if (!trans) {
      std::memcpy(&out[m], static_cast<const unsigned char*>(w.p[8 * m + g]) + 4 * t, 4);
    } else {
      uint16_t lo, hi;
      std::memcpy(&lo, static_cast<const unsigned char*>(w.p[8 * m + 2 * t]) + 2 * g, 2);
      std::memcpy(&hi, static_cast<const unsigned char*>(w.p[8 * m + 2 * t + 1]) + 2 * g, 2);
      out[m] = lo | (static_cast<uint32_t>(hi) << 16);
    }
  }
  warp_barrier();
  for (int m = 0; m < 4; ++m) r[m] = out[m];
}
void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix(r, row, false); }
void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) { ldmatrix(r, row, true); }

static void cp_async(void* dst, const void* src, int bytes, bool valid) {
  check_smem(dst, static_cast<size_t>(bytes), static_cast<size_t>(bytes), "cp.async dst");
  if (valid)
    check_global(src, static_cast<size_t>(bytes), static_cast<size_t>(bytes), "cp.async src");
  emu::st().current->open.push_back({dst, src, bytes, valid});
}
void cp_async16(void* dst, const void* src, bool valid) { cp_async(dst, src, 16, valid); }
void cp_async4(void* dst, const void* src, bool valid) { cp_async(dst, src, 4, valid); }

void cp_async_commit() {
  auto& s = emu::st();
  auto& f = *s.current;
  if (s.rng() & 1) {  // lands now
    emu::land(f.open);
    f.groups.emplace_back();
  } else {  // lands at the wait that covers it
    f.groups.push_back(std::move(f.open));
  }
  f.open.clear();
}

void cp_async_wait_n(int n) {
  auto& f = *emu::st().current;
  while (static_cast<int>(f.groups.size()) > n) {
    emu::land(f.groups.front());
    f.groups.pop_front();
  }
}

float4 lds128(const float* p) {
  check_smem(p, 16, 16, "lds128");
  float4 v;
  std::memcpy(&v, p, 16);
  return v;
}
float2 lds64(const float* p) {
  check_smem(p, 8, 8, "lds64");
  float2 v;
  std::memcpy(&v, p, 8);
  return v;
}
float ldg(const float* p) {
  check_global(p, 4, 4, "ldg");
  return *p;
}
void stg(float* p, float v) {
  check_global(p, 4, 4, "stg");
  *p = v;
}
void stg128(float* p, float4 v) {
  check_global(p, 16, 16, "stg128");
  std::memcpy(p, &v, 16);
}
void stg32(__nv_bfloat16* p, uint32_t v) {
  check_global(p, 4, 4, "stg32");
  std::memcpy(static_cast<void*>(p), &v, 4);
}

}  // namespace cohort::kernels::cuda::detail::mma
