// Thread count of CPU math. Our loops and oneDNN share one OpenMP runtime, whose setting is per
// calling thread; the process-wide choice is stored here and applied by every entry that
// computes (use_threads), so it holds whichever thread drives training.
#pragma once

namespace cohort::kernels::cpu {

// Process-wide thread count (n >= 1); 0 restores the runtime's default.
void set_num_threads(int n);
int configured_num_threads();  // 0 when never set
// Applies `override_n` when > 0, else the process-wide setting, to the calling thread.
void use_threads(int override_n);

}  // namespace cohort::kernels::cpu
