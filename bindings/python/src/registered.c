/*
 * registered.c — cohort.RegisteredBuffer: a communicator's registered memory
 * (cohort_comm_mem_alloc) as a Python object with the buffer protocol.
 *
 * The one thing to know: the memory must never go away under a view. Every export (memoryview,
 * numpy array, a collective or Work holding the buffer) is counted; free() raises BufferError
 * while one is alive, as resizing a bytearray does, and no export is made after it. A
 * communicator's close() asks pyc_registered_release the same before it destroys the
 * communicator, which unmaps the memory of its buffers. The live buffers are found through a
 * list kept here, not through Python references, so the answer does not depend on the order in
 * which the garbage collector clears weak references. Collecting a buffer never frees its
 * memory: freeing is collective and ranks collect garbage in different orders; the memory goes
 * with the communicator.
 */
#include "pycohort.h"

#include <stddef.h>
#include <string.h>

enum { LIVE = 0, FREED = 1, RELEASED = 2 };

typedef struct pyc_registered {
  PyObject_HEAD
  cohort_comm* comm;
  PyObject* owner; /* the cohort.Comm: the memory's communicator lives while the buffer does */
  PyObject* dtype_object;
  void* data; /* NULL unless LIVE */
  cohort_dtype dtype;
  int state;
  const char* format;
  Py_ssize_t count, nbytes, itemsize, one; /* shape and strides of typed and byte exports */
  Py_ssize_t exports;
  struct pyc_registered *prev, *next; /* in g_live while LIVE */
  PyObject* weakrefs;
} pyc_registered;

static PyTypeObject g_type;
static int g_ready = 0; /* PyType_Ready(&g_type) done */
static pyc_registered* g_live = NULL; /* the LIVE buffers of every communicator; the GIL guards it */

static void link_live(pyc_registered* r) {
  r->prev = NULL;
  r->next = g_live;
  if (g_live) g_live->prev = r;
  g_live = r;
}

static void unlink_live(pyc_registered* r) {
  if (r->prev) r->prev->next = r->next;
  else if (g_live == r) g_live = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
}

static const char* dtype_name(cohort_dtype dtype) {
  switch (dtype) {
    case COHORT_F32: return "f32";
    case COHORT_BF16: return "bf16";
    case COHORT_I32: return "i32";
    case COHORT_I64: return "i64";
    case COHORT_F16: return "f16";
  }
  return "?";
}

/* Raises InvalidHandleError for a buffer that is no longer LIVE, naming `fn` (and `what`, the
 * argument, when not NULL); returns NULL. */
static PyObject* raise_gone(const pyc_registered* r, const char* fn, const char* what) {
  return pyc_raise_msg(COHORT_ERR_INVALID_HANDLE, "%s: %s%sthe registered buffer of %zd %s %s", fn, what ? what : "",
                       what ? ": " : "", r->count, dtype_name(r->dtype),
                       r->state == FREED ? "was freed" : "was released when its communicator was closed");
}

/* ---- the buffer protocol ----------------------------------------------------------------------- */

static int registered_getbuffer(PyObject* obj, Py_buffer* view, int flags) {
  pyc_registered* r = (pyc_registered*)obj;
  if (r->state != LIVE) {
    view->obj = NULL;
    raise_gone(r, "cohort.RegisteredBuffer", NULL);
    return -1;
  }
  /* Typed (format, itemsize, elements) when the consumer reads formats, else bytes. */
  const int typed = (flags & PyBUF_FORMAT) == PyBUF_FORMAT;
  view->obj = Py_NewRef(obj);
  view->buf = r->data;
  view->len = r->nbytes;
  view->readonly = 0;
  view->itemsize = typed ? r->itemsize : 1;
  view->format = typed ? (char*)r->format : NULL;
  view->ndim = 1;
  view->shape = (flags & PyBUF_ND) == PyBUF_ND ? (typed ? &r->count : &r->nbytes) : NULL;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? (typed ? &r->itemsize : &r->one) : NULL;
  view->suboffsets = NULL;
  view->internal = NULL;
  ++r->exports;
  return 0;
}

static void registered_releasebuffer(PyObject* obj, Py_buffer* view) {
  (void)view;
  --((pyc_registered*)obj)->exports;
}

static PyBufferProcs g_buffer_procs = {registered_getbuffer, registered_releasebuffer};

/* ---- methods ----------------------------------------------------------------------------------- */

static PyObject* registered_free(PyObject* obj, PyObject* unused) {
  (void)unused;
  pyc_registered* r = (pyc_registered*)obj;
  if (r->state != LIVE) return raise_gone(r, "RegisteredBuffer.free", NULL);
  if (r->exports > 0) {
    PyErr_Format(PyExc_BufferError,
                 "RegisteredBuffer.free: %zd export(s) of the memory are alive (memoryviews, numpy arrays, "
                 "operations in flight); release them first",
                 r->exports);
    return NULL;
  }
  /* No export from here on, before the GIL is let go. */
  void* data = r->data;
  r->data = NULL;
  r->state = FREED;
  unlink_live(r);
  cohort_comm* comm = r->comm;
  cohort_status status;
  Py_BEGIN_ALLOW_THREADS
    status = cohort_comm_mem_free(comm, data);
  Py_END_ALLOW_THREADS
  if (status != COHORT_OK) return pyc_raise(status);
  Py_RETURN_NONE;
}

static PyObject* registered_enter(PyObject* obj, PyObject* unused) {
  (void)unused;
  return Py_NewRef(obj);
}

/* Frees a LIVE buffer. When the block is left by an exception and a view still holds the buffer
 * (the traceback often does), the BufferError would hide that exception: the buffer then stays
 * allocated until its communicator closes, and the exception goes on. */
static PyObject* registered_exit(PyObject* obj, PyObject* args) {
  if (((pyc_registered*)obj)->state != LIVE) Py_RETURN_FALSE;
  PyObject* result = registered_free(obj, NULL);
  if (result == NULL) {
    const int leaving_by_exception = PyTuple_Check(args) && PyTuple_GET_SIZE(args) > 0 &&
                                     PyTuple_GET_ITEM(args, 0) != Py_None;
    if (!leaving_by_exception || !PyErr_ExceptionMatches(PyExc_BufferError)) return NULL;
    PyErr_Clear();
  }
  Py_XDECREF(result);
  Py_RETURN_FALSE;
}

static PyMethodDef g_methods[] = {
    {"free", registered_free, METH_NOARGS,
     "free()\n--\n\nFrees the memory once the operations issued before it on the communicator have finished. "
     "Collective: every rank frees its buffer at the same point among its operations. BufferError while "
     "exports (memoryviews, numpy arrays, operations in flight) are alive; InvalidHandleError when freed "
     "already or released with its communicator."},
    {"__enter__", registered_enter, METH_NOARGS, NULL},
    {"__exit__", registered_exit, METH_VARARGS,
     "Frees the buffer (collectively) unless it was freed already; leaves it allocated, rather than hide "
     "the exception leaving the block, when a view still holds it then."},
    {NULL, NULL, 0, NULL}};

static PyObject* get_dtype(PyObject* obj, void* closure) {
  (void)closure;
  return Py_NewRef(((pyc_registered*)obj)->dtype_object);
}

static PyObject* get_count(PyObject* obj, void* closure) {
  (void)closure;
  return PyLong_FromSsize_t(((pyc_registered*)obj)->count);
}

static PyObject* get_nbytes(PyObject* obj, void* closure) {
  (void)closure;
  return PyLong_FromSsize_t(((pyc_registered*)obj)->nbytes);
}

static PyObject* get_freed(PyObject* obj, void* closure) {
  (void)closure;
  return PyBool_FromLong(((pyc_registered*)obj)->state != LIVE);
}

static PyObject* get_comm(PyObject* obj, void* closure) {
  (void)closure;
  PyObject* owner = ((pyc_registered*)obj)->owner;
  return Py_NewRef(owner ? owner : Py_None);
}

static PyGetSetDef g_getset[] = {
    {"dtype", get_dtype, NULL, "The cohort.DType of the elements.", NULL},
    {"count", get_count, NULL, "The number of elements (also len()).", NULL},
    {"nbytes", get_nbytes, NULL, "The size in bytes.", NULL},
    {"freed", get_freed, NULL, "True after free(), or once its communicator was closed.", NULL},
    {"comm", get_comm, NULL, "The cohort.Comm that allocated the memory.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static Py_ssize_t registered_length(PyObject* obj) { return ((pyc_registered*)obj)->count; }

static PySequenceMethods g_sequence = {.sq_length = registered_length};

static PyObject* registered_repr(PyObject* obj) {
  pyc_registered* r = (pyc_registered*)obj;
  const char* state = r->state == LIVE ? "live" : r->state == FREED ? "freed" : "released with its communicator";
  return PyUnicode_FromFormat("<cohort.RegisteredBuffer %zd x %s, %s>", r->count, dtype_name(r->dtype), state);
}

/* ---- lifetime ------------------------------------------------------------------------------------- */

static int registered_traverse(PyObject* obj, visitproc visit, void* arg) {
  pyc_registered* r = (pyc_registered*)obj;
  Py_VISIT(r->owner);
  Py_VISIT(r->dtype_object);
  return 0;
}

static int registered_clear(PyObject* obj) {
  pyc_registered* r = (pyc_registered*)obj;
  Py_CLEAR(r->owner);
  Py_CLEAR(r->dtype_object);
  return 0;
}

/* No export can be alive here (each holds a reference). The memory stays the communicator's:
 * freeing it here, in garbage-collection order, would break the collective order. */
static void registered_dealloc(PyObject* obj) {
  pyc_registered* r = (pyc_registered*)obj;
  PyObject_GC_UnTrack(obj);
  if (r->state == LIVE) unlink_live(r);
  if (r->weakrefs != NULL) PyObject_ClearWeakRefs(obj);
  registered_clear(obj);
  PyObject_GC_Del(obj);
}

static PyTypeObject g_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cohort.RegisteredBuffer",
    .tp_basicsize = sizeof(pyc_registered),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Registered memory of a cohort.Comm (Comm.alloc): a flat array of one dtype with the buffer "
              "protocol, zeroed when allocated. Pass it to any collective (in place where ranks share a host, "
              "from 256 KiB); memoryview() and numpy.asarray() share its memory. free() is collective. "
              "Garbage collection does not free it: un-freed memory is released with its communicator.",
    .tp_dealloc = registered_dealloc,
    .tp_traverse = registered_traverse,
    .tp_clear = registered_clear,
    .tp_repr = registered_repr,
    .tp_as_buffer = &g_buffer_procs,
    .tp_as_sequence = &g_sequence,
    .tp_methods = g_methods,
    .tp_getset = g_getset,
    .tp_weaklistoffset = offsetof(pyc_registered, weakrefs),
};

static int type_ready(void) {
  if (!g_ready) {
    if (PyType_Ready(&g_type) < 0) return -1;
    g_ready = 1;
  }
  return 0;
}

PyObject* pyc_registered_type(void) {
  if (type_ready() < 0) return NULL;
  return Py_NewRef((PyObject*)&g_type);
}

PyObject* pyc_comm_alloc(cohort_comm* comm, PyObject* owner, int64_t count, PyObject* dtype) {
  if (type_ready() < 0) return NULL;
  const long code = PyLong_AsLong(dtype);
  if (code == -1 && PyErr_Occurred()) return NULL;
  const size_t itemsize = cohort_dtype_size((cohort_dtype)code);
  if (itemsize == 0) return pyc_raise_msg(COHORT_ERR_INVALID_ARGUMENT, "Comm.alloc: unknown dtype %ld", code);
  if (count < 0 || (uint64_t)count > (uint64_t)PY_SSIZE_T_MAX / itemsize)
    return pyc_raise_msg(COHORT_ERR_INVALID_ARGUMENT, "Comm.alloc: count must be 1..%zd, got %lld",
                         (Py_ssize_t)(PY_SSIZE_T_MAX / (Py_ssize_t)itemsize), (long long)count);
  /* The object first: a Python allocation failure must not follow the collective allocation. */
  pyc_registered* r = PyObject_GC_New(pyc_registered, &g_type);
  if (r == NULL) return NULL;
  r->comm = comm;
  r->owner = Py_NewRef(owner);
  r->dtype_object = Py_NewRef(dtype);
  r->data = NULL;
  r->dtype = (cohort_dtype)code;
  r->state = RELEASED;
  r->format = code == COHORT_F32 ? "f" : code == COHORT_I32 ? "i" : code == COHORT_I64 ? "q" : "H";
  r->count = (Py_ssize_t)count;
  r->itemsize = (Py_ssize_t)itemsize;
  r->nbytes = r->count * r->itemsize;
  r->one = 1;
  r->exports = 0;
  r->prev = r->next = NULL;
  r->weakrefs = NULL;
  PyObject_GC_Track((PyObject*)r);

  void* data = NULL;
  const size_t bytes = (size_t)r->nbytes;
  cohort_status status;
  Py_BEGIN_ALLOW_THREADS
    status = cohort_comm_mem_alloc(comm, bytes, &data);
    if (status == COHORT_OK) memset(data, 0, bytes);
  Py_END_ALLOW_THREADS
  if (status != COHORT_OK) {
    pyc_raise(status);
    Py_DECREF(r);
    return NULL;
  }
  r->data = data;
  r->state = LIVE;
  link_live(r);
  return (PyObject*)r;
}

PyObject* pyc_registered_release(cohort_comm* comm, const char* fn) {
  for (pyc_registered* r = g_live; r != NULL; r = r->next) {
    if (r->comm == comm && r->exports > 0) {
      PyErr_Format(PyExc_BufferError,
                   "%s: registered buffer of %zd %s still has %zd export(s) (memoryviews, numpy arrays, "
                   "operations in flight); release them before closing the communicator, which unmaps it",
                   fn, r->count, dtype_name(r->dtype), r->exports);
      return NULL;
    }
  }
  for (pyc_registered* r = g_live, *next; r != NULL; r = next) {
    next = r->next;
    if (r->comm != comm) continue;
    r->data = NULL;
    r->state = RELEASED;
    unlink_live(r);
  }
  Py_RETURN_NONE;
}

int pyc_registered_check(PyObject* value, const char* fn, const char* what) {
  if (!g_ready || !PyObject_TypeCheck(value, &g_type)) return 0;
  const pyc_registered* r = (const pyc_registered*)value;
  if (r->state == LIVE) return 0;
  raise_gone(r, fn, what);
  return -1;
}

int pyc_registered_dtype(PyObject* value) {
  if (!g_ready || !PyObject_TypeCheck(value, &g_type)) return -1;
  return (int)((const pyc_registered*)value)->dtype;
}
