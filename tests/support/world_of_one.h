// Test helper: rank 0 of a job of one process — its rendezvous store (kept: some callers make
// more communicators over it) and a UCX communicator over that store.
#pragma once

#include <chrono>
#include <memory>

#include "transport/bootstrap/env.h"
#include "transport/coll/ucx_communicator.h"

namespace cohort::test {

struct WorldOfOne {
  std::shared_ptr<transport::Store> store;
  std::shared_ptr<transport::coll::Communicator> comm;
};

inline WorldOfOne world_of_one() {
  transport::JobEnv env;  // rank 0 of 1
  WorldOfOne w;
  w.store = transport::connect_job_store(env, std::chrono::milliseconds(5000));
  w.comm = transport::coll::UcxCommunicator::create(w.store, 0, 1);
  return w;
}

}  // namespace cohort::test
