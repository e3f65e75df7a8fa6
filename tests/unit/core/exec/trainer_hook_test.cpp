// The executor's value-produced callback and the trainer's StepHook: every gradient is reported
// once, before before_update; a hook that rewrites the gradients changes the update.
#include <gtest/gtest.h>

#include "core/exec/trainer.h"
#include "core/models/mlp.h"

namespace cohort {
namespace {

struct Recorder : StepHook {
  std::vector<size_t> seen;
  int before = 0, after = 0;
  bool zero_grads = false;
  void on_gradient(size_t index, const Tensor& grad) override {
    EXPECT_EQ(before, after);  // within this step, before before_update
    EXPECT_TRUE(grad.defined());
    seen.push_back(index);
  }
  void before_update(std::vector<Tensor>& grads) override {
    ++before;
    if (zero_grads)
      for (Tensor& g : grads) g.fill(0.0f);
  }
  void after_update(std::vector<Tensor>&, int64_t step) override { EXPECT_EQ(step, ++after); }
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
  // Backward reaches the last layer first.
  EXPECT_GT(hook->seen.front(), hook->seen.back());
  std::vector<float> w(t.parameters()[0].data<float>(), t.parameters()[0].data<float>() + t.parameters()[0].numel());
  hook->zero_grads = true;
  t.step(batch());
  EXPECT_EQ(0, std::memcmp(w.data(), t.parameters()[0].raw(), w.size() * sizeof(float)));
}

}  // namespace
}  // namespace cohort
