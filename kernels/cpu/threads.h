// Thread count of CPU math. Our loops and oneDNN share one OpenMP runtime, whose setting is per
// calling thread; the process-wide choice is stored here and applied by every entry that
// computes (use_threads), so it holds whichever thread drives training.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace cohort::kernels::cpu {

// Process-wide thread count (n >= 1); 0 restores the runtime's default.
void set_num_threads(int n);
int configured_num_threads();  // 0 when never set
// Applies `override_n` when > 0, else the process-wide setting, to the calling thread.
void use_threads(int override_n);

// The threads a loop starting here may use: one inside a parallel region (nested regions run on
// one thread), else the calling thread's setting.
inline int loop_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

// Whether a loop forks OpenMP threads: its work is `large` enough to pay for a fork (the caller's
// test) and more than one thread would run it (loop_threads). Every loop here asks this before
// entering `#pragma omp parallel` rather than leaving it to an if() clause: libgomp enters a
// region whose clause is false, or whose team is one thread, all the same — about 1.3 us and a
// futex call each on this project's 2-core machine, where a rank of a 2-stage interleaved
// pipeline over 8 micro-batches entered ~560 regions a step at one thread.
inline bool forks(bool large) { return large && loop_threads() > 1; }

// f(i) for i in [0, n): split over the threads (a static schedule) where forks(large), else in a
// plain loop on the calling thread. parallel_for_simd also marks the loop `simd` either way.
template <typename F>
void parallel_for(int64_t n, bool large, F&& f) {
  if (forks(large)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
  } else {
    for (int64_t i = 0; i < n; ++i) f(i);
  }
}
template <typename F>
void parallel_for_simd(int64_t n, bool large, F&& f) {
  if (forks(large)) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) f(i);
  }
}

// f(begin, end) over [0, n) cut into one contiguous span per thread (starts aligned to 64
// elements), on the calling thread alone when n <= serial_max (or !forks). For loops that hand a
// whole span to one vectorised function (a COHORT_VECTOR_CLONES loop), which an `omp parallel for`
// cannot.
template <typename F>
void parallel_spans(int64_t n, int64_t serial_max, F&& f) {
  if (!forks(n > serial_max)) {
    if (n > 0) f(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t span = ((n + threads - 1) / threads + 63) / 64 * 64;
    const int64_t begin = std::min(n, t * span), end = std::min(n, begin + span);
    if (begin < end) f(begin, end);
  }
}

// The sum of f(begin, end) -> double over the spans of parallel_spans: each thread's result is
// kept apart, then they are added in thread order.
template <typename F>
double parallel_span_sum(int64_t n, int64_t serial_max, F&& f) {
  if (!forks(n > serial_max)) return n > 0 ? f(int64_t{0}, n) : 0.0;
  std::vector<double> per_thread(static_cast<size_t>(std::max(1, omp_get_max_threads())), 0.0);
  parallel_spans(n, serial_max,
                 [&](int64_t b, int64_t e) { per_thread[static_cast<size_t>(omp_get_thread_num())] = f(b, e); });
  double sum = 0.0;
  for (double v : per_thread) sum += v;
  return sum;
}

}  // namespace cohort::kernels::cpu
