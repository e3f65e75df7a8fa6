"""Optimizers and trainers.

    with cohort.Optimizer("adamw", lr=1e-3) as opt, cohort.Trainer(graph, opt, seed=1) as trainer:
        loss = trainer.step(x=images, y=labels)           # any buffers: array.array, numpy, ...
        logits = trainer.evaluate({"x": test_images})["logits"]

Buffers are used in place when C-contiguous. A flat buffer takes the shape the graph declares
for its name (dimension 0 follows from its length); a shaped one (numpy) must match it. Results
are memoryviews (np.asarray(view) shares their memory), or the caller's own buffers.
"""
import dataclasses

from . import capi as _capi
from ._handle import Handle
from ._types import Device, OptimizerKind, Schedule, as_enum, set_options

_step = _capi.pyc_trainer_step  # the hot path, looked up once


class Optimizer(Handle):
    """An optimizer configuration (cohort_optimizer), validated when made. kind "sgd" or
    "adamw"; options as in cohort_optimizer_options: lr (0.01), momentum, nesterov,
    weight_decay, beta1 (0.9), beta2 (0.999), eps (1e-8), schedule ("constant" or
    "warmup_cosine"), warmup_steps, total_steps, min_lr, clip_norm (0 = off)."""

    __slots__ = ()
    _destroy = staticmethod(_capi.cohort_optimizer_destroy)
    FIELDS = ("lr", "momentum", "nesterov", "weight_decay", "beta1", "beta2", "eps", "schedule", "warmup_steps",
              "total_steps", "min_lr", "clip_norm")

    def __init__(self, kind="sgd", **options):
        o = _capi.cohort_optimizer_options_default()
        o.kind = int(as_enum(OptimizerKind, kind))
        set_options(o, self.FIELDS, options, {"schedule": Schedule}, "Optimizer")
        super().__init__(_capi.cohort_optimizer_create(o))


@dataclasses.dataclass(frozen=True)
class TrainerStats:
    """cohort_trainer_stats: cumulative since the trainer was made."""
    step: int
    learning_rate: float
    grad_norm: float
    peak_activation_bytes: int
    parameter_bytes: int
    last_step_seconds: float
    micro_batches: int  # per step (the plan's micro_batches; 1 otherwise)
    pipeline_busy_seconds: float  # pipeline stages, last step: this rank's work (forward, backward, bookkeeping)
    pipeline_bubble_fraction: float  # ... and its time blocked on the other stages, as a fraction of the step


@dataclasses.dataclass(frozen=True)
class ParallelStats:
    """cohort_parallel_stats of a data-parallel trainer; seconds on the training thread."""
    rounds: int
    compute_seconds: float
    comm_seconds: float
    wait_seconds: float
    hidden_fraction: float
    last_staleness_scale: float
    last_momentum_norm: float
    buckets: int
    parameter_bytes: int
    gradient_bytes: int
    optimizer_state_bytes: int
    parameter_gathers: int  # ZeRO 3: bucket all-gathers of parameters
    parameter_gathers_prefetched: int  # ... launched ahead of their first reader
    peak_parameter_bytes: int  # most bytes of whole parameters held at once in a step
    tau: int  # co2: the current round's length (the plan's, or chosen under overlap auto)
    overlap_steps: int  # co2: steps a round's average travels before its merge
    outer_comm_seconds: float  # co2 overlap auto: seconds the last average took to arrive
    step_seconds: float  # ... and compute seconds per step (0 until measured, and without auto)
    outer_fragments: int  # localsgd, co2: fragments of the outer synchronisation (0 for ddp)
    outer_syncs: int  # outer collectives this rank launched
    outer_sync_bytes: int  # the most bytes one of them carries from this rank
    outer_hidden_fraction: float  # the outer collectives' time hidden behind local steps
    shard_group: int  # ranks per replica (1 without shard groups)
    gradient_sync_bytes: int  # ddp: gradient bytes sent a step (top-k messages under grad_keep < 1)
    grad_keep: float  # ddp: the kept fraction (1 uncompressed)
    outer_shared_wait_seconds: float  # co2: the waits every rank shared (the transfers' own)


class Trainer(Handle):
    """Trains one model (cohort_trainer). With plan and comm it is data-parallel over the
    communicator (cohort_trainer_create_parallel: collective, every rank makes it in the same
    order); step() then takes this rank's shard of the batch. The graph, optimizer, plan and
    communicator may be closed afterwards. With a pipeline plan (pipeline_stages > 1, or fence)
    graph may be None on ranks other than world rank 0, which sends them their stages.

    device ("cpu" or "cuda", or a cohort.Device) is where parameters, gradients, optimizer state
    and the steps' work live; batches and results stay in host memory either way. "cuda" raises
    UnsupportedError naming the reason when the GPU cannot be used (cohort.device_usable says so
    beforehand) or an operator of the graph has no CUDA kernel. Data-parallel trainers on the GPU
    reduce DDP's gradients over NCCL where every rank has a device of its own, else through host
    copies."""

    __slots__ = ("_declared", "_graph", "_outputs")
    _destroy = staticmethod(_capi.cohort_trainer_destroy)

    def __init__(self, graph, optimizer, *, seed=0, num_threads=0, device="cpu", plan=None, comm=None):
        options = _capi.cohort_trainer_options_default()
        options.seed, options.num_threads = int(seed), int(num_threads)
        options.device = int(as_enum(Device, device))
        if plan is None and comm is None:
            handle = _capi.cohort_trainer_create(graph._handle, optimizer._handle, options)
        elif plan is None or comm is None:
            raise TypeError("Trainer: a data-parallel trainer needs both plan= and comm=")
        else:
            handle = _capi.cohort_trainer_create_parallel(None if graph is None else graph._handle,
                                                          optimizer._handle, plan._handle, comm._handle, options)
        super().__init__(handle)
        # name -> (dtype, shape) as the graph declares it; without a graph (a pipeline rank that
        # got its stage from rank 0) every buffer keeps its own shape
        self._declared = {} if graph is None else graph._declared()
        self._graph = graph  # asked about names not seen yet, while it is open
        self._outputs = () if graph is None else tuple(graph._outputs)

    def _learn(self, names):
        for name in names:
            if name not in self._declared:
                graph = self._graph
                self._declared[name] = None if graph is None or graph.closed else graph._describe(name)

    def step(self, inputs=None, /, **named):
        """One training step on the batch given as a mapping (or (name, buffer) pairs) and/or
        keywords. Returns the loss (a float)."""
        if inputs is None:
            inputs = named
        elif named or type(inputs) is not dict:
            inputs = dict(inputs, **named)
        declared = self._declared
        if not declared.keys() >= inputs.keys():
            self._learn(inputs)
        return _step(self._handle, inputs, declared)

    def evaluate(self, inputs, outputs=None):
        """Forward only, in evaluation mode. `outputs` names what to compute (default: the marked
        outputs), or maps names to the caller's buffers to write into (None entries are
        allocated). Returns a dict name -> buffer."""
        if outputs is None:
            outputs = self._outputs
            if not outputs:
                raise ValueError("evaluate: the graph's outputs are unknown to the binding; name them")
        if isinstance(outputs, str):
            outputs = (outputs,)
        outputs = dict(outputs) if isinstance(outputs, dict) else dict.fromkeys(outputs)
        inputs = dict(inputs)
        self._learn(list(inputs) + list(outputs))
        return _capi.pyc_trainer_evaluate(self._handle, inputs, outputs, self._declared)

    def get_parameter(self, name, out=None):
        """A parameter's current values: into `out` (f32, or bf16 for a bf16 parameter), or a new
        f32 memoryview of the parameter's shape."""
        self._learn((name,))
        return _capi.pyc_trainer_get_parameter(self._handle, name, out, self._declared[name])

    def gather_parameters(self):
        """Makes every parameter whole until the next step: under ZeRO stage 3 a collective every
        rank calls at the same point (e.g. before one rank alone evaluates); else a no-op."""
        _capi.cohort_trainer_gather_parameters(self._handle)

    def average_replicas(self):
        """Under local updating (localsgd, slowmo, diloco, co2) makes evaluate and get_parameter
        read the average of every data-parallel replica's parameters until the next step or
        set_parameter, leaving this rank's own (and so the run) unchanged: call it before
        evaluating such a run. A collective every rank calls at the same point. Returns False,
        doing nothing, where the replicas hold the same parameters anyway (sync, one replica)."""
        return bool(_capi.cohort_trainer_average_replicas(self._handle))

    def set_parameter(self, name, values):
        """Overwrites a parameter (f32 buffers are converted for a bf16 parameter)."""
        self._learn((name,))
        _capi.pyc_trainer_set_parameter(self._handle, name, values, self._declared[name])

    def stats(self):
        return TrainerStats(**_capi.cohort_trainer_get_stats(self._handle))

    def parallel_stats(self):
        """InvalidStateError for a trainer that is not data-parallel."""
        return ParallelStats(**_capi.cohort_trainer_get_parallel_stats(self._handle))

    def pipeline_stages(self):
        """The pipeline stages the plan cut the model into, as text to print (one line per stage:
        its nodes and estimated milliseconds); "" on ranks other than world rank 0 and without
        pipeline stages. InvalidStateError for a trainer that is not data-parallel."""
        return _capi.pyc_trainer_pipeline_stages(self._handle)

    def save_checkpoint(self, path):
        """Writes the whole training state to `path` atomically (a data-parallel trainer's outer
        state too); every rank writes its own file."""
        _capi.cohort_trainer_save_checkpoint(self._handle, str(path))

    def load_checkpoint(self, path):
        """Restores the training state; after any error the trainer is unchanged."""
        _capi.cohort_trainer_load_checkpoint(self._handle, str(path))

    def save_parallel_checkpoint(self, path):
        """Like save_checkpoint, but InvalidStateError for a trainer that is not data-parallel."""
        _capi.cohort_trainer_save_parallel_checkpoint(self._handle, str(path))

    def load_parallel_checkpoint(self, path):
        _capi.cohort_trainer_load_parallel_checkpoint(self._handle, str(path))

    def set_checkpoint_value(self, name, value):
        """A named int64 written with every later checkpoint (e.g. a sampler's position)."""
        _capi.cohort_trainer_set_checkpoint_value(self._handle, name, int(value))

    def get_checkpoint_value(self, name):
        """NotFoundError when no value has that name."""
        return _capi.cohort_trainer_get_checkpoint_value(self._handle, name)
