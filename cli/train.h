// `cohort train`: the training loop with its progress line, periodic evaluation, JSON-lines
// metrics and checkpoints that carry the sampler position (so a resumed run draws the same
// batches as one that never stopped).
#pragma once

#include "cli/options.h"

namespace cohort_cli {

// Runs the whole training job. Throws UsageError or RuntimeError; returns 0 on success.
int run_train(Options options);

}  // namespace cohort_cli
