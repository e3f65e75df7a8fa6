// bench_gpu_gpt: trains GPT-2 small (124M parameters, context 1024) on the CUDA device with the
// Trainer — AdamW, clipping, fp32 parameters with TF32 products, or with --dtype bf16 bf16
// parameters and activations with an fp32 master copy — on random tokens, and reports tokens/s,
// model FLOPs utilization and memory:
//   model FLOPs per token = 6 N + 12 L T C  (parameters N, forward + backward, attention scores)
//   MFU = tokens/s * FLOPs per token / peak, peak = the card's dense bf16 TFLOP/s (--peak).
//   device peak = the most device memory the caching allocator had handed out (parameters,
//   gradients, optimizer state, activations: what torch.cuda.max_memory_allocated counts);
//   activation peak = the executor's share of it during a step.
// Then, unless --no-torch, the PyTorch anchors on the same GPU in the same invocation (bench/gpu/
// torch_gpt_gpu.py, one process each, the same model and settings): eager TF32, eager bf16
// autocast and, unless --no-compile, torch.compile with bf16 autocast; each prints its tokens/s
// and torch.cuda.max_memory_allocated, and cohort/anchor as a ratio. Every anchor runs under a
// deadline (--torch-timeout seconds each, default 180 eager and 420 compiled: compiling takes a
// minute or more) and is killed with its whole process group when it passes it. Median of
// --rounds rounds of --steps steps after --warmup steps.
//
// Usage: bench_gpu_gpt [--batch 8] [--context 1024] [--layers 12] [--width 768] [--heads 12]
//          [--vocab 50257] [--steps 10] [--rounds 3] [--warmup 3] [--tf32 1] [--dtype f32|bf16] [--peak 989]
//          [--no-torch] [--no-compile] [--keep-gelu] [--torch-timeout S] [--python python3]
//          [--torch-script PATH (default: this source tree's bench/gpu/torch_gpt_gpu.py)]
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/device/cuda_context.h"
#include "core/device/device.h"
#include "core/exec/profile.h"
#include "core/exec/trainer.h"
#include "core/models/gpt.h"

namespace {

using namespace cohort;

struct Args {
  models::GptConfig gpt;
  int steps = 10, rounds = 3, warmup = 3;
  bool tf32 = true, torch = true, compile = true;
  int torch_timeout = 0;  // seconds per anchor; 0: 180 eager, 420 compiled
  double peak_tflops = 989.0;  // H100 SXM / H200 dense bf16
  std::string python = "python3";  // the GPU machine's, with CUDA torch
  std::string torch_script = std::string(COHORT_SOURCE_DIR) + "/bench/gpu/torch_gpt_gpu.py";
};

Args parse(int argc, char** argv) {
  Args a;
  a.gpt.batch = 8;
  a.gpt.context = 1024;
  a.gpt.layers = 12;
  a.gpt.width = 768;
  a.gpt.heads = 12;
  a.gpt.vocab = 50257;
  a.gpt.recompute_gelu = true;  // as cohort train --device cuda builds it
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--no-torch" || f == "--no-compile") {
      (f == "--no-torch" ? a.torch : a.compile) = false;
      continue;
    }
    if (f == "--keep-gelu") {  // the MLP keeps gelu(h) and gelu'(h) for backward (the CPU's way)
      a.gpt.recompute_gelu = false;
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
    else if (f == "--torch-timeout") a.torch_timeout = std::atoi(v);
    else if (f == "--torch-script") a.torch_script = v;
    else throw Error(Status::kInvalidArgument, "unknown option " + f);
  }
  COHORT_CHECK(a.steps >= 1 && a.rounds >= 1 && a.warmup >= 0 && a.peak_tflops > 0 && a.torch_timeout >= 0,
               Status::kInvalidArgument, "--steps and --rounds must be >= 1, --warmup and --torch-timeout >= 0, --peak > 0");
  return a;
}

double flops_per_token(const models::GptConfig& c) {
  const double n = static_cast<double>(models::gpt_parameter_count(c));
  return 6.0 * n + 12.0 * c.layers * c.context * c.width;
}

struct Child {
  std::string out;        // stdout and stderr together
  bool timed_out = false;
  int status = -1;        // waitpid's status; -1 when the child could not be started
};

// Runs `command` under /bin/sh in its own process group, collecting its output, for at most
// `seconds`. Past that, or once the command has exited (leaving perhaps compile workers behind,
// which may hold the output open), the whole group is killed: nothing it started outlives it.
Child run_with_deadline(const std::string& command, int seconds) {
  Child c;
  int fds[2];
  if (pipe(fds) != 0) {
    c.out = std::string("pipe: ") + std::strerror(errno);
    return c;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    c.out = std::string("fork: ") + std::strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return c;
  }
  if (pid == 0) {  // the child: only async-signal-safe calls until exec
    setpgid(0, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);  // also here: whichever runs first, the group exists before a kill
  close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  bool exited = false, eof = false;
  while (!(exited && eof)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      c.timed_out = true;
      break;
    }
    bool drained = eof;
    if (!eof) {
      pollfd p{fds[0], POLLIN, 0};
      const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), exited ? 0 : 200)));
      if (ready > 0) {
        char buf[4096];
        const ssize_t n = read(fds[0], buf, sizeof buf);
        if (n > 0) c.out.append(buf, static_cast<size_t>(n));
        else eof = true;
      } else if (ready == 0 || errno != EINTR) {
        drained = true;  // nothing pending now (or poll failed for good)
        if (ready < 0) eof = true;
      }
    } else {
      usleep(20000);  // output closed, process not yet gone
    }
    if (!exited && waitpid(pid, &c.status, WNOHANG) == pid) exited = true;
    if (exited && drained) break;  // the command is done and its output read
  }
  close(fds[0]);
  kill(-pid, SIGKILL);  // the deadline passed, or leftovers of a finished command (ESRCH: none)
  if (!exited) waitpid(pid, &c.status, 0);
  return c;
}

// One anchor mode of torch_gpt_gpu.py (one line of key=value pairs, or why it gave none).
Child run_torch(const Args& a, const std::string& mode) {
  const std::string cmd = a.python + " '" + a.torch_script + "' " + std::to_string(a.gpt.batch) + " " +
                          std::to_string(a.gpt.context) + " " + std::to_string(a.gpt.layers) + " " + std::to_string(a.gpt.width) + " " +
                          std::to_string(a.gpt.heads) + " " + std::to_string(a.gpt.vocab) + " " +
                          std::to_string(a.warmup) + " " + std::to_string(a.steps) + " " +
                          std::to_string(a.rounds) + " " + (a.tf32 ? "1" : "0") + " " + mode;
  const int seconds = a.torch_timeout > 0 ? a.torch_timeout : mode == "compile_bf16" ? 420 : 180;
  return run_with_deadline(cmd, seconds);
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
    OpProfile::reset();  // COHORT_PROFILE: the timed steps only (the warm-up's plans and compiles out)
    const uint64_t staged_before = cuda_context().blas.staged_products();
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
    const double device_peak_gib = static_cast<double>(cuda_context().allocator.stats().peak) / (1u << 30);
    std::printf("cohort gpt  %lld params  B %lld T %lld  %s  tokens/s %.0f  step %.1f ms  MFU %.1f%% of %.0f TFLOP/s"
                "  loss %.4f  device peak %.2f GiB  activation peak %.2f GiB\n",
                static_cast<long long>(models::gpt_parameter_count(c)), static_cast<long long>(c.batch),
                static_cast<long long>(c.context),
                c.dtype == DType::kBF16 ? "bf16 (fp32 master)" : a.tf32 ? "fp32/TF32" : "fp32", tps,
                1e3 * c.batch * c.context / tps, 100.0 * mfu, a.peak_tflops, loss, device_peak_gib,
                static_cast<double>(st.peak_activation_bytes) / (1u << 30));
    std::printf("cohort gemm staging: %.1f products a step copied through aligned buffers (kernels/cuda/gemm.h)\n",
                static_cast<double>(cuda_context().blas.staged_products() - staged_before) / (a.rounds * a.steps));
    std::fflush(stdout);  // before the anchors' output, however long they take
    if (!a.torch) return 0;
    for (const std::string mode : {"eager_tf32", "eager_bf16", "compile_bf16"}) {
      if (mode == "compile_bf16" && !a.compile) {
        std::printf("torch %-12s  skipped (--no-compile)\n", mode.c_str());
        continue;
      }
      const auto t0 = std::chrono::steady_clock::now();
      const Child run = run_torch(a, mode);
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const size_t at = run.out.find("mode=");
      const std::string line = at == std::string::npos ? "" : run.out.substr(at, run.out.find('\n', at) - at);
      const double torch_tps = field(line, "tokens_per_s");
      if (run.timed_out || torch_tps <= 0) {
        std::string tail = run.out.size() > 600 ? "..." + run.out.substr(run.out.size() - 600) : run.out;
        std::replace(tail.begin(), tail.end(), '\n', ' ');
        std::printf("torch %-12s  no figure: %s after %.0f s; output: %s\n", mode.c_str(),
                    run.timed_out ? "killed at its deadline" : "ended", wall, tail.empty() ? "(none)" : tail.c_str());
        continue;
      }
      std::printf("torch %-12s  tokens/s %.0f  MFU %.1f%%  max memory %.2f GiB  warm-up %.1f s  "
                  "cohort/anchor %.2fx  (%s)\n",
                  mode.c_str(), torch_tps, 100.0 * torch_tps * fpt / (a.peak_tflops * 1e12),
                  field(line, "max_memory_gib"), field(line, "warmup_s"), tps / torch_tps, line.c_str());
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_gpt: %s\n", e.what());
    return 1;
  }
}
