// cohort_dataset_* and cohort_sampler_*: in-memory datasets (core/data) and resumable, sharded
// samplers behind the C ABI. Batches are validated in full before the sampler moves, so a
// failed call changes neither the caller's buffers nor the sampler's position.
#include <cstring>
#include <memory>

#include "capi/src/handles.h"
#include "core/data/idx.h"
#include "core/data/sampler.h"
#include "core/data/text.h"

using namespace cohort;
using namespace cohort::capi;

struct cohort_dataset {
  std::unique_ptr<cohort::data::Dataset> dataset;
};
struct cohort_sampler {
  std::unique_ptr<cohort::data::Sampler> sampler;
};

namespace {
constexpr const char* kDataset = "dataset";
constexpr const char* kSampler = "sampler";

const data::Dataset& dataset_of(const cohort_dataset* d) { return *checked(d, kDataset, "dataset")->dataset; }
data::Sampler& sampler_of(cohort_sampler* s) { return *checked(s, kSampler, "sampler")->sampler; }
const data::Sampler& sampler_of(const cohort_sampler* s) { return *checked(s, kSampler, "sampler")->sampler; }

bool is_train(const cohort_dataset_split& value) {
  const int split = enum_int(value);
  COHORT_CHECK(split == COHORT_SPLIT_TRAIN || split == COHORT_SPLIT_VALIDATION, Status::kInvalidArgument, "split ",
               split, " is not a cohort_dataset_split");
  return split == COHORT_SPLIT_TRAIN;
}

void publish(std::unique_ptr<data::Dataset> d, cohort_dataset** dataset_out) {
  cohort_dataset* h = make_handle<cohort_dataset>(kDataset);
  h->dataset = std::move(d);
  *dataset_out = h;
}

// A caller buffer for batches: like wrap_ref, but the name is optional (used in messages only).
Tensor wrap_batch_buffer(const cohort_tensor_ref& ref, int32_t i) {
  std::string what = str_cat("outputs[", i, "]");
  if (ref.name != nullptr) what += str_cat(" '", std::string(ref.name).substr(0, 256), "'");
  return wrap_ref_memory(ref, what);
}
}  // namespace

extern "C" {

COHORT_API cohort_status cohort_dataset_open_fashion_mnist(const char* directory, cohort_dataset_split split,
                                                           cohort_dataset** dataset_out) {
  return guard("cohort_dataset_open_fashion_mnist", [&] {
    check_not_null(dataset_out, "dataset_out");
    const bool train = is_train(split);
    const std::string dir = directory ? std::string(directory) : std::string(data::kFashionMnistDir);
    publish(data::load_fashion_mnist(dir, train), dataset_out);
  });
}

COHORT_API cohort_status cohort_dataset_open_brown(const char* directory, double validation_fraction,
                                                   cohort_dataset_split split, int64_t context,
                                                   cohort_dataset** dataset_out) {
  return guard("cohort_dataset_open_brown", [&] {
    check_not_null(directory, "directory");
    check_not_null(dataset_out, "dataset_out");
    const bool train = is_train(split);
    COHORT_CHECK(context >= 1 && context <= (int64_t{1} << 20), Status::kInvalidArgument,
                 "context must be 1..2^20, got ", context);
    data::TextSplit text = data::load_brown(directory, validation_fraction);
    std::string name = std::string("brown ") + (train ? "train" : "validation");
    publish(std::make_unique<data::TokenWindowDataset>(name, train ? std::move(text.train) : std::move(text.validation),
                                                       context),
            dataset_out);
  });
}

COHORT_API cohort_status cohort_dataset_destroy(cohort_dataset* dataset) {
  return guard("cohort_dataset_destroy", [&] { destroy_handle(dataset, kDataset, "dataset"); });
}

COHORT_API cohort_status cohort_dataset_size(const cohort_dataset* dataset, int64_t* examples_out) {
  return guard("cohort_dataset_size", [&] {
    const data::Dataset& d = dataset_of(dataset);
    check_not_null(examples_out, "examples_out");
    *examples_out = d.size();
  });
}

COHORT_API cohort_sampler_options cohort_sampler_options_default(void) {
  cohort_sampler_options o;
  std::memset(&o, 0, sizeof(o));
  o.size = sizeof(o);
  o.world = 1;
  o.shuffle = 1;
  return o;
}

COHORT_API cohort_status cohort_sampler_create(const cohort_dataset* dataset, const cohort_sampler_options* options,
                                               cohort_sampler** sampler_out) {
  return guard("cohort_sampler_create", [&] {
    const data::Dataset& d = dataset_of(dataset);
    check_not_null(sampler_out, "sampler_out");
    const cohort_sampler_options o = options ? *options : cohort_sampler_options_default();
    check_struct_size(o.size, offsetof(cohort_sampler_options, shuffle) + sizeof(o.shuffle), "options");
    data::SamplerOptions so{o.seed, o.rank, o.world, o.shuffle != 0};
    auto s = std::make_unique<data::Sampler>(d.size(), so);
    cohort_sampler* h = make_handle<cohort_sampler>(kSampler);
    h->sampler = std::move(s);
    *sampler_out = h;
  });
}

COHORT_API cohort_status cohort_sampler_destroy(cohort_sampler* sampler) {
  return guard("cohort_sampler_destroy", [&] { destroy_handle(sampler, kSampler, "sampler"); });
}

COHORT_API cohort_status cohort_sampler_get_position(const cohort_sampler* sampler, int64_t* epoch_out,
                                                     int64_t* index_out) {
  return guard("cohort_sampler_get_position", [&] {
    data::SamplerPosition p = sampler_of(sampler).position();
    if (epoch_out) *epoch_out = p.epoch;
    if (index_out) *index_out = p.index;
  });
}

COHORT_API cohort_status cohort_sampler_set_position(cohort_sampler* sampler, int64_t epoch, int64_t index) {
  return guard("cohort_sampler_set_position", [&] { sampler_of(sampler).set_position({epoch, index}); });
}

COHORT_API cohort_status cohort_dataset_next_batch(const cohort_dataset* dataset, cohort_sampler* sampler,
                                                   cohort_tensor_ref* outputs, int32_t num_outputs) {
  return guard("cohort_dataset_next_batch", [&] {
    const data::Dataset& d = dataset_of(dataset);
    data::Sampler& s = sampler_of(sampler);
    COHORT_CHECK(s.size() == d.size(), Status::kInvalidArgument, "sampler was created for ", s.size(),
                 " examples, but ", d.name(), " has ", d.size());
    COHORT_CHECK(num_outputs == 2, Status::kInvalidArgument, "num_outputs must be 2 (features, labels), got ",
                 num_outputs);
    check_not_null(outputs, "outputs");
    Tensor features = wrap_batch_buffer(outputs[0], 0), labels = wrap_batch_buffer(outputs[1], 1);
    const int64_t batch = features.rank() >= 1 ? features.dim(0) : 0;
    data::check_batch(d, 0, features, batch, "outputs[0]");
    data::check_batch(d, 1, labels, batch, "outputs[1]");
    d.gather(s.next_batch(batch), features.raw(), labels.raw());
  });
}

}  // extern "C"
