// cohort_optimizer_*: an optimizer configuration, validated at creation.
#include <cstring>

#include "capi/src/handles.h"

using namespace cohort;
using namespace cohort::capi;

namespace {
constexpr const char* kType = "optimizer";

optim::OptimizerConfig to_config(const cohort_optimizer_options& o) {
  check_struct_size(o.size, offsetof(cohort_optimizer_options, clip_norm) + sizeof(o.clip_norm), "options");
  optim::OptimizerConfig c;
  const int kind = enum_int(o.kind), schedule = enum_int(o.schedule);
  COHORT_CHECK(kind == COHORT_OPTIM_SGD || kind == COHORT_OPTIM_ADAMW, Status::kInvalidArgument,
               "options->kind ", kind, " is not a cohort_optimizer_kind");
  COHORT_CHECK(schedule == COHORT_SCHEDULE_CONSTANT || schedule == COHORT_SCHEDULE_WARMUP_COSINE,
               Status::kInvalidArgument, "options->schedule ", schedule,
               " is not a cohort_schedule_kind");
  c.kind = kind == COHORT_OPTIM_SGD ? optim::OptimizerKind::kSgd : optim::OptimizerKind::kAdamW;
  c.lr = o.lr;
  c.momentum = o.momentum;
  c.nesterov = o.nesterov != 0;
  c.weight_decay = o.weight_decay;
  c.beta1 = o.beta1;
  c.beta2 = o.beta2;
  c.eps = o.eps;
  c.schedule = schedule == COHORT_SCHEDULE_CONSTANT ? optim::ScheduleKind::kConstant
                                                      : optim::ScheduleKind::kWarmupCosine;
  c.warmup_steps = o.warmup_steps;
  c.total_steps = o.total_steps;
  c.min_lr = o.min_lr;
  c.clip_norm = o.clip_norm;
  optim::validate(c);
  return c;
}
}  // namespace

extern "C" {

COHORT_API cohort_optimizer_options cohort_optimizer_options_default(void) {
  cohort_optimizer_options o;
  std::memset(&o, 0, sizeof(o));
  o.size = sizeof(o);
  o.kind = COHORT_OPTIM_SGD;
  o.lr = 0.01;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.eps = 1e-8;
  o.schedule = COHORT_SCHEDULE_CONSTANT;
  return o;
}

COHORT_API cohort_status cohort_optimizer_create(const cohort_optimizer_options* options,
                                                 cohort_optimizer** optimizer_out) {
  return guard("cohort_optimizer_create", [&] {
    check_not_null(options, "options");
    check_not_null(optimizer_out, "optimizer_out");
    optim::OptimizerConfig c = to_config(*options);
    cohort_optimizer* h = make_handle<cohort_optimizer>(kType);
    h->config = c;
    *optimizer_out = h;
  });
}

COHORT_API cohort_status cohort_optimizer_destroy(cohort_optimizer* optimizer) {
  return guard("cohort_optimizer_destroy", [&] { destroy_handle(optimizer, kType, "optimizer"); });
}

}  // extern "C"
