// Command-line options of `cohort train` and their parser. Parsing never exits: a bad argument
// throws UsageError (exit code 2), so the caller decides how to report it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace cohort_cli {

// A mistake in the command line; main() prints "error: <what>" and exits with 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A failure while running (missing data, a cohort call failing); exit code 1.
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "Not given on the command line" for numeric options that have model-dependent defaults.
constexpr int64_t kUnset = INT64_MIN;

struct Options {
  std::string model;       // mlp | cnn | gpt
  std::string data;        // fashion-mnist | brown
  std::string data_dir;    // "" = the dataset's default location
  int64_t epochs = 0;      // 0: not given
  int64_t steps = 0;       // 0: not given (neither given: mlp 1 epoch, cnn 3, gpt 2500 steps)
  int64_t batch = kUnset;  // the model's default unless given
  double lr = -1;          // < 0: the model's default (a given value must be > 0)
  std::string optimizer = "adamw";
  int64_t warmup = -1;     // -1: the model's default
  double weight_decay = -1;  // -1: the model's default
  double clip = -1;        // -1: the model's default
  int64_t layers = 4, width = 256, heads = 4, context = 128;  // gpt
  int64_t hidden = 256;    // mlp
  int64_t eval_every = 0;  // 0: only at the end
  int64_t eval_examples = -1;  // periodic evaluations: -1 the model's default, 0 all
  int64_t log_every = 0;   // metrics lines; 0: about 100 per run
  std::string metrics;     // JSON lines file
  std::string save;        // checkpoint path
  int64_t save_every = 0;  // 0: only at the end (when --save is given)
  std::string resume;      // checkpoint path
  int64_t threads = 0;     // 0: leave cohort's default
  std::string device = "cpu";  // cpu | cuda: where the trainer runs
  std::string dtype = "f32";   // f32 | bf16: the gpt's parameters and activations (fp32 master copies)
  // Data parallelism over the ranks this process was launched with (cohort-run, torchrun, mpirun,
  // srun): "" = one process; sync | localsgd | slowmo | diloco | co2 (a cohort_plan_preset).
  std::string parallel;
  int64_t tau = 8;         // inner steps per round for localsgd, slowmo, diloco and co2
  int64_t zero = 0;        // ZeRO stage: 1 shards optimizer (outer) state, 2 gradients, 3 parameters
  int64_t staleness_penalty = -1;  // co2: 0 off, 1 on, -1 the preset's (off)
  double outer_lr = -1;            // localsgd/slowmo/diloco/co2: outer learning rate, -1 the preset's
  double outer_momentum = -1;      // outer momentum in [0, 1), -1 the preset's
  int64_t nesterov = -1;           // 0 or 1, -1 the preset's
  double outer_clip = -1;          // co2: outer momentum clip threshold, 0 off, -1 the preset's
  int64_t noise_scaling = 0;       // localsgd/slowmo/diloco/co2 with adamw: cohort_plan_options::inner_noise_scaling
  uint64_t seed = 1;
  // Hidden flags for tests/parity: initial weights from a file, every step's batch to a file,
  // and every step's loss to a text file.
  std::string init_from;
  std::string dump_batches;
  std::string loss_log;
  int64_t stop_after = 0;  // hidden: stop (and save) after this many steps of this run
  bool no_eval = false;    // hidden: skip the final evaluation (parity runs)
  bool evaluates = true;   // set off on ranks other than 0: they only join the evaluation points
  bool quiet = false;      // no progress line
};

// Parses argv[first..argc) after the subcommand. Throws UsageError.
Options parse_train_options(int argc, char** argv, int first);

// Fills the model-dependent defaults (batch, lr, warmup, ...) and checks combinations.
void apply_defaults(Options& o);

const char* usage_text();

}  // namespace cohort_cli
