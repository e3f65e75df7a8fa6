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
#define COHORT_ABI_VERSION 100
#define COHORT_VERSION_MAJOR 0
#define COHORT_VERSION_MINOR 1
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
  COHORT_ERR_INVALID_STATE = 13    /* called in the wrong state: nothing changed */
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
/* Threads used by this process's CPU math (oneDNN and cohort's loops). With several ranks on one
 * machine give each rank cores/ranks threads. n >= 1, else INVALID_ARGUMENT. Process-wide. */
COHORT_API cohort_status cohort_set_num_threads(int n);

/* ---- element types ------------------------------------------------------------------------ */

typedef enum cohort_dtype {
  COHORT_F32 = 0,
  COHORT_BF16 = 1, /* bf16 storage; CPU math accumulates in f32 */
  COHORT_I32 = 2,  /* indices and labels */
  COHORT_I64 = 3,
  COHORT_F16 = 4
} cohort_dtype;

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

/* Adds operator `op` (see cohort_op_list) named `name` (NULL or "" picks "<op>_<n>") reading
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
 * a temporary file and a rename, so an existing file is never left half-written. */
COHORT_API cohort_status cohort_graph_save(const cohort_graph* graph, const char* path);
/* Reads a graph file. A truncated, corrupted or inconsistent file returns CORRUPT (or NOT_FOUND
 * for an unknown operator) and creates nothing. */
COHORT_API cohort_status cohort_graph_load(const char* path, cohort_graph** graph_out);

/* Names of the public operators, separated by ',' into buf (capacity buf_size, NUL-terminated).
 * *needed_out (may be NULL) receives the size needed including the NUL; INVALID_ARGUMENT if
 * buf is too small (nothing written then). */
COHORT_API cohort_status cohort_op_list(char* buf, size_t buf_size, size_t* needed_out);

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
 * (may be NULL). On any error before the update (bad buffer, unknown name) nothing changed. */
COHORT_API cohort_status cohort_trainer_step(cohort_trainer* trainer, const cohort_tensor_ref* inputs,
                                             int32_t num_inputs, float* loss_out);

/* Forward only, evaluation mode (dropout off), no update. Binds `inputs` like step (dimension 0
 * may differ from the declared batch), and writes each requested output (by name: a marked
 * output or the loss) into the caller's buffer in `outputs`, whose shape must match. */
COHORT_API cohort_status cohort_trainer_evaluate(cohort_trainer* trainer, const cohort_tensor_ref* inputs,
                                                 int32_t num_inputs, cohort_tensor_ref* outputs,
                                                 int32_t num_outputs);

/* Copies a parameter's current values out / in (by name; f32 buffers convert to/from bf16). */
COHORT_API cohort_status cohort_trainer_get_parameter(cohort_trainer* trainer, cohort_tensor_ref* parameter);
COHORT_API cohort_status cohort_trainer_set_parameter(cohort_trainer* trainer, const cohort_tensor_ref* parameter);

typedef struct cohort_trainer_stats {
  size_t size;                   /* sizeof(cohort_trainer_stats), set by the caller */
  int64_t step;                  /* completed training steps */
  double learning_rate;          /* used by the last step */
  double grad_norm;              /* global gradient L2 norm of the last step (before clipping) */
  int64_t peak_activation_bytes; /* largest live activation memory of any step so far */
  int64_t parameter_bytes;       /* parameters + gradients + optimizer state */
  double last_step_seconds;
} cohort_trainer_stats;
COHORT_API cohort_status cohort_trainer_get_stats(const cohort_trainer* trainer, cohort_trainer_stats* stats_out);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_COHORT_H_ */
