// The training loop of `cohort train`; see train.h. Output: a progress line on stdout (\r-updated
// on a terminal, one line per log point otherwise), evaluation lines, and optional JSON lines.
#include "cli/train.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cli/preflight.h"
#include "cli/task.h"

namespace cohort_cli {

namespace {

constexpr const char* kSamplerEpoch = "cli.sampler.epoch";
constexpr const char* kSamplerIndex = "cli.sampler.index";

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}

// A file of JSON lines; every line is flushed so a crashed or running job can be read.
class Metrics {
 public:
  explicit Metrics(const std::string& path) {
    if (path.empty()) return;
    file_ = std::fopen(path.c_str(), "a");
    if (!file_) throw RuntimeError("cannot open --metrics file '" + path + "'");
  }
  ~Metrics() {
    if (file_) std::fclose(file_);
  }
  void write(const std::string& line) {
    if (!file_) return;
    std::fprintf(file_, "%s\n", line.c_str());
    std::fflush(file_);
  }

 private:
  FILE* file_ = nullptr;
};

// " tensor N" (Megatron 1D) or " grid XxYxZ" for the header line; empty without tensor parallelism.
std::string grid_text(const Options& o) {
  if (o.tensor_degree() == 1) return "";
  if (o.tensor_x == 1 && o.tensor_z == 1) return " tensor " + std::to_string(o.tensor);
  return " grid " + std::to_string(o.tensor_x) + "x" + std::to_string(o.tensor) + "x" + std::to_string(o.tensor_z);
}

// " pipeline N (1f1b, chunks V)" and/or " micro-batches M" for the header line; empty without them.
std::string pipeline_text(const Options& o) {
  std::string text;
  if (o.pipeline > 1)
    text += " pipeline " + std::to_string(o.pipeline) + " (" + (o.schedule.empty() ? "1f1b" : o.schedule) +
            (o.pipeline_chunks > 1 ? ", chunks " + std::to_string(o.pipeline_chunks) : "") + ")";
  if (o.micro_batches > 1) text += " micro-batches " + std::to_string(o.micro_batches);
  return text;
}

// The stages rank 0 cut the model into (printed once, after the header line).
void print_pipeline_stages(cohort_trainer* trainer) {
  size_t needed = 0;
  (void)cohort_trainer_pipeline_stages(trainer, nullptr, 0, &needed);  // only the size (or 0: the next call says why)
  std::string text(std::max<size_t>(needed, 1), '\0');
  check(cohort_trainer_pipeline_stages(trainer, text.data(), text.size(), nullptr), "pipeline stages");
  text.resize(std::strlen(text.c_str()));
  std::printf("pipeline stages:\n%s", text.c_str());
  if (!text.empty() && text.back() != '\n') std::printf("\n");
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

class Loop {
 public:
  Loop(const Options& o, Task& task) : o_(o), task_(task), metrics_(o.metrics), tty_(isatty(1) != 0) {
    total_ = o.steps ? *o.steps : *o.epochs * task.steps_per_epoch();
    log_every_ = o.log_every ? *o.log_every : std::max<int64_t>(1, total_ / 100);
    if (!o.loss_log.empty()) {
      loss_log_ = std::fopen(o.loss_log.c_str(), "w");
      if (!loss_log_) throw RuntimeError("cannot open --loss-log file '" + o.loss_log + "'");
    }
  }
  ~Loop() {
    if (loss_log_) std::fclose(loss_log_);
  }
  void resume(const std::string& path);
  void run();

 private:
  void log_point(int64_t step, float loss, bool final_point);
  // averaged: of the replicas' average (Task::prepare_evaluation).
  std::string eval_fields(int64_t step, bool final_point, bool averaged);
  void save(int64_t step);
  void progress(int64_t step, double rate, bool newline);
  std::string parallel_fields(cohort_parallel_stats* out);  // a JSON member; fills *out if given
  void parallel_summary();
  void memory_report();
  void report_round_shape();
  int64_t shown_tau_ = 0, shown_overlap_ = 0;
  cohort_parallel_stats last_parallel_{};  // at the last metrics line (before any evaluation)
  int64_t last_activation_bytes_ = 0;      // the trainer's peak activation bytes, likewise
  double last_bubble_fraction_ = 0;        // the pipeline bubble of the trainer's last step, likewise

  const Options& o_;
  Task& task_;
  Metrics metrics_;
  bool tty_;
  FILE* loss_log_ = nullptr;
  int64_t total_ = 0, log_every_ = 1, start_step_ = 0;
  double smoothed_ = NAN, start_time_ = 0, window_time_ = 0;
  int64_t window_step_ = 0;
  double last_draw_ = 0;
  // Steps the trainer skipped for NaN or Inf since the last good one; training stops at the limit.
  static constexpr int kMaxSkippedInARow = 10;
  int skipped_in_a_row_ = 0;
};

void Loop::resume(const std::string& path) {
  check(cohort_trainer_load_checkpoint(task_.trainer(), path.c_str()), "--resume");
  int64_t epoch = 0, index = 0;
  check(cohort_trainer_get_checkpoint_value(task_.trainer(), kSamplerEpoch, &epoch), "--resume (sampler epoch)");
  check(cohort_trainer_get_checkpoint_value(task_.trainer(), kSamplerIndex, &index), "--resume (sampler index)");
  check(cohort_sampler_set_position(task_.sampler(), epoch, index), "--resume (sampler position)");
  cohort_trainer_stats s{};
  s.size = sizeof s;
  check(cohort_trainer_get_stats(task_.trainer(), &s), "trainer stats");
  start_step_ = s.step;
  std::printf("resumed from %s at step %lld (epoch %lld, example %lld)\n", path.c_str(),
              static_cast<long long>(start_step_), static_cast<long long>(epoch), static_cast<long long>(index));
}

void Loop::save(int64_t step) {
  int64_t epoch = 0, index = 0;
  check(cohort_sampler_get_position(task_.sampler(), &epoch, &index), "sampler position");
  check(cohort_trainer_set_checkpoint_value(task_.trainer(), kSamplerEpoch, epoch), "checkpoint value");
  check(cohort_trainer_set_checkpoint_value(task_.trainer(), kSamplerIndex, index), "checkpoint value");
  check(cohort_trainer_save_checkpoint(task_.trainer(), o_.save.c_str()), "--save");
  if (!tty_ || o_.quiet) std::printf("saved checkpoint %s at step %lld\n", o_.save.c_str(), static_cast<long long>(step));
}

void Loop::progress(int64_t step, double rate, bool newline) {
  if (o_.quiet) return;
  const double elapsed = now_seconds() - start_time_;
  const double done = static_cast<double>(step - start_step_);
  const double eta = done > 0 ? elapsed / done * static_cast<double>(total_ - step) : NAN;
  std::printf("%sstep %lld/%lld | epoch %.2f | loss %.4f | %.0f %s/s | ETA %s%s", tty_ ? "\r" : "",
              static_cast<long long>(step), static_cast<long long>(total_),
              static_cast<double>(step) / static_cast<double>(task_.steps_per_epoch()), smoothed_, rate,
              task_.item_unit(), format_duration(eta).c_str(), newline || !tty_ ? "\n" : "   ");
  std::fflush(stdout);
}

std::string Loop::eval_fields(int64_t step, bool final_point, bool averaged) {
  const double t0 = now_seconds();
  const EvalResult r = task_.evaluate(final_point ? 0 : *o_.eval_examples);
  const double secs = now_seconds() - t0;
  std::string line = ",\"eval_loss\":" + json_number(r.loss) + ",\"eval_examples\":" + std::to_string(r.examples) +
                     ",\"eval_s\":" + json_number(secs) +  // later lines' elapsed_s include it
                     ",\"eval_of_replica_average\":" + (averaged ? "true" : "false");
  const char* of = averaged ? ", the replicas' average" : "";
  if (o_.quiet && !final_point) return line;
  if (tty_ && !o_.quiet) std::printf("\n");
  if (task_.is_classifier()) {
    line += ",\"eval_accuracy\":" + json_number(r.accuracy);
    std::printf("eval step %lld: loss %.4f | accuracy %.2f%% (%lld examples, %.1f s%s)\n",
                static_cast<long long>(step), r.loss, 100.0 * r.accuracy, static_cast<long long>(r.examples),
                secs, of);
  } else {
    line += ",\"eval_nats_per_byte\":" + json_number(r.loss);
    std::printf("eval step %lld: %.4f nats/byte (%.3f bits/byte, %lld windows, %.1f s%s)\n",
                static_cast<long long>(step), r.loss, r.loss / std::log(2.0), static_cast<long long>(r.examples),
                secs, of);
  }
  std::fflush(stdout);
  return line;
}

void Loop::log_point(int64_t step, float loss, bool final_point) {
  const double t = now_seconds();
  const double rate = static_cast<double>((step - window_step_) * task_.items_per_step()) /
                      std::max(t - window_time_, 1e-9);
  const bool eval = (final_point && !o_.no_eval) || (o_.eval_every > 0 && step % o_.eval_every == 0);
  const bool log = final_point || eval || step % log_every_ == 0;
  if (log || (tty_ && t - last_draw_ > 0.25)) {
    progress(step, rate, false);
    last_draw_ = t;
  }
  if (!log) return;
  cohort_trainer_stats s{};
  s.size = sizeof s;
  check(cohort_trainer_get_stats(task_.trainer(), &s), "trainer stats");
  std::string line = "{\"step\":" + std::to_string(step) + ",\"epoch\":" +
                     json_number(static_cast<double>(step) / static_cast<double>(task_.steps_per_epoch())) +
                     ",\"loss\":" + json_number(loss) + ",\"loss_smoothed\":" + json_number(smoothed_) +
                     ",\"lr\":" + json_number(s.learning_rate) + ",\"grad_norm\":" + json_number(s.grad_norm) +
                     ",\"" + task_.item_unit() + "_per_s\":" + json_number(rate) +
                     ",\"elapsed_s\":" + json_number(t - start_time_);
  if (!o_.parallel.empty()) {
    line += parallel_fields(nullptr);
    report_round_shape();
  }
  if (eval) {
    const bool averaged = task_.prepare_evaluation();
    if (o_.evaluates) line += eval_fields(step, final_point, averaged);
    else if (o_.joins_evaluation) task_.evaluate(final_point ? 0 : *o_.eval_examples);
  }
  metrics_.write(line + "}");
  window_step_ = step;
  window_time_ = now_seconds();  // evaluation time is not training throughput
}

std::string Loop::parallel_fields(cohort_parallel_stats* out) {
  // Cumulative: how much of the communication the training thread did not wait for, and the
  // model state this rank holds (the same split on every rank, up to padding).
  cohort_parallel_stats p{};
  p.size = sizeof p;
  check(cohort_trainer_get_parallel_stats(task_.trainer(), &p), "parallel stats");
  if (out) *out = p;
  last_parallel_ = p;
  // Activations too: under --tensor they shrink with the split layers' features.
  cohort_trainer_stats t{};
  t.size = sizeof t;
  check(cohort_trainer_get_stats(task_.trainer(), &t), "trainer stats");
  last_activation_bytes_ = t.peak_activation_bytes;
  last_bubble_fraction_ = t.pipeline_bubble_fraction;
  // Pipeline stages: this rank's share of its last step spent waiting for the other stages.
  const std::string pipeline = o_.pipeline > 1 ? ",\"micro_batches\":" + std::to_string(t.micro_batches) +
                                                     ",\"pipeline_busy_s\":" + json_number(t.pipeline_busy_seconds) +
                                                     ",\"pipeline_bubble_fraction\":" +
                                                     json_number(t.pipeline_bubble_fraction)
                                               : "";
  return ",\"parallel\":{\"rounds\":" + std::to_string(p.rounds) + ",\"compute_s\":" + json_number(p.compute_seconds) +
         ",\"comm_s\":" + json_number(p.comm_seconds) + ",\"wait_s\":" + json_number(p.wait_seconds) +
         ",\"hidden_fraction\":" + json_number(p.hidden_fraction) +
         ",\"parameter_bytes\":" + std::to_string(p.parameter_bytes) +
         ",\"gradient_bytes\":" + std::to_string(p.gradient_bytes) +
         ",\"optimizer_state_bytes\":" + std::to_string(p.optimizer_state_bytes) +
         ",\"tau\":" + std::to_string(p.tau) + ",\"overlap\":" + std::to_string(p.overlap_steps) +
         ",\"outer_fragments\":" + std::to_string(p.outer_fragments) +
         ",\"outer_sync_bytes\":" + std::to_string(p.outer_sync_bytes) +
         ",\"shard_group\":" + std::to_string(p.shard_group) +
         ",\"grad_keep\":" + json_number(p.grad_keep) +
         ",\"gradient_sync_bytes\":" + std::to_string(p.gradient_sync_bytes) +
         ",\"outer_hidden_fraction\":" + json_number(p.outer_hidden_fraction) +
         ",\"outer_shared_wait_s\":" + json_number(p.outer_shared_wait_seconds) +
         ",\"peak_activation_bytes\":" + std::to_string(t.peak_activation_bytes) + pipeline + "}";
}

// --overlap auto: each new choice and why (rank 0, between progress lines).
void Loop::report_round_shape() {
  const cohort_parallel_stats& p = last_parallel_;
  if (o_.overlap != kAuto || o_.quiet || !o_.evaluates || (p.tau == shown_tau_ && p.overlap_steps == shown_overlap_))
    return;
  shown_tau_ = p.tau;
  shown_overlap_ = p.overlap_steps;
  if (tty_) std::printf("\n");
  // Over F fragments the average timed is one fragment's, each merged before the next one's sync.
  const std::string whose = p.outer_fragments > 1 ? "a fragment's average (1 of " + std::to_string(p.outer_fragments) + ")"
                                                  : std::string("an average");
  std::printf("co2: overlap %lld step(s), tau %lld: %s took %.3f s to arrive, a step computes in %.3f s\n",
              static_cast<long long>(p.overlap_steps), static_cast<long long>(p.tau), whose.c_str(),
              p.outer_comm_seconds, p.step_seconds);
  std::fflush(stdout);
}

void Loop::parallel_summary() {
  if (o_.quiet) return;
  // The model state as training holds it: an evaluation may have gathered ZeRO 3's parameters.
  const cohort_parallel_stats during = last_parallel_;
  cohort_parallel_stats p{};
  parallel_fields(&p);
  if (during.size != 0) {
    p.parameter_bytes = during.parameter_bytes;
    p.gradient_bytes = during.gradient_bytes;
    p.optimizer_state_bytes = during.optimizer_state_bytes;
  }
  const double mib = 1.0 / (1 << 20);
  std::printf("%s: %lld rounds | communication %.2f s, %.0f%% hidden behind compute (waited %.2f s, computed "
              "%.2f s) | model state per rank: parameters %.1f MiB, gradients %.1f MiB, optimizer %.1f MiB, "
              "activations %.1f MiB (peak of a step)\n",
              o_.parallel.c_str(), static_cast<long long>(p.rounds), p.comm_seconds, 100.0 * p.hidden_fraction,
              p.wait_seconds, p.compute_seconds, static_cast<double>(p.parameter_bytes) * mib,
              static_cast<double>(p.gradient_bytes) * mib, static_cast<double>(p.optimizer_state_bytes) * mib,
              static_cast<double>(last_activation_bytes_) * mib);
  if (o_.parallel == "co2" && p.shard_group == 1 && p.rounds > 0)  // whom the waits were for
    std::printf("%s: waits every rank shared (the transfers' own, not hidden) %.2f s; this rank's other %.2f s of "
                "waits were for ranks slower to reach the round's end\n",
                o_.parallel.c_str(), p.outer_shared_wait_seconds,
                std::max(0.0, p.wait_seconds - p.outer_shared_wait_seconds));
  if (p.outer_fragments > 0)  // the outer synchronisation's peak need: what one of its collectives carries
    std::printf("%s: outer synchronisation in %lld fragment(s): %lld syncs of at most %.1f KiB from each rank\n",
                o_.parallel.c_str(), static_cast<long long>(p.outer_fragments), static_cast<long long>(p.outer_syncs),
                static_cast<double>(p.outer_sync_bytes) / 1024.0);
  if (p.grad_keep < 1)
    std::printf("%s: top-k gradients keeping %g of each bucket: %.1f KiB sent a step from each rank\n",
                o_.parallel.c_str(), p.grad_keep, static_cast<double>(p.gradient_sync_bytes) / 1024.0);
  if (p.shard_group > 1)  // the replicas' outer all-reduces alone (comm above counts their ZeRO steps too)
    std::printf("%s: shard groups of %lld ranks (ZeRO %lld inside each): the outer all-reduces %.0f%% hidden behind "
                "compute\n",
                o_.parallel.c_str(), static_cast<long long>(p.shard_group), static_cast<long long>(o_.zero),
                100.0 * p.outer_hidden_fraction);
  if (o_.pipeline > 1)
    std::printf("pipeline: %lld stages, %lld micro-batches (%s) | bubble %.0f%% of rank 0's last step\n",
                static_cast<long long>(o_.pipeline), static_cast<long long>(o_.micro_batches),
                o_.schedule.empty() ? "1f1b" : o_.schedule.c_str(), 100.0 * last_bubble_fraction_);
  std::fflush(stdout);
}

// This rank's model state and the peak activation memory of its steps, in bytes (exact, for
// scripts) and MiB. Under --parallel the model state as the plan holds it (ZeRO's shards, DDP's
// gradient buckets) at the last log point, before an evaluation may gather parameters.
void Loop::memory_report() {
  if (!o_.memory_report) return;
  cohort_trainer_stats t{};
  t.size = sizeof t;
  check(cohort_trainer_get_stats(task_.trainer(), &t), "trainer stats");
  int64_t parameters = t.parameter_value_bytes, gradients = t.gradient_bytes, optimizer = t.optimizer_state_bytes;
  if (!o_.parallel.empty() && last_parallel_.size != 0) {
    parameters = last_parallel_.parameter_bytes;
    gradients = last_parallel_.gradient_bytes;
    optimizer = last_parallel_.optimizer_state_bytes;
  }
  const double mib = 1.0 / (1 << 20);
  auto part = [&](const char* what, int64_t bytes) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s %lld B (%.2f MiB)", what, static_cast<long long>(bytes),
                  static_cast<double>(bytes) * mib);
    return std::string(buf);
  };
  std::printf("memory rank %d/%d: %s, %s, %s, %s, peak of a step\n", task_.rank(), task_.world(),
              part("parameters", parameters).c_str(), part("gradients", gradients).c_str(),
              part("optimizer state", optimizer).c_str(), part("activations", t.peak_activation_bytes).c_str());
  std::fflush(stdout);
}

void Loop::run() {
  start_time_ = window_time_ = now_seconds();
  window_step_ = start_step_;
  float loss = NAN;
  const int64_t last = o_.stop_after > 0 ? std::min(total_, start_step_ + o_.stop_after) : total_;
  for (int64_t step = start_step_ + 1; step <= last; ++step) {
    loss = task_.step();
    if (std::isfinite(loss)) {
      skipped_in_a_row_ = 0;
      smoothed_ = std::isnan(smoothed_) ? loss : 0.95 * smoothed_ + 0.05 * loss;
      if (loss_log_) std::fprintf(loss_log_, "%lld %.9g\n", static_cast<long long>(step), loss);
    } else {  // skipped by the trainer, which is unchanged: report it and go on with the next batch
      const std::string rank = task_.world() > 1 ? "rank " + std::to_string(task_.rank()) + ": " : "";
      std::fprintf(stderr, "%swarning: step %lld skipped, its batch dropped: %s\n", rank.c_str(),
                   static_cast<long long>(step), task_.skip_reason().c_str());
      if (++skipped_in_a_row_ >= kMaxSkippedInARow)
        throw RuntimeError("the loss or gradients were NaN or Inf at " + std::to_string(kMaxSkippedInARow) +
                           " steps in a row, up to step " + std::to_string(step) + " (try a smaller --lr)");
    }
    log_point(step, loss, step == total_);  // every rank alike: evaluations may be collectives
    if (!o_.save.empty() && (step == last || (o_.save_every > 0 && step % o_.save_every == 0))) save(step);
  }
  if (!o_.parallel.empty() && last > start_step_) parallel_summary();
  if (last > start_step_) memory_report();
  if (start_step_ >= total_) {
    std::printf("nothing to train: the checkpoint is at step %lld of %lld\n", static_cast<long long>(start_step_),
                static_cast<long long>(total_));
    const bool averaged = task_.prepare_evaluation();
    if (o_.evaluates)
      metrics_.write("{\"step\":" + std::to_string(start_step_) + eval_fields(start_step_, true, averaged) + "}");
    else if (o_.joins_evaluation)
      task_.evaluate(0);
  }
}

// The per-rank file a rank resumes from: its own; or, when the saved run had another number of
// ranks — the same data-parallel replicas, each over more or fewer model ranks (another tensor
// grid or pipeline) — the file of the first rank of its replica there, counting the saved files.
// Every rank of a replica saves the same whole model and the replica's outer state. A miscount
// (stale files of a larger run beside them) maps a rank to another replica's file, which the
// data-parallel modes with outer state refuse at load; DDP's replicas are equal anyway.
std::string rank_file_to_resume(const std::string& base, int rank, int world, int64_t model_degree) {
  auto file = [&](int64_t r) { return base + ".rank" + std::to_string(r); };
  int64_t saved = 0;
  while (saved < (int64_t{1} << 16) && access(file(saved).c_str(), F_OK) == 0) ++saved;
  const int64_t degree = std::max<int64_t>(model_degree, 1), replicas = world / degree;
  if (saved == world || saved == 0 || replicas == 0 || saved % replicas != 0) return file(rank);
  return file(rank / degree * (saved / replicas));
}

}  // namespace

int run_train(Options o) {
  const std::vector<std::string> warnings = apply_defaults(o);
  o.memory_report = !o.quiet;
  if (o.threads > 0) check(cohort_set_num_threads(static_cast<int>(o.threads)), "--threads");
  Task task(o);
  // --plan auto: the layout and rows per rank the task chose, for the header, the summaries and
  // which ranks join the evaluations.
  if (!o.plan.empty()) copy_layout(task.options(), o);
  if (task.world() > 1) {
    // Rank 0 reports and evaluates (the others join its evaluation points: under ZeRO 3 the
    // parameters are gathered there; under --tensor they run the evaluation with it, silently);
    // every rank saves its own checkpoint file.
    if (task.rank() != 0) {
      o.quiet = true;
      o.evaluates = false;
      o.joins_evaluation = o.model_degree() > 1;
      o.metrics.clear();
    }
    const std::string suffix = ".rank" + std::to_string(task.rank());
    if (!o.save.empty()) o.save += suffix;
    if (!o.resume.empty()) o.resume = rank_file_to_resume(o.resume, task.rank(), task.world(), o.model_degree());
  }
  check_job_paths(o, task);  // before the first step: a run is not lost at its end to --save
  if (task.rank() == 0) print_warnings(warnings, o, task.world());
  Loop loop(o, task);
  const int64_t total = o.steps ? *o.steps : *o.epochs * task.steps_per_epoch();
  if (!o.quiet)
    std::printf("cohort %s: %s on %s, %lld parameters, batch %lld x %d rank(s)%s%s%s, %lld steps (%lld per epoch), "
                "%s lr %g, warmup %lld\n",
                cohort_version_string(), o.model.c_str(), o.data.c_str(), static_cast<long long>(task.parameter_count()),
                static_cast<long long>(*o.batch), task.world(), o.device == "cuda" ? " on the GPU" : "",
                o.parallel.empty() ? "" : ", ",
                o.parallel.empty() ? "" : (o.parallel + (o.parallel == "sync" ? "" : " tau " + std::to_string(*o.tau)) +
                                           (o.plan.empty() ? "" : " plan " + o.plan + ": data " +
                                                                        std::to_string(task.world() / o.model_degree())) +
                                           (o.zero > 0 ? " zero " + std::to_string(o.zero) : "") +
                                           grid_text(o) +
                                           (o.sequence_parallel.empty() ? "" : " sequence " + o.sequence_parallel) +
                                           (o.activation_checkpointing ? " activation checkpointing" : "") +
                                           pipeline_text(o)).c_str(),
                static_cast<long long>(total), static_cast<long long>(task.steps_per_epoch()), o.optimizer.c_str(), *o.lr,
                static_cast<long long>(*o.warmup));
  if (!o.quiet && o.pipeline > 1) print_pipeline_stages(task.trainer());
  if (!o.resume.empty()) loop.resume(o.resume);
  loop.run();
  return 0;
}

}  // namespace cohort_cli
