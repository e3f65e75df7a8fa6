/*
 * Fashion-MNIST with a two-layer MLP, through the C API only: the program a C user copies from.
 * The Python, Java and Rust examples do exactly the same (examples/README.md), so the four print
 * the same test accuracy for the same arguments. Started alone it trains on one process; under
 * `cohort-run -n 2` (or torchrun, mpirun, srun) the ranks train one model with data parallelism.
 *
 *   fashion_mnist [--data DIR] [--steps N] [--epochs E] [--batch B] [--hidden H] [--lr LR]
 *                 [--seed S] [--threads T]
 */
#include <cohort/cohort.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Every cohort call returns a status; on failure the thread's last error says what went wrong. */
#define CHECK(call)                                                                      \
  do {                                                                                   \
    cohort_status st_ = (call);                                                          \
    if (st_ != COHORT_OK) {                                                              \
      fprintf(stderr, "error: %s (%s)\n", cohort_last_error(), cohort_status_name(st_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

typedef struct {
  const char* data;
  long steps, epochs, batch, hidden, threads;
  double lr;
  unsigned long long seed;
} options;

static void usage_error(const char* msg, const char* arg) {
  fprintf(stderr,
          "error: %s%s\nusage: fashion_mnist [--data DIR] [--steps N] [--epochs E] [--batch B] "
          "[--hidden H] [--lr LR] [--seed S] [--threads T]\n",
          msg, arg ? arg : "");
  exit(2);
}

static options parse_args(int argc, char** argv) {
  options o = {"/usr/share/datasets/fashion-mnist", 0, 1, 64, 256, 0, 1e-3, 1};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (i + 1 >= argc) usage_error("missing value after ", a);
    const char* v = argv[++i];
    char* end = NULL;
    if (!strcmp(a, "--data")) o.data = v;
    else if (!strcmp(a, "--steps")) o.steps = strtol(v, &end, 10);
    else if (!strcmp(a, "--epochs")) o.epochs = strtol(v, &end, 10);
    else if (!strcmp(a, "--batch")) o.batch = strtol(v, &end, 10);
    else if (!strcmp(a, "--hidden")) o.hidden = strtol(v, &end, 10);
    else if (!strcmp(a, "--threads")) o.threads = strtol(v, &end, 10);
    else if (!strcmp(a, "--lr")) o.lr = strtod(v, &end);
    else if (!strcmp(a, "--seed")) o.seed = strtoull(v, &end, 10);
    else usage_error("unknown option ", a);
    if (end && (end == v || *end)) usage_error("not a number: ", v);
  }
  if (o.steps < 0 || o.epochs < 1 || o.batch < 1 || o.hidden < 1 || o.threads < 0 || !(o.lr > 0))
    usage_error("epochs, batch and hidden must be >= 1, lr > 0, steps and threads >= 0", NULL);
  return o;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* y = x W^T + b with W [out, in] drawn like PyTorch's nn.Linear, b zeros. */
static int32_t add_linear(cohort_graph* g, const char* name, int32_t x, int64_t in, int64_t out) {
  char wname[64], bname[64];
  snprintf(wname, sizeof wname, "%s.weight", name);
  snprintf(bname, sizeof bname, "%s.bias", name);
  cohort_initializer init = cohort_initializer_default();
  init.kind = COHORT_INIT_KAIMING_UNIFORM;
  init.a = 0.5773502691896258; /* gain 1/sqrt(3): bound 1/sqrt(fan_in) */
  cohort_initializer zeros = cohort_initializer_default();
  int64_t wshape[2] = {out, in}, bshape[1] = {out};
  int32_t w, b, y;
  CHECK(cohort_graph_add_parameter(g, wname, COHORT_F32, wshape, 2, &init, &w));
  CHECK(cohort_graph_add_parameter(g, bname, COHORT_F32, bshape, 1, &zeros, &b));
  int32_t ins[3] = {x, w, b};
  CHECK(cohort_graph_add_op(g, "linear", name, ins, 3, NULL, &y, 1, NULL));
  return y;
}

/* x [B, 784] -> fc1 -> relu -> logits [B, 10]; loss = cross_entropy(logits, y). */
static cohort_graph* build_mlp(int64_t batch, int64_t hidden) {
  cohort_graph* g = NULL;
  CHECK(cohort_graph_create(&g));
  int64_t xs[2] = {batch, 784}, ys[1] = {batch};
  int32_t x, y, r, loss;
  CHECK(cohort_graph_add_input(g, "x", COHORT_F32, xs, 2, &x));
  CHECK(cohort_graph_add_input(g, "y", COHORT_I32, ys, 1, &y));
  int32_t h = add_linear(g, "fc1", x, 784, hidden);
  CHECK(cohort_graph_add_op(g, "relu", "act1", &h, 1, NULL, &r, 1, NULL));
  int32_t logits = add_linear(g, "logits", r, hidden, 10);
  int32_t ce_in[2] = {logits, y};
  CHECK(cohort_graph_add_op(g, "cross_entropy", "loss", ce_in, 2, NULL, &loss, 1, NULL));
  CHECK(cohort_graph_mark_output(g, logits));
  CHECK(cohort_graph_set_loss(g, loss));
  return g;
}

static cohort_sampler* make_sampler(const cohort_dataset* d, unsigned long long seed, int rank, int world,
                                    int shuffle) {
  cohort_sampler_options so = cohort_sampler_options_default();
  so.seed = seed;
  so.rank = rank;
  so.world = world;
  so.shuffle = shuffle;
  cohort_sampler* s = NULL;
  CHECK(cohort_sampler_create(d, &so, &s));
  return s;
}

/* Share of the 10,000 test images classified right, in batches of 1000 read in order. */
static double test_accuracy(cohort_trainer* t, const cohort_dataset* test) {
  enum { kChunk = 1000, kBatches = 10 };
  static float images[kChunk * 784], logits[kChunk * 10];
  static int32_t labels[kChunk];
  cohort_sampler* s = make_sampler(test, 0, 0, 1, 0);
  int64_t xs[2] = {kChunk, 784}, ys[1] = {kChunk}, ls[2] = {kChunk, 10};
  int64_t correct = 0;
  for (int k = 0; k < kBatches; ++k) {
    cohort_tensor_ref batch[2] = {{"x", COHORT_F32, 2, xs, images, sizeof images},
                                  {"y", COHORT_I32, 1, ys, labels, sizeof labels}};
    CHECK(cohort_dataset_next_batch(test, s, batch, 2));
    cohort_tensor_ref out = {"logits", COHORT_F32, 2, ls, logits, sizeof logits};
    CHECK(cohort_trainer_evaluate(t, &batch[0], 1, &out, 1));
    for (int i = 0; i < kChunk; ++i) {
      int best = 0;
      for (int c = 1; c < 10; ++c)
        if (logits[i * 10 + c] > logits[i * 10 + best]) best = c;
      correct += best == labels[i];
    }
  }
  cohort_sampler_destroy(s);
  return (double)correct / (kChunk * kBatches);
}

int main(int argc, char** argv) {
  options o = parse_args(argc, argv);
  if (o.threads > 0) CHECK(cohort_set_num_threads((int)o.threads));

  /* The job this process belongs to: a world of one when started alone. */
  cohort_comm* comm = NULL;
  int32_t rank = 0, world = 1;
  CHECK(cohort_comm_create_from_env(NULL, &comm));
  CHECK(cohort_comm_rank(comm, &rank, &world));

  cohort_dataset *train = NULL, *test = NULL;
  CHECK(cohort_dataset_open_fashion_mnist(o.data, COHORT_SPLIT_TRAIN, &train));
  CHECK(cohort_dataset_open_fashion_mnist(o.data, COHORT_SPLIT_VALIDATION, &test));
  int64_t examples = 0;
  CHECK(cohort_dataset_size(train, &examples));
  cohort_sampler* sampler = make_sampler(train, o.seed, rank, world, 1);

  cohort_graph* g = build_mlp(o.batch, o.hidden);
  int64_t total = o.steps > 0 ? o.steps : o.epochs * (examples / world / o.batch);
  if (total < 1) usage_error("no steps: the batch is larger than this rank's share of the data", NULL);
  cohort_optimizer_options oo = cohort_optimizer_options_default();
  oo.kind = COHORT_OPTIM_ADAMW;
  oo.lr = o.lr;
  oo.schedule = COHORT_SCHEDULE_WARMUP_COSINE;
  oo.warmup_steps = total / 20;
  oo.total_steps = total;
  oo.min_lr = o.lr / 10;
  cohort_optimizer* opt = NULL;
  CHECK(cohort_optimizer_create(&oo, &opt));
  cohort_trainer_options to = cohort_trainer_options_default();
  to.seed = o.seed;
  cohort_trainer* t = NULL;
  if (world == 1) {
    CHECK(cohort_trainer_create(g, opt, &to, &t));
  } else {
    cohort_plan_options po = cohort_plan_options_default();
    po.preset = COHORT_PRESET_DDP;
    cohort_plan* plan = NULL;
    CHECK(cohort_plan_create(&po, &plan));
    CHECK(cohort_trainer_create_parallel(g, opt, plan, comm, &to, &t));
    cohort_plan_destroy(plan);
  }

  /* The batch lives in this program's own arrays: the sampler fills them, the step reads them. */
  float* bx = malloc(sizeof(float) * (size_t)(o.batch * 784));
  int32_t* by = malloc(sizeof(int32_t) * (size_t)o.batch);
  if (!bx || !by) usage_error("out of memory for a batch of this size", NULL);
  int64_t xs[2] = {o.batch, 784}, ys[1] = {o.batch};
  if (rank == 0)
    printf("cohort %s | Fashion-MNIST MLP 784-%ld-10 | %d rank(s) | %lld steps of batch %ld\n",
           cohort_version_string(), o.hidden, world, (long long)total, o.batch);
  double start = now_seconds(), smooth = 0;
  for (int64_t step = 0; step < total; ++step) {
    cohort_tensor_ref in[2] = {{"x", COHORT_F32, 2, xs, bx, sizeof(float) * (size_t)(o.batch * 784)},
                               {"y", COHORT_I32, 1, ys, by, sizeof(int32_t) * (size_t)o.batch}};
    CHECK(cohort_dataset_next_batch(train, sampler, in, 2));
    float loss = 0;
    CHECK(cohort_trainer_step(t, in, 2, &loss));
    smooth = step == 0 ? loss : 0.95 * smooth + 0.05 * loss;
    if (rank == 0 && (step % 20 == 0 || step + 1 == total)) {
      double el = now_seconds() - start, rate = (double)(step + 1) * o.batch * world / el;
      double eta = (double)(total - step - 1) * el / (double)(step + 1);
      printf("\rstep %lld/%lld | loss %.4f | %.0f samples/s | ETA %02d:%02d   ", (long long)step + 1,
             (long long)total, smooth, rate, (int)eta / 60, (int)eta % 60);
      fflush(stdout);
    }
  }
  if (rank == 0) printf("\n");
  double accuracy = test_accuracy(t, test);
  printf("done in %.1f s | test accuracy %.2f%% | final loss %.4f\n", now_seconds() - start, 100.0 * accuracy,
         smooth);

  cohort_trainer_destroy(t);
  cohort_optimizer_destroy(opt);
  cohort_graph_destroy(g);
  cohort_sampler_destroy(sampler);
  cohort_dataset_destroy(train);
  cohort_dataset_destroy(test);
  cohort_comm_destroy(comm);
  free(bx);
  free(by);
  return 0;
}
