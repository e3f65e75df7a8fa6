/*
 * pycohort.h — the hand-written C half of the Python binding: everything SWIG's stock typemaps
 * cannot do right. cohort.i wraps the pyc_* functions of the first section; the second section
 * is shared by tensor_args.c, calls.c, collectives.c and registered.c only.
 *
 * The one thing to know: a caller's buffer is held (Py_buffer) for exactly as long as cohort may
 * touch it — the call for synchronous functions, until completion for asynchronous collectives
 * (pyc_work owns the views then) — and the GIL is released around every call that can block.
 */
#ifndef COHORT_BINDINGS_PYTHON_PYCOHORT_H_
#define COHORT_BINDINGS_PYTHON_PYCOHORT_H_

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cohort/cohort.h>

/* ---- wrapped by SWIG ---------------------------------------------------------------------- */

/* Registers the exception classes: classes[s] is raised for status s, classes[0] (cohort.Error)
 * for a status the tuple does not cover. Called once by cohort/_errors.py. */
PyObject* pyc_set_error_classes(PyObject* classes);

/* The buffers of step, evaluate and the parameter calls. A value is any object with the buffer
 * protocol, or a tuple (data, dtype, shape) (cohort.Tensor) whose dtype / shape (None: inferred)
 * override what the buffer says. `declared` maps a graph value's name to (dtype, shape) as the
 * graph declares it, or None when unknown; a flat (1-D) buffer takes the declared shape, with
 * dimension 0 following from its length, and untyped memory (bytes, bytearray) takes the declared
 * dtype; any other buffer brings its element type in its format, which must fit. */
PyObject* pyc_trainer_step(cohort_trainer* trainer, PyObject* inputs, PyObject* declared);
/* Returns a dict name -> buffer: the caller's buffer where `outputs` gives one for a name,
 * otherwise a new memoryview shaped like the declared output (dimension 0 = the input batch). */
PyObject* pyc_trainer_evaluate(cohort_trainer* trainer, PyObject* inputs, PyObject* outputs, PyObject* declared);
/* `out` None allocates an f32 memoryview of the declared shape; returns the buffer written. */
PyObject* pyc_trainer_get_parameter(cohort_trainer* trainer, PyObject* name, PyObject* out, PyObject* declared);
PyObject* pyc_trainer_set_parameter(cohort_trainer* trainer, PyObject* name, PyObject* value, PyObject* declared);
/* batch > 0: dimension 0 of both buffers; 0: each buffer's own shape, a flat one taking its
 * batch from the other buffer's dimension 0 (or, with both flat, from the labels' length). */
PyObject* pyc_dataset_next_batch(cohort_dataset* dataset, cohort_sampler* sampler, PyObject* features, PyObject* labels,
                                 int64_t batch);

/* Collectives. kind is one of PYC_* below; `in` and `out` follow the C call's roles (None where
 * the call has no such buffer); dtype < 0 infers it from the buffers. With async_op the result
 * is a pyc_work that holds both buffers until the operation completes; otherwise the call waits
 * (without the GIL) and returns NULL with no error set. */
enum {
  PYC_ALL_REDUCE = 0,
  PYC_REDUCE_SCATTER = 1,
  PYC_ALL_GATHER = 2,
  PYC_BROADCAST = 3,
  PYC_ALL_TO_ALL = 4,
  PYC_BARRIER = 5,
  PYC_SEND = 6,
  PYC_RECV = 7
};
typedef struct pyc_work pyc_work;
pyc_work* pyc_comm_collective(cohort_comm* comm, int kind, PyObject* in, PyObject* out, int dtype, int op, int peer,
                              int async_op, PyObject* keep);
/* None when finished (the buffers are released then); raises the operation's failure, or
 * cohort.TimeoutError when timeout_ms passes first (the work stays valid). */
PyObject* pyc_work_wait(pyc_work* work, int64_t timeout_ms);
/* True when finished successfully, False while pending; raises the operation's failure. */
PyObject* pyc_work_test(pyc_work* work);
/* Waits for an operation still in flight (bounded by the communicator's timeout), then frees
 * the work and releases its buffers. Accepts NULL.
 * `keep` (a list, the Comm's): once the communicator has failed, a synchronous call that fails
 * and pyc_work_destroy append the buffers' views to it instead of releasing them (except
 * registered memory, which the communicator keeps); the Comm empties it after destroying the
 * communicator. A send to a rank that froze cannot be cancelled, and that rank may still read
 * the buffer when it wakes (cohort_work_wait). */
PyObject* pyc_work_destroy(pyc_work* work, PyObject* keep);

/* Registered memory (src/registered.c). pyc_comm_alloc allocates `count` elements of `dtype` (a
 * cohort.DType) with cohort_comm_mem_alloc — collective, without the GIL — zeroes them and returns
 * a cohort.RegisteredBuffer that keeps `owner` (the cohort.Comm) alive and exports the memory as a
 * flat array ('f', 'i', 'q'; bf16 and f16 as 'H'). pyc_registered_release, called before `comm`
 * is destroyed, raises BufferError (naming `fn`) while any of its buffers has an export, and
 * otherwise marks them all released, so that no export reaches the memory the destroy unmaps. */
PyObject* pyc_comm_alloc(cohort_comm* comm, PyObject* owner, int64_t count, PyObject* dtype);
PyObject* pyc_registered_release(cohort_comm* comm, const char* fn);
/* The type object cohort.RegisteredBuffer. */
PyObject* pyc_registered_type(void);

/* (status, failed_rank, message) of cohort_comm_status; never raises for the sticky failure. */
PyObject* pyc_comm_status(cohort_comm* comm);
/* fn(level, message) receives every log line (None restores stderr). fn is kept alive for the
 * life of the process: a cohort thread may still be about to call an old one. */
PyObject* pyc_set_log_callback(PyObject* fn);
/* The public operator names as a list of str. */
PyObject* pyc_op_list(void);
/* cohort_op_describe and every cohort_op_describe_attr of `op` as a tuple (name, input names,
 * min_inputs, output names, outputs_attr or None, ((attr name, cohort_attr_type, required,
 * default or None), ...)); list defaults are tuples. */
PyObject* pyc_op_describe(const char* op);

/* ---- shared by tensor_args.c, calls.c, collectives.c and registered.c ------------------------ */
#ifndef SWIG

/* One caller buffer seen as a cohort tensor. */
typedef struct pyc_tensor {
  Py_buffer view;
  int held;     /* view must be released */
  int writable; /* cohort writes it: a copy is copied back on release */
  int copied;   /* data is a C-contiguous copy of a strided view */
  void* data;
  size_t bytes;
  cohort_dtype dtype;
  int32_t rank;
  int64_t shape[8];
} pyc_tensor;

/* Gets a view of `value` (see above), resolving dtype and shape with `declared` (None or
 * (dtype, shape)). `fn` and `what` name the call and the buffer in messages. Returns 0, or -1
 * with a cohort.Error set (nothing held then). */
int pyc_tensor_acquire(pyc_tensor* t, PyObject* value, PyObject* declared, int writable, const char* fn,
                       const char* what);
/* Copies a strided view's copy back (writable tensors) and releases the view. Idempotent. */
void pyc_tensor_release(pyc_tensor* t);
/* The tensor as a cohort_tensor_ref bound to `name` (borrowed; valid while t is held). */
void pyc_tensor_ref(const pyc_tensor* t, const char* name, cohort_tensor_ref* ref);
/* A zeroed, writable memoryview of dtype and shape (bf16 and f16 as raw uint16 'H'). */
PyObject* pyc_alloc(cohort_dtype dtype, const int64_t* shape, int32_t rank);
/* Parses `declared` (None or (dtype, shape)): returns 1 and fills the outputs, 0 for None, -1
 * with an exception set for anything else. */
int pyc_parse_declared(PyObject* declared, cohort_dtype* dtype, int64_t* shape, int32_t* rank);

/* 0 unless `value` is a cohort.RegisteredBuffer that was freed or released: then -1 with
 * InvalidHandleError set, naming `fn` and `what`. */
int pyc_registered_check(PyObject* value, const char* fn, const char* what);
/* The cohort_dtype of a cohort.RegisteredBuffer, or -1 for any other object. */
int pyc_registered_dtype(PyObject* value);

/* "f32", "bf16", "i32", "i64", "f16": cohort's name for a dtype, as its messages spell it. */
const char* pyc_dtype_name(cohort_dtype dtype);

/* Raises the class registered for `status` with cohort_last_error() as message; returns NULL. */
PyObject* pyc_raise(cohort_status status);
/* Raises the class for `status` with a message of our own (PyUnicode_FromFormat syntax). */
PyObject* pyc_raise_msg(cohort_status status, const char* format, ...);

#endif /* SWIG */

#endif /* COHORT_BINDINGS_PYTHON_PYCOHORT_H_ */
