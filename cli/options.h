// Command-line options of `cohort train` and their parser. Parsing never exits: a bad argument
// throws UsageError (exit code 2), so the caller decides how to report it.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cohort_cli {

// A mistake in the command line; main() prints "error: <what>" and exits with 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A failure while running (missing data, a cohort call failing); exit code 1.
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// --tau auto, --overlap auto (cohort_plan_options.overlap_steps -1).
constexpr int64_t kAuto = -1;

// Flags whose default depends on the model or mode are std::optional: "not given" is nullopt,
// never a value a user could type. apply_defaults() fills every one of them that the chosen model
// and mode read, so code after it may dereference them.
struct Options {
  std::string model;       // mlp | cnn | gpt
  std::string data;        // fashion-mnist | brown
  std::string data_dir;    // "" = the dataset's default location
  std::optional<int64_t> epochs;  // at most one of epochs and steps is given; neither: mlp 1
  std::optional<int64_t> steps;   // epoch, cnn 3, gpt 2500 steps (filled by apply_defaults)
  std::optional<int64_t> batch;   // the model's default unless given
  std::optional<double> lr;       // the model's and optimizer's default unless given
  std::string optimizer = "adamw";
  std::optional<int64_t> warmup;        // the model's default unless given
  std::optional<double> weight_decay;   // the model's default unless given
  std::optional<double> clip;           // the model's default unless given; 0 = off
  std::optional<int64_t> layers, width, heads, context;  // gpt only: 4, 256, 4, 128
  std::optional<int64_t> hidden;                         // mlp only: 256
  int64_t eval_every = 0;  // 0: only at the end
  std::optional<int64_t> eval_examples;  // periodic evaluations: the model's default, 0 all
  std::optional<int64_t> log_every;      // metrics lines; not given: about 100 per run
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
  std::optional<int64_t> tau;  // inner steps per round for localsgd, slowmo, diloco and co2: 8
  int64_t zero = 0;        // ZeRO stage: 1 shards optimizer (outer) state, 2 gradients, 3 parameters
  // Outer settings of the local-step modes; not given: the preset's value (cohort.h lists them).
  std::optional<int64_t> staleness_penalty;  // co2: 0 off, 1 on
  std::optional<double> outer_lr;            // localsgd/slowmo/diloco/co2: outer learning rate
  std::optional<double> outer_momentum;      // outer momentum in [0, 1)
  std::optional<int64_t> nesterov;           // 0 or 1
  std::optional<double> outer_clip;          // co2: outer momentum clip threshold, 0 off
  // co2: steps a round's average travels before its merge, 1..tau, or kAuto (chosen as it runs;
  // also set by --tau auto). Not given: the preset's, 1.
  std::optional<int64_t> overlap;
  int64_t outer_bits = 0;                    // co2: 32, 8 or 4 bits a value sent; 0: the plan's default
  int64_t outer_fragments = 1;  // localsgd/slowmo/diloco/co2: cohort_plan_options::outer_fragments (1..tau)
  int64_t shard_group = 1;      // localsgd/slowmo/diloco/co2 with --zero 1-3: cohort_plan_options::shard_group
  std::optional<double> grad_keep;  // sync: top-k gradient compression, cohort_plan_options::grad_keep
  std::optional<double> bucket_mib;  // the gradient buckets' size, cohort_plan_options::bucket_bytes
  int64_t noise_scaling = 0;       // localsgd/slowmo/diloco/co2 with adamw: cohort_plan_options::inner_noise_scaling
  int64_t average_inner_state = 0;  // localsgd/slowmo/diloco: cohort_plan_options::average_inner_state
  // Tensor parallelism: the grid X x Y x Z of a model replica (cohort_plan_options::tensor_x/y/z;
  // --tensor N is Megatron's 1D, 1 x N x 1); the rest of the world is the data axis (the
  // --parallel mode); 1 x 1 x 1 = none.
  int64_t tensor_x = 1, tensor = 1, tensor_z = 1;
  int64_t tensor_degree() const { return tensor_x * tensor * tensor_z; }
  // cohort_plan_options::activation_checkpointing: recompute each gpt block in backward.
  bool activation_checkpointing = false;
  // cohort_plan_options::sequence_parallel over Y (gpt): "megatron", "all-to-all", or "" (none).
  std::string sequence_parallel;
  // Pipeline parallelism (cohort_plan_options::pipeline_*): the stages of a model replica, each
  // rank's virtual stages (interleaved), the micro-batches each rank's batch is cut into, the
  // schedule ("gpipe", "1f1b", "interleaved"; "" = the plan's default, 1f1b) and the first node
  // of stages 1.. by name, comma-separated ("" = balanced by the workload estimator).
  int64_t pipeline = 1, pipeline_chunks = 1, micro_batches = 1;
  std::string schedule;
  std::string pipeline_cuts;
  // Ranks of one model replica: pipeline stages x the tensor grid (consecutive ranks).
  int64_t model_degree() const { return pipeline * tensor_degree(); }
  // co2 over SGD inner steps: plain averaging and 8-bit messages (the library's), tau 2 (ours).
  bool co2_with_sgd() const { return parallel == "co2" && optimizer == "sgd"; }
  // --plan auto (cohort_plan_options::automatic): the planner chooses the layout — the fields
  // above from tensor_x to pipeline_cuts, zero and activation_checkpointing — at the start, for the
  // global batch --batch x world; Task then puts the chosen layout here, with batch the rows each
  // rank reads (the global batch over the data replicas and the Z ranks): copy_layout. "" = the
  // layout as given by the flags.
  // --plan fence (cohort_plan_options::fence): the world one pipeline whose rank order, cuts and
  // compression are chosen from the measured links; Task sets pipeline to the world's size.
  std::string plan;
  std::optional<int64_t> auto_trials;        // --plan auto: time the best K predicted layouts (0..64)
  int64_t fence_compression = 1;             // --plan fence: 0 turns top-k on slow cuts off
  std::optional<double> fence_min_keep;      // --plan fence: the smallest share a cut keeps, (0, 1]
  std::string pipeline_keep;                 // per cut, the share of entries sent ("" = all)
  std::optional<double> memory_limit_mib;    // cohort_plan_options::memory_limit_bytes, in MiB
  uint64_t seed = 1;
  // Hidden flags for tests/parity: initial weights from a file, every step's batch to a file,
  // and every step's loss to a text file.
  std::string init_from;
  std::string dump_batches;
  std::string loss_log;
  int64_t stop_after = 0;  // hidden: stop (and save) after this many steps of this run
  bool no_eval = false;    // hidden: skip the final evaluation (parity runs)
  bool evaluates = true;   // set off on ranks other than 0: they only join the evaluation points
  // Set on ranks other than 0 under --tensor or --pipeline: they run each evaluation with rank 0
  // (its operators hold collectives over the tensor axis; the stages send activations) and print
  // nothing.
  bool joins_evaluation = false;
  bool quiet = false;      // no progress line
  // Every rank prints its memory line at the end (parameters, gradients, optimizer state, peak
  // activations): on unless --quiet (ranks other than 0 are made quiet, not this).
  bool memory_report = true;
};

// Parses argv[first..argc) after the subcommand. Throws UsageError.
Options parse_train_options(int argc, char** argv, int first);

// Fills the model-dependent defaults (batch, lr, warmup, ...) and checks combinations: a flag
// that would change what is trained but does not apply to the chosen model or mode is a
// UsageError; one that only changes what is reported comes back as a warning for the caller to
// print ("warning: ..." on stderr, rank 0 only).
std::vector<std::string> apply_defaults(Options& o);

// The layout fields (batch, the tensor grid, the pipeline's fields, zero, activation
// checkpointing, sequence parallelism) of `from` written over `to`: after --plan auto, what the
// task chose (Task::options()) for the caller's copy of the options.
void copy_layout(const Options& from, Options& to);

const char* usage_text();
// What --help prints after the usage lines: how flags are checked and how ranks are launched.
const char* usage_notes();

}  // namespace cohort_cli
