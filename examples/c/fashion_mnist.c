/*
 * Fashion-MNIST with a two-layer MLP, through the C API only: the program a C user copies from,
 * and the main job of the README. It reads the IDX files of Debian's dataset-fashion-mnist,
 * trains with a live progress line (step, loss, samples/s, ETA) and reports test accuracy.
 *
 *   fashion_mnist [--data DIR] [--epochs N] [--batch B] [--hidden H] [--lr LR] [--steps N]
 *                 [--threads N] [--seed S]
 */
#include <cohort/cohort.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#define CHECK(call)                                                                      \
  do {                                                                                   \
    cohort_status st_ = (call);                                                          \
    if (st_ != COHORT_OK) {                                                              \
      fprintf(stderr, "error: %s (%s)\n", cohort_last_error(), cohort_status_name(st_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

typedef struct {
  float* images; /* n x 784, scaled to [0, 1] */
  int32_t* labels;
  int64_t n;
} dataset;

static uint32_t be32(const unsigned char* p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Reads a whole gzip file; returns NULL with a message on failure. */
static unsigned char* read_gz(const char* path, size_t* size_out) {
  gzFile f = gzopen(path, "rb");
  if (!f) {
    fprintf(stderr, "error: cannot open %s (install Debian's dataset-fashion-mnist or pass --data)\n", path);
    return NULL;
  }
  size_t cap = 1 << 20, size = 0;
  unsigned char* buf = malloc(cap);
  for (;;) {
    if (size == cap) buf = realloc(buf, cap *= 2);
    int got = gzread(f, buf + size, (unsigned)(cap - size));
    if (got <= 0) break;
    size += (size_t)got;
  }
  gzclose(f);
  *size_out = size;
  return buf;
}

static int load_split(const char* dir, const char* split, dataset* out) {
  char path[1024];
  size_t isz = 0, lsz = 0;
  snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", dir, split);
  unsigned char* img = read_gz(path, &isz);
  snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", dir, split);
  unsigned char* lab = img ? read_gz(path, &lsz) : NULL;
  if (!img || !lab || isz < 16 || lsz < 8 || be32(img) != 2051 || be32(lab) != 2049) {
    fprintf(stderr, "error: %s files in %s are missing or not IDX\n", split, dir);
    free(img);
    free(lab);
    return 0;
  }
  int64_t n = be32(img + 4), rows = be32(img + 8), cols = be32(img + 12);
  if (rows * cols != 784 || (int64_t)be32(lab + 4) != n || isz < 16 + (size_t)(n * 784) || lsz < 8 + (size_t)n) {
    fprintf(stderr, "error: %s files in %s have inconsistent sizes\n", split, dir);
    free(img);
    free(lab);
    return 0;
  }
  out->n = n;
  out->images = malloc(sizeof(float) * (size_t)n * 784);
  out->labels = malloc(sizeof(int32_t) * (size_t)n);
  for (int64_t i = 0; i < n * 784; ++i) out->images[i] = img[16 + i] / 255.0f;
  for (int64_t i = 0; i < n; ++i) out->labels[i] = lab[8 + i];
  free(img);
  free(lab);
  return 1;
}

static int32_t add_linear(cohort_graph* g, const char* name, int32_t x, int64_t in, int64_t out) {
  char wname[64], bname[64];
  snprintf(wname, sizeof wname, "%s.weight", name);
  snprintf(bname, sizeof bname, "%s.bias", name);
  cohort_initializer init = cohort_initializer_default();
  init.kind = COHORT_INIT_KAIMING_UNIFORM;
  init.a = 0.5773502691896258; /* gain 1/sqrt(3): bound 1/sqrt(fan_in), as PyTorch's nn.Linear */
  int64_t wshape[2] = {out, in}, bshape[1] = {out};
  int32_t w, b, y;
  CHECK(cohort_graph_add_parameter(g, wname, COHORT_F32, wshape, 2, &init, &w));
  cohort_initializer zero = cohort_initializer_default();
  CHECK(cohort_graph_add_parameter(g, bname, COHORT_F32, bshape, 1, &zero, &b));
  int32_t ins[3] = {x, w, b};
  CHECK(cohort_graph_add_op(g, "linear", name, ins, 3, NULL, &y, 1, NULL));
  return y;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage_error(const char* msg, const char* arg) {
  fprintf(stderr, "error: %s%s\nusage: fashion_mnist [--data DIR] [--epochs N] [--batch B] [--hidden H] "
          "[--lr LR] [--steps N] [--threads N] [--seed S]\n", msg, arg ? arg : "");
  exit(2);
}

typedef struct {
  const char* data;
  int epochs, batch, hidden, threads;
  long steps;
  double lr;
  unsigned long long seed;
} options;

static options parse_args(int argc, char** argv) {
  options o = {"/usr/share/datasets/fashion-mnist", 1, 64, 256, 0, 0, 1e-3, 1};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (i + 1 >= argc) usage_error("missing value after ", a);
    const char* v = argv[++i];
    char* end = NULL;
    if (!strcmp(a, "--data")) o.data = v;
    else if (!strcmp(a, "--epochs")) o.epochs = (int)strtol(v, &end, 10);
    else if (!strcmp(a, "--batch")) o.batch = (int)strtol(v, &end, 10);
    else if (!strcmp(a, "--hidden")) o.hidden = (int)strtol(v, &end, 10);
    else if (!strcmp(a, "--threads")) o.threads = (int)strtol(v, &end, 10);
    else if (!strcmp(a, "--steps")) o.steps = strtol(v, &end, 10);
    else if (!strcmp(a, "--lr")) o.lr = strtod(v, &end);
    else if (!strcmp(a, "--seed")) o.seed = strtoull(v, &end, 10);
    else usage_error("unknown option ", a);
    if (end && *end) usage_error("not a number: ", v);
  }
  if (o.epochs < 1 || o.batch < 1 || o.hidden < 1 || o.threads < 0 || o.steps < 0 || !(o.lr > 0))
    usage_error("epochs, batch and hidden must be >= 1, lr > 0, steps and threads >= 0", NULL);
  return o;
}

static void shuffle(int64_t* idx, int64_t n, unsigned long long* state) {
  for (int64_t i = n - 1; i > 0; --i) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    int64_t j = (int64_t)((*state >> 33) % (unsigned long long)(i + 1));
    int64_t t = idx[i];
    idx[i] = idx[j];
    idx[j] = t;
  }
}

static double test_accuracy(cohort_trainer* t, const dataset* test) {
  const int64_t chunk = 1000;
  float* logits = malloc(sizeof(float) * (size_t)chunk * 10);
  int64_t correct = 0;
  for (int64_t s = 0; s < test->n; s += chunk) {
    int64_t b = test->n - s < chunk ? test->n - s : chunk;
    int64_t xs[2] = {b, 784}, ls[2] = {b, 10};
    cohort_tensor_ref in = {"x", COHORT_F32, 2, xs, test->images + s * 784, sizeof(float) * (size_t)(b * 784)};
    cohort_tensor_ref out = {"logits", COHORT_F32, 2, ls, logits, sizeof(float) * (size_t)(b * 10)};
    CHECK(cohort_trainer_evaluate(t, &in, 1, &out, 1));
    for (int64_t i = 0; i < b; ++i) {
      int best = 0;
      for (int k = 1; k < 10; ++k) if (logits[i * 10 + k] > logits[i * 10 + best]) best = k;
      correct += best == test->labels[s + i];
    }
  }
  free(logits);
  return (double)correct / (double)test->n;
}

int main(int argc, char** argv) {
  options o = parse_args(argc, argv);
  dataset train, test;
  if (!load_split(o.data, "train", &train) || !load_split(o.data, "t10k", &test)) return 1;
  if (o.threads > 0) CHECK(cohort_set_num_threads(o.threads));

  /* x: (B, 784) -> fc1 -> relu -> fc2 -> logits (B, 10); loss = cross_entropy(logits, y) */
  cohort_graph* g = NULL;
  CHECK(cohort_graph_create(&g));
  int64_t xs[2] = {o.batch, 784}, ys[1] = {o.batch};
  int32_t x, y, h, r, logits, loss;
  CHECK(cohort_graph_add_input(g, "x", COHORT_F32, xs, 2, &x));
  CHECK(cohort_graph_add_input(g, "y", COHORT_I32, ys, 1, &y));
  h = add_linear(g, "fc1", x, 784, o.hidden);
  CHECK(cohort_graph_add_op(g, "relu", "act1", &h, 1, NULL, &r, 1, NULL));
  logits = add_linear(g, "logits", r, o.hidden, 10);
  int32_t ce_in[2] = {logits, y};
  CHECK(cohort_graph_add_op(g, "cross_entropy", "loss", ce_in, 2, NULL, &loss, 1, NULL));
  CHECK(cohort_graph_mark_output(g, logits));
  CHECK(cohort_graph_set_loss(g, loss));

  int64_t steps_per_epoch = train.n / o.batch;
  int64_t total = o.steps > 0 ? o.steps : steps_per_epoch * o.epochs;
  cohort_optimizer_options oo = cohort_optimizer_options_default();
  oo.kind = COHORT_OPTIM_ADAMW;
  oo.lr = o.lr;
  oo.schedule = COHORT_SCHEDULE_WARMUP_COSINE;
  oo.warmup_steps = total / 20;
  oo.total_steps = total;
  oo.min_lr = o.lr * 0.1;
  cohort_optimizer* opt = NULL;
  CHECK(cohort_optimizer_create(&oo, &opt));
  cohort_trainer_options to = cohort_trainer_options_default();
  to.seed = o.seed;
  cohort_trainer* t = NULL;
  CHECK(cohort_trainer_create(g, opt, &to, &t));

  float* bx = malloc(sizeof(float) * (size_t)o.batch * 784);
  int32_t* by = malloc(sizeof(int32_t) * (size_t)o.batch);
  int64_t* order = malloc(sizeof(int64_t) * (size_t)train.n);
  unsigned long long rng = o.seed;
  double start = now_seconds(), smooth = 0;
  printf("cohort %s | Fashion-MNIST MLP 784-%d-10 | %lld steps of batch %d\n", cohort_version_string(),
         o.hidden, (long long)total, o.batch);
  for (int64_t step = 0; step < total; ++step) {
    int64_t pos = step % steps_per_epoch;
    if (pos == 0) {
      for (int64_t i = 0; i < train.n; ++i) order[i] = i;
      shuffle(order, train.n, &rng);
    }
    for (int b = 0; b < o.batch; ++b) {
      int64_t k = order[pos * o.batch + b];
      memcpy(bx + (size_t)b * 784, train.images + k * 784, sizeof(float) * 784);
      by[b] = train.labels[k];
    }
    cohort_tensor_ref in[2] = {{"x", COHORT_F32, 2, xs, bx, sizeof(float) * (size_t)o.batch * 784},
                               {"y", COHORT_I32, 1, ys, by, sizeof(int32_t) * (size_t)o.batch}};
    float l = 0;
    CHECK(cohort_trainer_step(t, in, 2, &l));
    smooth = step == 0 ? l : 0.95 * smooth + 0.05 * l;
    if (step % 20 == 0 || step + 1 == total) {
      double el = now_seconds() - start, rate = (step + 1) * o.batch / el;
      double eta = (total - step - 1) * el / (step + 1);
      printf("\rstep %lld/%lld | epoch %lld | loss %.4f | %.0f samples/s | ETA %02d:%02d   ", (long long)step + 1,
             (long long)total, (long long)(step / steps_per_epoch) + 1, smooth, rate, (int)eta / 60, (int)eta % 60);
      fflush(stdout);
    }
  }
  double acc = test_accuracy(t, &test);
  cohort_trainer_stats st;
  memset(&st, 0, sizeof st);
  st.size = sizeof st;
  CHECK(cohort_trainer_get_stats(t, &st));
  printf("\ndone in %.1f s | test accuracy %.2f%% | peak activations %.1f MiB\n", now_seconds() - start,
         100.0 * acc, st.peak_activation_bytes / 1048576.0);
  cohort_trainer_destroy(t);
  cohort_optimizer_destroy(opt);
  cohort_graph_destroy(g);
  free(bx), free(by), free(order);
  free(train.images), free(train.labels), free(test.images), free(test.labels);
  return 0;
}
