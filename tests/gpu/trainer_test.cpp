// Training on the GPU against the CPU: a small GPT trained a few steps by a Trainer on each device
// from the same seed and batches (AdamW with warmup, weight decay and clipping; SGD with Nesterov
// momentum), the optimizer alone on bf16 parameters, checkpoints carried from one device to the
// other, and data parallelism on one rank (DDP over NCCL or through the host, co2). fp32 without
// TF32, so the runs differ only by summation order, which a few steps of training amplify
// slowly: losses within 5e-4 relative, parameters within 1e-3 relative L2. The same steps on
// the GPU twice give the same bits. Skips without a visible device.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "core/checkpoint/checkpoint.h"
#include "core/device/device.h"
#include "core/exec/trainer.h"
#include "core/models/gpt.h"
#include "core/models/mlp.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/device_comm.h"
#include "tests/support/expect_error.h"
#include "tests/support/world_of_one.h"

namespace cohort {
namespace {

using ::cohort::test::expect_error;

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << device_unavailable_reason(Device::kCuda)

models::GptConfig small_gpt() {
  models::GptConfig c;
  c.batch = 4;
  c.context = 32;
  c.vocab = 64;
  c.layers = 2;
  c.width = 64;
  c.heads = 2;
  return c;
}

std::map<std::string, Tensor> batch(const models::GptConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::map<std::string, Tensor> in;
  for (const char* name : {"tokens", "targets"}) {
    Tensor t = Tensor::empty({c.batch, c.context}, DType::kI32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>(rng() % c.vocab);
    in[name] = t;
  }
  return in;
}

std::vector<float> host_values(const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), DType::kF32);
  h.copy_from(t);
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

void expect_same_parameters(const Trainer& gpu, const Trainer& cpu, double tol) {
  for (size_t i = 0; i < cpu.parameters().size(); ++i)
    EXPECT_LE(rel_l2(host_values(gpu.parameters()[i]), host_values(cpu.parameters()[i])), tol)
        << cpu.parameter_names()[i];
}

// Bit for bit (the bound is 0): every parameter of `a` equals `b`'s; each one that does not is
// named with its worst element (largest difference), both values, how many elements differ and
// its relative L2 distance.
void expect_bitwise_same_parameters(const Trainer& a, const Trainer& b, const std::string& what) {
  for (size_t i = 0; i < b.parameters().size(); ++i) {
    const std::vector<float> x = host_values(a.parameters()[i]), y = host_values(b.parameters()[i]);
    int64_t worst = -1, count = 0;
    double largest = -1.0;
    for (size_t k = 0; k < y.size(); ++k) {
      if (std::memcmp(&x[k], &y[k], sizeof(float)) == 0) continue;
      ++count;
      const double d = std::isnan(x[k] - y[k]) ? INFINITY : std::fabs(double(x[k]) - y[k]);
      if (d > largest) largest = d, worst = static_cast<int64_t>(k);
    }
    EXPECT_EQ(count, 0) << what << ": " << b.parameter_names()[i] << " differs in " << count << " of " << y.size()
                        << " elements, worst at " << worst << " (" << (worst >= 0 ? x[worst] : 0.0f) << " vs "
                        << (worst >= 0 ? y[worst] : 0.0f) << ", bound 0), relative L2 " << rel_l2(x, y);
  }
}

Trainer make(const models::GptConfig& c, const optim::OptimizerConfig& oc, Device device) {
  TrainerOptions o;
  o.seed = 11;
  o.device = device;
  return Trainer(models::build_gpt(c), oc, o);
}

void train_both(const optim::OptimizerConfig& oc, int steps) {
  const models::GptConfig c = small_gpt();
  Trainer cpu = make(c, oc, Device::kCpu), gpu = make(c, oc, Device::kCuda);
  EXPECT_EQ(gpu.device(), Device::kCuda);
  EXPECT_EQ(gpu.parameters()[0].device(), Device::kCuda);
  expect_same_parameters(gpu, cpu, 0.0);  // initialised on the host, copied over
  for (int s = 0; s < steps; ++s) {
    const auto in = batch(c, 100 + s);
    const float lc = cpu.step(in), lg = gpu.step(in);
    EXPECT_NEAR(lg, lc, 5e-4 * std::fabs(lc)) << "step " << s;
    EXPECT_NEAR(gpu.stats().grad_norm, cpu.stats().grad_norm, 1e-3 * cpu.stats().grad_norm) << "step " << s;
  }
  expect_same_parameters(gpu, cpu, 1e-3);
  // evaluate: another batch size, outputs copied back into host tensors.
  std::map<std::string, Tensor> in;
  for (const char* name : {"tokens", "targets"}) {
    in[name] = Tensor::empty({2, c.context}, DType::kI32);
    for (int64_t i = 0; i < in[name].numel(); ++i) in[name].data<int32_t>()[i] = static_cast<int32_t>(i % c.vocab);
  }
  std::map<std::string, Tensor> oc_out = {{"logits", Tensor::empty({2, c.context, c.vocab}, DType::kF32)}},
                                og_out = {{"logits", Tensor::empty({2, c.context, c.vocab}, DType::kF32)}};
  cpu.evaluate(in, oc_out);
  gpu.evaluate(in, og_out);
  EXPECT_LT(rel_l2(host_values(og_out.at("logits")), host_values(oc_out.at("logits"))), 1e-3);
}

TEST(GpuTrainer, GptWithAdamWClippingAndScheduleMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  optim::OptimizerConfig oc;
  oc.kind = optim::OptimizerKind::kAdamW;
  oc.lr = 3e-3;
  oc.weight_decay = 0.1;
  oc.clip_norm = 0.5;  // below the norms of these steps: clipping acts every step
  oc.schedule = optim::ScheduleKind::kWarmupCosine;
  oc.warmup_steps = 2;
  oc.total_steps = 6;
  train_both(oc, 6);
}

TEST(GpuTrainer, GptWithSgdNesterovMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  optim::OptimizerConfig oc;
  oc.kind = optim::OptimizerKind::kSgd;
  oc.lr = 0.05;
  oc.momentum = 0.9;
  oc.nesterov = true;
  oc.weight_decay = 0.01;
  train_both(oc, 5);
}

// An MLP (ReLU and tanh hidden layers) with SGD momentum: the model `cohort train --model mlp
// --device cuda` trains.
TEST(GpuTrainer, MlpMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const char* act : {"relu", "tanh"}) {
    models::MlpConfig c;
    c.batch = 16;
    c.in_features = 40;
    c.hidden = {64, 32};
    c.activation = act;
    optim::OptimizerConfig oc;
    oc.kind = optim::OptimizerKind::kSgd;
    oc.lr = 0.05;
    oc.momentum = 0.9;
    TrainerOptions o;
    o.seed = 3;
    Trainer cpu(models::build_mlp(c), oc, o);
    o.device = Device::kCuda;
    Trainer gpu(models::build_mlp(c), oc, o);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (int s = 0; s < 5; ++s) {
      Tensor x = Tensor::empty({c.batch, c.in_features}, DType::kF32), y = Tensor::empty({c.batch}, DType::kI32);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = normal(rng);
      for (int64_t i = 0; i < c.batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(rng() % c.classes);
      const float lc = cpu.step({{"x", x}, {"y", y}}), lg = gpu.step({{"x", x}, {"y", y}});
      EXPECT_NEAR(lg, lc, 5e-4 * std::fabs(lc)) << act << " step " << s;
    }
    expect_same_parameters(gpu, cpu, 1e-3);
  }
}

// The fp32 master copy of each bf16 parameter (the optimizer's "master" state), on the host.
std::vector<std::vector<float>> masters(Trainer& t) {
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < t.parameters().size(); ++i) {
    const auto state = t.optimizer().state(i);
    const auto it = std::find_if(state.begin(), state.end(), [](const auto& s) { return s.first == "master"; });
    EXPECT_NE(it, state.end()) << t.parameter_names()[i] << " has no fp32 master";
    out.push_back(it == state.end() ? std::vector<float>() : host_values(it->second));
  }
  return out;
}

// Each bf16 parameter is its fp32 master rounded to nearest even, element for element.
void expect_parameters_are_rounded_masters(Trainer& t, const char* device) {
  const auto m = masters(t);
  for (size_t i = 0; i < t.parameters().size(); ++i) {
    const std::vector<float> p = host_values(t.parameters()[i]);
    if (m[i].size() != p.size()) continue;  // reported by masters()
    int64_t bad = -1;
    for (size_t k = 0; k < p.size() && bad < 0; ++k)
      if (bf16_to_f32(f32_to_bf16(m[i][k])) != p[k]) bad = static_cast<int64_t>(k);
    EXPECT_LT(bad, 0) << device << ": " << t.parameter_names()[i] << "[" << bad << "] = "
                      << (bad >= 0 ? p[bad] : 0.0f) << " is not its master " << (bad >= 0 ? m[i][bad] : 0.0f)
                      << " rounded";
  }
}

// A bf16 GPT (bf16 parameters and activations, fp32 master copies on the device). The GPU and
// the CPU compute each node in fp32 from the same bf16 values and round its outputs at the same
// points, so losses agree to bf16 precision (2e-2 relative) rather than fp32's. Parameters:
// with AdamW every element steps by about lr whatever its gradient's size, so elements whose
// gradient is rounding noise (all of the key bias: softmax ignores a shift shared by a row's
// scores, so its exact gradient is 0) step with a random sign on either device, and the two
// runs' parameters say nothing about correctness. The AdamW run checks the master copies
// instead (present, and each bf16 parameter their rounding, on both devices); an SGD run, whose
// steps are proportional to the gradients, checks that the masters moved alike: their updates
// agree within 5e-2 relative L2 (the gradients' bf16 precision, as GpuExecutor's bf16 step),
// the key bias left out.
TEST(GpuTrainer, Bf16GptMatchesTheCpuToBf16Precision) {
  SKIP_WITHOUT_GPU();
  models::GptConfig c = small_gpt();
  c.dtype = DType::kBF16;
  optim::OptimizerConfig adamw;
  adamw.kind = optim::OptimizerKind::kAdamW;
  adamw.lr = 3e-3;
  adamw.clip_norm = 1.0;
  optim::OptimizerConfig sgd;
  sgd.kind = optim::OptimizerKind::kSgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  for (const optim::OptimizerConfig& oc : {adamw, sgd}) {
    const bool adam = oc.kind == optim::OptimizerKind::kAdamW;
    SCOPED_TRACE(adam ? "adamw" : "sgd");
    Trainer cpu = make(c, oc, Device::kCpu), gpu = make(c, oc, Device::kCuda);
    std::vector<std::vector<float>> initial;
    for (const Tensor& p : cpu.parameters()) initial.push_back(host_values(p));
    for (int s = 0; s < 4; ++s) {
      const auto in = batch(c, 400 + s);
      const float lc = cpu.step(in), lg = gpu.step(in);
      EXPECT_NEAR(lg, lc, 2e-2 * std::fabs(lc)) << "step " << s;
    }
    EXPECT_EQ(gpu.parameters()[0].dtype(), DType::kBF16);
    EXPECT_EQ(gpu.optimizer().state(0).back().first, "master");
    expect_parameters_are_rounded_masters(gpu, "cuda");
    expect_parameters_are_rounded_masters(cpu, "cpu");
    if (adam) continue;
    const auto mg = masters(gpu), mc = masters(cpu);
    for (size_t i = 0; i < mc.size(); ++i) {
      if (mg[i].size() != initial[i].size() || mc[i].size() != initial[i].size()) continue;
      std::vector<float> ug(initial[i].size()), uc(initial[i].size());
      for (size_t k = 0; k < ug.size(); ++k) ug[k] = mg[i][k] - initial[i][k], uc[k] = mc[i][k] - initial[i][k];
      const std::string& name = cpu.parameter_names()[i];
      if (name.size() > 16 && name.compare(name.size() - 16, 16, "attn.c_attn.bias") == 0)
        for (int64_t k = c.width; k < 2 * c.width; ++k) ug[k] = uc[k] = 0.0f;  // the key bias: noise, see above
      EXPECT_LE(rel_l2(ug, uc), 5e-2) << "update of " << name;
    }
  }
}

// The optimizer alone on bf16 parameters (an fp32 master copy on the device), with the N-rank
// mean variant of AdamW and a caller-given global norm.
TEST(GpuOptimizer, Bf16ParametersAndGivenNormMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  for (int noise : {1, 4}) {
    optim::OptimizerConfig oc;
    oc.kind = optim::OptimizerKind::kAdamW;
    oc.lr = 1e-2;
    oc.weight_decay = 0.1;
    oc.clip_norm = 1.0;
    optim::Optimizer on_cpu(oc), on_gpu(oc);
    on_cpu.set_noise_ranks(noise);
    on_gpu.set_noise_ranks(noise);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    std::vector<Tensor> pc, pg, gc, gg;
    for (int64_t n : {int64_t{70001}, int64_t{300}}) {
      Tensor p = Tensor::empty({n}, DType::kBF16), g = Tensor::empty({n}, DType::kBF16);
      Tensor p32 = Tensor::empty({n}, DType::kF32), g32 = Tensor::empty({n}, DType::kF32);
      for (int64_t i = 0; i < n; ++i) p32.data<float>()[i] = normal(rng), g32.data<float>()[i] = normal(rng);
      p.copy_from(p32);
      g.copy_from(g32);
      pc.push_back(p);
      gc.push_back(g);
      pg.push_back(to_device(p, Device::kCuda));
      gg.push_back(to_device(g, Device::kCuda));
    }
    for (int s = 0; s < 3; ++s) {
      if (s == 2) {  // a shard's update with the norm over every shard (ZeRO's call)
        on_cpu.step(pc, gc, 1000.0);
        on_gpu.step(pg, gg, 1000.0);
      } else {
        on_cpu.step(pc, gc);
        on_gpu.step(pg, gg);
      }
      EXPECT_NEAR(on_gpu.last_grad_norm(), on_cpu.last_grad_norm(), 1e-6 * on_cpu.last_grad_norm());
    }
    EXPECT_EQ(on_gpu.device(), Device::kCuda);
    for (size_t i = 0; i < pc.size(); ++i) {
      EXPECT_LT(rel_l2(host_values(pg[i]), host_values(pc[i])), 4e-3) << "noise " << noise << " param " << i;
      const auto sg = on_gpu.state(i), sc = on_cpu.state(i);
      ASSERT_EQ(sg.size(), sc.size());
      for (size_t k = 0; k < sc.size(); ++k) {
        EXPECT_EQ(sg[k].second.device(), Device::kCuda);
        EXPECT_LT(rel_l2(host_values(sg[k].second), host_values(sc[k].second)), 1e-5)
            << "noise " << noise << " param " << i << " " << sc[k].first;
      }
    }
    std::vector<Tensor> wrong = {gc[0], gc[1]};  // host gradients for device parameters
    expect_error([&] { on_gpu.step(pg, wrong); }, Status::kInvalidArgument, "is not a defined cuda tensor");
  }
}

// A checkpoint written by the GPU trainer resumes on the CPU and the other way round: the file is
// the same format, the state is moved to the loading trainer's device.
TEST(GpuTrainer, CheckpointsMoveBetweenDevices) {
  SKIP_WITHOUT_GPU();
  const models::GptConfig c = small_gpt();
  optim::OptimizerConfig oc;
  oc.kind = optim::OptimizerKind::kAdamW;
  oc.lr = 3e-3;
  const std::string dir = (std::filesystem::temp_directory_path() / "cohort_gpu_ckpt").string();
  std::filesystem::create_directories(dir);
  Trainer gpu = make(c, oc, Device::kCuda);
  for (int s = 0; s < 3; ++s) gpu.step(batch(c, 200 + s));
  checkpoint::save_checkpoint(gpu, dir + "/from_gpu.ckpt", checkpoint::CheckpointExtra{});
  Trainer cpu = make(c, oc, Device::kCpu);
  checkpoint::load_checkpoint(cpu, dir + "/from_gpu.ckpt", nullptr);
  expect_same_parameters(gpu, cpu, 0.0);  // bit for bit
  EXPECT_EQ(cpu.step_count(), 3);
  for (int s = 3; s < 5; ++s) {
    const auto in = batch(c, 200 + s);
    const float lc = cpu.step(in), lg = gpu.step(in);
    EXPECT_NEAR(lg, lc, 5e-4 * std::fabs(lc)) << "step " << s;
  }
  checkpoint::save_checkpoint(cpu, dir + "/from_cpu.ckpt", checkpoint::CheckpointExtra{});
  Trainer gpu2 = make(c, oc, Device::kCuda);
  checkpoint::load_checkpoint(gpu2, dir + "/from_cpu.ckpt", nullptr);
  expect_same_parameters(gpu2, cpu, 0.0);
  EXPECT_EQ(gpu2.optimizer().device(), Device::kCuda);
  const auto in = batch(c, 300);
  const float lg = gpu2.step(in), lc = cpu.step(in);
  EXPECT_NEAR(lg, lc, 5e-4 * std::fabs(lc));
  std::filesystem::remove_all(dir);
}

TEST(GpuTrainer, HostOrDeviceInputs) {
  SKIP_WITHOUT_GPU();
  const models::GptConfig c = small_gpt();
  Trainer gpu = make(c, optim::OptimizerConfig{}, Device::kCuda);
  auto in = batch(c, 9);
  std::map<std::string, Tensor> on_device;
  for (const auto& [name, t] : in) on_device[name] = to_device(t, Device::kCuda);
  const float a = gpu.step(in);
  EXPECT_TRUE(std::isfinite(a));
  EXPECT_TRUE(std::isfinite(gpu.step(on_device)));  // bound without a copy
  in["tokens"] = Tensor::empty({c.batch, c.context + 1}, DType::kI32);
  expect_error([&] { gpu.step(in); }, Status::kShapeMismatch, "input 'tokens' has shape");
}

// Ids and labels are checked on the device and reported at the end of the run: the same error
// as on the CPU, and the failed step changes nothing (the update never ran).
TEST(GpuTrainer, BadIdsAndLabelsFailTheStepAsOnTheCpuAndChangeNothing) {
  SKIP_WITHOUT_GPU();
  const models::GptConfig c = small_gpt();
  Trainer gpu = make(c, optim::OptimizerConfig{}, Device::kCuda);
  Trainer cpu = make(c, optim::OptimizerConfig{}, Device::kCpu);
  const std::vector<float> before = host_values(gpu.parameters()[0]);
  auto bad_targets = batch(c, 12);
  bad_targets["targets"].data<int32_t>()[1 * c.context + 2] = static_cast<int32_t>(c.vocab) + 5;
  auto bad_tokens = batch(c, 13);
  bad_tokens["tokens"].data<int32_t>()[3] = -1;
  for (const auto* in : {&bad_targets, &bad_tokens}) {
    std::string cpu_error;
    try {
      cpu.step(*in);
    } catch (const Error& e) {
      cpu_error = e.what();
    }
    ASSERT_FALSE(cpu_error.empty());
    try {
      gpu.step(*in);
      ADD_FAILURE() << "a bad batch trained on the GPU";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_EQ(std::string(e.what()), cpu_error);
    }
  }
  EXPECT_EQ(host_values(gpu.parameters()[0]), before);
  EXPECT_EQ(gpu.step_count(), 0);
  EXPECT_TRUE(std::isfinite(gpu.step(batch(c, 14))));  // nothing left over from the failed runs
}

// Two trainers on the GPU given the same seed and batches step to the same bits, f32 and bf16:
// every kernel of a step is deterministic (no atomics in a sum; the embedding gradient sums each
// row in position order). The DDP test below relies on it; when both fail, look here first.
TEST(GpuTrainer, TheSameStepsTwiceGiveTheSameBits) {
  SKIP_WITHOUT_GPU();
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    models::GptConfig c = small_gpt();
    c.dtype = dtype;
    optim::OptimizerConfig oc;
    oc.kind = optim::OptimizerKind::kAdamW;
    oc.lr = 1e-3;
    oc.clip_norm = 1.0;
    Trainer a = make(c, oc, Device::kCuda), b = make(c, oc, Device::kCuda);
    for (int s = 0; s < 3; ++s) {
      const auto in = batch(c, 400 + s);
      const float la = a.step(in), lb = b.step(in);
      EXPECT_EQ(la, lb) << "step " << s;
      EXPECT_EQ(a.stats().grad_norm, b.stats().grad_norm) << "step " << s;
    }
    expect_bitwise_same_parameters(a, b, "two runs");
  }
}

// NaN or Inf in a batch on the GPU (issue #25): the norm is measured on the device and the update
// kernels skip a non-finite one there; the step reports kNonFinite like the CPU, changes no
// parameter and no optimizer state, and the next good step matches a CPU run without the batch.
TEST(GpuTrainer, NonFiniteBatchSkipsTheUpdateOnTheDeviceAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const char* kind : {"adamw", "sgd"}) {
    SCOPED_TRACE(kind);
    models::MlpConfig c;
    c.batch = 16;
    c.in_features = 40;
    c.hidden = {64};
    c.activation = "relu";
    optim::OptimizerConfig oc;
    oc.kind = std::string(kind) == "adamw" ? optim::OptimizerKind::kAdamW : optim::OptimizerKind::kSgd;
    oc.lr = 0.01;
    oc.momentum = oc.kind == optim::OptimizerKind::kSgd ? 0.9 : 0.0;
    TrainerOptions o;
    o.seed = 5;
    Trainer cpu(models::build_mlp(c), oc, o);
    o.device = Device::kCuda;
    Trainer gpu(models::build_mlp(c), oc, o);
    std::mt19937 rng(2);
    std::normal_distribution<float> normal;
    auto make_batch = [&] {
      Tensor x = Tensor::empty({c.batch, c.in_features}, DType::kF32), y = Tensor::empty({c.batch}, DType::kI32);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = normal(rng);
      for (int64_t i = 0; i < c.batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(rng() % c.classes);
      return std::map<std::string, Tensor>{{"x", x}, {"y", y}};
    };
    const auto first = make_batch(), second = make_batch();
    cpu.step(first);
    gpu.step(first);
    std::vector<std::vector<float>> params, state;
    for (size_t i = 0; i < gpu.parameters().size(); ++i) {
      params.push_back(host_values(gpu.parameters()[i]));
      for (const auto& [name, t] : gpu.optimizer().state(i)) state.push_back(host_values(t));
    }
    for (float bad : {std::nanf(""), INFINITY}) {
      auto poisoned = make_batch();
      poisoned["x"].data<float>()[7] = bad;
      expect_error([&] { gpu.step(poisoned); }, Status::kNonFinite, "the update was skipped");
      EXPECT_EQ(gpu.step_count(), 1);
      EXPECT_EQ(gpu.optimizer().step_count(), 1);
      EXPECT_FALSE(std::isfinite(gpu.stats().grad_norm));
      size_t k = 0;
      for (size_t i = 0; i < gpu.parameters().size(); ++i) {
        EXPECT_EQ(host_values(gpu.parameters()[i]), params[i]) << gpu.parameter_names()[i];
        for (const auto& [name, t] : gpu.optimizer().state(i)) EXPECT_EQ(host_values(t), state[k++]) << name;
      }
    }
    const float lc = cpu.step(second), lg = gpu.step(second);
    EXPECT_NEAR(lg, lc, 5e-4 * std::fabs(lc));
    expect_same_parameters(gpu, cpu, 1e-3);
  }
}

// One rank: DDP's average is the rank's own gradient, so a DDP trainer on the GPU — buckets
// reduced over NCCL in device memory, or through host copies over UCX — must step exactly as a
// plain one: the average over one rank is the identity (NCCL's and UCX's both), the bucket copies
// move bits, and every kernel of the step is deterministic (TheSameStepsTwiceGiveTheSameBits),
// so the tolerance is 0. (The first GPU run saw relative differences of 1e-8 to 2e-4 here: the
// embedding gradient's fp32 atomics then summed repeated ids in a varying order; one-ulp changes
// of that gradient, replayed on the CPU, move every parameter by 1e-8 to 1e-7 relative after
// three AdamW steps, and the key biases — whose exact gradient is 0, so what is left is rounding
// noise that AdamW turns into steps of about lr — by 1.3e-4.) (Several ranks:
// multirank.dp.*-cuda.)
TEST(GpuDataParallel, DdpOverNcclOrThroughTheHostStepsLikePlainTrainingOnOneRank) {
  SKIP_WITHOUT_GPU();
  const test::WorldOfOne world = test::world_of_one();
  const auto& store = world.store;
  const auto& comm = world.comm;
  const models::GptConfig c = small_gpt();
  optim::OptimizerConfig oc;
  oc.kind = optim::OptimizerKind::kAdamW;
  oc.lr = 1e-3;
  oc.clip_norm = 1.0;
  Trainer plain = make(c, oc, Device::kCuda), nccl = make(c, oc, Device::kCuda), staged = make(c, oc, Device::kCuda);
  std::string why;
  auto device_comm = parallel::make_device_communicator(*comm, store, &why);
  ASSERT_NE(device_comm, nullptr) << why;
  parallel::PlanConfig plan = parallel::preset(parallel::Preset::kDdp, 1);
  plan.bucket_bytes = 64 << 10;  // several buckets
  auto on_device = parallel::DataParallel::attach(nccl, plan, comm, device_comm);
  auto through_host = parallel::DataParallel::attach(staged, plan, comm);
  EXPECT_TRUE(on_device->reduces_on_device());
  EXPECT_FALSE(through_host->reduces_on_device());
  for (int s = 0; s < 3; ++s) {
    const auto in = batch(c, 400 + s);
    const float lp = plain.step(in), ln = nccl.step(in), lh = staged.step(in);
    EXPECT_EQ(ln, lp) << "step " << s;
    EXPECT_EQ(lh, lp) << "step " << s;
  }
  EXPECT_GE(on_device->stats().buckets, 2);
  expect_bitwise_same_parameters(nccl, plain, "DDP over NCCL vs plain");
  expect_bitwise_same_parameters(staged, plain, "DDP through the host vs plain");
  parallel::PlanConfig zero = plan;
  zero.zero_stage = 1;
  Trainer sharded = make(c, oc, Device::kCuda);
  expect_error([&] { parallel::DataParallel::attach(sharded, zero, comm, device_comm); }, Status::kUnsupported,
               "ZeRO stage 1 of DDP runs on host parameters only");
}

// co2 on the GPU keeps its outer state on host copies: one rank on each device, same steps.
TEST(GpuDataParallel, Co2OnTheGpuMatchesCo2OnTheCpu) {
  SKIP_WITHOUT_GPU();
  const test::WorldOfOne world = test::world_of_one();
  const auto& comm = world.comm;
  const models::GptConfig c = small_gpt();
  optim::OptimizerConfig oc;
  oc.kind = optim::OptimizerKind::kAdamW;
  oc.lr = 1e-3;
  Trainer gpu = make(c, oc, Device::kCuda), cpu = make(c, oc, Device::kCpu);
  parallel::PlanConfig plan = parallel::preset(parallel::Preset::kCo2, 2);
  plan.outer.momentum = 0.5;
  auto a = parallel::DataParallel::attach(gpu, plan, comm);
  auto b = parallel::DataParallel::attach(cpu, plan, comm);
  for (int s = 0; s < 5; ++s) {
    const auto in = batch(c, 500 + s);
    const float lg = gpu.step(in), lc = cpu.step(in);
    EXPECT_NEAR(lg, lc, 5e-4 * std::fabs(lc)) << "step " << s;
  }
  EXPECT_EQ(a->stats().rounds, 2);
  expect_same_parameters(gpu, cpu, 1e-3);
}

}  // namespace
}  // namespace cohort
