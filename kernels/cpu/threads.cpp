// Thread count of CPU math (see threads.h).
#include "kernels/cpu/threads.h"

#include <omp.h>

#include <atomic>

namespace cohort::kernels::cpu {

namespace {
std::atomic<int> g_threads{0};
}

void set_num_threads(int n) {
  g_threads = n > 0 ? n : 0;
  if (n > 0) omp_set_num_threads(n);
}

int configured_num_threads() { return g_threads.load(); }

void use_threads(int override_n) {
  int n = override_n > 0 ? override_n : g_threads.load();
  if (n > 0 && omp_get_max_threads() != n) omp_set_num_threads(n);
}

}  // namespace cohort::kernels::cpu
