// Peer processes on the same host: a rank publishes which process it runs in (boot, pid
// namespace, pid, start time), and its peers that share the host and pid namespace check that
// process directly. Over shared memory UCX 1.13 reports no dead peers, so without this a killed
// rank would be noticed only when a deadline expires, and a rank waiting behind another
// survivor could blame that survivor instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "transport/bootstrap/store.h"

namespace cohort::transport::ucx {

struct ProcessIdentity {
  std::string boot_id;
  uint64_t pid_namespace = 0;
  int64_t pid = 0;
  uint64_t start_ticks = 0;
};

// The calling process. Fields it cannot read stay empty or zero (the identity then matches
// no other, and its liveness is never judged).
ProcessIdentity this_process();
// Looks up `pid` in /proc (for tests and this_process); nullopt when no such process is visible.
std::optional<ProcessIdentity> process_of(int64_t pid);

Bytes encode(const ProcessIdentity& id);
// nullopt for bytes that are not a valid identity.
std::optional<ProcessIdentity> decode(const Bytes& bytes);

// Whether `peer`'s liveness can be judged from this process: same boot, same pid namespace,
// every field known.
bool checkable_from(const ProcessIdentity& self, const ProcessIdentity& peer);

// Whether a checkable peer's process has ended: no such pid, a zombie, or the pid now belongs
// to a process started at another time. Reads /proc/<pid>/stat once.
bool process_ended(const ProcessIdentity& peer);

}  // namespace cohort::transport::ucx
