// cohort_comm_* and cohort_work_*: the asynchronous collectives of transport/coll on caller
// buffers. A work handle keeps its communicator alive, so destroying a communicator never
// frees state an outstanding operation still uses.
#include <cstring>
#include <memory>

#include "capi/src/handles.h"
#include "transport/bootstrap/env.h"
#include "transport/coll/ucx_communicator.h"

using namespace cohort;
using namespace cohort::capi;
namespace coll = cohort::transport::coll;

struct cohort_work {
  std::shared_ptr<coll::Work> work;
  std::shared_ptr<coll::Communicator> comm;
};

namespace {
constexpr const char* kComm = "comm";
constexpr const char* kWork = "work";

coll::Communicator& comm_of(const cohort_comm* c) { return *checked(c, kComm, "comm")->comm; }

coll::DataType to_type(const cohort_dtype& dtype) {
  const int d = enum_int(dtype);
  switch (d) {
    case COHORT_F32: return coll::DataType::kF32;
    case COHORT_BF16: return coll::DataType::kBF16;
    case COHORT_F16: return coll::DataType::kF16;
    case COHORT_I32: return coll::DataType::kI32;
    case COHORT_I64: return coll::DataType::kI64;
  }
  throw Error(Status::kInvalidArgument, str_cat("dtype ", d, " is not a cohort_dtype"));
}

coll::ReduceOp to_op(const cohort_reduce_op& reduce_op) {
  const int op = enum_int(reduce_op);
  switch (op) {
    case COHORT_REDUCE_SUM: return coll::ReduceOp::kSum;
    case COHORT_REDUCE_AVG: return coll::ReduceOp::kAvg;
    case COHORT_REDUCE_MAX: return coll::ReduceOp::kMax;
  }
  throw Error(Status::kInvalidArgument, str_cat("op ", op, " is not a cohort_reduce_op"));
}

// Hands the work to the caller, or waits for it when the caller asked for a blocking call.
void finish(const cohort_comm* c, std::shared_ptr<coll::Work> work, cohort_work** work_out) {
  if (work_out == nullptr) {
    work->wait();
    return;
  }
  cohort_work* h = make_handle<cohort_work>(kWork);
  h->work = std::move(work);
  h->comm = c->comm;
  *work_out = h;
}

template <typename F>
cohort_status collective(const char* fn, cohort_comm* c, cohort_work** work_out, F&& issue) {
  return guard(fn, [&] {
    coll::Communicator& comm = comm_of(c);
    finish(c, issue(comm), work_out);
  });
}
}  // namespace

extern "C" {

COHORT_API cohort_comm_options cohort_comm_options_default(void) {
  cohort_comm_options o;
  std::memset(&o, 0, sizeof o);
  o.size = sizeof o;
  return o;
}

COHORT_API cohort_status cohort_comm_create_from_env(const cohort_comm_options* options, cohort_comm** comm_out) {
  return guard("cohort_comm_create_from_env", [&] {
    check_not_null(comm_out, "comm_out");
    cohort_comm_options o = cohort_comm_options_default();
    if (options) {
      check_struct_size(options->size, offsetof(cohort_comm_options, connect_timeout_ms) + sizeof(int64_t), "options");
      COHORT_CHECK(options->timeout_ms >= 0 && options->connect_timeout_ms >= 0, Status::kInvalidArgument,
                   "options: timeouts must be >= 0");
      o = *options;
    }
    transport::JobEnv env = transport::detect_job_env();
    std::chrono::milliseconds connect(o.connect_timeout_ms > 0 ? o.connect_timeout_ms : 60000);
    coll::CommOptions co;
    if (o.timeout_ms > 0) co.timeout = std::chrono::milliseconds(o.timeout_ms);
    auto store = transport::connect_job_store(env, connect);
    auto comm = coll::UcxCommunicator::create(store, env.rank, env.world, co);
    cohort_comm* h = make_handle<cohort_comm>(kComm);
    h->comm = std::move(comm);
    h->store = std::move(store);
    *comm_out = h;
  });
}

COHORT_API cohort_status cohort_comm_destroy(cohort_comm* comm) {
  return guard("cohort_comm_destroy", [&] { destroy_handle(comm, kComm, "comm"); });
}

COHORT_API cohort_status cohort_comm_rank(const cohort_comm* comm, int32_t* rank_out, int32_t* size_out) {
  return guard("cohort_comm_rank", [&] {
    const coll::Communicator& c = comm_of(comm);
    if (rank_out) *rank_out = c.rank();
    if (size_out) *size_out = c.size();
  });
}

COHORT_API cohort_status cohort_comm_split(cohort_comm* comm, int32_t color, int32_t key, cohort_comm** comm_out) {
  return guard("cohort_comm_split", [&] {
    coll::Communicator& c = comm_of(comm);
    check_not_null(comm_out, "comm_out");
    auto sub = c.split(color, key);
    if (!sub) {
      *comm_out = nullptr;
      return;
    }
    cohort_comm* h = make_handle<cohort_comm>(kComm);
    h->comm = std::move(sub);
    h->store = comm->store;
    *comm_out = h;
  });
}

COHORT_API cohort_status cohort_comm_status(const cohort_comm* comm, int32_t* failed_rank_out) {
  return guard("cohort_comm_status", [&] {
    std::string message;
    int failed = -1;
    Status s = comm_of(comm).status(&message, &failed);
    if (failed_rank_out) *failed_rank_out = failed;
    if (s != Status::kOk) throw Error(s, message);
  });
}

COHORT_API cohort_status cohort_comm_abort(cohort_comm* comm) {
  return guard("cohort_comm_abort", [&] { comm_of(comm).abort("cohort_comm_abort() called"); });
}

COHORT_API cohort_status cohort_comm_mem_alloc(cohort_comm* comm, size_t bytes, void** ptr_out) {
  return guard("cohort_comm_mem_alloc", [&] {
    coll::Communicator& c = comm_of(comm);
    check_not_null(ptr_out, "ptr_out");
    *ptr_out = nullptr;
    *ptr_out = c.allocate(bytes);
  });
}

COHORT_API cohort_status cohort_comm_mem_free(cohort_comm* comm, void* ptr) {
  return guard("cohort_comm_mem_free", [&] {
    coll::Communicator& c = comm_of(comm);
    check_not_null(ptr, "ptr");
    c.deallocate(ptr);
  });
}

COHORT_API cohort_status cohort_comm_all_reduce(cohort_comm* comm, const void* in, void* out, size_t count,
                                                cohort_dtype dtype, cohort_reduce_op op, cohort_work** work_out) {
  return collective("cohort_comm_all_reduce", comm, work_out,
                    [&](coll::Communicator& c) { return c.all_reduce(in, out, count, to_type(dtype), to_op(op)); });
}

COHORT_API cohort_status cohort_comm_reduce_scatter(cohort_comm* comm, const void* in, void* out, size_t count,
                                                    cohort_dtype dtype, cohort_reduce_op op, cohort_work** work_out) {
  return collective("cohort_comm_reduce_scatter", comm, work_out, [&](coll::Communicator& c) {
    return c.reduce_scatter(in, out, count, to_type(dtype), to_op(op));
  });
}

COHORT_API cohort_status cohort_comm_all_gather(cohort_comm* comm, const void* in, void* out, size_t count,
                                                cohort_dtype dtype, cohort_work** work_out) {
  return collective("cohort_comm_all_gather", comm, work_out,
                    [&](coll::Communicator& c) { return c.all_gather(in, out, count, to_type(dtype)); });
}

COHORT_API cohort_status cohort_comm_broadcast(cohort_comm* comm, void* buf, size_t count, cohort_dtype dtype,
                                               int32_t root, cohort_work** work_out) {
  return collective("cohort_comm_broadcast", comm, work_out,
                    [&](coll::Communicator& c) { return c.broadcast(buf, count, to_type(dtype), root); });
}

COHORT_API cohort_status cohort_comm_all_to_all(cohort_comm* comm, const void* in, void* out, size_t count,
                                                cohort_dtype dtype, cohort_work** work_out) {
  return collective("cohort_comm_all_to_all", comm, work_out,
                    [&](coll::Communicator& c) { return c.all_to_all(in, out, count, to_type(dtype)); });
}

COHORT_API cohort_status cohort_comm_barrier(cohort_comm* comm, cohort_work** work_out) {
  return collective("cohort_comm_barrier", comm, work_out, [&](coll::Communicator& c) { return c.barrier(); });
}

COHORT_API cohort_status cohort_comm_send(cohort_comm* comm, const void* buf, size_t count, cohort_dtype dtype,
                                          int32_t peer, cohort_work** work_out) {
  return collective("cohort_comm_send", comm, work_out,
                    [&](coll::Communicator& c) { return c.send(buf, count, to_type(dtype), peer); });
}

COHORT_API cohort_status cohort_comm_recv(cohort_comm* comm, void* buf, size_t count, cohort_dtype dtype,
                                          int32_t peer, cohort_work** work_out) {
  return collective("cohort_comm_recv", comm, work_out,
                    [&](coll::Communicator& c) { return c.recv(buf, count, to_type(dtype), peer); });
}

COHORT_API cohort_status cohort_work_wait(cohort_work* work, int64_t timeout_ms) {
  return guard("cohort_work_wait", [&] {
    cohort_work* w = checked(work, kWork, "work");
    COHORT_CHECK(timeout_ms >= -1, Status::kInvalidArgument, "timeout_ms must be >= -1, got ", timeout_ms);
    if (timeout_ms < 0) w->work->wait();
    else w->work->wait(std::chrono::milliseconds(timeout_ms));
  });
}

COHORT_API cohort_status cohort_work_test(cohort_work* work, int32_t* done_out) {
  return guard("cohort_work_test", [&] {
    cohort_work* w = checked(work, kWork, "work");
    check_not_null(done_out, "done_out");
    bool done = w->work->test();  // throws the operation's failure, leaving done_out alone
    *done_out = done ? 1 : 0;
  });
}

COHORT_API cohort_status cohort_work_destroy(cohort_work* work) {
  return guard("cohort_work_destroy", [&] {
    if (work == nullptr) return;
    checked(work, kWork, "work");
    // The caller's buffers must be free when this returns: let the operation end first. Its
    // failure is not this call's failure (status() reports it); the deadline bounds the wait.
    try {
      work->work->wait();
    } catch (const Error&) {
    }
    destroy_handle(work, kWork, "work");
  });
}

}  // extern "C"
