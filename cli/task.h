// One training task for the CLI: the model graph, the trainer, the training and validation data
// and their samplers — all through the public C API only. Every failing cohort call becomes a
// RuntimeError carrying cohort_last_error().
#pragma once

#include <cohort/cohort.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/options.h"

namespace cohort_cli {

// Throws RuntimeError("<what>: <cohort_last_error()>") unless status is COHORT_OK.
void check(cohort_status status, const char* what);

struct EvalResult {
  double loss = 0;      // mean cross entropy (nats per example; nats per byte for text)
  double accuracy = -1; // classifiers only, else -1
  int64_t examples = 0;
};

class Task {
 public:
  explicit Task(const Options& options);
  ~Task();
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  // Draws the next batch from the training sampler and runs one training step. Returns the loss,
  // or NaN when the trainer skipped the step for NaN or Inf in its loss or gradients (nothing
  // changed; skip_reason() says what): the batch is used up, and training may go on.
  float step();
  const std::string& skip_reason() const { return skip_reason_; }
  // Evaluates the first max_examples (0: all) validation examples, in order.
  EvalResult evaluate(int64_t max_examples);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t items_per_step() const;      // samples, or tokens for text
  const char* item_unit() const { return text_ ? "tokens" : "samples"; }
  bool is_classifier() const { return !text_; }
  int64_t parameter_count() const { return parameter_count_; }
  cohort_trainer* trainer() { return trainer_; }
  // Before an evaluation, on every rank at the same point (a collective): makes the parameters
  // whole on this rank (ZeRO 3), and under local updating makes evaluation read the replicas'
  // average, leaving the run as it is (cohort_trainer_average_replicas). True when it averaged.
  bool prepare_evaluation();
  // Collective (every rank calls it at the same point): "" when every rank's `problem` is empty,
  // else the problem of the highest rank that has one, prefixed "rank R: " in a world above one.
  // Ranks agree on a failure before training, as one that left alone would keep its peers
  // waiting in their first collective until the timeout.
  std::string agree_on_problem(const std::string& problem);
  int rank() const { return rank_; }
  int world() const { return world_; }
  cohort_sampler* sampler() { return train_sampler_; }
  // The options the task trains with: as given, except that --plan auto put the chosen layout and
  // each rank's rows there (copy_layout takes them into the caller's copy).
  const Options& options() const { return o_; }

 private:
  void join_ranks();
  // The data shards of the ranks under the layout in o_: a model replica's ranks share rows.
  void set_data_ranks();
  // --plan auto: cohort_plan_choose on the model at the global batch (--batch x world); the
  // chosen layout and each rank's rows go into o_, rank 0 prints the report.
  void choose_plan();
  void open_data();
  void build_model();
  void create_trainer();
  cohort_graph* make_graph(int64_t batch) const;
  cohort_optimizer* make_optimizer(int64_t total_steps) const;
  cohort_trainer_options trainer_options() const;
  cohort_plan_options plan_options() const;
  void load_initial_weights(const std::string& path);
  // Binds features and labels buffers for `rows` examples (dimension 0).
  void bind(int64_t rows, std::vector<float>& fx, std::vector<int32_t>& ix, std::vector<int32_t>& y,
            cohort_tensor_ref refs[2], int64_t shape_x[4], int64_t shape_y[2]) const;
  void dump_batch(const cohort_tensor_ref refs[2]) const;

  Options o_;
  bool text_ = false;
  cohort_dataset* train_ = nullptr;
  cohort_dataset* valid_ = nullptr;
  cohort_sampler* train_sampler_ = nullptr;
  cohort_sampler* valid_sampler_ = nullptr;
  cohort_graph* graph_ = nullptr;
  cohort_trainer* trainer_ = nullptr;
  cohort_comm* comm_ = nullptr;  // data parallelism only
  std::string skip_reason_;      // of the last step skipped for NaN or Inf
  int rank_ = 0, world_ = 1;
  int data_rank_ = 0, data_world_ = 1;  // this rank's data replica, and their number (--tensor)
  int64_t steps_per_epoch_ = 0;
  int64_t parameter_count_ = 0;
  // Training batch buffers, reused every step.
  std::vector<float> fx_;
  std::vector<int32_t> ix_, y_;
  int64_t shape_x_[4] = {0, 0, 0, 0}, shape_y_[2] = {0, 0};
  cohort_tensor_ref refs_[2] = {};
};

}  // namespace cohort_cli
