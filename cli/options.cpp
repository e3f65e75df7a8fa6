// The parser of `cohort train` options: a table of flags with each number's range, strict
// parsing, the checks of which flags apply to which model and mode, and the per-model defaults
// that reach the README's figures.
#include "cli/options.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <utility>

namespace cohort_cli {

namespace {

int64_t parse_int(const std::string& flag, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(flag + " expects an integer, got '" + v + "'");
  return x;
}

double parse_double(const std::string& flag, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x))
    throw UsageError(flag + " expects a number, got '" + v + "'");
  return x;
}

using Setter = std::function<void(Options&, const std::string&, const std::string&)>;

constexpr int64_t kNoLimit = INT64_MAX;

// How a range reads in a message: ">= 1", "0 or 1", "0, 1, 2 or 3", "in 1..1048576".
std::string range_text(int64_t lo, int64_t hi) {
  if (hi == kNoLimit) return ">= " + std::to_string(lo);
  if (hi - lo > 3) return "in " + std::to_string(lo) + ".." + std::to_string(hi);
  std::string text;
  for (int64_t x = lo; x <= hi; ++x)
    text += std::to_string(x) + (x + 2 <= hi ? ", " : x + 1 == hi ? " or " : "");
  return text;
}

// An integer flag and its range [lo, hi]; Field is int64_t or std::optional<int64_t>.
template <typename Field>
Setter int_in(Field Options::*field, int64_t lo, int64_t hi) {
  return [field, lo, hi](Options& o, const std::string& f, const std::string& v) {
    const int64_t x = parse_int(f, v);
    if (x < lo || x > hi) throw UsageError(f + " must be " + range_text(lo, hi) + ", got " + v);
    o.*field = x;
  };
}

// A real flag whose values satisfy ok(), described as `range` ("> 0", "in [0, 1)").
Setter number(std::optional<double> Options::*field, const char* range, bool (*ok)(double)) {
  return [field, range, ok](Options& o, const std::string& f, const std::string& v) {
    const double x = parse_double(f, v);
    if (!ok(x)) throw UsageError(f + " must be " + range + ", got " + v);
    o.*field = x;
  };
}
// An integer flag in [lo, hi], or "auto" (kAuto).
Setter int_in_or_auto(std::optional<int64_t> Options::*field, int64_t lo, int64_t hi) {
  Setter number_only = int_in(field, lo, hi);
  return [field, number_only, lo, hi](Options& o, const std::string& f, const std::string& v) {
    if (v == "auto") {
      o.*field = kAuto;
      return;
    }
    try {
      number_only(o, f, v);
    } catch (const UsageError&) {
      throw UsageError(f + " must be " + range_text(lo, hi) + " or auto, got '" + v + "'");
    }
  };
}

bool positive(double x) { return x > 0; }
bool non_negative(double x) { return x >= 0; }

Setter string_field(std::string Options::*field) {
  return [field](Options& o, const std::string& f, const std::string& v) {
    if (v.empty()) throw UsageError(f + " needs a value, got ''");
    o.*field = v;
  };
}

// Every numeric flag states its range here, at parse time: a typed value is either in range or
// an error, so none can stand for "not given" (that is an empty std::optional).
const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      {"--model", string_field(&Options::model)},
      {"--data", string_field(&Options::data)},
      {"--data-dir", string_field(&Options::data_dir)},
      {"--epochs", int_in(&Options::epochs, 1, 1000000)},  // bounded: epochs x steps per epoch fits
      {"--steps", int_in(&Options::steps, 1, kNoLimit)},
      {"--batch", int_in(&Options::batch, 1, 1 << 20)},
      {"--lr", number(&Options::lr, "> 0", positive)},
      {"--optimizer", string_field(&Options::optimizer)},
      {"--warmup", int_in(&Options::warmup, 0, kNoLimit)},
      {"--weight-decay", number(&Options::weight_decay, ">= 0", non_negative)},
      {"--clip", number(&Options::clip, ">= 0 (0: off)", non_negative)},
      {"--layers", int_in(&Options::layers, 1, kNoLimit)},
      {"--width", int_in(&Options::width, 1, kNoLimit)},
      {"--heads", int_in(&Options::heads, 1, kNoLimit)},
      {"--context", int_in(&Options::context, 1, kNoLimit)},
      {"--hidden", int_in(&Options::hidden, 1, kNoLimit)},
      {"--eval-every", int_in(&Options::eval_every, 0, kNoLimit)},
      {"--eval-examples", int_in(&Options::eval_examples, 0, kNoLimit)},
      {"--log-every", int_in(&Options::log_every, 1, kNoLimit)},
      {"--metrics", string_field(&Options::metrics)},
      {"--save", string_field(&Options::save)},
      {"--save-every", int_in(&Options::save_every, 0, kNoLimit)},
      {"--resume", string_field(&Options::resume)},
      {"--threads", int_in(&Options::threads, 0, 1024)},
      {"--device", string_field(&Options::device)},
      {"--dtype", string_field(&Options::dtype)},
      {"--parallel", string_field(&Options::parallel)},
      {"--tau", int_in_or_auto(&Options::tau, 1, kNoLimit)},
      {"--overlap", int_in_or_auto(&Options::overlap, 1, kNoLimit)},  // <= tau: apply_defaults
      {"--outer-bits",
       [](Options& o, const std::string& f, const std::string& v) {
         const int64_t b = parse_int(f, v);
         if (b != 32 && b != 8 && b != 4) throw UsageError(f + " must be 32, 8 or 4, got " + v);
         o.outer_bits = b;
       }},
      {"--outer-fragments", int_in(&Options::outer_fragments, 1, 1 << 20)},  // <= tau: apply_defaults
      {"--shard-group", int_in(&Options::shard_group, 1, 1 << 20)},  // divides the ranks: the plan checks
      {"--grad-keep", number(&Options::grad_keep, "in (0, 1]", [](double x) { return x > 0 && x <= 1; })},
      {"--bucket-mib", number(&Options::bucket_mib, "in (0, 65536]", [](double x) { return x > 0 && x <= 65536; })},
      {"--zero", int_in(&Options::zero, 0, 3)},
      {"--staleness-penalty", int_in(&Options::staleness_penalty, 0, 1)},
      {"--outer-clip", number(&Options::outer_clip, ">= 0 (0: off)", non_negative)},
      {"--noise-scaling", int_in(&Options::noise_scaling, 0, 1)},
      {"--average-inner-state", int_in(&Options::average_inner_state, 0, 1)},
      {"--tensor",
       [](Options& o, const std::string& f, const std::string& v) {
         if (o.tensor_x * o.tensor * o.tensor_z > 1) throw UsageError("give one of --tensor and --grid");
         o.tensor = parse_int(f, v);
         if (o.tensor < 1 || o.tensor > 65536) throw UsageError(f + " must be in 1..65536, got " + v);
       }},
      {"--sequence-parallel",
       [](Options& o, const std::string& f, const std::string& v) {
         if (v != "megatron" && v != "all-to-all") throw UsageError(f + " must be megatron or all-to-all, got '" + v + "'");
         o.sequence_parallel = v;
       }},
      {"--grid",
       [](Options& o, const std::string& f, const std::string& v) {
         if (o.tensor_x * o.tensor * o.tensor_z > 1) throw UsageError("give one of --tensor and --grid");
         int64_t* axes[3] = {&o.tensor_x, &o.tensor, &o.tensor_z};
         size_t at = 0;
         for (int a = 0; a < 3; ++a) {
           const size_t end = a < 2 ? v.find('x', at) : v.size();
           if (end == std::string::npos || end == at || (a == 2 && v.find('x', at) != std::string::npos))
             throw UsageError(f + " expects X x Y x Z written XxYxZ (e.g. 2x2x1), got '" + v + "'");
           *axes[a] = parse_int(f, v.substr(at, end - at));
           if (*axes[a] < 1 || *axes[a] > 65536)
             throw UsageError(f + ": each of X, Y and Z must be in 1..65536, got '" + v + "'");
           at = end + 1;
         }
         if (o.tensor_x * o.tensor * o.tensor_z > 65536)
           throw UsageError(f + ": X x Y x Z must be at most 65536, got '" + v + "'");
       }},
      {"--pipeline", int_in(&Options::pipeline, 1, 65536)},
      {"--pipeline-chunks", int_in(&Options::pipeline_chunks, 1, 1024)},
      {"--micro-batches", int_in(&Options::micro_batches, 1, 1 << 20)},
      {"--schedule",
       [](Options& o, const std::string& f, const std::string& v) {
         if (v != "gpipe" && v != "1f1b" && v != "interleaved")
           throw UsageError(f + " must be gpipe, 1f1b or interleaved, got '" + v + "'");
         o.schedule = v;
       }},
      {"--pipeline-cuts",
       [](Options& o, const std::string& f, const std::string& v) {
         // Node names separated by commas: an empty one is a typo, not a name.
         if (v.empty() || v.front() == ',' || v.back() == ',' || v.find(",,") != std::string::npos)
           throw UsageError(f + " expects node names separated by commas (e.g. h.2.ln_1), got '" + v + "'");
         o.pipeline_cuts = v;
       }},
      {"--plan",
       [](Options& o, const std::string& f, const std::string& v) {
         if (v != "auto" && v != "fence")
           throw UsageError(f + " must be auto (the planner chooses the layout) or fence (one pipeline over the "
                                "measured links), got '" + v + "'");
         o.plan = v;
       }},
      {"--fence-compression", int_in(&Options::fence_compression, 0, 1)},
      {"--fence-min-keep", number(&Options::fence_min_keep, "in (0, 1]", [](double x) { return x > 0 && x <= 1; })},
      {"--pipeline-keep",
       [](Options& o, const std::string& f, const std::string& v) {
         // Shares separated by commas, each in (0, 1]; the plan checks their count against the cuts.
         size_t at = 0;
         while (true) {
           const size_t end = v.find(',', at);
           const std::string item = v.substr(at, end == std::string::npos ? std::string::npos : end - at);
           char* stop = nullptr;
           const double k = item.empty() ? 0 : std::strtod(item.c_str(), &stop);
           if (item.empty() || *stop != '\0' || !(k > 0 && k <= 1))
             throw UsageError(f + " expects shares in (0, 1] separated by commas, one per cut (e.g. 1,0.1), got '" +
                              v + "'");
           if (end == std::string::npos) break;
           at = end + 1;
         }
         o.pipeline_keep = v;
       }},
      {"--auto-trials", int_in(&Options::auto_trials, 0, 64)},
      {"--memory-limit", number(&Options::memory_limit_mib, "> 0 (MiB a rank may use)", positive)},
      {"--outer-lr", number(&Options::outer_lr, "> 0", positive)},
      {"--outer-momentum", number(&Options::outer_momentum, "in [0, 1)", [](double x) { return x >= 0 && x < 1; })},
      {"--nesterov", int_in(&Options::nesterov, 0, 1)},
      {"--seed",
       [](Options& o, const std::string& f, const std::string& v) {
         const int64_t s = parse_int(f, v);
         if (s < 0) throw UsageError("--seed must be >= 0, got " + v);
         o.seed = static_cast<uint64_t>(s);
       }},
      {"--init-from", string_field(&Options::init_from)},
      {"--dump-batches", string_field(&Options::dump_batches)},
      {"--loss-log", string_field(&Options::loss_log)},
      {"--stop-after", int_in(&Options::stop_after, 0, kNoLimit)},
  };
  return table;
}

void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

}  // namespace

const char* usage_text() {
  return "usage: cohort train --model mlp|cnn|gpt [--data fashion-mnist|brown] [--data-dir DIR]\n"
         "         [--epochs N | --steps N] [--batch B] [--lr LR] [--optimizer sgd|adamw] [--warmup N]\n"
         "         [--weight-decay W] [--clip NORM (0: off)] [--hidden H (mlp only)]\n"
         "         [--layers L] [--width C] [--heads H] [--context T] (gpt only)\n"
         "         [--eval-every N] [--eval-examples N (with --eval-every)] [--log-every N] [--metrics FILE.jsonl]\n"
         "         [--save PATH] [--save-every N] [--resume PATH] [--threads N (0: the cores of the process's CPU affinity)] [--seed S] [--quiet]\n"
         "         [--device cpu|cuda] [--dtype f32|bf16 (gpt only)]\n"
         "         [--parallel sync|localsgd|slowmo|diloco|co2 [--tau N|auto (not sync)]]  (under a launcher, below)\n"
         "         [--zero 0|1|2|3]  (ZeRO stage: sync takes 0-3; localsgd, slowmo, diloco 0-1; co2 none;\n"
         "          with --shard-group S > 1 any of 1-3, inside each replica; with --tensor / --grid over\n"
         "          the data axis, 3 included; 3 also with --pipeline / --micro-batches, gathered per slot)\n"
         "         [--grad-keep K (0 < K <= 1)]  (sync, --zero 0|1: each gradient bucket sends only its K largest\n"
         "          entries, the rest kept for later steps (error feedback); fewer bytes below K ~ 1/ranks; 1: off)\n"
         "         [--bucket-mib M]  (sync, and ZeRO inside --shard-group replicas: the gradients are reduced in\n"
         "          buckets of about M MiB, each as soon as backward has made it; 25 by default)\n"
         "         [--shard-group S]  (not sync; 1: off): replicas of S consecutive ranks, each training\n"
         "          synchronously under --zero 1-3 over its S ranks; the outer rule runs between replicas on\n"
         "          each rank's shard, so a rank's outer state and each outer all-reduce are ~1/S of the model\n"
         "          (with --outer-fragments F, ~1/(F S) an all-reduce); with --tensor / --grid or --pipeline\n"
         "          over each model position's data axis\n"
         "         [--outer-lr A] [--outer-momentum B] [--nesterov 0|1] [--noise-scaling 0|1 (adamw)]  (not sync)\n"
         "         [--average-inner-state 0|1]  (localsgd, slowmo, diloco: the ranks' inner optimizer state\n"
         "          averaged at every round end, as DDP's replicas share theirs)\n"
         "         [--outer-fragments F (1..tau)]  (not sync: the outer sync streamed in F fragments, each\n"
         "          synchronised tau/F steps after the one before, so a sync carries ~1/F of the model; with\n"
         "          --overlap auto each fragment's average is merged before the next fragment's sync)\n"
         "         [--staleness-penalty 0|1] [--outer-clip C] [--overlap N|auto (1..tau)]\n"
         "         [--outer-bits 32|8|4 (default 4; 8 with --optimizer sgd)]\n"
         "         (co2 only; --tau auto = --overlap auto: chosen from the measured all-reduce and step times)\n"
         "         (co2 with --optimizer sgd: plain averaging (outer lr 1, no momentum) and tau 2 by default)\n"
         "         [--tensor N | --grid XxYxZ]  (mlp and gpt: tensor parallelism over groups of N or X*Y*Z ranks)\n"
         "         [--activation-checkpointing]  (gpt: recompute each block's activations in backward)\n"
         "         [--sequence-parallel megatron|all-to-all]  (gpt with --tensor / --grid Y > 1: tokens split over Y)\n"
         "         [--pipeline N [--schedule gpipe|1f1b|interleaved] [--pipeline-chunks V (interleaved)]\n"
         "          [--pipeline-cuts NODE,NODE,...] [--pipeline-keep K,K,...]]  (pipeline parallelism: the model\n"
         "          cut into N stages; --pipeline-keep: per cut, the share of activations sent, top-k)\n"
         "         [--micro-batches M]  (each rank's batch cut into M micro-batches; M must divide --batch)\n"
         "         [--plan auto [--auto-trials K]]  (the planner chooses the layout: no layout flags with it)\n"
         "         [--plan fence [--fence-compression 0|1] [--fence-min-keep K]]  (geo-distributed: the world one\n"
         "          pipeline cut to the measured links; --micro-batches and --schedule gpipe|1f1b apply)\n"
         "         [--memory-limit MIB]  (memory a rank may use: auto passes over layouts above it, others fail)\n";
}

const char* usage_notes() {
  return "Every number is range-checked. A flag the chosen model or mode does not read is an error, as it\n"
         "would change what trains; one that only changes what is reported (--eval-examples without\n"
         "--eval-every, --log-every with --quiet and no --metrics) is a warning. --save, --metrics and\n"
         "--resume are checked before training starts.\n"
         "--parallel runs one process per rank, started by a launcher (README.md, 'Launching'):\n"
         "  cohort-run -n 4 -- cohort train ...   mpirun -np 4 cohort train ...   srun -n 4 cohort train ...\n"
         "  torchrun --nproc_per_node 4 --no_python cohort train ...\n"
         "Ranks on several machines need MASTER_ADDR (rank 0's host). cohort's store listens on\n"
         "COHORT_MASTER_PORT, else MASTER_PORT + 1 (MASTER_PORT is PyTorch's store), else 29501. The job\n"
         "token is COHORT_JOB_TOKEN, else derived from the launcher's job id (SLURM_JOB_ID, PMIX_NAMESPACE,\n"
         "TORCHELASTIC_RUN_ID): not a secret, so set COHORT_JOB_TOKEN where others can reach the port.\n"
         "--tensor N splits each model replica over N consecutive ranks (Megatron-LM's 1D tensor\n"
         "parallelism: the gpt's attention by heads and its mlp, the mlp's two layers); the world / N\n"
         "replicas train in the --parallel mode. N must divide the world, the heads and the hidden widths,\n"
         "and the gpt's vocabulary (its embedding and output head are cut along it).\n"
         "--grid XxYxZ is AxoNN's tensor grid (--tensor N is 1xNx1): each split layer's weight is cut over\n"
         "X along its in-features and over Y along its out-features (consecutive layers swap the two),\n"
         "and its block over Z along its rows, gathered before use; the X*Y*Z ranks of a replica are\n"
         "consecutive (Z varies fastest) and its Z ranks train on different rows, like data ranks.\n"
         "--activation-checkpointing (a field of the --parallel plan; --parallel sync with no launcher runs\n"
         "one rank) keeps only each transformer block's input through forward and recomputes the block\n"
         "just before its backward: the same gradients, less activation memory (the memory line printed at\n"
         "the end), one more forward of every block.\n"
         "--sequence-parallel megatron also splits the layernorm, dropout and residual regions between\n"
         "the split layers along the tokens over Y: their activations shrink by Y too, for the same bytes\n"
         "sent (an all-gather and a reduce-scatter where an all-reduce was); under --grid with X > 1\n"
         "the regions are whole over X. --sequence-parallel all-to-all (DeepSpeed-Ulysses') makes Y a\n"
         "sequence axis instead: nothing is cut by features, every layer holds its rank's block of the\n"
         "tokens, and attention exchanges them for every token of heads / Y heads (--tensor N, --grid\n"
         "1xNx1, or --grid 1xNxZ: the weights also cut over Z and gathered before use; not with X > 1).\n"
         "Y must divide --context (and the heads).\n"
         "--pipeline N cuts each model replica into N stages along its graph, one per rank: a replica is\n"
         "N x the tensor grid's ranks, consecutive (the stages outside the grid: pipe rank = rank / (X*Y*Z)\n"
         "within the replica), which all read the same rows. The cuts fall where the graph is narrowest,\n"
         "balancing the stages' estimated time (rank 0 prints them at the start), or at the nodes named\n"
         "by --pipeline-cuts (the first node of stages 1..N-1; N*V-1 names with --pipeline-chunks V).\n"
         "--micro-batches M cuts each rank's batch into M micro-batches that flow through the stages\n"
         "(with one stage: gradient accumulation; the update is that of the whole batch). --schedule\n"
         "orders them: gpipe runs every forward, then every backward; 1f1b (the default) alternates, so\n"
         "fewer micro-batches' activations are held; interleaved is 1f1b over V stages per rank\n"
         "(--pipeline-chunks V; M a multiple of N), a smaller bubble for more messages. The summary at\n"
         "the end reports the bubble: the share of rank 0's last step spent waiting for other stages.\n"
         "--plan auto (with --parallel) lets the planner choose the layout instead of the flags --pipeline,\n"
         "--pipeline-chunks, --schedule, --pipeline-cuts, --micro-batches, --tensor, --grid, --zero,\n"
         "--activation-checkpointing and --sequence-parallel (an error with it). The global batch is --batch x\n"
         "the world: what the ranks would train together under plain data parallelism. At the start the\n"
         "ranks probe their links, rank 0 ranks the layouts that fit by predicted step time and memory and\n"
         "prints that report and its choice (--auto-trials K also times a few steps of the K best and takes\n"
         "the fastest measured); each of the D data replicas then trains global / D rows a step (its Z ranks\n"
         "slices of them). --memory-limit MIB is the memory a rank may use (default: the host's memory over\n"
         "the ranks): auto passes over layouts predicted to need more, and fails naming memory_limit_bytes\n"
         "when none fits; a plan given by the flags that needs more fails before training.\n"
         "--plan fence (with --parallel) makes the world one pipeline for machines joined by uneven links: the\n"
         "ranks measure the links between every pair (a few seconds), rank 0 groups ranks of similar\n"
         "bandwidth, chains the groups so that neighbouring stages share the fastest links, and cuts the\n"
         "model so that the slowest of a stage's compute and a cut's transfer is fastest; a cut that would\n"
         "still be slowest sends only the top-k of its activations (at least --fence-min-keep of them,\n"
         "default 0.1; --fence-compression 0 sends everything). Rank 0 prints the link matrix and the\n"
         "partition. Every rank reads the same --batch rows; use --micro-batches to keep the stages busy.\n";
}

Options parse_train_options(int argc, char** argv, int first) {
  Options o;
  for (int i = first; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quiet" || flag == "--no-eval") {
      (flag == "--quiet" ? o.quiet : o.no_eval) = true;
      continue;
    }
    if (flag == "--activation-checkpointing") {
      o.activation_checkpointing = true;
      continue;
    }
    auto it = setters().find(flag);
    if (it == setters().end()) throw UsageError("unknown option '" + flag + "'");
    if (i + 1 >= argc) throw UsageError(flag + " needs a value");
    it->second(o, flag, argv[++i]);
  }
  return o;
}

namespace {

// The flags that size each model, for messages.
std::string size_flags(const std::string& model) {
  if (model == "mlp") return "its size is --hidden";
  if (model == "gpt") return "its size is --layers, --width, --heads and --context";
  return "its shape is fixed";
}

// Model-shape flags change what is trained: one the chosen model does not read is an error.
void check_model_flags(const Options& o) {
  const std::pair<const char*, bool> gpt_flags[] = {{"--layers", o.layers.has_value()},
                                                    {"--width", o.width.has_value()},
                                                    {"--heads", o.heads.has_value()},
                                                    {"--context", o.context.has_value()}};
  for (const auto& [flag, given] : gpt_flags)
    require(!given || o.model == "gpt",
            std::string(flag) + " applies to --model gpt, not " + o.model + " (" + size_flags(o.model) + ")");
  require(!o.hidden || o.model == "mlp", "--hidden applies to --model mlp, not " + o.model + " (" +
                                             size_flags(o.model) + ")");
}

// co2 with SGD inner steps: rounds of 2 steps (one a fragment at least). With SGD the accuracy
// is set by the round's length (CNN, 4 ranks, 3 epochs, seeds 1-3: blocking local SGD at tau 2
// 86.03% against sync's 86.11%, at tau 8 84.71%; co2 at tau 2 with 8-bit messages 85.85%, at tau 8
// 84.58%: bench/time_to_accuracy/README.md). AdamW keeps 8: DiLoCo's outer Nesterov, co2's rule
// with it, fails at short rounds. The other modes keep the published methods' 8.
int64_t default_tau(const Options& o) { return o.co2_with_sgd() ? std::max<int64_t>(2, o.outer_fragments) : 8; }

// Data-parallel flags change what is trained too: each needs the mode that reads it.
void check_parallel_flags(const Options& o) {
  require(o.parallel.empty() || o.parallel == "sync" || o.parallel == "localsgd" || o.parallel == "slowmo" ||
              o.parallel == "diloco" || o.parallel == "co2",
          "unknown --parallel '" + o.parallel + "' (expected sync, localsgd, slowmo, diloco or co2)");
  require(o.plan.empty() || !o.parallel.empty(),
          "--plan " + o.plan + " needs --parallel (sync, localsgd, slowmo, diloco or co2: the mode the chosen layout's "
          "data replicas train in; --parallel sync without a launcher runs one rank)");
  require((o.fence_compression == 1 && !o.fence_min_keep) || o.plan == "fence",
          "--fence-compression and --fence-min-keep need --plan fence");
  require(o.pipeline_keep.empty() || o.pipeline > 1, "--pipeline-keep applies to --pipeline N with N > 1");
  require(!o.memory_limit_mib || !o.parallel.empty(), "--memory-limit needs --parallel (it is a field of the "
                                                       "parallel plan)");
  require(!o.auto_trials || o.plan == "auto", "--auto-trials needs --plan auto");
  if (!o.plan.empty()) {
    // fence chooses the stages, their order and cuts, and keeps the micro-batches and schedule.
    const bool fence = o.plan == "fence";
    std::string given;
    const std::pair<const char*, bool> layout_flags[] = {
        {"--pipeline", o.pipeline > 1},
        {"--pipeline-chunks", o.pipeline_chunks > 1},
        {"--schedule", !fence && !o.schedule.empty()},
        {"--pipeline-cuts", !o.pipeline_cuts.empty()},
        {"--micro-batches", !fence && o.micro_batches > 1},
        {"--tensor / --grid", o.tensor_degree() > 1},
        {"--zero", o.zero > 0},
        {"--activation-checkpointing", o.activation_checkpointing},
        {"--sequence-parallel", !o.sequence_parallel.empty()}};
    for (const auto& [flag, on] : layout_flags)
      if (on) given += std::string(given.empty() ? "" : ", ") + flag;
    require(given.empty(), "--plan " + o.plan + " chooses the layout itself: drop " + given + " (or drop --plan " +
                               o.plan + " to give the layout by the flags)");
    require(!fence || o.schedule != "interleaved", "--plan fence runs one stage per rank: --schedule gpipe or 1f1b");
  }
  require(o.zero == 0 || !o.parallel.empty(), "--zero needs --parallel (and several ranks)");
  const bool local_steps = !o.parallel.empty() && o.parallel != "sync";
  require(!o.tau || local_steps,
          "--tau needs --parallel localsgd, slowmo, diloco or co2 (local steps; sync averages every step)");
  require(o.noise_scaling == 0 || local_steps,
          "--noise-scaling needs --parallel localsgd, slowmo, diloco or co2 (local steps)");
  require(o.average_inner_state == 0 || o.parallel == "localsgd" || o.parallel == "slowmo" || o.parallel == "diloco",
          "--average-inner-state needs --parallel localsgd, slowmo or diloco (blocking round ends; co2 measured no "
          "gain with it)");
  require(o.noise_scaling == 0 || o.optimizer == "adamw",
          "--noise-scaling 1 applies to --optimizer adamw (it rescales AdamW's second moment), not sgd");
  require((!o.outer_lr && !o.outer_momentum && !o.nesterov) || local_steps,
          "--outer-lr, --outer-momentum and --nesterov need --parallel localsgd, slowmo, diloco or co2");
  const bool fp32_messages = !o.outer_bits || o.outer_bits == 32;  // 0: the plan's default
  require((!o.staleness_penalty && !o.outer_clip && !o.overlap && fp32_messages) || o.parallel == "co2",
          "--staleness-penalty, --outer-clip, --overlap and --outer-bits need --parallel co2");
  require(!o.tau || *o.tau != kAuto || o.parallel == "co2", "--tau auto needs --parallel co2");
  require(o.outer_fragments == 1 || local_steps,
          "--outer-fragments needs --parallel localsgd, slowmo, diloco or co2 (sync has no outer synchronisation)");
  const int64_t tau = o.tau && *o.tau != kAuto ? *o.tau : default_tau(o);
  require(!o.overlap || *o.overlap == kAuto || *o.overlap <= tau,
          "--overlap must be in 1..tau (" + std::to_string(tau) + "), got " + std::to_string(o.overlap.value_or(0)));
  require(o.outer_fragments <= tau, "--outer-fragments must be in 1..tau (" + std::to_string(tau) + "), got " +
                                        std::to_string(o.outer_fragments));
  require(!o.grad_keep || *o.grad_keep == 1 || (o.parallel == "sync" && o.zero <= 1 && o.tensor_degree() == 1 &&
                                                 o.pipeline == 1 && o.plan.empty()),
          "--grad-keep compresses --parallel sync's gradients; with --zero 2|3, --tensor / --grid, --pipeline or --plan it "
          "is not supported yet");
  require(o.shard_group == 1 || local_steps,
          "--shard-group needs --parallel localsgd, slowmo, diloco or co2 (replicas that synchronise every tau steps)");
  require(o.shard_group == 1 || o.zero >= 1,
          "--shard-group " + std::to_string(o.shard_group) + " runs ZeRO inside each replica: give --zero 1, 2 or 3");
  require(o.tensor_degree() == 1 || !o.parallel.empty(),
          "--tensor and --grid need --parallel (sync, localsgd, slowmo, diloco or co2: how the model replicas "
          "train)");
  require(o.sequence_parallel.empty() || (o.model == "gpt" && o.tensor > 1),
          "--sequence-parallel applies to --model gpt with --tensor N or --grid XxYxZ, Y > 1 (it splits the tokens "
          "over Y)");
  const bool pipeline_flags = o.pipeline > 1 || o.pipeline_chunks > 1 || !o.schedule.empty() || !o.pipeline_cuts.empty();
  require((!pipeline_flags && o.micro_batches == 1) || !o.parallel.empty(),
          "--pipeline, --pipeline-chunks, --schedule, --pipeline-cuts and --micro-batches need --parallel (sync, "
          "localsgd, slowmo, diloco or co2: they are fields of the parallel plan; --parallel sync without a "
          "launcher runs one rank)");
  require(o.pipeline > 1 || o.plan == "fence" || (o.pipeline_chunks == 1 && o.schedule.empty() && o.pipeline_cuts.empty()),
          "--pipeline-chunks, --schedule and --pipeline-cuts apply to --pipeline N with N > 1");
  require(o.pipeline_chunks == 1 || o.schedule == "interleaved",
          "--pipeline-chunks " + std::to_string(o.pipeline_chunks) +
              " needs --schedule interleaved (gpipe and 1f1b run one stage per rank)");
  require(o.schedule != "interleaved" || o.micro_batches % o.pipeline == 0,
          "--schedule interleaved needs --micro-batches (" + std::to_string(o.micro_batches) +
              ") to be a multiple of --pipeline (" + std::to_string(o.pipeline) + ")");
  require(!o.activation_checkpointing || o.model == "gpt",
          "--activation-checkpointing applies to --model gpt (it recomputes transformer blocks; " + o.model +
              " has none)");
  require(!o.bucket_mib || !o.parallel.empty(),
          "--bucket-mib sizes the parallel plan's gradient buckets: it needs --parallel");
  require(!o.activation_checkpointing || !o.parallel.empty(),
          "--activation-checkpointing needs --parallel (it is a field of the parallel plan; --parallel sync "
          "without a launcher runs one rank)");
}

}  // namespace

void copy_layout(const Options& from, Options& to) {
  to.batch = from.batch;
  to.tensor_x = from.tensor_x;
  to.tensor = from.tensor;
  to.tensor_z = from.tensor_z;
  to.pipeline = from.pipeline;
  to.pipeline_chunks = from.pipeline_chunks;
  to.micro_batches = from.micro_batches;
  to.schedule = from.schedule;
  to.pipeline_cuts = from.pipeline_cuts;
  to.pipeline_keep = from.pipeline_keep;
  to.zero = from.zero;
  to.shard_group = from.shard_group;
  to.grad_keep = from.grad_keep;
  to.activation_checkpointing = from.activation_checkpointing;
  to.sequence_parallel = from.sequence_parallel;
}

std::vector<std::string> apply_defaults(Options& o) {
  require(!o.model.empty(), "--model is required (mlp, cnn or gpt)");
  require(o.model == "mlp" || o.model == "cnn" || o.model == "gpt",
          "unknown model '" + o.model + "' (expected mlp, cnn or gpt)");
  if (o.data.empty()) o.data = o.model == "gpt" ? "brown" : "fashion-mnist";
  require(o.data == "fashion-mnist" || o.data == "brown",
          "unknown data '" + o.data + "' (expected fashion-mnist or brown)");
  require((o.model == "gpt") == (o.data == "brown"),
          "model '" + o.model + "' cannot train on '" + o.data + "' (gpt reads brown; mlp and cnn fashion-mnist)");
  require(o.optimizer == "adamw" || o.optimizer == "sgd",
          "unknown optimizer '" + o.optimizer + "' (expected sgd or adamw)");
  require(!(o.epochs && o.steps), "give either --epochs or --steps, not both");
  require(o.device == "cpu" || o.device == "cuda", "unknown --device '" + o.device + "' (expected cpu or cuda)");
  require(o.dtype == "f32" || o.dtype == "bf16", "unknown --dtype '" + o.dtype + "' (expected f32 or bf16)");
  require(o.dtype == "f32" || o.model == "gpt", "--dtype bf16 is for --model gpt (the mlp and cnn builders are f32)");
  check_model_flags(o);
  check_parallel_flags(o);
  require(o.save_every == 0 || !o.save.empty(), "--save-every needs --save PATH");

  // Flags that only change what is reported are warned about, not refused.
  std::vector<std::string> warnings;
  if (o.eval_examples && o.eval_every == 0)
    warnings.push_back("--eval-examples applies to the periodic evaluations of --eval-every N; the final "
                       "evaluation reads the whole validation split");
  if (o.log_every && o.quiet && o.metrics.empty())
    warnings.push_back("--log-every has no effect with --quiet and no --metrics");

  const bool gpt = o.model == "gpt", cnn = o.model == "cnn";
  // The defaults reach the README's figures: MLP 1 epoch, CNN 3 epochs, GPT 2500 steps.
  if (!o.epochs && !o.steps) (gpt ? o.steps : o.epochs) = gpt ? 2500 : (cnn ? 3 : 1);
  if (!o.batch) o.batch = gpt ? 8 : 32;
  if (!o.lr) o.lr = o.optimizer == "sgd" ? 0.05 : (gpt ? 2e-3 : (cnn ? 2e-3 : 3e-3));
  if (!o.warmup) o.warmup = gpt ? 100 : (cnn ? 100 : 50);
  if (!o.weight_decay) o.weight_decay = gpt ? 0.1 : 0.01;
  if (!o.clip) o.clip = gpt ? 1.0 : 0.0;
  if (!o.eval_examples) o.eval_examples = gpt ? 2048 : 0;
  if (o.tau == kAuto) {  // co2 picks its overlap, and tau from it, never below the default
    o.tau = default_tau(o);
    o.overlap = kAuto;
  }
  if (!o.tau) o.tau = default_tau(o);  // --outer-bits unset: the plan's default (8 over SGD: plan.h)
  // Every model's shape is filled (only the chosen one is read), so no reader meets an empty one.
  if (!o.hidden) o.hidden = 256;
  if (!o.layers) o.layers = 4;
  if (!o.width) o.width = 256;
  if (!o.heads) o.heads = 4;
  if (!o.context) o.context = 128;
  require(*o.batch % o.micro_batches == 0, "--micro-batches (" + std::to_string(o.micro_batches) +
                                                ") must divide --batch (" + std::to_string(*o.batch) + ")");
  require(*o.width % *o.heads == 0, "--heads (" + std::to_string(*o.heads) + ") must divide --width (" +
                                        std::to_string(*o.width) + ")");
  return warnings;
}

}  // namespace cohort_cli
