/*
 * A C11 program, built against an installed libcohort, that install_without_cuda.sh runs where
 * the CUDA toolkit and driver cannot be found. It must load (the CUDA runtime is linked into
 * libcohort statically and finds the driver only at first use), train on the CPU, and be told
 * politely, not crash, when it asks for the CUDA device. Exit 0 when all of that holds.
 */
#include <cohort/cohort.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                          \
  do {                                                                                       \
    cohort_status st_ = (call);                                                              \
    if (st_ != COHORT_OK) {                                                                  \
      fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call, cohort_last_error()); \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

enum { kBatch = 8, kIn = 16, kClasses = 4 };

int main(int argc, char** argv) {
  /* "--driver-present": a CUDA driver (libcuda.so.1) is still visible, so the device may be usable. */
  const int driver_present = argc > 1 && strcmp(argv[1], "--driver-present") == 0;
  int32_t usable = -1;
  char reason[256] = "";
  CHECK(cohort_device_usable(COHORT_DEVICE_CPU, &usable, NULL, 0));
  if (usable != 1) {
    fprintf(stderr, "the CPU is reported unusable\n");
    return 1;
  }
  /* Without a driver the CUDA device is unusable, with the reason; it is never a failed call. */
  CHECK(cohort_device_usable(COHORT_DEVICE_CUDA, &usable, reason, sizeof reason));
  if (usable == 1 && driver_present) {
    printf("CUDA device: usable (a driver is installed)\n");
  } else if (usable != 0 || reason[0] == '\0') {
    fprintf(stderr, "CUDA reported usable=%d (reason '%s') with no CUDA on this machine\n", usable, reason);
    return 1;
  } else {
    printf("CUDA device: not usable (%s)\n", reason);
  }

  int64_t hidden[1] = {8};
  cohort_model_mlp_options mo = cohort_model_mlp_options_default();
  mo.batch = kBatch;
  mo.in_features = kIn;
  mo.hidden = hidden;
  mo.num_hidden = 1;
  mo.classes = kClasses;
  cohort_graph* g = NULL;
  CHECK(cohort_graph_create_mlp(&mo, &g));
  cohort_optimizer_options oo = cohort_optimizer_options_default();
  oo.lr = 0.1;
  cohort_optimizer* opt = NULL;
  CHECK(cohort_optimizer_create(&oo, &opt));

  /* A trainer on an unusable CUDA device is refused with UNSUPPORTED and the reason. */
  cohort_trainer_options to = cohort_trainer_options_default();
  cohort_trainer* t = NULL;
  if (usable == 0) {
    to.device = COHORT_DEVICE_CUDA;
    cohort_status st = cohort_trainer_create(g, opt, &to, &t);
    if (st != COHORT_ERR_UNSUPPORTED || t != NULL) {
      fprintf(stderr, "a CUDA trainer without CUDA returned %s (%s), expected unsupported\n",
              cohort_status_name(st), cohort_last_error());
      return 1;
    }
  }

  /* One class per feature block: the loss of a few SGD steps on one batch must fall. */
  to.device = COHORT_DEVICE_CPU;
  CHECK(cohort_trainer_create(g, opt, &to, &t));
  float x[kBatch * kIn];
  int32_t y[kBatch];
  for (int i = 0; i < kBatch; ++i) {
    y[i] = i % kClasses;
    for (int j = 0; j < kIn; ++j) x[i * kIn + j] = j / (kIn / kClasses) == y[i] ? 1.0f : 0.0f;
  }
  int64_t xs[2] = {kBatch, kIn}, ys[1] = {kBatch};
  cohort_tensor_ref in[2] = {{"x", COHORT_F32, 2, xs, x, sizeof x}, {"y", COHORT_I32, 1, ys, y, sizeof y}};
  float first = 0, loss = 0;
  for (int step = 0; step < 20; ++step) {
    CHECK(cohort_trainer_step(t, in, 2, &loss));
    if (step == 0) first = loss;
  }
  printf("CPU training: loss %.4f -> %.4f\n", first, loss);
  CHECK(cohort_trainer_destroy(t));
  CHECK(cohort_optimizer_destroy(opt));
  CHECK(cohort_graph_destroy(g));
  return loss < first ? 0 : 1;
}
