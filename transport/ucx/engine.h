// Engine: one UCX context and worker per process group, endpoints to every other rank, and the
// progress thread that owns them. Everything that touches UCX after creation runs on that
// thread: communicators (Clients) are polled there and post their tagged transfers from poll().
// Dead peers (UCX error callbacks, keepalive) and failures other ranks report are handed to
// every client; the engine never aborts, exits or prints.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ucp/api/ucp.h>

#include "core/base/error.h"
#include "transport/bootstrap/store.h"
#include "transport/ucx/peer_process.h"
#include "transport/ucx/tag.h"

namespace cohort::transport::ucx {

struct EngineOptions {
  std::string name = "world";  // namespaces store keys: "<name>/ucx/addr/<rank>"
  std::string tls;             // UCX_TLS to use; "" = the environment's, else "self,sm,tcp"
  std::chrono::milliseconds connect_timeout{60000};  // waiting for peers' addresses
  // At shutdown, how long to wait for live peers to finish their last operations and say
  // goodbye: leaving earlier cuts off messages a slow (not failed) peer still needs.
  std::chrono::milliseconds leave_timeout{60000};
  std::chrono::milliseconds keepalive{1000};         // how often UCX checks that peers live
  bool blocking_progress = true;  // sleep on the worker's event fd when idle instead of spinning
  // Busy-poll this long after the last event before sleeping. Unset: 50 us, or 0 when this host
  // runs more of the job's ranks than this process may use CPUs (4 ranks on 2 cores, 64 MiB
  // all-reduce: shm 1.14 -> 1.30 GB/s, tcp 0.67 -> 0.71, 8-byte latency no worse), since a
  // spinning progress thread then takes the core a peer needs; at 2 ranks on 2 cores spinning
  // pays (shm 4.3 against 1.3 GB/s without it). Under cohort-run's binding each rank may use one
  // CPU, so 2 ranks on 2 cores count as oversubscribed too: their progress thread shares its
  // rank's one core with the training thread. Measured there (Zen 5, 2026-11-29): spinning
  // anyway moved a 16 MiB shm all-reduce from 5.0 to 6.8 GB/s but a DDP GPT step's waits from
  // 0.43-0.76 s to 0.59-1.48 s over 150 steps, so the binding's rule stays. A caller blocked on
  // an operation is another matter: its core has nothing else to run (memory_spin).
  std::optional<std::chrono::microseconds> spin;
  // Over shared memory (no reliable events for senders) a busy engine naps this long at a time.
  // On shared cores a rank waiting this way takes ~45% of the core from the rank computing beside
  // it (2 ranks on 1 CPU: the probe's model step 7.0 ms with the other rank waiting in a barrier,
  // 3.9 ms with it on another CPU; Zen 5, 2026-11-29), which inflates the probe's and the
  // estimator's "alone" timings at 4 ranks on 2 cores alike. Tried and not kept: sleeping on the
  // worker's events instead (a receive over shared memory raises one) while only receives are
  // pending on an oversubscribed host, from the first microsecond or after 1 ms of naps. The
  // model step alone went back to 3.9 ms, but data 2 x tensor 2 at 4 ranks trained 2-10% slower
  // (an event's wake-up is slower than a nap's), DDP and pipelines the same.
  std::chrono::microseconds busy_nap{50};
  // Where the host's ranks share cores, a wait that has lasted longer naps longer: since_event /
  // nap_growth, between busy_nap and longest_nap (nap_length; 0: always busy_nap), so that a rank
  // waiting milliseconds (a pipeline's bubble, a barrier while another rank works) stops taking
  // its core-mate's time at the cost of waking at most an eighth of its wait late. Where each rank
  // has its cores there is no core-mate to give time to, and growing naps measured no difference
  // (2 ranks on 2 cores, GPT 4x64, interleaved runs: DDP 103-121k against 105-125k tokens/s,
  // 2-stage 1F1B 47-59k against 56-58k), so the rule stays with the case it was made for. 4 ranks on 2 cores over shared memory,
  // the probe's compute stretch (world rank 0 timed alone while the others wait in a barrier):
  // 1.32-1.59x with 50 us naps, 1.92x with these (2026-11-29); training speed the same within
  // noise (GPT 4x64: 4 stages 30.0-36.5k against 27.7-37.2k tokens/s, data 2 x pipe 2 50.4-63.8k
  // against 62.3-64.1k, DDP 103-112k against 101-109k).
  int nap_growth = 8;
  std::chrono::microseconds longest_nap{1000};
  // Waiting for a peer's write to shared memory (which raises no event), the progress thread
  // yields its core between checks for this long after the last activity, then naps (nap_length).
  // While a caller is blocked on one of the engine's operations and the host's ranks do not share
  // cores (Engine::blocked_callers), the core is the progress thread's whatever it waits for —
  // shared memory, the worker's events, tcp — and it keeps yielding instead of napping or sleeping
  // (progress_wait). A nap there made each of a tensor-parallel step's all-reduces wait 145-163 us
  // instead of 56-70 (2 ranks on 2 cores, each bound to one, a GPT 4x64 over a 1x2x1 grid: the
  // step's ~400 us of compute between all-reduces leaves the ranks apart by more than 200 us, and
  // each nap of 50 us wakes late on a virtual machine): 57.6-62.7k tokens/s against 69.5-81.2k.
  // A point-to-point receive slept on the worker's events: a message sent to a pipeline stage
  // blocked for it woke the stage 96-136 us later at 1 KiB and 230-258 us at 16 KiB (a ping-pong
  // over shared memory, 2 ranks on 2 cores, Zen 5, 2026-11-29); polling, 12-33 us and 17-41 us.
  std::chrono::microseconds memory_spin{200};
  // UCX reports dead peers only over transports with a peer failure handler (tcp, not UCX
  // 1.13's shared memory); without one the engine falls back to deadlines unless this is set.
  bool require_peer_failure_detection = false;
  // Shared memory alone cannot report dead peers, and a cma read from a process that died is
  // fatal inside UCX 1.13; so cma is dropped there unless this is set (faster, not robust).
  bool cma_without_failure_detection = false;
  // How often the progress thread checks that peers on this host (same boot and pid namespace)
  // still run; a peer whose process ended fails at once, named, instead of at a deadline.
  // Zero turns the check off.
  std::chrono::milliseconds liveness_interval{100};
  // With tcp in UCX_TLS: receive segments of 256 KiB, send segments of 64 KiB and 4 MiB socket
  // buffers (UCX: 64K, 8K, system default), each unless the environment sets it (UCX_TCP_*).
  // A collective keeps a connection to every peer busy at once, where UCX's defaults made
  // 3-4 progress-thread wake-ups per 64 KiB (64 MiB all-reduce over tcp on 2 cores: 2 ranks
  // 1.8-2.3 -> 2.6 GB/s, 4 ranks 0.73 -> 0.91-0.93; ucx_perftest's single stream does not
  // gain: 3.4-3.5 against 3.7-3.9 GB/s).
  bool tune_tcp = true;
  // Every message sent eagerly (UCX_RNDV_THRESH=inf, unless the environment sets it) where the
  // transports in use copy every message anyway: tcp is among them, or shared memory without cma
  // (sysv / posix alone: create_context drops cma where no transport reports dead peers). There
  // UCX's rendezvous moves the same copies after a handshake, and the handshake needs the
  // sender's progress thread again — which, beside a rank's compute, runs late.
  // Over tcp the handshake costs a round trip per message, and on a loaded link each handshake
  // waits behind the data queued ahead of it — a ring all-reduce pays that at each of its
  // 2 (n - 1) steps. 4 ranks in network namespaces (bench/netns, netns_bw, 2026-11-28): a 1 MiB
  // all-reduce at 100 Mbit/s 7.3 -> 11.9 MB/s bus bandwidth, at 1 Gbit/s 73 -> 115; 4 MiB at
  // 100 Mbit/s 9.0 -> 11.2; 16 MiB unshaped 915 -> 959.
  // Over sysv shared memory (2 ranks on 2 cores, Zen 5, 2026-11-29; the receiver blocked, its
  // progress thread polling): a message sent while its sender computes on for 500 us reached the
  // receiver after 159-167 us at 16 KiB, 183 at 256 KiB, 248 at 768 KiB and 692 at 2 MiB under
  // UCX's rendezvous, 14-17, 38, 87 and 177 us eager; a GPT 4x64 2-stage pipeline over 8
  // micro-batches (16 KiB messages) 49.5-53.2k -> 49.6-56.8k tokens/s in 1F1B, 39.2-40.0k ->
  // 48.7-51.2k interleaved. (Before the receiver polled, eager had read 0-10% faster at 32 KiB
  // and 12-16% slower at 768 KiB: the receiver's wake-up, not the protocol, set those.)
  // The cost over tcp, measured with `cohort train --model gpt --layers 4 --width 64 --parallel sync`
  // (200 steps, 4 ranks at 100 Mbit/s, seconds, UCX's default against this): DDP 40-41 -> 29-30,
  // 4 pipeline stages 8.1-8.3 with it, a 2-stage pipeline on 2 ranks 7.6 either way, data 2 x
  // pipe 2 20-21 -> 21-23. A rendezvous threshold of 16 KiB read 5.1 and 17.8 s for the last two
  // once and DDP 41, but three interleaved pairs of the 2-stage pipeline later gave 8.3-8.7 s
  // eager against 6.9-8.7 at 16 KiB: that pipeline is bound by the link (1 rank 3.8 s, 1 Gbit/s
  // 5.7, 100 Mbit/s 8.1), so per-message protocol control has nothing to win there. UCX's
  // FAST_CMPL on the collectives' sends alone did not keep a netns_bw all-reduce off the rendezvous.
  bool eager_copies = true;
};

// How the progress thread waits before it looks at the worker and its clients again (Engine::run).
enum class ProgressWait {
  kPoll,   // at once (busy-polling, EngineOptions::spin after the last event)
  kYield,  // after giving the core to whoever else wants it
  kNap,    // after EngineOptions::busy_nap, or when woken
  kEvent,  // on the worker's next event (tcp and friends raise them reliably), 1 ms at most
  kIdle,   // nothing pending: on the worker's next event or a wake-up, 50 ms at most
};
struct ProgressState {
  bool busy = false;          // PollResult::busy of every client, or transfers in flight
  bool memory_waits = false;  // PollResult::memory_waits
  std::chrono::nanoseconds since_event{0};  // since the last UCX event or client progress
  // A caller is blocked on one of the engine's operations and the host's ranks do not share
  // cores (Engine::blocked_callers, Engine::ranks_share_cores): the rank's core is free.
  bool caller_blocked = false;
  bool ranks_share_cores = false;  // Engine::ranks_share_cores: naps grow (EngineOptions::nap_growth)
  bool worker_events = false;  // the worker's events wake the thread (blocking progress + peer failure detection)
};
ProgressWait progress_wait(const ProgressState& state, std::chrono::microseconds spin, const EngineOptions& options);
// How long a kNap lasts: busy_nap, or where the host's ranks share cores longer the longer the
// wait has lasted (EngineOptions::nap_growth).
std::chrono::microseconds nap_length(const ProgressState& state, const EngineOptions& options);

// Completion slot of one tagged transfer; it must keep its address while in flight.
struct Transfer {
  void* request = nullptr;  // the UCX request while in flight
  int peer = -1;            // world rank
  size_t bytes = 0;
  bool posted = false;
  bool done = false;
  ucs_status_t status = UCS_OK;
  int* counter = nullptr;  // decremented once when the transfer completes (optional)
  bool in_flight() const { return posted && !done; }
};

constexpr uint32_t kAnyComm = 0xFFFFFFFFu;

// What one poll of a client found.
struct PollResult {
  bool busy = false;          // transfers or operations pending
  bool progressed = false;    // a step completed (counts as activity, like a UCX event)
  bool memory_waits = false;  // waiting for peers' writes to shared memory, which raise no event
};

// Something the progress thread drives (a communicator's executor).
class Client {
 public:
  virtual ~Client() = default;
  // Advances operations and says what is pending.
  virtual PollResult poll(Clock::time_point now) = 0;
  // A failure: comm == kAnyComm when world rank `culprit` died, else one communicator's.
  virtual void on_failure(uint32_t comm, int culprit, Status status, const std::string& why) = 0;
  // Another rank's operation on communicator `comm` stalled waiting for world rank `culprit`.
  virtual void on_suspect(uint32_t comm, int reporter, int culprit) {}
  // True once the owner has let go and nothing is in flight; the engine then drops the client.
  virtual bool finished() const = 0;
  // The engine shuts down with this client still attached: let go of UCX resources (mapped
  // memory, remote keys) now, before the endpoints, worker and context go. Progress thread.
  virtual void release_ucx_resources() {}
};

class Engine {
 public:
  // Creates the context and worker, publishes this rank's address and connects to every rank.
  // Collective over all `size` ranks sharing `store`. Throws cohort::Error.
  static std::shared_ptr<Engine> create(std::shared_ptr<Store> store, int rank, int size,
                                        EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return options_.name; }
  const std::string& tls() const { return tls_; }
  // Whether UCX itself reports dead peers (else only deadlines and peers' reports do).
  bool peer_failure_detection() const { return peer_failure_detection_; }
  std::thread::id progress_thread_id() const { return thread_.get_id(); }
  // Ranks of this engine running on this host (same boot and pid namespace), this one included.
  int local_ranks() const;
  // Whether this host runs more of the job's ranks than this process may use CPUs (fixed at
  // creation): the progress thread then does not spin, and communicators pipeline in larger chunks.
  bool oversubscribed() const { return oversubscribed_; }
  // How long the progress thread busy-polls after an event (EngineOptions::spin, resolved).
  std::chrono::microseconds spin() const { return spin_; }
  // Whether this host runs more of the job's ranks than it has CPUs online (fixed at creation),
  // whatever each process's affinity: then ranks take turns on cores, and a rank whose callers all
  // wait still shares its core with another rank's compute. (A CPU quota of a container, which
  // neither count shows, is not seen.)
  bool ranks_share_cores() const { return ranks_share_cores_; }
  // Whether the engine sends every message eagerly (EngineOptions::eager_copies applied).
  bool eager() const { return eager_; }
  // The callers blocked in Work::wait on this engine's operations (coll::Executor hands it to
  // each Work). While one is and the ranks do not share cores, the rank's core has nothing else
  // to run: the progress thread keeps yielding instead of napping or sleeping on events
  // (EngineOptions::memory_spin, progress_wait).
  const std::shared_ptr<std::atomic<int>>& blocked_callers() const { return blocked_callers_; }

  // Thread-safe.
  void attach(std::shared_ptr<Client> client);
  void wake();
  // Communicator ids: the next free id on this rank, and marking ids below `end` as used.
  uint32_t next_comm_id() const { return next_comm_id_.load(); }
  void reserve_comm_ids(uint32_t end);

  // Progress thread only. Failures complete the transfer with an error status, never throw.
  void send(int peer, const void* buf, size_t bytes, uint64_t tag, Transfer* t);
  void recv(int peer, void* buf, size_t bytes, uint64_t tag, Transfer* t);
  void cancel(Transfer* t);
  bool peer_dead(int peer) const { return dead_[peer] != 0; }
  // Whether `peer` said goodbye (its engine shuts down: it posts no transfer any more, and every
  // message it sent before reached this rank first), and when this rank heard it.
  bool peer_left(int peer) const { return left_[peer] != 0; }
  Clock::time_point left_at(int peer) const { return left_at_[peer]; }
  // The first failure that peer had heard of when it left ("" when none): why it may have left.
  const std::string& left_after(int peer) const { return left_after_[peer]; }
  int peers_left() const { return peers_left_; }
  // Whether `peer` runs on this host (same boot and pid namespace).
  bool peer_local(int peer) const { return peer == rank_ || local_[peer] != 0; }
  // The UCX handles, for shared regions (shared_memory.h); nullptr endpoint for this rank.
  ucp_context_h context() const { return context_; }
  ucp_ep_h endpoint(int peer) const { return eps_[peer]; }
  // Tells every other live rank about a failure (best effort, asynchronous). A culprit equal to
  // this rank means this rank aborted `comm` itself.
  void report_failure(uint32_t comm, int culprit, Status status, const std::string& why);
  // Tells every other live rank that this rank's operation on `comm` waits for `culprit`.
  void report_suspect(uint32_t comm, int culprit);

 private:
  static constexpr uint32_t kControlFailure = 1;
  static constexpr uint32_t kControlGoodbye = 2;
  static constexpr uint32_t kControlSuspect = 3;
  // A live rank aborted one communicator: its peers fail that communicator's operations but
  // still wait for the rank's goodbye at shutdown (it is not dead, and may still be receiving).
  static constexpr uint32_t kControlAbort = 4;
  struct ControlMsg {  // failure reports, suspicions and goodbyes between engines
    uint32_t kind = 0;
    uint32_t comm = 0;
    int32_t culprit = -1;
    int32_t status = 0;
    char text[240] = {};
  };
  struct ControlSend {
    ControlMsg msg;
    Transfer transfer;
  };
  struct EpSlot {
    Engine* engine;
    int peer;
  };
  Engine(int rank, int size, EngineOptions options);
  void setup(Store& store);                  // engine_setup.cpp
  void create_context();                     // engine_setup.cpp
  void connect(Store& store);                // engine_setup.cpp
  void shutdown() noexcept;                  // engine_setup.cpp
  void progress_until(Clock::time_point deadline, const std::function<bool()>& done);
  void say_goodbye(Clock::time_point deadline);
  void close_endpoints(Clock::time_point deadline);
  void run() noexcept;
  // Sleeps unless wake() was called since `posts_seen` (a value of posts_ read before the work
  // it found was looked at).
  void wait_for_events(std::chrono::microseconds timeout, bool worker_events, uint64_t posts_seen) noexcept;
  PollResult poll_clients(Clock::time_point now) noexcept;
  void handle_ep_errors() noexcept;
  // A peer is gone: fail its transfers' owners and tell the other ranks (unless it said goodbye).
  void mark_dead(int peer, const std::string& why) noexcept;
  // Checks the processes of peers on this host, at most once per liveness_interval.
  void check_local_peers(Clock::time_point now) noexcept;
  // A peer lost without a goodbye over transports that cannot report failures: its endpoint
  // cannot be torn down safely inside UCX 1.13 (see shutdown).
  bool lost_peer_without_detection() const noexcept;
  void post_control_recv() noexcept;
  void handle_control() noexcept;
  void dispatch(uint32_t comm, int culprit, Status status, const std::string& why) noexcept;
  void send_control(int peer, uint32_t kind, uint32_t comm, int culprit, Status status,
                    const std::string& why) noexcept;
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) noexcept;

  int rank_;
  int size_;
  EngineOptions options_;
  bool oversubscribed_ = false;
  bool ranks_share_cores_ = false;
  bool eager_ = false;
  std::chrono::microseconds spin_{50};  // options_.spin resolved for this host at creation
  std::shared_ptr<std::atomic<int>> blocked_callers_ = std::make_shared<std::atomic<int>>(0);
  std::string tls_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  std::vector<EpSlot> ep_slots_;
  std::vector<char> dead_;  // world rank -> died (UCX error or report)
  std::vector<char> blamed_;  // world rank -> named in a failure: not awaited at shutdown
  std::vector<char> left_;  // world rank -> said goodbye: its later disconnect is expected
  std::vector<Clock::time_point> left_at_;  // world rank -> when its goodbye arrived
  std::vector<std::string> left_after_;      // world rank -> the failure its goodbye carried
  int peers_left_ = 0;
  std::vector<ProcessIdentity> local_peers_;  // world rank -> its process, when checkable here
  std::vector<char> local_;                   // world rank -> local_peers_[rank] is set
  Clock::time_point next_liveness_check_{};
  bool peer_failure_detection_ = true;
  bool started_ = false;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int worker_fd_ = -1;
  // wake() writes wake_fd_ only while the progress thread sleeps (or is about to): each write and
  // the read clearing it are system calls, ~20 of each a step of a 2-stage pipeline whose thread
  // was mostly awake to see the new work anyway. posts_ counts the calls; the thread raises
  // sleeping_ and then looks at posts_ once more before it sleeps, and wake() counts and then
  // looks at sleeping_ (all sequentially consistent), so either the thread sees the new count and
  // stays up, or wake() sees it sleeping and writes.
  std::atomic<uint64_t> posts_{0};
  std::atomic<bool> sleeping_{false};

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> next_comm_id_{1};  // 0 is the world communicator

  std::mutex clients_mutex_;
  std::vector<std::shared_ptr<Client>> new_clients_;
  std::vector<std::shared_ptr<Client>> clients_;  // progress thread only

  std::mutex ep_errors_mutex_;
  std::vector<std::pair<int, ucs_status_t>> ep_errors_;

  struct Failure {
    uint32_t comm;
    int culprit;
    Status status;
    std::string why;
  };
  std::vector<Failure> failures_;  // replayed to clients attached later

  std::unique_ptr<ControlMsg> control_in_;
  Transfer control_recv_;
  std::list<ControlSend> control_out_;
};

}  // namespace cohort::transport::ucx
