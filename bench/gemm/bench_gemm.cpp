// bench_gemm: GFLOP/s of the matmul operator's CPU kernel (oneDNN matmul primitive behind our
// cache) next to raw oneDNN sgemm and OpenBLAS cblas_sgemm, 1 thread and all threads, measured
// in the same run. OpenBLAS picks its kernels at load time from OPENBLAS_CORETYPE, so the
// forced-SkylakeX figures come from a child process (this binary re-run with --openblas-only).
// Also prints the per-call cost of small products with and without our primitive cache.
//
//   bench_gemm [--step [ROUNDS]]
//
// --step: the products of one training step of the GPT 6 x 384 (context 256, batch 8: 2048
// tokens), each in the layout the step uses (forward x W^T, input gradient dy W, weight gradient
// dy^T x), timed with its operands evicted from the caches before every call, as they are in the
// step; 1 thread. Prints each product's GFLOP/s for ours, oneDNN sgemm and OpenBLAS (forced
// SkylakeX, child process), and the step's total time in products for each; ROUNDS (default 5)
// interleaved rounds, the median of each.
#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <dnnl.h>

#include "core/ops/schema.h"
#include "kernels/cpu/matmul.h"

namespace {

using cohort::Attrs;
using cohort::DType;
using cohort::KernelContext;
using cohort::Tensor;

struct Shape3 { int64_t M, N, K; const char* what; };

// One product of the step: C[M, N] = op(A) op(B), A stored [M, K] ([K, M] when ta), B [K, N]
// ([N, K] when tb); `count` of them in one step.
struct StepProduct { int64_t M, N, K; bool ta, tb; int count; const char* what; };

constexpr int64_t kTok = 2048, kW = 384, kL6 = 6;
const StepProduct kStep[] = {
    {kTok, 3 * kW, kW, false, true, kL6, "qkv  x W^T"},
    {kTok, kW, kW, false, true, kL6, "proj x W^T"},
    {kTok, 4 * kW, kW, false, true, kL6, "up   x W^T"},
    {kTok, kW, 4 * kW, false, true, kL6, "down x W^T"},
    {kTok, 256, kW, false, true, 1, "head x W^T"},
    {kTok, kW, 3 * kW, false, false, kL6, "qkv  dy W"},
    {kTok, kW, kW, false, false, kL6, "proj dy W"},
    {kTok, 4 * kW, kW, false, false, kL6, "down dy W"},
    {kTok, kW, 4 * kW, false, false, kL6, "up   dy W"},
    {kTok, kW, 256, false, false, 1, "head dy W"},
    {3 * kW, kW, kTok, true, false, kL6, "qkv  dy^T x"},
    {kW, kW, kTok, true, false, kL6, "proj dy^T x"},
    {4 * kW, kW, kTok, true, false, kL6, "up   dy^T x"},
    {kW, 4 * kW, kTok, true, false, kL6, "down dy^T x"},
    {256, kW, kTok, true, false, 1, "head dy^T x"},
};

const Shape3 kShapes[] = {{1024, 768, 256, "GPT-256 qkv"},
                          {1024, 1024, 256, "GPT-256 mlp up"},
                          {1024, 256, 1024, "GPT-256 mlp down"},
                          {1024, 1024, 1024, "square"}};

// Best seconds per call over repetitions filling ~0.3 s (best, not mean: the machine is shared).
template <typename F>
double time_best(F&& f) {
  f();
  double best = 1e30, total = 0;
  for (int rep = 0; rep < 200 && (rep < 3 || total < 0.3); ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

Tensor random_tensor(const cohort::Shape& s, std::mt19937& rng) {
  Tensor t = Tensor::empty(s, DType::kF32);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

struct Buffers {
  Tensor a, b, c;
};

Buffers make(const Shape3& s) {
  std::mt19937 rng(1);
  return {random_tensor({s.M, s.K}, rng), random_tensor({s.K, s.N}, rng), Tensor::empty({s.M, s.N}, DType::kF32)};
}

double gflops(const Shape3& s, double sec) { return 2.0 * s.M * s.N * s.K / sec * 1e-9; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double run_openblas(const Shape3& s, Buffers& m) {
  return time_best([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(s.M), static_cast<int>(s.N),
                static_cast<int>(s.K), 1.0f, m.a.data<float>(), static_cast<int>(s.K), m.b.data<float>(),
                static_cast<int>(s.N), 0.0f, m.c.data<float>(), static_cast<int>(s.N));
  });
}

double run_dnnl(const Shape3& s, Buffers& m) {
  return time_best([&] {
    dnnl_sgemm('N', 'N', s.M, s.N, s.K, 1.0f, m.a.data<float>(), s.K, m.b.data<float>(), s.N, 0.0f,
               m.c.data<float>(), s.N);
  });
}

double run_ours(const Shape3& s, Buffers& m) {
  const cohort::OpSchema* op = cohort::OpRegistry::global().find("matmul");
  Attrs attrs;
  attrs.set("transpose_a", int64_t{0});
  attrs.set("transpose_b", int64_t{0});
  KernelContext ctx{attrs, {m.a, m.b}, {m.c}};
  return time_best([&] { op->kernels[0](ctx); });
}

// Child mode: OpenBLAS only, one "M N K threads gflops" line per measurement.
int openblas_only(const std::vector<int>& threads) {
  for (int t : threads) {
    openblas_set_num_threads(t);
    for (const Shape3& s : kShapes) {
      Buffers m = make(s);
      double best = 0;
      for (int round = 0; round < 3; ++round) best = std::max(best, gflops(s, run_openblas(s, m)));
      std::printf("%ld %ld %ld %d %.3f\n", static_cast<long>(s.M), static_cast<long>(s.N), static_cast<long>(s.K), t,
                  best);
    }
  }
  std::printf("core %s\n", openblas_get_corename());
  return 0;
}

// Runs this binary again with OPENBLAS_CORETYPE=SkylakeX and `args`, and returns its output
// lines (none when it cannot be started).
std::vector<std::string> skylakex_child(const std::string& args) {
  std::vector<std::string> lines;
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return lines;
  std::string cmd = std::string("OPENBLAS_CORETYPE=SkylakeX '") + self + "' " + args;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return lines;
  char line[256];
  while (std::fgets(line, sizeof(line), p)) lines.emplace_back(line);
  pclose(p);
  return lines;
}

// The child's OpenBLAS figures over kShapes (openblas_only).
std::map<std::tuple<int64_t, int>, double> openblas_skylakex(std::string* core) {
  std::map<std::tuple<int64_t, int>, double> out;
  for (const std::string& line : skylakex_child("--openblas-only")) {
    long M, N, K;
    int t;
    double g;
    char name[64];
    if (std::sscanf(line.c_str(), "%ld %ld %ld %d %lf", &M, &N, &K, &t, &g) == 5)
      out[{M * 1000000 + N * 1000 + K, t}] = g;
    else if (std::sscanf(line.c_str(), "core %63s", name) == 1) *core = name;
  }
  return out;
}

// --step: seconds of one call with cold operands, the median over `reps` calls, each after a
// pass over a buffer larger than the L2 caches (64 MiB; the operands may stay in a larger L3, as
// they do between the products of a step).
template <typename F>
double time_cold(F&& f, std::vector<float>& flush, int reps) {
  std::vector<double> t;
  for (int rep = 0; rep < reps + 1; ++rep) {
    for (size_t i = 0; i < flush.size(); i += 16) flush[i] += 1.0f;
    auto t0 = std::chrono::steady_clock::now();
    f();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) t.push_back(s);  // the first call builds our primitive
  }
  return median(t);
}

// A step product's operands, random as make's (A stored [K, M] when transposed: the same size).
Buffers make_step(const StepProduct& p) {
  std::mt19937 rng(1);
  return {random_tensor({p.M, p.K}, rng), random_tensor({p.K, p.N}, rng), Tensor::empty({p.M, p.N}, DType::kF32)};
}

constexpr int kStepReps = 5;
std::vector<float> flush_buffer() { return std::vector<float>(size_t{64} << 20 >> 2, 0.0f); }

// Child mode: one round of OpenBLAS over the step's products, one "index seconds" line each.
int openblas_step_only() {
  openblas_set_num_threads(1);
  std::vector<float> flush = flush_buffer();
  for (size_t i = 0; i < std::size(kStep); ++i) {
    const StepProduct& p = kStep[i];
    Buffers m = make_step(p);
    const double sec = time_cold([&] {
      cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans,
                  static_cast<int>(p.M), static_cast<int>(p.N), static_cast<int>(p.K), 1.0f, m.a.data<float>(),
                  static_cast<int>(p.ta ? p.M : p.K), m.b.data<float>(), static_cast<int>(p.tb ? p.K : p.N), 0.0f,
                  m.c.data<float>(), static_cast<int>(p.N));
    }, flush, kStepReps);
    std::printf("%zu %.9f\n", i, sec);
  }
  return 0;
}

// One round of the OpenBLAS SkylakeX child over the step's products: seconds per product index.
std::map<size_t, double> openblas_step_round() {
  std::map<size_t, double> out;
  for (const std::string& line : skylakex_child("--openblas-step-only")) {
    size_t i;
    double sec;
    if (std::sscanf(line.c_str(), "%zu %lf", &i, &sec) == 2) out[i] = sec;
  }
  return out;
}

int step_products(int rounds) {
  omp_set_num_threads(1);
  std::vector<float> flush = flush_buffer();
  const size_t n = std::size(kStep);
  std::vector<Buffers> bufs;
  for (const StepProduct& p : kStep) bufs.push_back(make_step(p));
  // Rounds interleave the three (ours, oneDNN sgemm, then the OpenBLAS child over every product),
  // so a change of the box's speed reaches all of them; each figure is the median over rounds.
  std::vector<std::vector<double>> ours(n), dn(n), skx(n);
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < n; ++i) {
      const StepProduct& p = kStep[i];
      Buffers& m = bufs[i];
      const int64_t lda = p.ta ? p.M : p.K, ldb = p.tb ? p.K : p.N;
      ours[i].push_back(time_cold([&] {
        cohort::kernels::cpu::gemm(p.ta, p.tb, p.M, p.N, p.K, 1.0f, m.a.data<float>(), lda, m.b.data<float>(), ldb,
                                   0.0f, m.c.data<float>(), p.N);
      }, flush, kStepReps));
      dn[i].push_back(time_cold([&] {
        dnnl_sgemm(p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', p.M, p.N, p.K, 1.0f, m.a.data<float>(), lda,
                   m.b.data<float>(), ldb, 0.0f, m.c.data<float>(), p.N);
      }, flush, kStepReps));
    }
    for (const auto& [i, sec] : openblas_step_round()) skx[i].push_back(sec);
  }
  std::printf("bench_gemm --step: the products of a GPT 6x384 step (2048 tokens), cold operands, 1 thread, "
              "GFLOP/s (median of %d rounds)\n", rounds);
  std::printf("%-13s %-16s %5s %8s %8s %9s %9s %9s\n", "product", "M x N x K", "count", "ours", "oneDNN",
              "OBLAS-skx", "ours/dnnl", "ours/skx");
  double tot_ours = 0, tot_dnnl = 0, tot_skx = 0;
  for (size_t i = 0; i < n; ++i) {
    const StepProduct& p = kStep[i];
    const double o = median(ours[i]), d = median(dn[i]), k = skx[i].empty() ? 0.0 : median(skx[i]);
    const Shape3 s{p.M, p.N, p.K, p.what};
    std::string label = std::to_string(p.M) + "x" + std::to_string(p.N) + "x" + std::to_string(p.K);
    std::printf("%-13s %-16s %5d %8.1f %8.1f %9.1f %9.2f %9.2f\n", p.what, label.c_str(), p.count, gflops(s, o),
                gflops(s, d), k > 0 ? gflops(s, k) : 0.0, d / o, k > 0 ? k / o : 0.0);
    tot_ours += p.count * o;
    tot_dnnl += p.count * d;
    tot_skx += p.count * k;
  }
  std::printf("a step's products, ms: ours %.1f, oneDNN sgemm %.1f, OpenBLAS SkylakeX %.1f; speed ours/dnnl %.2f, "
              "ours/skx %.2f\n", tot_ours * 1e3, tot_dnnl * 1e3, tot_skx * 1e3, tot_dnnl / tot_ours,
              tot_skx > 0 ? tot_skx / tot_ours : 0.0);
  return 0;
}

void small_shape_overhead() {
  // One thread: with more, an OpenMP join on a busy machine swamps the microseconds measured.
  omp_set_num_threads(1);
  std::printf("\nper-call cost of small products, 1 thread (us):\n");
  std::printf("%-16s %12s %12s %12s\n", "M x N x K", "ours, cached", "ours, no cache", "dnnl_sgemm");
  for (Shape3 s : {Shape3{16, 64, 64, ""}, Shape3{64, 64, 64, ""}, Shape3{128, 128, 32, ""}, Shape3{256, 256, 256, ""}}) {
    Buffers m = make(s);
    cohort::kernels::cpu::set_matmul_cache_enabled(true);
    double on = run_ours(s, m);
    cohort::kernels::cpu::set_matmul_cache_enabled(false);
    double off = run_ours(s, m);
    cohort::kernels::cpu::set_matmul_cache_enabled(true);
    double dn = run_dnnl(s, m);
    std::string label = std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K);
    std::printf("%-16s %12.1f %12.1f %12.1f\n", label.c_str(), on * 1e6, off * 1e6, dn * 1e6);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int all = std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  std::vector<int> threads = {1};
  if (all > 1) threads.push_back(all);
  if (argc > 1 && std::strcmp(argv[1], "--openblas-only") == 0) return openblas_only(threads);
  if (argc > 1 && std::strcmp(argv[1], "--openblas-step-only") == 0) return openblas_step_only();
  if (argc > 1 && std::strcmp(argv[1], "--step") == 0) return step_products(argc > 2 ? std::max(1, std::atoi(argv[2])) : 5);

  std::string forced_core = "?";
  auto skx = openblas_skylakex(&forced_core);
  std::printf("bench_gemm: fp32 C[M,N] = A[M,K] B[K,N], GFLOP/s (best of repeated calls)\n");
  std::printf("OpenBLAS detected core: %s; forced: %s\n\n", openblas_get_corename(), forced_core.c_str());
  std::printf("%-17s %-16s %3s %8s %8s %8s %8s %9s %9s %9s\n", "shape", "M x N x K", "thr", "ours", "oneDNN",
              "OBLAS", "OBLAS-skx", "ours/dnnl", "ours/obl", "ours/skx");
  for (int t : threads) {
    omp_set_num_threads(t);
    openblas_set_num_threads(t);
    for (const Shape3& s : kShapes) {
      Buffers m = make(s);
      // Interleaved rounds, best of each: contention on a shared machine then hits all alike.
      double ours = 0, dn = 0, ob = 0;
      for (int round = 0; round < 3; ++round) {
        ours = std::max(ours, gflops(s, run_ours(s, m)));
        dn = std::max(dn, gflops(s, run_dnnl(s, m)));
        ob = std::max(ob, gflops(s, run_openblas(s, m)));
      }
      auto it = skx.find({s.M * 1000000 + s.N * 1000 + s.K, t});
      double sk = it == skx.end() ? 0.0 : it->second;
      std::string label = std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K);
      std::printf("%-17s %-16s %3d %8.1f %8.1f %8.1f %8.1f %9.2f %9.2f %9.2f\n", s.what, label.c_str(), t, ours, dn, ob,
                  sk, ours / dn, ours / ob, sk > 0 ? ours / sk : 0.0);
    }
  }
  small_shape_overhead();
  return 0;
}
