// bench_compute: training throughput of cohort's GPT (4 layers, width 256, 4 heads, context 128,
// batch 8, AdamW) on one thread, against the same model in PyTorch measured in the same run —
// once with Debian's OpenBLAS as installed and once with OPENBLAS_CORETYPE=SkylakeX — plus our
// achieved GFLOP/s against this machine's single-thread sgemm peak (oneDNN 1024^3, measured
// here) and the peak memory of a training step. cohort is driven through the public C API only.
//
//   bench_compute [--rounds R] [--steps N] [--warmup W] [--python PATH] [--no-torch] [--ab [--sizes gpt:LxCxT]]
//   bench_compute --scaling [--sizes gpt:4x256x128,gpt:6x384x256,gpt:4x768x128,cnn] [--threads 1,2,..]
//
// --scaling (#31): for each model (gpt:LAYERSxWIDTHxCONTEXT, heads = width / 64, batch 8; cnn: the
// Fashion-MNIST CNN, batch 32) and each thread count (default 1 to the cores of the process's CPU
// affinity), cohort and both PyTorch configurations with that many threads, rounds interleaved as
// below; prints items/s, cohort / the faster PyTorch, and each one's parallel efficiency
// (items/s at N threads / (N x items/s at 1 thread)).
//
// --ab, for trying a change to the library: between invocations the box's load moves the figure
// by 5-8%, more than most single changes gain. This mode builds two trainers, the first with
// COHORT_AB=0 in the environment and the second with COHORT_AB=1 (set again around each one's
// rounds), alternates their rounds in one process (A B, B A, ...) and prints each pair's ratio
// and the median. With no switch (A/A) the median came out 0.994-1.019, so gains under ~1% stay
// unproven here too. The library reads no such variable: an experiment adds the read,
// temporarily, where it switches between the two versions (and into any cache of what it
// switches, such as the matmul primitives' key). --sizes gpt:LxCxT picks the model (default: the
// shape above).
//
// Every figure is the median of R rounds of N steps, for cohort and for each PyTorch configuration
// alike (with fewer torch rounds, the faster of two noisy torch medians sat above both runs'
// typical speed). The two PyTorch configurations run as worker processes that stay alive for the
// whole benchmark and time one round when asked, so the rounds interleave, in an order that
// rotates each round: cohort, as installed, SkylakeX; as installed, SkylakeX, cohort; ... A
// change of the box's load then reaches all three alike. (Timed one after the other, cohort
// before and after two whole PyTorch runs, the ratio moved 1.42-1.65x between invocations of
// unchanged code.) The ratio printed is cohort's median over the faster PyTorch median; the
// median of the per-round ratios is printed beside it.
#include <cohort/cohort.h>
#include <dnnl.h>
#include <fcntl.h>
#include <omp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int64_t kB = 8, kT = 128, kL = 4, kC = 256, kH = 4;

struct Args {
  int rounds = 6, steps = 8, warmup = 3;
  std::string python = "/usr/bin/python3";
  bool torch = true;
  bool ab = false;
  bool scaling = false;
  std::string sizes = "gpt:4x256x128,gpt:6x384x256,gpt:4x768x128,cnn";
  bool sizes_given = false;  // --ab: its first GPT shape
  std::vector<int> threads;  // empty: 1 .. the cores of the CPU affinity
};

void check(cohort_status s, const char* what) {
  if (s == COHORT_OK) return;
  std::fprintf(stderr, "error: %s: %s\n", what, cohort_last_error());
  std::exit(1);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

int64_t status_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t len = std::strlen(field);
  while (std::getline(f, line))
    if (line.compare(0, len, field) == 0 && line[len] == ':') return std::atoll(line.c_str() + len + 1);
  return 0;
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  return static_cast<bool>(f);
}

// A model to time: the GPT (tokens) or the CNN (images), batch and shape as given.
struct Shape {
  bool cnn = false;
  int64_t B = kB, T = kT, L = kL, C = kC, H = kH;
  int64_t items_per_step() const { return cnn ? B : B * T; }
  std::string name() const {
    if (cnn) return "cnn B" + std::to_string(B);
    return "gpt " + std::to_string(L) + "x" + std::to_string(C) + " T" + std::to_string(T) + " B" + std::to_string(B);
  }
};

// The trainer, random inputs, and the memory it took.
struct Gpt {
  Shape shape_;
  cohort_trainer* trainer = nullptr;
  std::vector<int32_t> tokens, targets;
  std::vector<float> images;
  int64_t shape[4] = {kB, kT, 0, 0};
  int64_t label_shape[1] = {0};
  cohort_tensor_ref refs[2];
  int64_t params = 0;

  explicit Gpt(const Shape& sh = Shape()) : shape_(sh) {
    cohort_graph* g = nullptr;
    if (sh.cnn) {
      cohort_model_cnn_options m = cohort_model_cnn_options_default();
      m.batch = sh.B;
      check(cohort_graph_create_cnn(&m, &g), "cnn");
    } else {
      cohort_model_gpt_options m = cohort_model_gpt_options_default();
      m.batch = sh.B, m.context = sh.T, m.layers = sh.L, m.width = sh.C, m.heads = sh.H;
      check(cohort_graph_create_gpt(&m, &g), "gpt");
    }
    check(cohort_graph_stats(g, nullptr, nullptr, nullptr, &params), "stats");
    cohort_optimizer_options o = cohort_optimizer_options_default();
    o.kind = COHORT_OPTIM_ADAMW, o.lr = 1e-4, o.weight_decay = 0.1;
    cohort_optimizer* opt = nullptr;
    check(cohort_optimizer_create(&o, &opt), "optimizer");
    check(cohort_trainer_create(g, opt, nullptr, &trainer), "trainer");
    cohort_optimizer_destroy(opt);
    cohort_graph_destroy(g);
    std::mt19937 rng(0);
    if (sh.cnn) {
      images.resize(static_cast<size_t>(sh.B * 28 * 28));
      targets.resize(static_cast<size_t>(sh.B));
      for (auto& v : images) v = static_cast<float>(rng() % 256) / 255.0f;
      for (auto& t : targets) t = static_cast<int32_t>(rng() % 10);
      shape[0] = sh.B, shape[1] = 1, shape[2] = 28, shape[3] = 28;
      label_shape[0] = sh.B;
      refs[0] = {"x", COHORT_F32, 4, shape, images.data(), images.size() * 4};
      refs[1] = {"y", COHORT_I32, 1, label_shape, targets.data(), targets.size() * 4};
      return;
    }
    shape[0] = sh.B, shape[1] = sh.T;
    tokens.resize(static_cast<size_t>(sh.B * sh.T)), targets.resize(static_cast<size_t>(sh.B * sh.T));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = rng() % 256, targets[i] = rng() % 256;
    refs[0] = {"tokens", COHORT_I32, 2, shape, tokens.data(), tokens.size() * 4};
    refs[1] = {"targets", COHORT_I32, 2, shape, targets.data(), targets.size() * 4};
  }
  ~Gpt() { cohort_trainer_destroy(trainer); }
  void step() { check(cohort_trainer_step(trainer, refs, 2, nullptr), "step"); }
  double tokens_per_s(int steps) {
    const double t0 = now();
    for (int i = 0; i < steps; ++i) step();
    return static_cast<double>(shape_.items_per_step() * steps) / (now() - t0);
  }
};

// Single-thread sgemm peak: the best of 20 oneDNN 1024^3 products (the box is shared: the best
// run is the one least disturbed).
double sgemm_peak_gflops() {
  const int n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.0f);
  double best = 0;
  for (int r = 0; r < 20; ++r) {
    const double t0 = now();
    dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best = std::max(best, 2.0 * n * n * n / (now() - t0) / 1e9);
  }
  return best;
}

struct TorchResult {
  std::vector<double> rounds;  // tokens/s of each timed round
  double rss_delta = -1;
  double tokens_per_s() const { return median(rounds); }
};

// One PyTorch configuration as a worker process (torch_model.py ... serve): it warms up (await_ready
// waits for that), then times one round per "round" line we send. Every wait on it is bounded (kWaitSeconds); a worker
// that does not answer in time, or dies, is killed and its figures stay empty.
class TorchWorker {
 public:
  static constexpr int kWaitSeconds = 300;

  TorchWorker(const Args& a, const char* coretype, const Shape& sh = Shape(), int threads = 1)
      : name_(coretype ? coretype : "as installed") {
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0) return;
    if (pipe2(from_child, O_CLOEXEC) != 0) {
      close(to_child[0]), close(to_child[1]);
      return;
    }
    const std::string script = COHORT_BENCH_DIR "/torch_model.py";
    std::vector<std::string> args = {a.python, script, "--threads", std::to_string(threads)};
    if (sh.cnn) args.push_back("--cnn");
    for (int64_t v : {sh.B, sh.T, sh.L, sh.C, sh.H}) args.push_back(std::to_string(v));
    for (const std::string& v : {std::to_string(a.warmup), std::to_string(a.steps), std::string("serve")})
      args.push_back(v);
    // The child's arguments and environment are built here: after fork only exec-safe calls.
    const std::string n = std::to_string(threads);
    // OPENBLAS_THREAD_TIMEOUT: OpenBLAS's pthread workers spin about 2^28 cycles after each call
    // before they sleep, so a worker that has just timed its round can keep a core busy into the
    // next player's round. A precaution: on a Zen 5 box one run with it read GPT 4x256 at 2 threads
    // at cohort 11831 and PyTorch 5835 tokens/s against 8861-9864 and 4946-5705 without, but later
    // runs with it read 8957-13446, that box's own spread. Passive OpenMP waits, for the same reason.
    std::vector<std::string> env = {"OMP_NUM_THREADS=" + n, "OPENBLAS_NUM_THREADS=" + n, "OMP_WAIT_POLICY=passive",
                                    "OPENBLAS_THREAD_TIMEOUT=4"};
    if (coretype) env.push_back(std::string("OPENBLAS_CORETYPE=") + coretype);
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e, key = kv.substr(0, kv.find('=') + 1);
      if (key != "OMP_NUM_THREADS=" && key != "OPENBLAS_NUM_THREADS=" && key != "OMP_WAIT_POLICY=" &&
          key != "OPENBLAS_CORETYPE=" && key != "OPENBLAS_THREAD_TIMEOUT=")
        env.push_back(kv);
    }
    std::vector<char*> argv, envp;
    for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
    for (const std::string& s : env) envp.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr), envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0), dup2(from_child[1], 1);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(to_child[0]), close(from_child[1]);
    to_ = to_child[1], from_ = from_child[0];
    if (pid_ < 0) stop();
  }
  ~TorchWorker() { stop(); }

  // Waits for the end of its warm-up (workers started together warm up side by side).
  void await_ready() {
    if (pid_ > 0 && read_line() != "ready") stop();
  }

  // Times one round; false (and the worker stopped) when it did not answer.
  bool round() {
    if (!send("round\n")) return false;
    const std::string line = read_line();
    const size_t at = line.find("tokens_per_s=");
    if (at == std::string::npos) return stop(), false;
    result_.rounds.push_back(std::atof(line.c_str() + at + 13));
    return true;
  }

  // Ends the worker and collects its memory figure.
  const TorchResult& finish() {
    if (send("quit\n")) {
      const std::string line = read_line();
      const size_t at = line.find("rss_peak_delta_bytes=");
      if (at != std::string::npos) result_.rss_delta = std::atof(line.c_str() + at + 21);
    }
    stop();
    return result_;
  }

 private:
  bool send(const char* text) {
    if (pid_ <= 0) return false;
    const size_t n = std::strlen(text);
    return write(to_, text, n) == static_cast<ssize_t>(n) || (stop(), false);
  }

  // The worker's next line, or "" when it closed its output or said nothing for kWaitSeconds.
  std::string read_line() {
    std::string line;
    const double deadline = now() + kWaitSeconds;
    while (pid_ > 0) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const double left = deadline - now();
      pollfd p{from_, POLLIN, 0};
      if (left <= 0 || poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) break;
      char chunk[512];
      const ssize_t got = read(from_, chunk, sizeof chunk);
      if (got <= 0) break;
      buffer_.append(chunk, static_cast<size_t>(got));
    }
    std::fprintf(stderr, "bench_compute: PyTorch (%s) stopped answering; its figures are left out\n", name_);
    stop();
    return line;
  }

  void stop() {
    if (to_ >= 0) close(to_), to_ = -1;
    if (from_ >= 0) close(from_), from_ = -1;
    if (pid_ > 0) {
      // Closing its stdin ends a healthy worker; one that is stuck gets SIGKILL after 10 s.
      for (int i = 0; i < 100 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i) usleep(100000);
      if (waitpid(pid_, nullptr, WNOHANG) == 0) kill(pid_, SIGKILL), waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }

  const char* name_;
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buffer_;
  TorchResult result_;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    const bool has = i + 1 < argc;
    if (f == "--rounds" && has) a.rounds = std::max(1, std::atoi(argv[++i]));
    else if (f == "--steps" && has) a.steps = std::max(1, std::atoi(argv[++i]));
    else if (f == "--warmup" && has) a.warmup = std::max(0, std::atoi(argv[++i]));
    else if (f == "--python" && has) a.python = argv[++i];
    else if (f == "--no-torch") a.torch = false;
    else if (f == "--ab") a.ab = true;
    else if (f == "--scaling") a.scaling = true;
    else if (f == "--sizes" && has) a.sizes = argv[++i], a.sizes_given = true;
    else if (f == "--threads" && has) {
      const std::string list = argv[++i];
      for (size_t pos = 0; pos < list.size();) {
        const size_t comma = list.find(',', pos);
        a.threads.push_back(std::max(1, std::atoi(list.substr(pos, comma - pos).c_str())));
        pos = comma == std::string::npos ? list.size() : comma + 1;
      }
    } else {
      std::fprintf(stderr, "usage: bench_compute [--rounds R] [--steps N] [--warmup W] [--python P] [--no-torch] [--ab [--sizes gpt:LxCxT]]\n"
                           "       bench_compute --scaling [--sizes gpt:LxCxT,...,cnn] [--threads 1,2,...] [...]\n");
      std::exit(2);
    }
  }
  return a;
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// OpenBLAS's SkylakeX kernels need AVX-512 (without it the anchor dies of an illegal instruction).
bool has_avx512() { return __builtin_cpu_supports("avx512f"); }

Shape parse_shape(const std::string& spec);

// --ab: trainers A (COHORT_AB=0) and B (COHORT_AB=1), alternating rounds.
int run_ab(const Args& a) {
  auto side = [](bool b) { setenv("COHORT_AB", b ? "1" : "0", 1); };
  // The first GPT of --sizes, else the default shape.
  Shape sh;
  if (a.sizes_given && a.sizes.rfind("gpt:", 0) == 0) sh = parse_shape(a.sizes.substr(0, a.sizes.find(',')));
  side(false);
  Gpt ga(sh);
  for (int i = 0; i < a.warmup; ++i) ga.step();
  side(true);
  Gpt gb(sh);
  for (int i = 0; i < a.warmup; ++i) gb.step();
  std::vector<double> ta, tb, ratio;
  for (int r = 0; r < a.rounds; ++r) {
    for (int k = 0; k < 2; ++k) {  // A B, then B A: neither always runs in the other's wake
      const bool b = (k == 1) != (r % 2 == 1);
      side(b);
      (b ? tb : ta).push_back((b ? gb : ga).tokens_per_s(a.steps));
    }
    ratio.push_back(tb.back() / ta.back());
    std::printf("round %2d: A %8.0f  B %8.0f tokens/s  B/A %.3f\n", r + 1, ta.back(), tb.back(), ratio.back());
  }
  std::printf("median: A %.0f  B %.0f tokens/s; median B/A %.3f over %d rounds of %d steps\n", median(ta), median(tb),
              median(ratio), a.rounds, a.steps);
  return 0;
}

// a.rounds rounds, round r running cohort and the workers in an order rotated by r; cohort's
// items/s of each round.
std::vector<double> interleave(const Args& a, Gpt& model, std::vector<std::unique_ptr<TorchWorker>>& workers) {
  std::vector<double> ours;
  const int players = 1 + static_cast<int>(workers.size());
  for (int r = 0; r < a.rounds; ++r)
    for (int k = 0; k < players; ++k) {
      const int who = (r + k) % players;
      if (who == 0) ours.push_back(model.tokens_per_s(a.steps));
      else workers[static_cast<size_t>(who - 1)]->round();
    }
  return ours;
}

Shape parse_shape(const std::string& spec) {
  Shape sh;
  if (spec == "cnn") {
    sh.cnn = true;
    sh.B = 32;
    return sh;
  }
  long long L = 0, C = 0, T = 0;
  if (std::sscanf(spec.c_str(), "gpt:%lldx%lldx%lld", &L, &C, &T) != 3 || L < 1 || C < 64 || C % 64 || T < 1) {
    std::fprintf(stderr, "bench_compute: size '%s' is not cnn or gpt:LAYERSxWIDTHxCONTEXT (width a multiple of 64)\n",
                 spec.c_str());
    std::exit(2);
  }
  sh.L = L, sh.C = C, sh.T = T, sh.H = C / 64;
  return sh;
}

int affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? std::max(1, CPU_COUNT(&set)) : 1;
}

// --scaling: every size at every thread count, cohort and the two PyTorch configurations
// interleaved per round; then each one's parallel efficiency.
int run_scaling(const Args& a) {
  std::vector<int> threads = a.threads;
  if (threads.empty())
    for (int t = 1; t <= affinity_cores(); ++t) threads.push_back(t);
  std::vector<Shape> shapes;
  for (size_t pos = 0; pos < a.sizes.size();) {
    const size_t comma = a.sizes.find(',', pos);
    shapes.push_back(parse_shape(a.sizes.substr(pos, comma - pos)));
    pos = comma == std::string::npos ? a.sizes.size() : comma + 1;
  }
  signal(SIGPIPE, SIG_IGN);
  std::printf("bench_compute --scaling: %d rounds of %d steps per figure, medians; items are tokens (gpt) or "
              "images (cnn); torch = the faster of OpenBLAS as installed and SkylakeX\n",
              a.rounds, a.steps);
  std::printf("%-22s %7s %12s %12s %7s %9s %9s\n", "model", "threads", "cohort/s", "torch/s", "ratio", "eff cohort",
              "eff torch");
  for (const Shape& sh : shapes) {
    double ours1 = 0, torch1 = 0;
    for (int t : threads) {
      check(cohort_set_num_threads(t), "threads");
      omp_set_num_threads(t);
      Gpt model(sh);
      for (int i = 0; i < a.warmup; ++i) model.step();
      std::vector<std::unique_ptr<TorchWorker>> workers;
      if (a.torch) {
        workers.push_back(std::make_unique<TorchWorker>(a, nullptr, sh, t));
        if (has_avx512()) workers.push_back(std::make_unique<TorchWorker>(a, "SkylakeX", sh, t));
        for (auto& w : workers) w->await_ready();
      }
      const std::vector<double> ours = interleave(a, model, workers);
      double theirs = 0;
      for (auto& w : workers) theirs = std::max(theirs, w->finish().tokens_per_s());
      const double mine = median(ours);
      if (t == 1) ours1 = mine, torch1 = theirs;
      auto eff = [&](double v, double one) { return one > 0 && v > 0 ? v / (t * one) : 0.0; };
      std::printf("%-22s %7d %12.0f %12.0f %6.2fx %9.2f %9.2f\n", sh.name().c_str(), t, mine, theirs,
                  theirs > 0 ? mine / theirs : 0.0, eff(mine, ours1), eff(theirs, torch1));
      std::fflush(stdout);
    }
  }
  std::printf("targets (#31): ratio >= 1.5x at 1 and 2 threads for every size; cohort's efficiency at 2 threads >= 0.85\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.scaling) return run_scaling(a);
  check(cohort_set_num_threads(1), "threads");
  omp_set_num_threads(1);
  if (a.ab) return run_ab(a);
  const bool rss = reset_peak_rss();
  const int64_t base_kib = status_kib("VmRSS");
  Gpt gpt;
  for (int i = 0; i < a.warmup; ++i) gpt.step();
  std::vector<std::unique_ptr<TorchWorker>> workers;  // as installed, SkylakeX
  if (a.torch) {
    signal(SIGPIPE, SIG_IGN);  // a worker that died makes our next write fail, not kill us
    workers.push_back(std::make_unique<TorchWorker>(a, nullptr));
    if (has_avx512()) workers.push_back(std::make_unique<TorchWorker>(a, "SkylakeX"));
    else std::printf("torch (OPENBLAS_CORETYPE=SkylakeX) skipped: this CPU has no AVX-512 (its kernels would not run)\n");
    for (auto& w : workers) w->await_ready();
  }
  const std::vector<double> ours = interleave(a, gpt, workers);
  const double our_rss = rss ? static_cast<double>(status_kib("VmHWM") - base_kib) * 1024.0 : -1;
  cohort_trainer_stats st{};
  st.size = sizeof st;
  check(cohort_trainer_get_stats(gpt.trainer, &st), "stats");
  TorchResult installed, skx;
  if (a.torch) {
    installed = workers[0]->finish();
    if (workers.size() > 1) skx = workers[1]->finish();
  }
  const double peak = sgemm_peak_gflops();

  // Model FLOPs (PaLM appendix B): 6 N per token for the weights (wte counts: it is the tied
  // output projection) plus 12 L T C per token for attention scores and values, fwd + bwd.
  const double flops_per_token = 6.0 * static_cast<double>(gpt.params) + 12.0 * kL * kT * kC;
  const double tps = median(ours);
  const double gflops = tps * flops_per_token / 1e9;
  std::printf("bench_compute: GPT L=%lld C=%lld H=%lld T=%lld B=%lld, %lld parameters, AdamW, 1 thread\n",
              (long long)kL, (long long)kC, (long long)kH, (long long)kT, (long long)kB, (long long)gpt.params);
  std::printf("model FLOPs per token: 6N + 12LTC = %.3g\n", flops_per_token);
  std::printf("%-28s %10.0f tokens/s  (median of %d rounds of %d steps; %.2f GFLOP/s = %.0f%% of sgemm peak)\n",
              "cohort", tps, a.rounds, a.steps, gflops, 100.0 * gflops / peak);
  std::printf("%-28s %10.1f GFLOP/s (oneDNN sgemm 1024^3, 1 thread, best of 20)\n", "sgemm peak", peak);
  if (a.torch) {
    const TorchResult* rs[2] = {&installed, &skx};
    const char* names[2] = {"torch (OpenBLAS as installed)", "torch (OPENBLAS_CORETYPE=SkylakeX)"};
    for (int i = 0; i < 2; ++i) {
      if (rs[i]->tokens_per_s() > 0)
        std::printf("%-28s %10.0f tokens/s  cohort/torch = %.2fx\n", names[i], rs[i]->tokens_per_s(),
                    tps / rs[i]->tokens_per_s());
      else
        std::printf("%-28s unavailable\n", names[i]);
    }
    // Per round: cohort over the faster of that round's two PyTorch figures.
    std::vector<double> per_round;
    for (size_t r = 0; r < ours.size(); ++r) {
      double faster = 0;
      for (const TorchResult* t : rs)
        if (r < t->rounds.size()) faster = std::max(faster, t->rounds[r]);
      if (faster > 0) per_round.push_back(ours[r] / faster);
    }
    const double best = std::max(installed.tokens_per_s(), skx.tokens_per_s());
    if (best <= 0 || per_round.empty()) {
      std::printf("vs the faster torch: no PyTorch figure (is python3-torch installed? see --python)\n");
    } else {
      std::printf("vs the faster torch: %.3fx (target >= 1.5x: %s); per-round ratios: median %.3fx, range %.3f-%.3fx\n",
                  tps / best, tps / best >= 1.5 ? "met" : "NOT met", median(per_round),
                  *std::min_element(per_round.begin(), per_round.end()),
                  *std::max_element(per_round.begin(), per_round.end()));
    }
  }
  std::printf("memory of a training step: cohort stats %.1f MiB (peak activations %.1f + parameters, grads, "
              "AdamW %.1f); cohort RSS peak delta %.1f MiB",
              mib(static_cast<double>(st.peak_activation_bytes + st.parameter_bytes)),
              mib(static_cast<double>(st.peak_activation_bytes)), mib(static_cast<double>(st.parameter_bytes)),
              mib(our_rss));
  if (a.torch && installed.rss_delta >= 0)
    std::printf("; torch RSS peak delta %.1f MiB (as installed)", mib(installed.rss_delta));
  std::printf("\n");
  return 0;
}
