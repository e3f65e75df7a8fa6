/*
 * tensor_args.c — Python buffers as cohort tensors, and cohort statuses as Python exceptions.
 *
 * A buffer is used in place whenever it is C-contiguous (array.array, bytearray, memoryview,
 * contiguous numpy arrays); a strided one is copied into a contiguous block for the call and, if
 * cohort writes it, copied back when released. Element types come from the buffer's struct
 * format ('f' f32, 'e' f16, 'i'/'l'/'q' of 4 or 8 bytes i32/i64), never from its byte count: a
 * uint8 or float64 array is refused, naming the dtype wanted. Only untyped memory (bytes,
 * bytearray, 'c') takes the graph's declared dtype, and uint16 words ('H', how bf16 travels
 * without numpy support) a declared bf16 or f16; cohort.Tensor(data, dtype) reads any one-byte
 * buffer as raw bytes of that dtype.
 */
#include "pycohort.h"

#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the buffer formats below assume a little-endian machine"
#endif

/* classes[s]: the exception for status s; classes[0] is cohort.Error. */
static PyObject* g_error_classes = NULL;

PyObject* pyc_set_error_classes(PyObject* classes) {
  if (!PyTuple_Check(classes) || PyTuple_GET_SIZE(classes) < 1) {
    PyErr_SetString(PyExc_TypeError, "pyc_set_error_classes: expected a non-empty tuple of classes");
    return NULL;
  }
  Py_INCREF(classes);
  Py_XSETREF(g_error_classes, classes);
  Py_RETURN_NONE;
}

/* Raises the registered class for status with `message` (a new reference, consumed). The class
 * is called with the message alone (OSError and friends read a second argument as errno); the
 * base class, used for a status without a class of its own, gets the status as an attribute. */
static PyObject* raise_with(cohort_status status, PyObject* message) {
  if (message == NULL) return NULL;
  if (g_error_classes == NULL) {
    PyErr_SetObject(PyExc_RuntimeError, message);
    Py_DECREF(message);
    return NULL;
  }
  Py_ssize_t index = (Py_ssize_t)status;
  if (index <= 0 || index >= PyTuple_GET_SIZE(g_error_classes)) index = 0;
  PyObject* cls = PyTuple_GET_ITEM(g_error_classes, index);
  PyObject* exc = PyObject_CallOneArg(cls, message);
  Py_DECREF(message);
  if (exc == NULL) return NULL;
  if (index == 0) {
    PyObject* code = PyLong_FromLong((long)status);
    if (code == NULL || PyObject_SetAttrString(exc, "status", code) < 0) PyErr_Clear();
    Py_XDECREF(code);
  }
  PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
  return NULL;
}

PyObject* pyc_raise(cohort_status status) {
  /* Copied at once: the text lives only until the next cohort call on this thread. */
  const char* text = cohort_last_error();
  return raise_with(status, PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace"));
}

PyObject* pyc_raise_msg(cohort_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  PyObject* message = PyUnicode_FromFormatV(format, args);
  va_end(args);
  return raise_with(status, message);
}

/* Replaces the pending exception (a TypeError or BufferError from the buffer protocol) by an
 * INVALID_ARGUMENT error that names the call and the buffer and quotes the original text. */
static int reraise_buffer_error(const char* fn, const char* what) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyObject* text = value ? PyObject_Str(value) : NULL;
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  if (text == NULL) PyErr_Clear();
  pyc_raise_msg(COHORT_ERR_INVALID_ARGUMENT, "%s: %s: %S", fn, what, text ? text : Py_None);
  Py_XDECREF(text);
  return -1;
}

/* What a buffer's format says about its elements. */
enum element_kind {
  kTyped,   /* a cohort dtype: 'f' f32, 'e' f16, 'i'/'l'/'q' of 4 or 8 bytes i32/i64 */
  kBytes,   /* one-byte elements: 'B' uint8, 'b' int8, 'c' char */
  kWords,   /* 'H' uint16: how bf16 and f16 travel where there is no such format */
  kForeign  /* anything else: float64, bool, unsigned 32-bit, big-endian data, ... */
};

/* The format without its byte-order prefix, or NULL for big-endian multi-byte data. */
static const char* native_format(const char* f, Py_ssize_t itemsize) {
  if (f == NULL) return "B";
  if (*f == '@' || *f == '=' || *f == '<') return f + 1;
  if (*f == '>' || *f == '!') return itemsize > 1 ? NULL : f + 1;
  return f;
}

static enum element_kind element_kind_of(const char* format, Py_ssize_t itemsize, cohort_dtype* out) {
  const char* f = native_format(format, itemsize);
  if (f == NULL || f[0] == '\0' || f[1] != '\0') return kForeign;
  switch (f[0]) {
    case 'f': *out = COHORT_F32; return itemsize == 4 ? kTyped : kForeign;
    case 'e': *out = COHORT_F16; return itemsize == 2 ? kTyped : kForeign;
    case 'i':
    case 'l':
    case 'q':
      if (itemsize != 4 && itemsize != 8) return kForeign;
      *out = itemsize == 4 ? COHORT_I32 : COHORT_I64;
      return kTyped;
    case 'B':
    case 'b':
    case 'c': return kBytes;
    case 'H': return kWords;
    default: return kForeign;
  }
}

/* numpy's name for the elements of a struct format (messages only); NULL when it has none. */
static const char* element_name(const char* format, Py_ssize_t itemsize) {
  const char* f = native_format(format, itemsize);
  if (f == NULL) return "big-endian";
  if (f[0] == '\0' || f[1] != '\0') return NULL;
  const int wide = itemsize == 8;
  switch (f[0]) {
    case 'b': return "int8";
    case 'B': return "uint8";
    case 'c': return "char";
    case '?': return "bool";
    case 'h': return "int16";
    case 'H': return "uint16";
    case 'i':
    case 'l':
    case 'q':
    case 'n': return wide ? "int64" : "int32";
    case 'I':
    case 'L':
    case 'Q':
    case 'N': return wide ? "uint64" : "uint32";
    case 'e': return "float16";
    case 'f': return "float32";
    case 'd': return "float64";
    default: return NULL;
  }
}

const char* pyc_dtype_name(cohort_dtype dtype) {
  switch (dtype) {
    case COHORT_F32: return "f32";
    case COHORT_BF16: return "bf16";
    case COHORT_I32: return "i32";
    case COHORT_I64: return "i64";
    case COHORT_F16: return "f16";
  }
  return "an unknown dtype";
}

/* numpy's name for a cohort dtype, for the hint in messages; NULL for bf16, which it lacks. */
static const char* numpy_name(cohort_dtype dtype) {
  switch (dtype) {
    case COHORT_F32: return "float32";
    case COHORT_I32: return "int32";
    case COHORT_I64: return "int64";
    case COHORT_F16: return "float16";
    default: return NULL;
  }
}

int pyc_parse_declared(PyObject* declared, cohort_dtype* dtype, int64_t* shape, int32_t* rank) {
  if (declared == NULL || declared == Py_None) return 0;
  /* Read directly (no PyArg_ParseTuple): this runs for every input of every step. */
  PyObject* dims = PyTuple_Check(declared) && PyTuple_GET_SIZE(declared) == 2 ? PyTuple_GET_ITEM(declared, 1) : NULL;
  if (dims == NULL || !PyTuple_Check(dims) || !PyLong_Check(PyTuple_GET_ITEM(declared, 0))) {
    PyErr_SetString(PyExc_TypeError, "declared shapes must be (dtype, shape tuple) or None");
    return -1;
  }
  const long value = PyLong_AsLong(PyTuple_GET_ITEM(declared, 0));
  Py_ssize_t n = PyTuple_GET_SIZE(dims);
  if (n > 8) n = 8;
  for (Py_ssize_t i = 0; i < n; ++i) {
    shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(dims, i));
    if (shape[i] == -1 && PyErr_Occurred()) return -1;
  }
  *dtype = (cohort_dtype)value;
  *rank = (int32_t)n;
  return 1;
}

/* An explicit shape (any sequence of ints) into t. */
static int parse_shape(pyc_tensor* t, PyObject* dims, const char* fn, const char* what) {
  PyObject* seq = PySequence_Fast(dims, "shape must be a sequence of ints");
  if (seq == NULL) return reraise_buffer_error(fn, what);
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > 8) {
    Py_DECREF(seq);
    pyc_raise_msg(COHORT_ERR_INVALID_ARGUMENT, "%s: %s: rank must be 0..8, got %zd", fn, what, n);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    t->shape[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (t->shape[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return reraise_buffer_error(fn, what);
    }
  }
  t->rank = (int32_t)n;
  Py_DECREF(seq);
  return 0;
}

/* The shape of a buffer that brings none of its own: the declared one, with dimension 0 made
 * to fit `count` elements; [count] when nothing fits (cohort's message then says what it
 * expected). */
static void fit_declared_shape(pyc_tensor* t, int64_t count, const int64_t* shape, int32_t rank) {
  int64_t rest = 1;
  for (int32_t i = 1; i < rank; ++i) rest *= shape[i];
  if (rank == 0 && count == 1) {
    t->rank = 0;
  } else if (rank >= 1 && rest > 0 && count % rest == 0) {
    t->rank = rank;
    t->shape[0] = count / rest;
    for (int32_t i = 1; i < rank; ++i) t->shape[i] = shape[i];
  } else {
    t->rank = 1;
    t->shape[0] = count;
  }
}

/* "uint8 elements (format 'B')": what the buffer holds, for messages (a new reference). */
static PyObject* describe_elements(const Py_buffer* view, int raw) {
  const char* format = view->format ? view->format : "B";
  const char* name = element_name(format, view->itemsize);
  const int registered = pyc_registered_dtype(view->obj);
  if (registered >= 0)
    return PyUnicode_FromFormat("%s elements (a cohort.RegisteredBuffer)", pyc_dtype_name((cohort_dtype)registered));
  if (raw) return PyUnicode_FromFormat("raw bytes (%s)", Py_TYPE(view->obj)->tp_name);
  if (name == NULL) return PyUnicode_FromFormat("elements of format '%s'", format);
  return PyUnicode_FromFormat("%s elements (format '%s')", name, format);
}

/* Resolves t->dtype from an explicit dtype, the buffer's elements or the declared dtype. The
 * elements decide wherever the buffer says what they are: its format (a RegisteredBuffer's own
 * dtype, bf16 and f16 included), never its byte count. Only untyped memory — bytes, bytearray,
 * 'c' — takes the declared dtype; uint16 words take a declared bf16 or f16. An explicit dtype
 * must agree with typed elements; it reads one-byte elements (uint8 too) as raw bytes. */
static int resolve_dtype(pyc_tensor* t, PyObject* data, PyObject* explicit_dtype, int have_declared,
                         cohort_dtype declared, const char* fn, const char* what) {
  cohort_dtype typed = COHORT_F32;
  enum element_kind kind = element_kind_of(t->view.format, t->view.itemsize, &typed);
  const int registered = pyc_registered_dtype(data);
  if (registered >= 0) {
    kind = kTyped;
    typed = (cohort_dtype)registered;
  }
  const char* format = native_format(t->view.format, t->view.itemsize);
  const int raw = kind == kBytes && (PyBytes_Check(data) || PyByteArray_Check(data) || (format && *format == 'c'));
  const int half = have_declared && (declared == COHORT_BF16 || declared == COHORT_F16);

  if (explicit_dtype != Py_None) {
    const long value = PyLong_AsLong(explicit_dtype);
    if (value == -1 && PyErr_Occurred()) return reraise_buffer_error(fn, what);
    const cohort_dtype dtype = (cohort_dtype)value;
    if (cohort_dtype_size(dtype) == 0) {
      pyc_raise_msg(COHORT_ERR_INVALID_ARGUMENT, "%s: %s: unknown dtype %ld", fn, what, value);
      return -1;
    }
    const int agrees = kind == kBytes || (kind == kTyped && typed == dtype) ||
                       (kind == kWords && (dtype == COHORT_BF16 || dtype == COHORT_F16));
    if (!agrees) {
      PyObject* given = describe_elements(&t->view, 0);
      if (given != NULL)
        pyc_raise_msg(COHORT_ERR_SHAPE_MISMATCH,
                      "%s: %s: dtype %s was given, but the buffer holds %U (only raw bytes are reinterpreted)",
                      fn, what, pyc_dtype_name(dtype), given);
      Py_XDECREF(given);
      return -1;
    }
    t->dtype = dtype;
    return 0;
  }
  /* f32 for a bf16 value is left to cohort, which converts parameters and names the rest. */
  if (kind == kTyped && (!have_declared || typed == declared || (typed == COHORT_F32 && declared == COHORT_BF16))) {
    t->dtype = typed;
    return 0;
  }
  if (have_declared && (raw || (kind == kWords && half))) {
    t->dtype = declared;
    return 0;
  }

  PyObject* given = describe_elements(&t->view, raw);
  if (given == NULL) return -1;
  if (have_declared) {
    const char* numpy = numpy_name(declared);
    pyc_raise_msg(COHORT_ERR_SHAPE_MISMATCH, "%s: %s is %s, but the buffer holds %U: convert the data%s%s%s%s", fn,
                  what, pyc_dtype_name(declared), given, numpy ? " (numpy: .astype('" : "", numpy ? numpy : "",
                  numpy ? "'))" : " (bf16: uint16 bits)",
                  kind == kBytes ? ", or wrap raw bytes as cohort.Tensor(data, dtype=...)" : "");
  } else if (raw) {
    pyc_raise_msg(COHORT_ERR_SHAPE_MISMATCH, "%s: %s: %U need a dtype: pass cohort.Tensor(data, dtype=...)", fn,
                  what, given);
  } else {
    pyc_raise_msg(COHORT_ERR_SHAPE_MISMATCH,
                  "%s: %s: the buffer holds %U, which is no cohort dtype (float32 'f', float16 'e', int32 'i', "
                  "int64 'q'; bf16 or f16 as uint16 'H' with dtype=...; raw bytes with dtype=...)",
                  fn, what, given);
  }
  Py_DECREF(given);
  return -1;
}

int pyc_tensor_acquire(pyc_tensor* t, PyObject* value, PyObject* declared, int writable, const char* fn,
                       const char* what) {
  memset(t, 0, sizeof *t);
  PyObject* data = value;
  PyObject* explicit_dtype = Py_None;
  PyObject* explicit_shape = Py_None;
  if (PyTuple_Check(value)) { /* cohort.Tensor(data, dtype, shape) */
    if (PyTuple_GET_SIZE(value) != 3) {
      pyc_raise_msg(COHORT_ERR_INVALID_ARGUMENT, "%s: %s: expected a buffer or cohort.Tensor(data, dtype, shape)", fn,
                    what);
      return -1;
    }
    data = PyTuple_GET_ITEM(value, 0);
    explicit_dtype = PyTuple_GET_ITEM(value, 1);
    explicit_shape = PyTuple_GET_ITEM(value, 2);
  }
  cohort_dtype declared_dtype = COHORT_F32;
  int64_t declared_shape[8];
  int32_t declared_rank = 0;
  const int have_declared = pyc_parse_declared(declared, &declared_dtype, declared_shape, &declared_rank);
  if (have_declared < 0) return -1;

  if (pyc_registered_check(data, fn, what) < 0) return -1; /* freed: say so, not "not a buffer" */
  const int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(data, &t->view, flags) < 0) return reraise_buffer_error(fn, what);
  t->held = 1;
  t->writable = writable;
  if (resolve_dtype(t, data, explicit_dtype, have_declared, declared_dtype, fn, what) < 0) goto fail;

  const size_t element = cohort_dtype_size(t->dtype);
  t->bytes = (size_t)t->view.len;
  if (t->bytes % element != 0) {
    pyc_raise_msg(COHORT_ERR_SHAPE_MISMATCH, "%s: %s: %zd bytes are not a whole number of %zu-byte elements", fn, what,
                  t->view.len, element);
    goto fail;
  }
  const int64_t count = (int64_t)(t->bytes / element);
  if (explicit_shape != Py_None) {
    if (parse_shape(t, explicit_shape, fn, what) < 0) goto fail;
  } else if (t->view.ndim >= 2 && (size_t)t->view.itemsize == element) {
    if (t->view.ndim > 8) {
      pyc_raise_msg(COHORT_ERR_SHAPE_MISMATCH, "%s: %s: rank must be 0..8, got %d", fn, what, t->view.ndim);
      goto fail;
    }
    t->rank = t->view.ndim;
    for (int i = 0; i < t->view.ndim; ++i) t->shape[i] = (int64_t)t->view.shape[i];
  } else if (have_declared) {
    fit_declared_shape(t, count, declared_shape, declared_rank);
  } else {
    t->rank = 1;
    t->shape[0] = count;
  }

  t->data = t->view.buf;
  if (!PyBuffer_IsContiguous(&t->view, 'C')) {
    t->data = PyMem_Malloc(t->bytes ? t->bytes : 1);
    if (t->data == NULL) {
      PyErr_NoMemory();
      goto fail;
    }
    t->copied = 1;
    if (PyBuffer_ToContiguous(t->data, &t->view, t->view.len, 'C') < 0) goto fail;
  }
  return 0;

fail:
  pyc_tensor_release(t);
  return -1;
}

void pyc_tensor_release(pyc_tensor* t) {
  if (t->copied) {
    if (t->writable) {
      /* Keeps an exception already pending (the call's failure) ahead of a copy-back error. */
      PyObject *type, *value, *traceback;
      PyErr_Fetch(&type, &value, &traceback);
      if (PyBuffer_FromContiguous(&t->view, t->data, t->view.len, 'C') < 0) PyErr_Clear();
      PyErr_Restore(type, value, traceback);
    }
    PyMem_Free(t->data);
    t->copied = 0;
  }
  t->data = NULL;
  if (t->held) {
    PyBuffer_Release(&t->view);
    t->held = 0;
  }
}

void pyc_tensor_ref(const pyc_tensor* t, const char* name, cohort_tensor_ref* ref) {
  ref->name = name;
  ref->dtype = t->dtype;
  ref->rank = t->rank;
  ref->shape = t->shape;
  ref->data = t->data;
  ref->bytes = t->bytes;
}

PyObject* pyc_alloc(cohort_dtype dtype, const int64_t* shape, int32_t rank) {
  const char* format = "f";
  switch (dtype) {
    case COHORT_F32: format = "f"; break;
    case COHORT_I32: format = "i"; break;
    case COHORT_I64: format = "q"; break;
    default: format = "H"; break; /* bf16 and f16: memoryview.cast has no half-precision format */
  }
  int64_t count = 1;
  PyObject* dims = PyTuple_New(rank);
  if (dims == NULL) return NULL;
  for (int32_t i = 0; i < rank; ++i) {
    count *= shape[i];
    PyTuple_SET_ITEM(dims, i, PyLong_FromLongLong(shape[i]));
  }
  PyObject* bytes = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(count * (int64_t)cohort_dtype_size(dtype)));
  if (bytes == NULL) {
    Py_DECREF(dims);
    return NULL;
  }
  memset(PyByteArray_AS_STRING(bytes), 0, (size_t)PyByteArray_GET_SIZE(bytes));
  PyObject* flat = PyMemoryView_FromObject(bytes);
  Py_DECREF(bytes);
  PyObject* shaped = flat ? PyObject_CallMethod(flat, "cast", "sO", format, dims) : NULL;
  Py_XDECREF(flat);
  Py_DECREF(dims);
  return shaped;
}
