/*
 * bench/bindings: one training step of a small MLP timed from C — the baseline every binding's
 * step program is divided by (bench/bindings/README.md has the contract they all follow).
 *
 *   step_c --hidden H --batch B --steps N --warmup W   ->   "step_us MEDIAN MEAN"
 */
#include <cohort/cohort.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                      \
  do {                                                                                   \
    cohort_status st_ = (call);                                                          \
    if (st_ != COHORT_OK) {                                                              \
      fprintf(stderr, "error: %s (%s)\n", cohort_last_error(), cohort_status_name(st_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  long hidden = 256, batch = 128, steps = 200, warmup = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    long v = strtol(argv[i + 1], NULL, 10);
    if (!strcmp(argv[i], "--hidden")) hidden = v;
    else if (!strcmp(argv[i], "--batch")) batch = v;
    else if (!strcmp(argv[i], "--steps")) steps = v;
    else if (!strcmp(argv[i], "--warmup")) warmup = v;
    else {
      fprintf(stderr, "error: unknown option %s\nusage: step_c --hidden H --batch B --steps N --warmup W\n",
              argv[i]);
      return 2;
    }
  }
  if (hidden < 1 || batch < 1 || steps < 1 || warmup < 0) {
    fprintf(stderr, "error: hidden, batch and steps must be >= 1, warmup >= 0\n");
    return 2;
  }
  CHECK(cohort_set_num_threads(1));
  int64_t widths[1] = {hidden};
  cohort_model_mlp_options mo = cohort_model_mlp_options_default();
  mo.batch = batch;
  mo.in_features = 784;
  mo.hidden = widths;
  mo.num_hidden = 1;
  mo.classes = 10;
  mo.activation = COHORT_ACTIVATION_RELU;
  cohort_graph* g = NULL;
  CHECK(cohort_graph_create_mlp(&mo, &g));
  cohort_optimizer_options oo = cohort_optimizer_options_default();
  oo.lr = 0.01;
  cohort_optimizer* opt = NULL;
  CHECK(cohort_optimizer_create(&oo, &opt));
  cohort_trainer_options to = cohort_trainer_options_default();
  to.seed = 1;
  cohort_trainer* t = NULL;
  CHECK(cohort_trainer_create(g, opt, &to, &t));

  float* x = malloc(sizeof(float) * (size_t)(batch * 784));
  int32_t* y = malloc(sizeof(int32_t) * (size_t)batch);
  double* times = malloc(sizeof(double) * (size_t)steps);
  for (long i = 0; i < batch * 784; ++i) x[i] = (float)(i % 255) / 255.0f;
  for (long i = 0; i < batch; ++i) y[i] = (int32_t)(i % 10);
  int64_t xs[2] = {batch, 784}, ys[1] = {batch};
  cohort_tensor_ref in[2] = {{"x", COHORT_F32, 2, xs, x, sizeof(float) * (size_t)(batch * 784)},
                             {"y", COHORT_I32, 1, ys, y, sizeof(int32_t) * (size_t)batch}};
  float loss = 0;
  for (long s = 0; s < warmup; ++s) CHECK(cohort_trainer_step(t, in, 2, &loss));
  double sum = 0;
  for (long s = 0; s < steps; ++s) {
    double t0 = now_us();
    CHECK(cohort_trainer_step(t, in, 2, &loss));
    times[s] = now_us() - t0;
    sum += times[s];
  }
  qsort(times, (size_t)steps, sizeof(double), by_value);
  printf("step_us %.2f %.2f\n", times[steps / 2], sum / steps);
  free(x);
  free(y);
  free(times);
  cohort_trainer_destroy(t);
  cohort_optimizer_destroy(opt);
  cohort_graph_destroy(g);
  return 0;
}
