/*
 * collectives.c — communicator collectives over Python buffers, and the work handles that own
 * those buffers until the operation completes.
 *
 * Counts are derived from the buffers (elements = bytes / dtype size) and checked against the
 * communicator's size before anything is issued: the C calls take bare pointers, so a buffer too
 * small for its role would otherwise be overrun by a peer's data.
 */
#include "pycohort.h"

#include <string.h>

struct pyc_work {
  cohort_work* work;
  cohort_comm* comm;
  pyc_tensor tensors[2];
  int count;
};

static const char* const kNames[] = {
    "cohort_comm_all_reduce", "cohort_comm_reduce_scatter", "cohort_comm_all_gather", "cohort_comm_broadcast",
    "cohort_comm_all_to_all", "cohort_comm_barrier",        "cohort_comm_send",       "cohort_comm_recv"};

static void work_release(pyc_work* w) {
  for (int i = 0; i < w->count; ++i) pyc_tensor_release(&w->tensors[i]);
  w->count = 0;
}

/* The views of an operation that ended after its communicator failed, in a capsule on the
 * Comm's keep list until the communicator is destroyed: a send to a rank that froze cannot be
 * cancelled, and that rank may read the buffer when it wakes (cohort_work_wait). */
typedef struct pyc_kept {
  pyc_tensor tensors[2];
  int count;
} pyc_kept;

static const char kKeptName[] = "cohort.kept_buffers";

static void kept_destroy(PyObject* capsule) {
  pyc_kept* k = PyCapsule_GetPointer(capsule, kKeptName);
  if (k == NULL) return;
  for (int i = 0; i < k->count; ++i) pyc_tensor_release(&k->tensors[i]);
  PyMem_Free(k);
}

/* Releases w's views, or moves them onto `keep` (a list) when w's communicator has failed.
 * Registered memory is left out: the communicator keeps it mapped until it is destroyed, and a
 * view held on it would make Comm.close refuse. A failed operation's results are undefined, so a
 * strided buffer's copy is not copied back. Keeps any exception already set. */
static void work_release_or_keep(pyc_work* w, PyObject* keep) {
  int32_t failed_rank = -1;
  cohort_status status = COHORT_OK;
  if (w->count > 0 && w->comm != NULL && PyList_Check(keep)) {
    Py_BEGIN_ALLOW_THREADS
      status = cohort_comm_status(w->comm, &failed_rank);
    Py_END_ALLOW_THREADS
  }
  if (status == COHORT_OK) {
    work_release(w);
    return;
  }
  PyObject *type, *value, *trace;
  PyErr_Fetch(&type, &value, &trace);
  pyc_kept* k = PyMem_Calloc(1, sizeof *k);
  for (int i = 0; k != NULL && i < w->count; ++i) {
    pyc_tensor* t = &w->tensors[i];
    if (!t->held || pyc_registered_dtype(t->view.obj) >= 0) continue;
    t->writable = 0;
    k->tensors[k->count++] = *t;
    t->held = 0; /* now the capsule's */
    t->copied = 0;
  }
  if (k != NULL && k->count > 0) {
    PyObject* capsule = PyCapsule_New(k, kKeptName, kept_destroy);
    if (capsule == NULL || PyList_Append(keep, capsule) < 0) {
      /* No memory for the bookkeeping: the views stay held for the life of the process. */
      PyErr_Clear();
      if (capsule != NULL) PyCapsule_SetDestructor(capsule, NULL);
    }
    Py_XDECREF(capsule);
  } else {
    PyMem_Free(k);
  }
  work_release(w); /* whatever was not kept */
  PyErr_Restore(type, value, trace);
}

/* The C call for `kind`. Runs without the GIL. */
static cohort_status issue(int kind, cohort_comm* comm, const void* in, void* out, size_t count, cohort_dtype dtype,
                           int op, int peer, cohort_work** work_out) {
  const cohort_reduce_op reduce = (cohort_reduce_op)op;
  switch (kind) {
    case PYC_ALL_REDUCE: return cohort_comm_all_reduce(comm, in, out, count, dtype, reduce, work_out);
    case PYC_REDUCE_SCATTER: return cohort_comm_reduce_scatter(comm, in, out, count, dtype, reduce, work_out);
    case PYC_ALL_GATHER: return cohort_comm_all_gather(comm, in, out, count, dtype, work_out);
    case PYC_BROADCAST: return cohort_comm_broadcast(comm, out, count, dtype, peer, work_out);
    case PYC_ALL_TO_ALL: return cohort_comm_all_to_all(comm, in, out, count, dtype, work_out);
    case PYC_BARRIER: return cohort_comm_barrier(comm, work_out);
    case PYC_SEND: return cohort_comm_send(comm, in, count, dtype, peer, work_out);
    default: return cohort_comm_recv(comm, out, count, dtype, peer, work_out);
  }
}

/* Views `value` for the collective (an explicit dtype >= 0 overrides the buffer's format; a
 * RegisteredBuffer brings its own, bf16 and f16 included). */
static int acquire(pyc_tensor* t, PyObject* value, int dtype, int writable, const char* fn, const char* what) {
  if (dtype < 0) dtype = pyc_registered_dtype(value);
  if (dtype < 0) return pyc_tensor_acquire(t, value, Py_None, writable, fn, what);
  PyObject* typed = Py_BuildValue("(OiO)", value, dtype, Py_None);
  if (typed == NULL) return -1;
  const int rc = pyc_tensor_acquire(t, typed, Py_None, writable, fn, what);
  Py_DECREF(typed);
  return rc;
}

/* Elements of in and out, checked for `kind` at world `size`; the C count to *count. */
static int check_counts(int kind, const char* fn, int64_t size, int64_t n_in, int64_t n_out, size_t* count) {
  int64_t c = 0;
  const char* rule = NULL;
  switch (kind) {
    case PYC_ALL_REDUCE:
      c = n_out;
      if (n_in != n_out) rule = "in and out must hold the same number of elements";
      break;
    case PYC_REDUCE_SCATTER:
      c = n_out;
      if (n_in != size * n_out) rule = "in must hold size x (elements of out)";
      break;
    case PYC_ALL_GATHER:
      c = n_in;
      if (n_out != size * n_in) rule = "out must hold size x (elements of in)";
      break;
    case PYC_ALL_TO_ALL:
      c = n_in / size;
      if (n_in != n_out || n_in % size != 0) rule = "in and out must hold the same multiple of size elements";
      break;
    case PYC_SEND: c = n_in; break;
    case PYC_BROADCAST:
    case PYC_RECV: c = n_out; break;
    default: break;
  }
  if (rule != NULL) {
    pyc_raise_msg(COHORT_ERR_SHAPE_MISMATCH, "%s: in has %lld elements, out %lld, world size %lld: %s", fn,
                  (long long)n_in, (long long)n_out, (long long)size, rule);
    return -1;
  }
  *count = (size_t)c;
  return 0;
}

/* Acquires the buffers of `kind` into w; in-place (in is out) shares one writable view. */
static int acquire_buffers(pyc_work* w, int kind, PyObject* in, PyObject* out, int dtype, const char* fn,
                           pyc_tensor** tin, pyc_tensor** tout) {
  const int needs_in = kind == PYC_ALL_REDUCE || kind == PYC_REDUCE_SCATTER || kind == PYC_ALL_GATHER ||
                       kind == PYC_ALL_TO_ALL || kind == PYC_SEND;
  const int needs_out = needs_in ? kind != PYC_SEND : kind != PYC_BARRIER;
  *tin = *tout = NULL;
  if (needs_in && needs_out && in == out) {
    if (acquire(&w->tensors[w->count], in, dtype, 1, fn, "buf") < 0) return -1;
    *tin = *tout = &w->tensors[w->count++];
    return 0;
  }
  if (needs_in) {
    if (acquire(&w->tensors[w->count], in, dtype, 0, fn, "in") < 0) return -1;
    *tin = &w->tensors[w->count++];
  }
  if (needs_out) {
    if (acquire(&w->tensors[w->count], out, dtype, 1, fn, kind == PYC_BROADCAST ? "buf" : "out") < 0) return -1;
    *tout = &w->tensors[w->count++];
  }
  if (*tin && *tout && (*tin)->dtype != (*tout)->dtype) {
    pyc_raise_msg(COHORT_ERR_SHAPE_MISMATCH, "%s: in holds %s elements but out %s", fn, pyc_dtype_name((*tin)->dtype),
                  pyc_dtype_name((*tout)->dtype));
    return -1;
  }
  return 0;
}

pyc_work* pyc_comm_collective(cohort_comm* comm, int kind, PyObject* in, PyObject* out, int dtype, int op, int peer,
                              int async_op, PyObject* keep) {
  if (kind < PYC_ALL_REDUCE || kind > PYC_RECV) {
    PyErr_Format(PyExc_ValueError, "unknown collective kind %d", kind);
    return NULL;
  }
  const char* fn = kNames[kind];
  int32_t size = 0;
  cohort_status status = comm ? cohort_comm_rank(comm, NULL, &size) : COHORT_OK;
  if (comm == NULL) status = issue(kind, NULL, NULL, NULL, 0, COHORT_F32, op, peer, NULL); /* its own message */
  if (status != COHORT_OK) {
    pyc_raise(status);
    return NULL;
  }
  pyc_work* w = PyMem_Calloc(1, sizeof *w);
  if (w == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  w->comm = comm;
  pyc_tensor *tin, *tout;
  size_t count = 0;
  if (acquire_buffers(w, kind, in, out, dtype, fn, &tin, &tout) < 0) goto fail;
  const size_t element = cohort_dtype_size((tin ? tin : tout ? tout : &w->tensors[0])->dtype);
  const int64_t n_in = tin ? (int64_t)(tin->bytes / element) : 0;
  const int64_t n_out = tout ? (int64_t)(tout->bytes / element) : 0;
  if (kind != PYC_BARRIER && check_counts(kind, fn, size, n_in, n_out, &count) < 0) goto fail;
  const cohort_dtype type = tin ? tin->dtype : tout ? tout->dtype : COHORT_F32;
  const void* in_data = tin ? tin->data : NULL;
  void* out_data = tout ? tout->data : NULL;
  Py_BEGIN_ALLOW_THREADS
    status = issue(kind, comm, in_data, out_data, count, type, op, peer, async_op ? &w->work : NULL);
  Py_END_ALLOW_THREADS
  if (status != COHORT_OK) {
    pyc_raise(status);
    if (!async_op) work_release_or_keep(w, keep); /* the call may have started sending */
    goto fail;
  }
  if (async_op) return w;
  work_release(w); /* the call waited: cohort is done with the buffers */
  PyMem_Free(w);
  return NULL;

fail:
  work_release(w);
  PyMem_Free(w);
  return NULL;
}

PyObject* pyc_work_wait(pyc_work* work, int64_t timeout_ms) {
  cohort_status status;
  cohort_work* handle = work ? work->work : NULL;
  Py_BEGIN_ALLOW_THREADS
    status = cohort_work_wait(handle, timeout_ms);
  Py_END_ALLOW_THREADS
  if (status != COHORT_OK) return pyc_raise(status);
  work_release(work);
  Py_RETURN_NONE;
}

PyObject* pyc_work_test(pyc_work* work) {
  cohort_status status;
  int32_t done = 0;
  cohort_work* handle = work ? work->work : NULL;
  Py_BEGIN_ALLOW_THREADS
    status = cohort_work_test(handle, &done);
  Py_END_ALLOW_THREADS
  if (status != COHORT_OK) return pyc_raise(status);
  if (!done) Py_RETURN_FALSE;
  work_release(work);
  Py_RETURN_TRUE;
}

PyObject* pyc_work_destroy(pyc_work* work, PyObject* keep) {
  if (work == NULL) Py_RETURN_NONE;
  cohort_status status;
  cohort_work* handle = work->work;
  Py_BEGIN_ALLOW_THREADS
    status = cohort_work_destroy(handle); /* waits for an operation in flight */
  Py_END_ALLOW_THREADS
  PyObject* result = status == COHORT_OK ? Py_NewRef(Py_None) : pyc_raise(status);
  work_release_or_keep(work, keep);
  PyMem_Free(work);
  return result;
}

PyObject* pyc_comm_status(cohort_comm* comm) {
  int32_t failed_rank = -1;
  cohort_status status;
  Py_BEGIN_ALLOW_THREADS
    status = cohort_comm_status(comm, &failed_rank);
  Py_END_ALLOW_THREADS
  const char* text = status == COHORT_OK ? "" : cohort_last_error();
  return Py_BuildValue("(iiN)", (int)status, (int)failed_rank,
                       PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace"));
}
