// What `cohort train` checks after the model and data are ready and before its first step: that
// every file the run will write can be written and every file it reads can be read — so a typo
// in --save does not cost a whole run at its end — and the warnings it prints before training.
// A failed check is a UsageError (exit code 2) naming the flag, the path and the cause.
#pragma once

#include <string>
#include <vector>

#include "cli/options.h"
#include "cli/task.h"

namespace cohort_cli {

// Checks the outputs (--save, --metrics, and the hidden --loss-log and --dump-batches) and the
// input (--resume) of this rank, named as in `o` once checkpoints carry their ".rank<r>" suffix
// (world > 1). An existing output must be
// writable — or, for a checkpoint, which is written beside its path and renamed over it, its
// directory must take new files; a missing one needs a directory that exists and takes new files
// (probed by creating the file exclusively and removing it again). Nothing existing is changed.
void check_paths(const Options& o, int world);

// check_paths on every rank of the task's job, which then agree: when any rank fails, every rank
// throws the same message ("rank R: ..."), so whichever exits first tells the cause and none is
// left waiting for a peer that has gone.
void check_job_paths(const Options& o, Task& task);

// Prints each warning as "warning: ..." on stderr, after adding the one for --parallel in a
// world of one process, which names the launcher that started this process, or says none did.
void print_warnings(std::vector<std::string> warnings, const Options& o, int world);

}  // namespace cohort_cli
