// Process identities from /proc and their FlatBuffers form (peer_process.fbs).
#include "transport/ucx/peer_process.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "transport/ucx/peer_process_generated.h"

namespace cohort::transport::ucx {

namespace {

struct Stat {
  char state = 0;
  uint64_t start_ticks = 0;
};

// The state (field 3) and start time (field 22) of /proc/<pid>/stat. The command name (field
// 2) is in parentheses and may itself hold spaces and parentheses: fields resume after the
// last ')'.
std::optional<Stat> read_stat(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  Stat s;
  std::string field;
  if (!(rest >> s.state)) return std::nullopt;
  for (int i = 4; i < 22; ++i)  // fields 4..21
    if (!(rest >> field)) return std::nullopt;
  if (!(rest >> s.start_ticks)) return std::nullopt;
  return s;
}

std::string read_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (in) std::getline(in, id);
  return id;
}

uint64_t pid_namespace_inode() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

}  // namespace

std::optional<ProcessIdentity> process_of(int64_t pid) {
  auto stat = read_stat(pid);
  if (!stat) return std::nullopt;
  ProcessIdentity id;
  id.boot_id = read_boot_id();
  id.pid_namespace = pid_namespace_inode();
  id.pid = pid;
  id.start_ticks = stat->start_ticks;
  return id;
}

ProcessIdentity this_process() {
  auto id = process_of(static_cast<int64_t>(::getpid()));
  if (id) return *id;
  ProcessIdentity unknown;
  unknown.pid = static_cast<int64_t>(::getpid());
  return unknown;
}

Bytes encode(const ProcessIdentity& id) {
  flatbuffers::FlatBufferBuilder builder(128);
  auto boot = builder.CreateString(id.boot_id);
  builder.Finish(wire::CreateProcessIdentity(builder, boot, id.pid_namespace, id.pid,
                                             id.start_ticks));
  return Bytes(builder.GetBufferPointer(), builder.GetBufferPointer() + builder.GetSize());
}

std::optional<ProcessIdentity> decode(const Bytes& bytes) {
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  if (!verifier.VerifyBuffer<wire::ProcessIdentity>(nullptr)) return std::nullopt;
  auto* msg = flatbuffers::GetRoot<wire::ProcessIdentity>(bytes.data());
  ProcessIdentity id;
  if (msg->boot_id()) id.boot_id = msg->boot_id()->str();
  id.pid_namespace = msg->pid_namespace();
  id.pid = msg->pid();
  id.start_ticks = msg->start_ticks();
  return id;
}

bool checkable_from(const ProcessIdentity& self, const ProcessIdentity& peer) {
  return !self.boot_id.empty() && self.boot_id == peer.boot_id && self.pid_namespace != 0 &&
         self.pid_namespace == peer.pid_namespace && peer.pid > 0 && peer.start_ticks != 0;
}

bool process_ended(const ProcessIdentity& peer) {
  auto stat = read_stat(peer.pid);
  if (!stat) return true;
  if (stat->state == 'Z' || stat->state == 'X' || stat->state == 'x') return true;
  return stat->start_ticks != peer.start_ticks;
}

}  // namespace cohort::transport::ucx
