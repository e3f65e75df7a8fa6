// The parser of `cohort train` options: a table of flags, strict number parsing, and the
// per-model defaults that reach the README's figures.
#include "cli/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>

namespace cohort_cli {

namespace {

int64_t parse_int(const std::string& flag, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(flag + " expects an integer, got '" + v + "'");
  return x;
}

double parse_double(const std::string& flag, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x))
    throw UsageError(flag + " expects a number, got '" + v + "'");
  return x;
}

using Setter = std::function<void(Options&, const std::string&, const std::string&)>;

Setter int_field(int64_t Options::*field) {
  return [field](Options& o, const std::string& f, const std::string& v) { o.*field = parse_int(f, v); };
}
Setter double_field(double Options::*field) {
  return [field](Options& o, const std::string& f, const std::string& v) { o.*field = parse_double(f, v); };
}
Setter string_field(std::string Options::*field) {
  return [field](Options& o, const std::string&, const std::string& v) { o.*field = v; };
}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      {"--model", string_field(&Options::model)},
      {"--data", string_field(&Options::data)},
      {"--data-dir", string_field(&Options::data_dir)},
      {"--epochs", int_field(&Options::epochs)},
      {"--steps", int_field(&Options::steps)},
      {"--batch", int_field(&Options::batch)},
      {"--lr",
       [](Options& o, const std::string& f, const std::string& v) {
         o.lr = parse_double(f, v);
         if (!(o.lr > 0)) throw UsageError("--lr must be > 0, got " + v);
       }},
      {"--optimizer", string_field(&Options::optimizer)},
      {"--warmup", int_field(&Options::warmup)},
      {"--weight-decay", double_field(&Options::weight_decay)},
      {"--clip", double_field(&Options::clip)},
      {"--layers", int_field(&Options::layers)},
      {"--width", int_field(&Options::width)},
      {"--heads", int_field(&Options::heads)},
      {"--context", int_field(&Options::context)},
      {"--hidden", int_field(&Options::hidden)},
      {"--eval-every", int_field(&Options::eval_every)},
      {"--eval-examples", int_field(&Options::eval_examples)},
      {"--log-every", int_field(&Options::log_every)},
      {"--metrics", string_field(&Options::metrics)},
      {"--save", string_field(&Options::save)},
      {"--save-every", int_field(&Options::save_every)},
      {"--resume", string_field(&Options::resume)},
      {"--threads", int_field(&Options::threads)},
      {"--device", string_field(&Options::device)},
      {"--dtype", string_field(&Options::dtype)},
      {"--parallel", string_field(&Options::parallel)},
      {"--tau", int_field(&Options::tau)},
      {"--zero", int_field(&Options::zero)},
      {"--staleness-penalty", int_field(&Options::staleness_penalty)},
      {"--outer-clip", double_field(&Options::outer_clip)},
      {"--noise-scaling", int_field(&Options::noise_scaling)},
      {"--outer-lr", double_field(&Options::outer_lr)},
      {"--outer-momentum", double_field(&Options::outer_momentum)},
      {"--nesterov", int_field(&Options::nesterov)},
      {"--seed",
       [](Options& o, const std::string& f, const std::string& v) {
         const int64_t s = parse_int(f, v);
         if (s < 0) throw UsageError("--seed must be >= 0, got " + v);
         o.seed = static_cast<uint64_t>(s);
       }},
      {"--init-from", string_field(&Options::init_from)},
      {"--dump-batches", string_field(&Options::dump_batches)},
      {"--loss-log", string_field(&Options::loss_log)},
      {"--stop-after", int_field(&Options::stop_after)},
  };
  return table;
}

void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

}  // namespace

const char* usage_text() {
  return "usage: cohort train --model mlp|cnn|gpt --data fashion-mnist|brown [--data-dir DIR]\n"
         "         [--epochs N | --steps N] [--batch B] [--lr LR] [--optimizer sgd|adamw] [--warmup N]\n"
         "         [--weight-decay W] [--clip NORM] [--hidden H (mlp)]\n"
         "         [--layers L] [--width C] [--heads H] [--context T] (gpt)\n"
         "         [--eval-every N] [--eval-examples N] [--log-every N] [--metrics FILE.jsonl]\n"
         "         [--save PATH] [--save-every N] [--resume PATH] [--threads N] [--seed S] [--quiet]\n"
         "         [--device cpu|cuda] [--dtype f32|bf16 (gpt)]"
         "         [--parallel sync|localsgd|slowmo|diloco|co2 [--tau N]]  (under cohort-run -n N)\n"
         "         [--zero 0|1|2|3]  (ZeRO stage: sync takes 0-3; localsgd, slowmo, diloco, co2 0-1)\n"
         "         [--outer-lr A] [--outer-momentum B] [--nesterov 0|1] [--noise-scaling 0|1]  (not sync)\n"
         "         [--staleness-penalty 0|1] [--outer-clip C]  (co2 only)\n";
}

Options parse_train_options(int argc, char** argv, int first) {
  Options o;
  for (int i = first; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quiet" || flag == "--no-eval") {
      (flag == "--quiet" ? o.quiet : o.no_eval) = true;
      continue;
    }
    auto it = setters().find(flag);
    if (it == setters().end()) throw UsageError("unknown option '" + flag + "'");
    if (i + 1 >= argc) throw UsageError(flag + " needs a value");
    it->second(o, flag, argv[++i]);
  }
  return o;
}

void apply_defaults(Options& o) {
  require(!o.model.empty(), "--model is required (mlp, cnn or gpt)");
  require(o.model == "mlp" || o.model == "cnn" || o.model == "gpt",
          "unknown model '" + o.model + "' (expected mlp, cnn or gpt)");
  if (o.data.empty()) o.data = o.model == "gpt" ? "brown" : "fashion-mnist";
  require(o.data == "fashion-mnist" || o.data == "brown",
          "unknown data '" + o.data + "' (expected fashion-mnist or brown)");
  require((o.model == "gpt") == (o.data == "brown"),
          "model '" + o.model + "' cannot train on '" + o.data + "' (gpt reads brown; mlp and cnn fashion-mnist)");
  require(o.optimizer == "adamw" || o.optimizer == "sgd",
          "unknown optimizer '" + o.optimizer + "' (expected sgd or adamw)");
  require(!(o.epochs != 0 && o.steps != 0), "give either --epochs or --steps, not both");
  require(o.epochs >= 0 && o.steps >= 0, "--epochs and --steps must be >= 1");
  const bool gpt = o.model == "gpt", cnn = o.model == "cnn";
  // The defaults reach the README's figures: MLP 1 epoch, CNN 3 epochs, GPT 2500 steps.
  if (o.epochs == 0 && o.steps == 0) (gpt ? o.steps : o.epochs) = gpt ? 2500 : (cnn ? 3 : 1);
  if (o.batch == kUnset) o.batch = gpt ? 8 : 32;
  require(o.batch >= 1 && o.batch <= (1 << 20), "--batch must be in 1..1048576, got " + std::to_string(o.batch));
  if (o.lr < 0) o.lr = o.optimizer == "sgd" ? 0.05 : (gpt ? 2e-3 : (cnn ? 2e-3 : 3e-3));
  if (o.warmup < 0) o.warmup = gpt ? 100 : (cnn ? 100 : 50);
  if (o.weight_decay < 0) o.weight_decay = gpt ? 0.1 : 0.01;
  if (o.clip < 0) o.clip = gpt ? 1.0 : 0.0;
  if (o.eval_examples < 0) o.eval_examples = gpt ? 2048 : 0;
  require(o.hidden >= 1, "--hidden must be >= 1");
  require(o.layers >= 1 && o.width >= 1 && o.heads >= 1 && o.context >= 1,
          "--layers, --width, --heads and --context must be >= 1");
  require(o.width % o.heads == 0, "--heads (" + std::to_string(o.heads) + ") must divide --width (" +
                                      std::to_string(o.width) + ")");
  require(o.eval_every >= 0 && o.save_every >= 0 && o.log_every >= 0 && o.eval_examples >= 0 && o.stop_after >= 0,
          "--eval-every, --save-every, --log-every and --eval-examples must be >= 0");
  require(o.threads >= 0 && o.threads <= 1024, "--threads must be in 0..1024");
  require(o.device == "cpu" || o.device == "cuda", "unknown --device '" + o.device + "' (expected cpu or cuda)");
  require(o.dtype == "f32" || o.dtype == "bf16", "unknown --dtype '" + o.dtype + "' (expected f32 or bf16)");
  require(o.dtype == "f32" || gpt, "--dtype bf16 is for --model gpt (the mlp and cnn builders are f32)");
  require(o.parallel.empty() || o.parallel == "sync" || o.parallel == "localsgd" || o.parallel == "slowmo" ||
              o.parallel == "diloco" || o.parallel == "co2",
          "unknown --parallel '" + o.parallel + "' (expected sync, localsgd, slowmo, diloco or co2)");
  require(o.tau >= 1, "--tau must be >= 1");
  require(o.zero >= 0 && o.zero <= 3, "--zero must be 0, 1, 2 or 3, got " + std::to_string(o.zero));
  require(o.zero == 0 || !o.parallel.empty(), "--zero needs --parallel (and several ranks)");
  require(o.staleness_penalty >= -1 && o.staleness_penalty <= 1, "--staleness-penalty must be 0 or 1");
  require(o.outer_clip == -1 || o.outer_clip >= 0, "--outer-clip must be >= 0");
  require(o.outer_lr == -1 || o.outer_lr >= 0, "--outer-lr must be >= 0");
  require(o.outer_momentum == -1 || (o.outer_momentum >= 0 && o.outer_momentum < 1),
          "--outer-momentum must be in [0, 1)");
  require(o.nesterov >= -1 && o.nesterov <= 1, "--nesterov must be 0 or 1");
  require(o.noise_scaling == 0 || o.noise_scaling == 1, "--noise-scaling must be 0 or 1");
  const bool local_steps = !o.parallel.empty() && o.parallel != "sync";
  require(o.noise_scaling == 0 || local_steps,
          "--noise-scaling needs --parallel localsgd, slowmo, diloco or co2 (local steps)");
  require((o.outer_lr == -1 && o.outer_momentum == -1 && o.nesterov == -1) || local_steps,
          "--outer-lr, --outer-momentum and --nesterov need --parallel localsgd, slowmo, diloco or co2");
  require((o.staleness_penalty == -1 && o.outer_clip == -1) || o.parallel == "co2",
          "--staleness-penalty and --outer-clip need --parallel co2");
  require(o.save_every == 0 || !o.save.empty(), "--save-every needs --save PATH");
}

}  // namespace cohort_cli
