"""Communicators, collectives and parallel plans.

    with cohort.Comm.from_env() as comm:                 # cohort-run, torchrun, mpirun, srun or alone
        comm.all_reduce(grads)                           # in place, waits
        work = comm.all_gather(mine, everyone, async_op=True)
        ...                                              # the buffers are held by `work`
        work.wait()

Collectives on one communicator must be issued from one thread at a time, in the same order on
every rank. Counts follow from the buffers; the dtype from their format (pass dtype= for raw
bytes or bf16 as uint16; a dtype= that disagrees with typed elements, e.g. float64, is refused). An asynchronous collective returns a Work that keeps its buffers
referenced (and, for a strided buffer, copies results back) until the operation completes.

Registered memory (like NCCL's registered buffers) comes from Comm.alloc:

    grads = comm.alloc(1 << 20, "f32")   # collective: same count and dtype on every rank
    numpy.asarray(grads)[:] = 1.0        # shares the memory (so does memoryview(grads))
    comm.all_reduce(grads)               # in place where the ranks share a host (from 256 KiB)
    grads.free()                         # collective too; BufferError while views are alive

A RegisteredBuffer keeps its Comm alive. Garbage collection does not free it (ranks collect
garbage in different orders, and freeing is collective): memory never freed is released with the
communicator, whose close() raises BufferError while any of its buffers still has a view.
"""
import weakref

from . import capi as _capi
from ._errors import Status
from ._handle import Handle
from ._types import Device, Preset, ReduceOp, SyncMode, as_dtype, as_enum, set_options

_collective = _capi.pyc_comm_collective

#: Registered memory of a Comm (Comm.alloc); see the module's documentation.
RegisteredBuffer = _capi.pyc_registered_type()


class Work(Handle):
    """An operation in flight (cohort_work). close() waits for it (bounded by the communicator's
    timeout) before freeing it, so its buffers are free afterwards — unless the communicator has
    failed: then the Comm holds them until its own close() (see Comm)."""

    __slots__ = ("_comm",)

    def __init__(self, handle, comm):
        super().__init__(handle)
        self._comm = comm  # the communicator outlives its works

    def _destroy(self, handle):  # Handle.close's call, with the Comm's keep list
        _capi.pyc_work_destroy(handle, self._comm._kept)

    def wait(self, timeout_ms=-1):
        """Waits until the operation finishes; raises its failure, or cohort.TimeoutError when
        timeout_ms (-1: the communicator's deadline) passes first (then wait again)."""
        _capi.pyc_work_wait(self._handle, int(timeout_ms))

    def test(self):
        """True when finished, False while pending; raises the operation's failure."""
        return _capi.pyc_work_test(self._handle)


class Comm(Handle):
    """A group of ranks (cohort_comm) exchanging host buffers. After a PeerFailedError or
    TimeoutError only status() and close() are useful.

    Once the communicator has failed, the buffers of an operation that fails or ends (a failed
    synchronous call, a Work closed) stay referenced by the Comm until close() has destroyed the
    communicator: a send to a rank that froze cannot be cancelled, and the rank may still read
    the buffer when it wakes. A bytearray stays unresizable until then; registered memory is
    the communicator's own and is not held."""

    __slots__ = ("_works", "_kept")
    _destroy = staticmethod(_capi.cohort_comm_destroy)

    def __init__(self, handle):
        super().__init__(handle)
        self._works = weakref.WeakSet()  # closed before the communicator
        self._kept = []  # buffers of operations that failed with it, released after its destroy

    @classmethod
    def from_env(cls, timeout_ms=0, connect_timeout_ms=0):
        """Joins the job this process was started in (collective: every rank calls it); a world of
        one without a launcher. Timeouts in ms, 0 = 60000."""
        o = _capi.cohort_comm_options_default()
        o.timeout_ms, o.connect_timeout_ms = int(timeout_ms), int(connect_timeout_ms)
        return cls(_capi.cohort_comm_create_from_env(o))

    def close(self):
        """Waits for operations in flight (their Works are closed first), then destroys, which
        releases the registered memory not yet freed. BufferError, leaving the communicator
        open, while a RegisteredBuffer of it still has an export (a memoryview, a numpy array,
        an operation in flight on another communicator)."""
        for work in list(self._works):
            work.close()
        if self._handle is not None:
            _capi.pyc_registered_release(self._handle, "Comm.close")
        try:
            super().close()
        finally:
            self._kept.clear()  # the communicator is gone: nothing can read them now

    def alloc(self, count, dtype="f32"):
        """count zeroed elements of registered memory, as a RegisteredBuffer (a flat array with the
        buffer protocol: memoryview() and numpy.asarray() share it; bf16 and f16 appear as uint16
        'H'). Collectives on buffers in it run in place where the ranks share a host.
        Collective: every rank calls it with the same count and dtype, in the same order among
        its other operations, and frees the buffer (free(), or the end of a `with` block) at the
        same point. Not freed by garbage collection: released with the communicator."""
        return _capi.pyc_comm_alloc(self._handle, self, int(count), as_dtype(dtype))

    @property
    def rank(self):
        return _capi.cohort_comm_rank(self._handle)[0]

    @property
    def size(self):
        return _capi.cohort_comm_rank(self._handle)[1]

    def split(self, color, key=0):
        """Collective: ranks with equal color form a new Comm ordered by (key, rank); a rank
        with color < 0 takes part and gets None."""
        handle = _capi.cohort_comm_split(self._handle, int(color), int(key))
        return None if handle is None else Comm(handle)

    def status(self):
        """(Status, failed rank or -1, message): the sticky failure, never raised."""
        status, failed_rank, message = _capi.pyc_comm_status(self._handle)
        return Status(status), failed_rank, message

    def abort(self):
        """Fails every pending and later operation and tells the peers. Returns at once."""
        _capi.cohort_comm_abort(self._handle)

    def _run(self, kind, in_, out, dtype, op, peer, async_op):
        dtype = -1 if dtype is None else int(as_dtype(dtype))
        op = int(as_enum(ReduceOp, op))
        handle = _collective(self._handle, kind, in_, out, dtype, op, int(peer), bool(async_op), self._kept)
        if handle is None:
            return None
        work = Work(handle, self)
        self._works.add(work)
        return work

    def all_reduce(self, buf, out=None, op="sum", dtype=None, async_op=False):
        """Reduces buf over the ranks into out (None: in place). op "sum", "avg" or "max"
        (i32/i64: sum and max). Returns a Work with async_op, else None."""
        return self._run(_capi.PYC_ALL_REDUCE, buf, buf if out is None else out, dtype, op, 0, async_op)

    def reduce_scatter(self, buf, out, op="sum", dtype=None, async_op=False):
        """buf: size x n elements; out: n (rank r receives block r of the reduction)."""
        return self._run(_capi.PYC_REDUCE_SCATTER, buf, out, dtype, op, 0, async_op)

    def all_gather(self, buf, out, dtype=None, async_op=False):
        """buf: n elements; out: size x n, rank r's block at r."""
        return self._run(_capi.PYC_ALL_GATHER, buf, out, dtype, "sum", 0, async_op)

    def broadcast(self, buf, root=0, dtype=None, async_op=False):
        """Rank root's buf into every rank's buf."""
        return self._run(_capi.PYC_BROADCAST, None, buf, dtype, "sum", root, async_op)

    def all_to_all(self, buf, out, dtype=None, async_op=False):
        """buf and out: size x n elements each, distinct; block j of buf goes to rank j."""
        return self._run(_capi.PYC_ALL_TO_ALL, buf, out, dtype, "sum", 0, async_op)

    def barrier(self, async_op=False):
        return self._run(_capi.PYC_BARRIER, None, None, None, "sum", 0, async_op)

    def send(self, buf, peer, dtype=None, async_op=False):
        """Point to point, matched in issue order per (sender, receiver) pair."""
        return self._run(_capi.PYC_SEND, buf, None, dtype, "sum", peer, async_op)

    def recv(self, buf, peer, dtype=None, async_op=False):
        return self._run(_capi.PYC_RECV, None, buf, dtype, "sum", peer, async_op)

    def probe_links(self):
        """The links between every pair of ranks (cohort_comm_probe_links): a collective — every
        rank calls it at the same point — bounded to about 20 s. Returns (bandwidth, latency,
        report): size x size nested lists of floats, bytes per second and seconds (symmetric, the
        diagonal 0), and the matrix as text (Mbit/s and ms). PeerFailedError or TimeoutError when
        a rank fails during it."""
        return _capi.pyc_comm_probe_links(self._handle)


class Plan(Handle):
    """How a model is spread over a communicator's ranks (cohort_plan), validated when made.
    preset "ddp", "localsgd", "slowmo", "diloco" or "co2" sets the mode and outer settings;
    options as in cohort_plan_options: data_parallel (0 = whole communicator), mode ("ddp",
    "localsgd", "co2"), tau, outer_lr, outer_momentum, outer_nesterov, staleness_penalty,
    penalty_constant, clip_threshold, zero_stage (0..3), bucket_bytes, inner_noise_scaling (localsgd,
    co2 with AdamW: local steps normalised for the group's averaged gradient), overlap_steps (co2:
    steps a round's average travels before its merge, 0 = 1, -1 = chosen from measured times),
    outer_bits (co2: 32, or 8 / 4 for block-scaled low-bit pseudo-gradients; 0 = the default: 4 under co2 (8
    over an SGD optimizer; each rank's of its shard with shard groups), 32 in another mode), outer_fragments
    (localsgd, co2: the outer synchronisation streamed over that many fragments of the parameters, fragment
    f synchronised f * tau / F steps into each round, each all-reduce ~1/F of the model; 0 or 1 = the whole
    model at once, at most tau), shard_group (localsgd, co2: replicas of that many consecutive ranks, each
    training synchronously with zero_stage 1..3 over its ranks, the outer rule between replicas on each
    rank's ZeRO shard, so a rank's outer state and each outer all-reduce are ~1/S of the model; 0 or 1 =
    every rank its own replica; it must divide the data-parallel degree), grad_keep (ddp: top-k
    compression of the gradients with error feedback, each bucket sending that fraction of its largest
    entries and keeping the rest for later steps; 0 or 1 = off), average_inner_state (localsgd: every
    rank's inner optimizer state averaged over the data ranks at each round end, as DDP's replicas
    share theirs; one more blocking all-reduce a round), tensor_x, tensor_y,
    tensor_z (AxoNN's tensor grid; tensor_y alone is Megatron's 1D tensor parallelism: each rank trains
    its part of the model, and the ranks of one tensor group step on the same rows, except that the Z
    ranks each step on their own), tensor_overlap_off, activation_checkpointing (recompute each
    transformer block of a gpt in backward), sequence_parallel (over tensor_y: 0 none, 1 Megatron's, the
    regions between split layers hold each rank's block of the tokens; 2 the all-to-all kind, tensor_y a
    sequence axis whose attention exchanges tokens for heads), pipeline_stages (the model cut into that
    many stages over consecutive ranks; ranks row-major over (data, pipe, x, y, z); 0 or 1 = none),
    pipeline_chunks (stages per rank, interleaved schedule only), micro_batches (each rank's batch cut
    into that many; 0 or 1 = one), pipeline_schedule (0 GPipe, 1 1F1B — the default —, 2 interleaved),
    pipeline_cuts (the first node of stages 1.., a str "a,b" or a sequence of names; None = balanced by
    the workload estimator), automatic (1: the layout is the planner's to choose — resolve it with
    Plan.choose first; a Trainer refuses it), auto_trials (Plan.choose: time the K best predicted
    layouts, 0..64), memory_limit_bytes (what a rank may use; 0 = the host's memory over the ranks).

    Geo-distributed pipelines, keyword only: fence (True: OP-Fence — the communicator's ranks become
    one pipeline, a stage per rank, whose rank order, cuts and compression the Trainer chooses from
    the links it measures between the ranks and their compute; tensor_x/y/z and data_parallel must
    be 1 (else UnsupportedError), pipeline_chunks 1, no pipeline_cuts or pipeline_keep),
    fence_compression (False: fence never compresses a cut; else a cut whose transfer would be the
    bottleneck sends only its top-k entries), fence_min_keep (the smallest share of entries a
    compressed cut keeps, in (0, 1]; None = 0.1), pipeline_keep (per cut of a pipeline, the share
    of its activations' entries sent, top-k by magnitude, each in (0, 1]: a sequence of floats, one
    per cut — pipeline_stages x pipeline_chunks - 1 of them — or a str "1,0.1"; None = no cut
    compressed). InvalidPlanError naming fence_min_keep or "pipeline keep" for a bad value or count.
    With pipeline stages (pipeline_stages > 1, or fence) the Trainer of ranks other than world
    rank 0 may be made with graph None: rank 0 sends them their stages."""

    __slots__ = ()
    _destroy = staticmethod(_capi.cohort_plan_destroy)
    FIELDS = ("data_parallel", "mode", "tau", "outer_lr", "outer_momentum", "outer_nesterov", "staleness_penalty",
              "penalty_constant", "clip_threshold", "zero_stage", "bucket_bytes", "inner_noise_scaling",
              "overlap_steps", "outer_bits", "outer_fragments", "shard_group", "grad_keep", "average_inner_state",
              "tensor_x", "tensor_y", "tensor_z",
              "tensor_overlap_off", "activation_checkpointing", "sequence_parallel", "pipeline_stages",
              "pipeline_chunks", "micro_batches", "pipeline_schedule", "automatic", "auto_trials", "memory_limit_bytes")

    def __init__(self, preset="none", pipeline_cuts=None, *, fence=False, fence_compression=True, fence_min_keep=None,
                 pipeline_keep=None, **options):
        o = _capi.cohort_plan_options_default()
        o.preset = int(as_enum(Preset, preset))
        set_options(o, self.FIELDS, options, {"mode": SyncMode}, "Plan")
        _set_fence(o, fence, fence_compression, fence_min_keep)
        if pipeline_cuts is not None and not isinstance(pipeline_cuts, str):
            pipeline_cuts = ",".join(pipeline_cuts)
        if pipeline_keep is not None and not isinstance(pipeline_keep, str):
            pipeline_keep = ",".join(repr(float(k)) for k in pipeline_keep)
        super().__init__(_capi.pyc_plan_create(o, pipeline_cuts, pipeline_keep))

    @classmethod
    def choose(cls, graph, optimizer, comm, preset="none", *, seed=0, num_threads=0, device="cpu", fence=False,
               fence_compression=True, fence_min_keep=None, **options):
        """Chooses the layout of an automatic plan (cohort_plan_choose): a collective over `comm` —
        every rank calls it with the same arguments — that probes the links, ranks the layouts that
        fit with the planner's model (world rank 0 decides) and, with auto_trials K > 0, times a few
        steps of the K best (with `optimizer` and the trainer settings seed, num_threads, device).
        `graph` is the model at the GLOBAL batch: every data replica's rows together. Options as
        Plan's (automatic is implied; pipeline_cuts and pipeline_keep, layout fields, are not taken;
        fence, which chooses the layout itself, is InvalidPlanError).

        Returns (options, report): options, the keyword arguments of the concrete Plan — preset and
        every field as given except the layout (data_parallel, tensor_x/y/z, sequence_parallel,
        pipeline_stages, pipeline_chunks, micro_batches, pipeline_schedule, zero_stage,
        activation_checkpointing), which is the chosen one, automatic 0, fence False — and report, the text world
        rank 0 prints ("" on the other ranks). Each rank then trains the graph at the global batch /
        (D x tensor_z) rows, D = comm.size / (pipeline_stages x tensor_x x tensor_y x tensor_z).
        InvalidPlanError naming memory_limit_bytes when no layout fits, naming the field for a bad
        option."""
        o = _capi.cohort_plan_options_default()
        o.preset = int(as_enum(Preset, preset))
        set_options(o, cls.FIELDS, options, {"mode": SyncMode}, "Plan.choose")
        _set_fence(o, fence, fence_compression, fence_min_keep)
        o.automatic = 1
        to = _capi.cohort_trainer_options_default()
        to.seed, to.num_threads = int(seed), int(num_threads)
        to.device = int(as_enum(Device, device))
        chosen = _capi.cohort_plan_options_default()
        report = _capi.pyc_plan_choose(o, graph._handle, optimizer._handle, to, comm._handle, chosen)
        result = {"preset": Preset(chosen.preset)}
        for field in cls.FIELDS:
            result[field] = getattr(chosen, field)
        result["mode"] = SyncMode(chosen.mode)
        result["fence"] = bool(chosen.fence)
        result["fence_compression"] = not chosen.fence_compression_off
        result["fence_min_keep"] = chosen.fence_min_keep or None
        return result, report


def _set_fence(o, fence, fence_compression, fence_min_keep):
    """Plan's fence keywords onto a cohort_plan_options (None for fence_min_keep: 0, the default)."""
    o.fence = int(bool(fence))
    o.fence_compression_off = 0 if fence_compression else 1
    o.fence_min_keep = 0.0 if fence_min_keep is None else float(fence_min_keep)
