/*
 * cohort.i — the SWIG interface of the Python binding: capi/include/cohort/cohort.h wrapped as
 * the low-level module cohort.capi (extension cohort._capi), which the package's Python files
 * turn into classes.
 *
 * Conventions of the generated functions:
 *  - A cohort_status other than COHORT_OK raises the cohort.Error subclass registered for it
 *    (src/tensor_args.c), carrying cohort_last_error(); on OK the function returns its outputs
 *    (the *_out arguments, which disappear from the Python signature), or None.
 *  - Handles are opaque pointer objects that own nothing: the Python classes destroy them.
 *    None passes NULL, so a closed Python object reaches cohort as a NULL handle.
 *  - Arrays (shapes, ids, attribute lists) are any Python sequence.
 *  - The GIL is released around every C call (threads="1"); the pyc_* functions, which work on
 *    Python objects, release it themselves around their cohort call.
 *  - Calls that take caller buffers (steps, evaluation, parameters, batches, collectives) are
 *    replaced by the pyc_* functions of src/pycohort.h.
 */
%module(package="cohort", threads="1") capi

%{
#include <stdlib.h>
#include <string.h>
#include <cohort/cohort.h>
#include "pycohort.h"

/* A sequence of numbers as a new array of `count` elements; None gives NULL and count -1.
 * Returns 0, or -1 with a TypeError set. */
#define PYC_SEQUENCE_READER(NAME, TYPE, CONVERT)                                                \
  static int NAME(PyObject* obj, TYPE** values, int32_t* count) {                               \
    *values = NULL;                                                                             \
    *count = -1;                                                                                \
    if (obj == Py_None) return 0;                                                               \
    PyObject* seq = PySequence_Fast(obj, "expected a sequence of numbers");                     \
    if (seq == NULL) return -1;                                                                 \
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);                                               \
    if (n > INT32_MAX) n = INT32_MAX;                                                           \
    *values = (TYPE*)PyMem_Malloc(sizeof(TYPE) * (size_t)(n > 0 ? n : 1));                      \
    if (*values == NULL) {                                                                      \
      Py_DECREF(seq);                                                                           \
      PyErr_NoMemory();                                                                         \
      return -1;                                                                                \
    }                                                                                           \
    for (Py_ssize_t i = 0; i < n; ++i) {                                                        \
      (*values)[i] = (TYPE)CONVERT(PySequence_Fast_GET_ITEM(seq, i));                           \
      if (PyErr_Occurred()) {                                                                   \
        Py_DECREF(seq);                                                                         \
        return -1;                                                                              \
      }                                                                                         \
    }                                                                                           \
    *count = (int32_t)n;                                                                        \
    Py_DECREF(seq);                                                                             \
    return 0;                                                                                   \
  }
PYC_SEQUENCE_READER(pyc_read_int64s, int64_t, PyLong_AsLongLong)
PYC_SEQUENCE_READER(pyc_read_int32s, int32_t, PyLong_AsLong)
PYC_SEQUENCE_READER(pyc_read_doubles, double, PyFloat_AsDouble)
%}

%include <stdint.i>
%include <typemaps.i>

/* ---- statuses ----------------------------------------------------------------------------- */

%typemap(out) cohort_status {
  if ($1 != COHORT_OK) {
    pyc_raise($1);
    SWIG_fail;
  }
  $result = SWIG_Py_Void();
}

/* pyc_* functions return NULL with an exception set on failure. */
%typemap(out) pyc_work* {
  if ($1 == NULL) {
    if (PyErr_Occurred()) SWIG_fail;
    $result = SWIG_Py_Void();
  } else {
    $result = SWIG_NewPointerObj($1, $descriptor(pyc_work*), 0);
  }
}

/* ---- outputs ------------------------------------------------------------------------------ */

/* A created handle, returned as a pointer object that does not own it (None for NULL). */
%define PYC_HANDLE_OUT(TYPE)
%typemap(in, numinputs=0) TYPE** (TYPE* handle = NULL) {
  $1 = &handle;
}
%typemap(argout) TYPE** {
  $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj(*$1, $descriptor(TYPE*), 0));
}
%enddef
PYC_HANDLE_OUT(cohort_attrs)
PYC_HANDLE_OUT(cohort_graph)
PYC_HANDLE_OUT(cohort_optimizer)
PYC_HANDLE_OUT(cohort_trainer)
PYC_HANDLE_OUT(cohort_dataset)
PYC_HANDLE_OUT(cohort_sampler)
PYC_HANDLE_OUT(cohort_comm)
PYC_HANDLE_OUT(cohort_plan)

%apply int32_t* OUTPUT { int32_t* id_out, int32_t* rank_out, int32_t* size_out, int32_t* num_values_out,
                         int32_t* num_nodes_out, int32_t* num_parameters_out };
%apply int64_t* OUTPUT { int64_t* num_parameter_elements_out, int64_t* examples_out, int64_t* epoch_out,
                         int64_t* index_out, int64_t* value_out };

/* cohort_device_usable: returns [usable (0 or 1), reason str ("" when usable)]. */
%apply int32_t* OUTPUT { int32_t* usable_out };
%apply int32_t* OUTPUT { int32_t* averaged_out };
%typemap(in, numinputs=0) (char* reason_out, size_t reason_capacity) (char reason[1024]) {
  reason[0] = '\0';
  $1 = reason;
  $2 = sizeof reason;
}
%typemap(argout) (char* reason_out, size_t reason_capacity) {
  PyObject* reason_str = PyUnicode_DecodeUTF8($1, (Py_ssize_t)strlen($1), "replace");
  if (reason_str == NULL) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, reason_str);
}

/* cohort_graph_value_shape: returns [shape tuple, dtype]. */
%typemap(in, numinputs=0) (int64_t* shape_out, int32_t max_rank, int32_t* rank_out) (int64_t dims[8], int32_t rank = 0) {
  $1 = dims;
  $2 = 8;
  $3 = &rank;
}
%typemap(argout) (int64_t* shape_out, int32_t max_rank, int32_t* rank_out) {
  int32_t n = *$3 < 8 ? *$3 : 8;
  PyObject* dims_tuple = PyTuple_New(n);
  if (dims_tuple == NULL) SWIG_fail;
  for (int32_t i = 0; i < n; ++i) PyTuple_SET_ITEM(dims_tuple, i, PyLong_FromLongLong($1[i]));
  $result = SWIG_Python_AppendOutput($result, dims_tuple);
}
%typemap(in, numinputs=0) cohort_dtype* dtype_out (cohort_dtype dtype = COHORT_F32) {
  $1 = &dtype;
}
%typemap(argout) cohort_dtype* dtype_out {
  $result = SWIG_Python_AppendOutput($result, PyLong_FromLong((long)*$1));
}

/* cohort_graph_add_op: the ids of the operator's outputs, as a list. */
%typemap(in, numinputs=0) (int32_t* outputs_out, int32_t max_outputs, int32_t* num_outputs_out)
    (int32_t ids[64], int32_t count = 0) {
  $1 = ids;
  $2 = 64;
  $3 = &count;
}
%typemap(argout) (int32_t* outputs_out, int32_t max_outputs, int32_t* num_outputs_out) {
  int32_t n = *$3 < $2 ? *$3 : $2;
  PyObject* ids_list = PyList_New(n);
  if (ids_list == NULL) SWIG_fail;
  for (int32_t i = 0; i < n; ++i) PyList_SET_ITEM(ids_list, i, PyLong_FromLong($1[i]));
  $result = SWIG_Python_AppendOutput($result, ids_list);
}

/* Stats structs come back as dicts (the caller's size field is set here). */
%typemap(in, numinputs=0) cohort_trainer_stats* stats_out (cohort_trainer_stats stats) {
  memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  $1 = &stats;
}
%typemap(argout) cohort_trainer_stats* stats_out {
  $result = SWIG_Python_AppendOutput($result, Py_BuildValue(
      "{s:L,s:d,s:d,s:L,s:L,s:d,s:i,s:d,s:d}", "step", (long long)$1->step, "learning_rate", $1->learning_rate,
      "grad_norm", $1->grad_norm, "peak_activation_bytes", (long long)$1->peak_activation_bytes,
      "parameter_bytes", (long long)$1->parameter_bytes, "last_step_seconds", $1->last_step_seconds,
      "micro_batches", (int)$1->micro_batches, "pipeline_busy_seconds", $1->pipeline_busy_seconds,
      "pipeline_bubble_fraction", $1->pipeline_bubble_fraction));
}
%typemap(in, numinputs=0) cohort_parallel_stats* stats_out (cohort_parallel_stats stats) {
  memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  $1 = &stats;
}
%typemap(argout) cohort_parallel_stats* stats_out {
  $result = SWIG_Python_AppendOutput($result, Py_BuildValue(
      "{s:L,s:d,s:d,s:d,s:d,s:d,s:d,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:d,s:d,s:L,s:L,s:L,s:d,s:L,s:L,s:d,s:d}",
      "rounds", (long long)$1->rounds,
      "compute_seconds", $1->compute_seconds, "comm_seconds", $1->comm_seconds,
      "wait_seconds", $1->wait_seconds, "hidden_fraction", $1->hidden_fraction,
      "last_staleness_scale", $1->last_staleness_scale, "last_momentum_norm", $1->last_momentum_norm,
      "buckets", (long long)$1->buckets, "parameter_bytes", (long long)$1->parameter_bytes,
      "gradient_bytes", (long long)$1->gradient_bytes,
      "optimizer_state_bytes", (long long)$1->optimizer_state_bytes,
      "parameter_gathers", (long long)$1->parameter_gathers,
      "parameter_gathers_prefetched", (long long)$1->parameter_gathers_prefetched,
      "peak_parameter_bytes", (long long)$1->peak_parameter_bytes,
      "tau", (long long)$1->tau, "overlap_steps", (long long)$1->overlap_steps,
      "outer_comm_seconds", $1->outer_comm_seconds, "step_seconds", $1->step_seconds,
      "outer_fragments", (long long)$1->outer_fragments, "outer_syncs", (long long)$1->outer_syncs,
      "outer_sync_bytes", (long long)$1->outer_sync_bytes, "outer_hidden_fraction", $1->outer_hidden_fraction,
      "shard_group", (long long)$1->shard_group, "gradient_sync_bytes", (long long)$1->gradient_sync_bytes,
      "grad_keep", $1->grad_keep, "outer_shared_wait_seconds", $1->outer_shared_wait_seconds));
}

/* ---- arrays in ---------------------------------------------------------------------------- */

%define PYC_SEQUENCE_IN(TYPE, READER)
%typemap(in) (const TYPE* SEQUENCE, int32_t COUNT) (TYPE* values = NULL, int32_t count = -1) {
  if (READER($input, &values, &count) < 0) SWIG_fail;
  $1 = values;
  $2 = count;
}
%typemap(freearg) (const TYPE* SEQUENCE, int32_t COUNT) {
  PyMem_Free(values$argnum);
}
%enddef
PYC_SEQUENCE_IN(int64_t, pyc_read_int64s)
PYC_SEQUENCE_IN(int32_t, pyc_read_int32s)
PYC_SEQUENCE_IN(double, pyc_read_doubles)
%apply (const int64_t* SEQUENCE, int32_t COUNT) { (const int64_t* shape, int32_t rank),
                                                   (const int64_t* values, int32_t count),
                                                   (const int64_t* hidden, int32_t num_hidden),
                                                   (const int64_t* widths, int32_t num_stages) };
%apply (const int32_t* SEQUENCE, int32_t COUNT) { (const int32_t* inputs, int32_t num_inputs) };
%apply (const double* SEQUENCE, int32_t COUNT) { (const double* values, int32_t count) };

/* ---- what the pyc_* functions replace ----------------------------------------------------- */

%ignore cohort_set_log_callback;
%ignore cohort_log_fn;
%ignore cohort_op_list;
%ignore cohort_op_describe;
%ignore cohort_op_describe_attr;
%ignore cohort_op_info;
%ignore cohort_op_attr_info;
%ignore cohort_tensor_ref;
%ignore cohort_trainer_step;
%ignore cohort_trainer_evaluate;
%ignore cohort_trainer_get_parameter;
%ignore cohort_trainer_set_parameter;
%ignore cohort_dataset_next_batch;
%ignore cohort_comm_status;
/* Registered memory: pyc_comm_alloc returns a cohort.RegisteredBuffer whose free() calls
 * cohort_comm_mem_free once no export of it is alive (src/registered.c). */
%ignore cohort_comm_mem_alloc;
%ignore cohort_comm_mem_free;
%ignore cohort_comm_all_reduce;
%ignore cohort_comm_reduce_scatter;
%ignore cohort_comm_all_gather;
%ignore cohort_comm_broadcast;
%ignore cohort_comm_all_to_all;
%ignore cohort_comm_barrier;
%ignore cohort_comm_send;
%ignore cohort_comm_recv;
%ignore cohort_comm_probe_links;
%ignore cohort_work_wait;
%ignore cohort_work_test;
%ignore cohort_work_destroy;
%ignore cohort_graph_create_mlp;
%ignore cohort_graph_create_cnn;
%ignore cohort_trainer_stats;
%ignore cohort_parallel_stats;
/* A string the plan copies: passed to pyc_plan_create for the call's duration, not stored in
 * the SWIG struct (whose setter would keep a copy nobody frees). */
%ignore cohort_plan_options::pipeline_cuts;
%ignore cohort_plan_options::pipeline_keep;
%ignore cohort_plan_create;
%ignore cohort_trainer_pipeline_stages;
%ignore cohort_plan_choose;
%ignore cohort_model_mlp_options::hidden;
%ignore cohort_model_mlp_options::num_hidden;
%ignore cohort_model_cnn_options::widths;
%ignore cohort_model_cnn_options::num_stages;

%feature("nothreadallow") pyc_set_error_classes;
%feature("nothreadallow") pyc_trainer_step;
%feature("nothreadallow") pyc_trainer_evaluate;
%feature("nothreadallow") pyc_trainer_get_parameter;
%feature("nothreadallow") pyc_trainer_set_parameter;
%feature("nothreadallow") pyc_dataset_next_batch;
%feature("nothreadallow") pyc_comm_collective;
%feature("nothreadallow") pyc_work_wait;
%feature("nothreadallow") pyc_work_test;
%feature("nothreadallow") pyc_work_destroy;
%feature("nothreadallow") pyc_comm_status;
%feature("nothreadallow") pyc_comm_alloc;
%feature("nothreadallow") pyc_registered_release;
%feature("nothreadallow") pyc_registered_type;
%feature("nothreadallow") pyc_set_log_callback;
%feature("nothreadallow") pyc_op_list;
%feature("nothreadallow") pyc_op_describe;

#define COHORT_API
%include <cohort/cohort.h>
%include "pycohort.h"

/* The models whose options carry an array pointer: the array comes as a separate sequence
 * (None keeps the default's). */
%inline %{
cohort_status pyc_graph_create_mlp(const cohort_model_mlp_options* options, const int64_t* hidden,
                                   int32_t num_hidden, cohort_graph** graph_out) {
  cohort_model_mlp_options o = options ? *options : cohort_model_mlp_options_default();
  if (num_hidden >= 0) {
    o.hidden = hidden;
    o.num_hidden = num_hidden;
  }
  return cohort_graph_create_mlp(&o, graph_out);
}

/* cohort_plan_create with pipeline_cuts and pipeline_keep given apart (None: NULL — the
 * estimator's cuts, no cut compressed). */
cohort_status pyc_plan_create(const cohort_plan_options* options, const char* pipeline_cuts, const char* pipeline_keep,
                              cohort_plan** plan_out) {
  cohort_plan_options o = options ? *options : cohort_plan_options_default();
  o.pipeline_cuts = pipeline_cuts;
  o.pipeline_keep = pipeline_keep;
  return cohort_plan_create(&o, plan_out);
}

/* cohort_trainer_pipeline_stages as a str (rank 0's description of the stages; "" elsewhere). */
%}
%typemap(in, numinputs=0) (char** text_out) (char* text = NULL) { $1 = &text; }
%typemap(argout) (char** text_out) {
  PyObject* s = PyUnicode_FromString(*$1 ? *$1 : "");
  free(*$1);
  if (s == NULL) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, s);
}
%typemap(freearg) (char** text_out) { }
%inline %{
cohort_status pyc_trainer_pipeline_stages(const cohort_trainer* trainer, char** text_out) {
  size_t needed = 0;
  *text_out = NULL;
  (void)cohort_trainer_pipeline_stages(trainer, NULL, 0, &needed); /* the size; 0 when it failed */
  char* text = (char*)malloc(needed > 0 ? needed : 1);
  if (text == NULL) return COHORT_ERR_OUT_OF_MEMORY;
  cohort_status st = cohort_trainer_pipeline_stages(trainer, text, needed > 0 ? needed : 1, NULL);
  if (st != COHORT_OK) {
    free(text);
    return st;
  }
  *text_out = text;
  return COHORT_OK;
}

/* cohort_plan_choose with pipeline_cuts given apart (ignored: a layout field) and the report as
 * a str. A collective: the report cannot be asked for again, so the buffer holds 256 KiB (the
 * text is cut there; the report of a few ranked plans is a few KiB). */
cohort_status pyc_plan_choose(const cohort_plan_options* options, const cohort_graph* global_graph,
                              const cohort_optimizer* optimizer, const cohort_trainer_options* trainer_options,
                              cohort_comm* comm, cohort_plan_options* chosen_out, char** text_out) {
  const size_t capacity = (size_t)1 << 18;
  cohort_plan_options o = options ? *options : cohort_plan_options_default();
  o.pipeline_cuts = NULL;
  o.pipeline_keep = NULL;
  *text_out = NULL;
  char* text = (char*)malloc(capacity);
  if (text == NULL) return COHORT_ERR_OUT_OF_MEMORY;
  cohort_status st = cohort_plan_choose(&o, global_graph, optimizer, trainer_options, comm, chosen_out, text,
                                        capacity, NULL);
  if (st != COHORT_OK) {
    free(text);
    return st;
  }
  *text_out = text;
  return COHORT_OK;
}

%}

/* cohort_comm_probe_links: returns (bandwidth, latency, report) — two size x size nested lists
 * (bytes per second, seconds; symmetric, diagonal 0) and the matrix as text. */
%{
typedef struct pyc_links {
  double* matrices; /* bandwidth then latency, ranks * ranks each */
  int32_t ranks;
  char* text;
} pyc_links;

static PyObject* pyc_matrix_list(const double* m, int32_t n) {
  PyObject* rows = PyList_New(n);
  for (int32_t i = 0; rows != NULL && i < n; ++i) {
    PyObject* row = PyList_New(n);
    if (row == NULL) {
      Py_CLEAR(rows);
      break;
    }
    PyList_SET_ITEM(rows, i, row);
    for (int32_t j = 0; j < n; ++j) {
      PyObject* x = PyFloat_FromDouble(m[(size_t)i * (size_t)n + (size_t)j]);
      if (x == NULL) {
        Py_CLEAR(rows);
        return NULL;
      }
      PyList_SET_ITEM(row, j, x);
    }
  }
  return rows;
}
%}
%typemap(in, numinputs=0) pyc_links* links_out (pyc_links links) {
  memset(&links, 0, sizeof links);
  $1 = &links;
}
%typemap(argout) pyc_links* links_out {
  size_t cells = (size_t)$1->ranks * (size_t)$1->ranks;
  PyObject* bandwidth = pyc_matrix_list($1->matrices, $1->ranks);
  PyObject* latency = bandwidth ? pyc_matrix_list($1->matrices + cells, $1->ranks) : NULL;
  PyObject* report = latency ? PyUnicode_DecodeUTF8($1->text, (Py_ssize_t)strlen($1->text), "replace") : NULL;
  PyObject* links_tuple = report ? PyTuple_Pack(3, bandwidth, latency, report) : NULL;
  Py_XDECREF(bandwidth);
  Py_XDECREF(latency);
  Py_XDECREF(report);
  if (links_tuple == NULL) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, links_tuple);
}
%typemap(freearg) pyc_links* links_out { /* $1 is set before any argument is converted */
  free($1->matrices);
  free($1->text);
}
%inline %{
cohort_status pyc_comm_probe_links(cohort_comm* comm, pyc_links* links_out) {
  int32_t rank = 0, size = 0;
  if (cohort_comm_rank(comm, &rank, &size) != COHORT_OK) /* the probe's own error, naming it */
    return cohort_comm_probe_links(comm, NULL, NULL, 0, NULL, 0, NULL);
  const size_t cells = (size_t)size * (size_t)size;
  /* A collective: the report cannot be asked for twice, so the buffer holds the whole text
   * (about 18 characters a cell) with room to spare; a longer one is cut. */
  const size_t capacity = 4096 + 32 * (cells + (size_t)size);
  links_out->matrices = (double*)calloc(2 * cells, sizeof(double));
  links_out->text = (char*)calloc(capacity, 1);
  if (links_out->matrices == NULL || links_out->text == NULL) return COHORT_ERR_OUT_OF_MEMORY;
  cohort_status st = cohort_comm_probe_links(comm, links_out->matrices, links_out->matrices + cells, cells,
                                             links_out->text, capacity, NULL);
  if (st == COHORT_OK) links_out->ranks = size;
  return st;
}

cohort_status pyc_graph_create_cnn(const cohort_model_cnn_options* options, const int64_t* widths,
                                   int32_t num_stages, cohort_graph** graph_out) {
  cohort_model_cnn_options o = options ? *options : cohort_model_cnn_options_default();
  if (num_stages >= 0) {
    o.widths = widths;
    o.num_stages = num_stages;
  }
  return cohort_graph_create_cnn(&o, graph_out);
}

%}
