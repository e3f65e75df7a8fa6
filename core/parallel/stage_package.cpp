// Stage packages: encoding, verification and the exchange (stage_package.h).
#include "core/parallel/stage_package.h"

#include <algorithm>

#include "core/base/error.h"
#include "core/graph/serialize.h"
#include "core/parallel/auto_plan.h"
#include "core/parallel/stage_package_generated.h"

namespace cohort::parallel {

namespace sp = cohort::stage_package;
namespace coll = transport::coll;

namespace {

constexpr uint32_t kStagePackageFormatVersion = 1;

std::string what_from(int world_rank) { return str_cat("stage package for world rank ", world_rank); }

std::vector<std::string> strings(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (v)
    for (const auto* s : *v) out.push_back(s->str());
  return out;
}

}  // namespace

StagePackage failed_stage_package(const std::exception& e) {
  StagePackage p;
  p.error = e.what();
  const auto* error = dynamic_cast<const Error*>(&e);
  p.status = static_cast<int>(error ? error->status() : Status::kInternal);
  return p;
}

std::vector<uint8_t> encode_stage_package(const StagePackage& p) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<uint8_t> model, stage;
  if (p.error.empty()) {
    model = serialize_graph(p.model);
    stage = serialize_graph(p.stage.graph);
  }
  std::vector<flatbuffers::Offset<sp::TiedParameter>> tied;
  for (const auto& [name, ranks] : p.stage.tied_holders)
    tied.push_back(sp::CreateTiedParameter(b, b.CreateString(name), b.CreateVector(ranks)));
  auto root = sp::CreateStagePackage(
      b, kStagePackageFormatVersion, p.error.empty() ? 0 : b.CreateString(p.error), p.status, p.world_size,
      p.world_rank, b.CreateVector(p.layout), b.CreateVector(p.rank_order), p.pipe_index, b.CreateVector(model),
      b.CreateVector(stage), b.CreateVectorOfStrings(p.stage.chunk_losses), b.CreateVector(tied),
      b.CreateVectorOfStrings(p.recompute), b.CreateString(p.stages));
  sp::FinishStagePackageBuffer(b, root);
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

StagePackage decode_stage_package(const uint8_t* data, size_t size, int world_rank, int world_size) {
  const std::string what = what_from(world_rank);
  flatbuffers::Verifier verifier(data, size);
  COHORT_CHECK(data != nullptr && size >= 8 && sp::StagePackageBufferHasIdentifier(data) &&
                   sp::VerifyStagePackageBuffer(verifier),
               Status::kCorrupt, what, ": ", size, " bytes that are not a verified stage package");
  const sp::StagePackage* f = sp::GetStagePackage(data);
  COHORT_CHECK(f->format_version() == kStagePackageFormatVersion, Status::kCorrupt, what, ": format version ",
               f->format_version(), ", this build reads ", kStagePackageFormatVersion,
               " (every rank must run the same cohort)");
  StagePackage p;
  if (f->error() && f->error()->size() > 0) {
    p.error = f->error()->str();
    p.status = f->status();
    return p;
  }
  p.world_size = f->world_size();
  p.world_rank = f->world_rank();
  COHORT_CHECK(p.world_rank == world_rank && p.world_size == world_size, Status::kCorrupt, what,
               ": made for world rank ", p.world_rank, " of ", p.world_size, ", received by rank ", world_rank, " of ",
               world_size);
  if (f->layout()) p.layout.assign(f->layout()->begin(), f->layout()->end());
  if (f->rank_order()) p.rank_order.assign(f->rank_order()->begin(), f->rank_order()->end());
  COHORT_CHECK(p.layout.size() == kLayoutFields, Status::kCorrupt, what, ": ", p.layout.size(),
               " layout fields, expected ", kLayoutFields);
  COHORT_CHECK(p.rank_order.empty() || p.rank_order.size() == static_cast<size_t>(world_size), Status::kCorrupt, what,
               ": a rank order of ", p.rank_order.size(), " ranks for a world of ", world_size);
  p.pipe_index = f->pipe_index();
  const PlanConfig layout = with_layout(PlanConfig{}, p.layout.data());
  COHORT_CHECK(p.pipe_index >= 0 && p.pipe_index < layout.pipeline.stages, Status::kCorrupt, what, ": pipe rank ",
               p.pipe_index, " of ", layout.pipeline.stages);
  COHORT_CHECK(f->model() && f->stage(), Status::kCorrupt, what, ": no graph files");
  p.model = deserialize_graph(f->model()->data(), f->model()->size(), what + ": model graph");
  p.stage.graph = deserialize_graph(f->stage()->data(), f->stage()->size(), what + ": stage graph");
  p.stage.chunk_losses = strings(f->chunk_losses());
  p.recompute = strings(f->recompute());
  if (f->stages()) p.stages = f->stages()->str();
  if (f->tied())
    for (const auto* t : *f->tied()) {
      std::vector<int> ranks;
      if (t->ranks()) ranks.assign(t->ranks()->begin(), t->ranks()->end());
      p.stage.tied_holders[t->name()->str()] = ranks;
    }
  // The package against itself: the stage trains blocks of the model's parameters, under the
  // model's names (a tensor-parallel block is smaller along its cut dimensions).
  const Graph& g = p.stage.graph;
  for (const Value& v : g.values()) {
    if (v.kind != ValueKind::kParameter) continue;
    const ValueId m = p.model.find(v.name);
    COHORT_CHECK(m >= 0 && p.model.value(m).kind == ValueKind::kParameter, Status::kCorrupt, what,
                 ": the stage graph trains '", v.name, "', which is no parameter of the model");
    const TensorType& whole = p.model.value(m).type;
    bool fits = whole.dtype == v.type.dtype && whole.shape.size() == v.type.shape.size();
    for (size_t d = 0; fits && d < whole.shape.size(); ++d)
      fits = v.type.shape[d] >= 1 && whole.shape[d] % v.type.shape[d] == 0;
    COHORT_CHECK(fits, Status::kCorrupt, what, ": the stage's '", v.name, "' is ", dtype_name(v.type.dtype), " ",
                 shape_str(v.type.shape), ", no block of the model's ", dtype_name(whole.dtype), " ",
                 shape_str(whole.shape));
  }
  COHORT_CHECK(!p.stage.chunk_losses.empty(), Status::kCorrupt, what, ": no chunk losses");
  for (const std::string& loss : p.stage.chunk_losses)
    COHORT_CHECK(g.find(loss) >= 0, Status::kCorrupt, what, ": chunk loss '", loss, "' is no value of the stage graph");
  for (const auto& [name, ranks] : p.stage.tied_holders) {
    COHORT_CHECK(p.model.find(name) >= 0, Status::kCorrupt, what, ": tied parameter '", name,
                 "' is no value of the model");
    for (int r : ranks)
      COHORT_CHECK(r >= 0 && r < layout.pipeline.stages, Status::kCorrupt, what, ": tied parameter '", name,
                   "' held by pipe rank ", r, " of ", layout.pipeline.stages);
  }
  return p;
}

StagePackage exchange_stage_packages(coll::Communicator& world, const std::vector<StagePackage>* packages) {
  const int n = world.size(), me = world.rank();
  std::vector<uint8_t> bytes;
  if (me == 0) {
    COHORT_CHECK(packages != nullptr && packages->size() == static_cast<size_t>(n), Status::kInternal,
                 "stage packages: world rank 0 has ", packages ? packages->size() : 0, " for ", n, " ranks");
    // Every rank's bytes first (an encoding failure reaches every rank as an error package).
    std::vector<std::vector<uint8_t>> all;
    try {
      for (const StagePackage& p : *packages) all.push_back(encode_stage_package(p));
    } catch (const std::exception& e) {
      all.assign(static_cast<size_t>(n), encode_stage_package(failed_stage_package(e)));
    }
    std::vector<coll::WorkPtr> sends;
    std::vector<int64_t> sizes(static_cast<size_t>(n));
    for (int r = 1; r < n; ++r) {
      sizes[static_cast<size_t>(r)] = static_cast<int64_t>(all[static_cast<size_t>(r)].size());
      sends.push_back(world.send(&sizes[static_cast<size_t>(r)], 1, coll::DataType::kI64, r));
      sends.push_back(world.send(all[static_cast<size_t>(r)].data(), all[static_cast<size_t>(r)].size(),
                                 coll::DataType::kU8, r));
    }
    for (auto& w : sends) w->wait();
    bytes = std::move(all[0]);
  } else {
    int64_t size = 0;
    world.recv(&size, 1, coll::DataType::kI64, 0)->wait();
    COHORT_CHECK(size > 0 && size <= (int64_t{1} << 32), Status::kCorrupt, what_from(me), ": world rank 0 announced ",
                 size, " bytes");
    bytes.resize(static_cast<size_t>(size));
    world.recv(bytes.data(), bytes.size(), coll::DataType::kU8, 0)->wait();
  }
  StagePackage p = decode_stage_package(bytes.data(), bytes.size(), me, n);
  if (!p.error.empty())
    throw Error(p.status >= 1 && p.status <= static_cast<int>(Status::kNonFinite) ? static_cast<Status>(p.status)
                                                                                   : Status::kInternal, me == 0 ? p.error : str_cat("world rank 0: ", p.error));
  return p;
}

}  // namespace cohort::parallel
