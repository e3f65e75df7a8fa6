// The executor's value-produced callback and the trainer's StepHook: every gradient is reported
// once, before before_update; a hook that rewrites the gradients changes the update; the loss is
// reported before any gradient, and a step skipped for NaN still reaches after_update.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

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

}  // namespace
}  // namespace cohort
