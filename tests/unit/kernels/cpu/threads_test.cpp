// The loop helpers of kernels/cpu/threads.h: where a loop forks threads and where it enters no
// OpenMP region at all (omp_get_level() counts every region entered, active or not), and that
// every index runs once either way.
#include <gtest/gtest.h>

#include <omp.h>

#include <atomic>
#include <vector>

#include "kernels/cpu/threads.h"

namespace cohort::kernels::cpu {
namespace {

// Sets the thread count for the scope and restores the caller's after.
class Threads {
 public:
  explicit Threads(int n) : before_(omp_get_max_threads()) { set_num_threads(n); }
  ~Threads() { set_num_threads(before_); }

 private:
  int before_;
};

// Runs a parallel_for over n indices; returns the region levels seen (the largest) and checks that
// each index ran once.
int run_parallel_for(int64_t n, bool large) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  std::atomic<int> level{-1};
  parallel_for(n, large, [&](int64_t i) {
    seen[static_cast<size_t>(i)]++;
    int l = omp_get_level(), was = level.load();
    while (l > was && !level.compare_exchange_weak(was, l)) {
    }
  });
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)].load(), 1) << i;
  return level.load();
}

TEST(Threads, OneThreadEntersNoRegion) {
  Threads one(1);
  EXPECT_FALSE(forks(true));
  EXPECT_EQ(run_parallel_for(1000, true), 0);
  int spans = 0, level = -1;
  parallel_spans(int64_t{1} << 20, 0, [&](int64_t b, int64_t e) {
    ++spans;
    level = omp_get_level();
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, int64_t{1} << 20);
  });
  EXPECT_EQ(spans, 1);
  EXPECT_EQ(level, 0);
  EXPECT_EQ(parallel_span_sum(100, 0, [](int64_t b, int64_t e) { return static_cast<double>(e - b); }), 100.0);
}

TEST(Threads, TwoThreadsForkLargeLoopsOnly) {
  Threads two(2);
  EXPECT_TRUE(forks(true));
  EXPECT_FALSE(forks(false));
  EXPECT_EQ(run_parallel_for(1000, true), 1);
  EXPECT_EQ(run_parallel_for(1000, false), 0);
  EXPECT_EQ(run_parallel_for(0, true), -1);  // nothing to run
  // Spans: the sum is the same as the serial one whichever way the loop went.
  const auto count = [](int64_t b, int64_t e) { return static_cast<double>(e - b); };
  EXPECT_EQ(parallel_span_sum(100000, 0, count), 100000.0);
  EXPECT_EQ(parallel_span_sum(100000, 1 << 20, count), 100000.0);
}

TEST(Threads, InsideARegionLoopsStayOnTheirThread) {
  Threads two(2);
  std::atomic<int> forked{0}, nested_level{0};
#pragma omp parallel num_threads(2)
  {
    if (forks(true)) forked++;
    parallel_for(10, true, [&](int64_t) {
      if (omp_get_level() > 1) nested_level++;
    });
  }
  EXPECT_EQ(forked.load(), 0);
  EXPECT_EQ(nested_level.load(), 0);
}

}  // namespace
}  // namespace cohort::kernels::cpu
