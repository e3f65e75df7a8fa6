// bench_gpu_gpt: trains GPT-2 small (124M parameters, context 1024) on the CUDA device with the
// Trainer — AdamW, clipping, fp32 parameters with TF32 products, or with --dtype bf16 bf16
// parameters and activations with an fp32 master copy — on random tokens, and reports tokens/s and model FLOPs utilization:
//   model FLOPs per token = 6 N + 12 L T C  (parameters N, forward + backward, attention scores)
//   MFU = tokens/s * FLOPs per token / peak, peak = the card's dense bf16 TFLOP/s (--peak).
// Then, unless --no-torch, runs bench/gpu/torch_gpt_gpu.py (PyTorch, the same model and settings on
// the same GPU) and prints cohort/torch as a ratio. Median of --rounds rounds of --steps steps
// after --warmup steps.
//
// Usage: bench_gpu_gpt [--batch 8] [--context 1024] [--layers 12] [--width 768] [--heads 12]
//          [--vocab 50257] [--steps 10] [--rounds 3] [--warmup 3] [--tf32 1] [--dtype f32|bf16] [--peak 989]
//          [--no-torch] [--python python3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/device/device.h"
#include "core/exec/trainer.h"
#include "core/models/gpt.h"

namespace {

using namespace cohort;

struct Args {
  models::GptConfig gpt;
  int steps = 10, rounds = 3, warmup = 3;
  bool tf32 = true, torch = true;
  double peak_tflops = 989.0;  // H100 SXM / H200 dense bf16
  std::string python = "python3";  // the GPU machine's, with CUDA torch
};

Args parse(int argc, char** argv) {
  Args a;
  a.gpt.batch = 8;
  a.gpt.context = 1024;
  a.gpt.layers = 12;
  a.gpt.width = 768;
  a.gpt.heads = 12;
  a.gpt.vocab = 50257;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--no-torch") {
      a.torch = false;
      continue;
    }
    if (i + 1 >= argc) throw Error(Status::kInvalidArgument, f + " needs a value");
    const char* v = argv[++i];
    if (f == "--batch") a.gpt.batch = std::atoll(v);
    else if (f == "--context") a.gpt.context = std::atoll(v);
    else if (f == "--layers") a.gpt.layers = std::atoll(v);
    else if (f == "--width") a.gpt.width = std::atoll(v);
    else if (f == "--heads") a.gpt.heads = std::atoll(v);
    else if (f == "--vocab") a.gpt.vocab = std::atoll(v);
    else if (f == "--steps") a.steps = std::atoi(v);
    else if (f == "--rounds") a.rounds = std::atoi(v);
    else if (f == "--warmup") a.warmup = std::atoi(v);
    else if (f == "--tf32") a.tf32 = std::atoi(v) != 0;
    else if (f == "--dtype") {
      COHORT_CHECK(std::strcmp(v, "f32") == 0 || std::strcmp(v, "bf16") == 0, Status::kInvalidArgument,
                   "--dtype must be f32 or bf16, got ", v);
      a.gpt.dtype = std::strcmp(v, "bf16") == 0 ? DType::kBF16 : DType::kF32;
    }
    else if (f == "--peak") a.peak_tflops = std::atof(v);
    else if (f == "--python") a.python = v;
    else throw Error(Status::kInvalidArgument, "unknown option " + f);
  }
  COHORT_CHECK(a.steps >= 1 && a.rounds >= 1 && a.warmup >= 0 && a.peak_tflops > 0, Status::kInvalidArgument,
               "--steps and --rounds must be >= 1, --warmup >= 0, --peak > 0");
  return a;
}

double flops_per_token(const models::GptConfig& c) {
  const double n = static_cast<double>(models::gpt_parameter_count(c));
  return 6.0 * n + 12.0 * c.layers * c.context * c.width;
}

// One line of key=value pairs from the anchor; empty when it did not run.
std::string run_torch(const Args& a) {
  const std::string cmd = a.python + " " + COHORT_SOURCE_DIR + "/bench/gpu/torch_gpt_gpu.py " +
                          std::to_string(a.gpt.batch) + " " + std::to_string(a.gpt.context) + " " +
                          std::to_string(a.gpt.layers) + " " + std::to_string(a.gpt.width) + " " +
                          std::to_string(a.gpt.heads) + " " + std::to_string(a.gpt.vocab) + " " +
                          std::to_string(a.warmup) + " " + std::to_string(a.steps) + " " +
                          std::to_string(a.rounds) + " " + (a.tf32 ? "1" : "0") + " " +
                          dtype_name(a.gpt.dtype) + " 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  return out;
}

double field(const std::string& line, const std::string& key) {
  const size_t at = line.find(key + "=");
  return at == std::string::npos ? -1.0 : std::atof(line.c_str() + at + key.size() + 1);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    if (cuda_device_count() == 0) {
      std::printf("bench_gpu_gpt: skipped: %s\n", device_unavailable_reason(Device::kCuda).c_str());
      return 0;
    }
    set_cuda_allow_tf32(a.tf32);
    optim::OptimizerConfig oc;
    oc.kind = optim::OptimizerKind::kAdamW;
    oc.lr = 6e-4;
    oc.weight_decay = 0.1;
    oc.clip_norm = 1.0;
    TrainerOptions to;
    to.seed = 1;
    to.device = Device::kCuda;
    const models::GptConfig& c = a.gpt;
    Trainer trainer(models::build_gpt(c), oc, to);
    std::mt19937 rng(0);
    std::map<std::string, Tensor> in;
    for (const char* name : {"tokens", "targets"}) {
      Tensor t = Tensor::empty({c.batch, c.context}, DType::kI32);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>(rng() % c.vocab);
      in[name] = to_device(t, Device::kCuda);  // the data pipeline's job: not timed here
    }
    float loss = 0;
    for (int s = 0; s < a.warmup; ++s) loss = trainer.step(in);
    std::vector<double> rates;
    for (int r = 0; r < a.rounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int s = 0; s < a.steps; ++s) loss = trainer.step(in);  // each step reads its loss back
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rates.push_back(static_cast<double>(c.batch * c.context) * a.steps / sec);
    }
    std::sort(rates.begin(), rates.end());
    const double tps = rates[rates.size() / 2];
    const double fpt = flops_per_token(c);
    const double mfu = tps * fpt / (a.peak_tflops * 1e12);
    const TrainerStats st = trainer.stats();
    std::printf("cohort gpt  %lld params  B %lld T %lld  %s  tokens/s %.0f  step %.1f ms  MFU %.1f%% of %.0f TFLOP/s"
                "  loss %.4f  activation peak %.2f GiB\n",
                static_cast<long long>(models::gpt_parameter_count(c)), static_cast<long long>(c.batch),
                static_cast<long long>(c.context),
                c.dtype == DType::kBF16 ? "bf16 (fp32 master)" : a.tf32 ? "fp32/TF32" : "fp32", tps,
                1e3 * c.batch * c.context / tps, 100.0 * mfu, a.peak_tflops, loss,
                static_cast<double>(st.peak_activation_bytes) / (1u << 30));
    if (a.torch) {
      const std::string out = run_torch(a);
      const double torch_tps = field(out, "tokens_per_s");
      if (torch_tps > 0) {
        std::printf("torch  gpt  tokens/s %.0f  MFU %.1f%%  (%s)\n", torch_tps,
                    100.0 * torch_tps * fpt / (a.peak_tflops * 1e12), out.substr(0, out.find('\n')).c_str());
        std::printf("ratio cohort/torch tokens/s: %.2f\n", tps / torch_tps);
      } else {
        std::printf("torch anchor did not run: %s\n", out.empty() ? "no output" : out.c_str());
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_gpt: %s\n", e.what());
    return 1;
  }
}
