// The executor's value-produced callback and the trainer's StepHook: every gradient is reported
// once, before before_update; a hook that rewrites the gradients changes the update; the loss is
// reported before any gradient, and a step skipped for NaN still reaches after_update. Under
// micro-batches each gradient is handed over, final, while the backward bringing its last
// contribution still runs, and the loss after the schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "core/base/error.h"
#include "core/exec/trainer.h"
#include "core/models/mlp.h"

namespace cohort {
namespace {

struct Recorder : StepHook {
  std::vector<size_t> seen;
  int before = 0, after = 0, losses = 0;
  int64_t last_step = 0;
  bool zero_grads = false, nan_grads = false;
  void begin_step() override { seen.clear(); }
  void on_loss(const Tensor& loss) override {
    EXPECT_TRUE(seen.empty()) << "the loss comes before any gradient of backward";
    EXPECT_EQ(loss.numel(), 1);
    ++losses;
  }
  void on_gradient(size_t index, const Tensor& grad) override {
    EXPECT_EQ(before, after);  // within this step, before before_update
    EXPECT_TRUE(grad.defined());
    seen.push_back(index);
  }
  void before_update(std::vector<Tensor>& grads) override {
    ++before;
    if (zero_grads)
      for (Tensor& g : grads) g.fill(0.0f);
    if (nan_grads) grads.back().data<float>()[0] = std::nanf("");  // as another rank's NaN would arrive
  }
  void after_update(std::vector<Tensor>&, int64_t step) override {
    ++after;
    last_step = step;
  }
};

std::map<std::string, Tensor> batch() {
  Tensor x = Tensor::zeros({4, 5}, DType::kF32), y = Tensor::zeros({4}, DType::kI32);
  for (int i = 0; i < 20; ++i) x.data<float>()[i] = static_cast<float>(i % 7) / 7.0f;
  return {{"x", x}, {"y", y}};
}

TEST(TrainerHook, ReportsEveryGradientOnceInBackwardOrder) {
  models::MlpConfig c;
  c.batch = 4;
  c.in_features = 5;
  c.hidden = {6};
  c.classes = 3;
  optim::OptimizerConfig o;
  o.lr = 0.1;
  Trainer t(models::build_mlp(c), o, TrainerOptions{});
  auto hook = std::make_shared<Recorder>();
  t.set_step_hook(hook);
  t.step(batch());
  ASSERT_EQ(hook->seen.size(), t.parameters().size());
  EXPECT_EQ(hook->before, 1);
  EXPECT_EQ(hook->after, 1);
  EXPECT_EQ(hook->losses, 1);
  EXPECT_EQ(hook->last_step, 1);
  // Backward reaches the last layer first.
  EXPECT_GT(hook->seen.front(), hook->seen.back());
  std::vector<float> w(t.parameters()[0].data<float>(), t.parameters()[0].data<float>() + t.parameters()[0].numel());
  hook->zero_grads = true;
  t.step(batch());
  EXPECT_EQ(0, std::memcmp(w.data(), t.parameters()[0].raw(), w.size() * sizeof(float)));
  // Gradients that turn NaN in the hook (a DDP average carrying another rank's NaN): the update
  // is skipped and reported, after_update still runs (ranks count their calls alike), the step
  // count stays.
  hook->zero_grads = false;
  hook->nan_grads = true;
  const int64_t steps = t.step_count();
  try {
    t.step(batch());
    ADD_FAILURE() << "no error for NaN gradients";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kNonFinite) << e.what();
    EXPECT_NE(std::string(e.what()).find("the update was skipped"), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.step_count(), steps);
  EXPECT_EQ(hook->after, 3);
  EXPECT_EQ(hook->last_step, steps);
  EXPECT_EQ(0, std::memcmp(w.data(), t.parameters()[0].raw(), w.size() * sizeof(float)));
}

// Under micro-batches a gradient is final once its last micro-batch's contribution is in: it is
// handed over then — averaged, never touched again — while that backward's remaining nodes run,
// so that DDP reduces the last layers' bucket behind the first layers' backward; the loss comes
// after the schedule.
struct MicroRecorder : StepHook {
  size_t nodes_run = 0, losses = 0;
  std::vector<size_t> order, nodes_at;  // parameter index, and the nodes run when it came
  std::vector<std::vector<float>> handed;
  std::vector<size_t> gradients_at_loss;
  bool observes_nodes() const override { return true; }
  void after_node(size_t) override { ++nodes_run; }
  void begin_step() override {
    nodes_run = 0;
    order.clear(), nodes_at.clear(), handed.clear(), gradients_at_loss.clear();
  }
  void on_loss(const Tensor&) override {
    ++losses;
    gradients_at_loss.push_back(order.size());
  }
  void on_gradient(size_t index, const Tensor& grad) override {
    order.push_back(index);
    nodes_at.push_back(nodes_run);
    handed.emplace_back(grad.data<float>(), grad.data<float>() + grad.numel());
  }
  void before_update(std::vector<Tensor>& grads) override {
    for (size_t k = 0; k < order.size(); ++k) {
      const Tensor& g = grads[order[k]];
      ASSERT_EQ(static_cast<size_t>(g.numel()), handed[k].size());
      EXPECT_EQ(0, std::memcmp(g.raw(), handed[k].data(), g.nbytes())) << "parameter " << order[k]
                                                                        << " changed after it was handed over";
    }
  }
  void after_update(std::vector<Tensor>&, int64_t) override {}
};

TEST(TrainerHook, UnderMicroBatchesEachGradientComesAsItsLastContributionIsMade) {
  models::MlpConfig c;
  c.batch = 2;  // one micro-batch; the step's batch is two of them
  c.in_features = 5;
  c.hidden = {6, 6};
  c.classes = 3;
  optim::OptimizerConfig o;
  o.lr = 0.1;
  TrainerOptions opts;
  opts.micro_batches = 2;
  Trainer t(models::build_mlp(c), o, opts);
  auto hook = std::make_shared<MicroRecorder>();
  t.set_step_hook(hook);
  t.step(batch());
  const size_t total_nodes = hook->nodes_run;
  ASSERT_EQ(hook->order.size(), t.parameters().size());
  std::set<size_t> distinct(hook->order.begin(), hook->order.end());
  EXPECT_EQ(distinct.size(), t.parameters().size()) << "each gradient once";
  ASSERT_EQ(hook->gradients_at_loss.size(), 1u);
  EXPECT_EQ(hook->gradients_at_loss[0], t.parameters().size()) << "the loss after the schedule";
  // The last layer's come first, with nodes of the last backward still to run.
  EXPECT_GT(hook->order.front(), hook->order.back());
  EXPECT_LT(hook->nodes_at.front(), total_nodes);
  EXPECT_LT(hook->nodes_at.front(), hook->nodes_at.back());
}

}  // namespace
}  // namespace cohort
