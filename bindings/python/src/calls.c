/*
 * calls.c — the cohort calls that take caller buffers (training steps, evaluation, parameters,
 * batches, collectives), plus the log callback, the operator list and its descriptions.
 *
 * Every call that may block runs without the GIL; buffers stay held (pyc_tensor) until cohort
 * is done with them. For an asynchronous collective that is after the call returns: the
 * pyc_work keeps the views and releases them when the operation is seen complete (wait, test or
 * destroy), which is why SWIG's stock buffer typemaps, which release on return, are not used.
 */
#include "pycohort.h"

#include <stdio.h>
#include <string.h>

/* ---- named buffers ------------------------------------------------------------------------ */

enum { kStackBindings = 8 };

/* The tensors bound to a dict of name -> buffer, with their tensor refs. */
typedef struct bindings {
  int count;
  pyc_tensor* tensors;
  cohort_tensor_ref* refs;
  pyc_tensor stack_tensors[kStackBindings];
  cohort_tensor_ref stack_refs[kStackBindings];
} bindings;

static void bindings_release(bindings* b) {
  for (int i = 0; i < b->count; ++i) pyc_tensor_release(&b->tensors[i]);
  if (b->tensors != b->stack_tensors) {
    PyMem_Free(b->tensors);
    PyMem_Free(b->refs);
  }
  b->count = 0;
}

/* The declared (dtype, shape) for key, or None. Borrowed. */
static PyObject* declared_for(PyObject* declared, PyObject* key) {
  if (declared == NULL || !PyDict_Check(declared)) return Py_None;
  PyObject* d = PyDict_GetItemWithError(declared, key);
  return d ? d : Py_None;
}

/* Binds every (name, buffer) of `named`; a None buffer is allocated from the declared shape
 * (outputs only), with dimension 0 replaced by `batch` when it equals `declared_batch`. */
static int bind_named(bindings* b, PyObject* named, PyObject* declared, int writable, const char* fn, const char* role,
                      int64_t batch, int64_t declared_batch, PyObject* results) {
  memset(b, 0, offsetof(bindings, stack_tensors));
  if (!PyDict_Check(named)) {
    PyErr_Format(PyExc_TypeError, "%s: %ss must be a dict of name -> buffer", fn, role);
    return -1;
  }
  const Py_ssize_t n = PyDict_GET_SIZE(named);
  b->tensors = b->stack_tensors;
  b->refs = b->stack_refs;
  if (n > kStackBindings) {
    b->tensors = PyMem_Calloc((size_t)n, sizeof(pyc_tensor));
    b->refs = PyMem_Calloc((size_t)n, sizeof(cohort_tensor_ref));
    if (b->tensors == NULL || b->refs == NULL) {
      PyMem_Free(b->tensors);
      PyMem_Free(b->refs);
      b->tensors = b->stack_tensors;
      PyErr_NoMemory();
      return -1;
    }
  }
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(named, &pos, &key, &value)) {
    const char* name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
    if (name == NULL) {
      if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s: %s names must be str", fn, role);
      goto fail;
    }
    char what[300];
    snprintf(what, sizeof what, "%s '%.256s'", role, name);
    PyObject* decl = declared_for(declared, key);
    PyObject* buffer = value;
    PyObject* allocated = NULL;
    if (value == Py_None && results != NULL) { /* an output the binding allocates */
      cohort_dtype dtype;
      int64_t shape[8];
      int32_t rank;
      const int have = pyc_parse_declared(decl, &dtype, shape, &rank);
      if (have <= 0) {
        if (have == 0)
          pyc_raise_msg(COHORT_ERR_NOT_FOUND,
                        "%s: %s: not a value of the graph the trainer was made from (or that graph was closed "
                        "before the binding saw the name): pass a buffer for it",
                        fn, what);
        goto fail;
      }
      if (rank >= 1 && batch > 0 && shape[0] == declared_batch) shape[0] = batch;
      buffer = allocated = pyc_alloc(dtype, shape, rank);
      if (allocated == NULL) goto fail;
    }
    if (results != NULL && PyDict_SetItem(results, key, buffer) < 0) {
      Py_XDECREF(allocated);
      goto fail;
    }
    Py_XDECREF(allocated); /* `results` keeps it alive */
    if (pyc_tensor_acquire(&b->tensors[b->count], buffer, decl, writable, fn, what) < 0) goto fail;
    pyc_tensor_ref(&b->tensors[b->count], name, &b->refs[b->count]);
    ++b->count;
  }
  return 0;

fail:
  bindings_release(b);
  return -1;
}

/* Dimension 0 of the first bound input of rank >= 1, and the graph's declared dimension 0 of
 * that input; 0 when there is none. */
static void input_batch(const bindings* b, PyObject* inputs, PyObject* declared, int64_t* batch,
                        int64_t* declared_batch) {
  *batch = *declared_batch = 0;
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  for (int i = 0; i < b->count && PyDict_Next(inputs, &pos, &key, &value); ++i) {
    if (b->tensors[i].rank < 1) continue;
    cohort_dtype dtype;
    int64_t shape[8];
    int32_t rank;
    if (pyc_parse_declared(declared_for(declared, key), &dtype, shape, &rank) != 1 || rank < 1) {
      PyErr_Clear();
      continue;
    }
    *batch = b->tensors[i].shape[0];
    *declared_batch = shape[0];
    return;
  }
}

/* ---- trainers ----------------------------------------------------------------------------- */

PyObject* pyc_trainer_step(cohort_trainer* trainer, PyObject* inputs, PyObject* declared) {
  bindings in;
  if (bind_named(&in, inputs, declared, 0, "cohort_trainer_step", "input", 0, 0, NULL) < 0) return NULL;
  float loss = 0.0f;
  cohort_status status;
  Py_BEGIN_ALLOW_THREADS
    status = cohort_trainer_step(trainer, in.refs, in.count, &loss);
  Py_END_ALLOW_THREADS
  PyObject* result = status == COHORT_OK ? PyFloat_FromDouble((double)loss) : pyc_raise(status);
  bindings_release(&in);
  return result;
}

PyObject* pyc_trainer_evaluate(cohort_trainer* trainer, PyObject* inputs, PyObject* outputs, PyObject* declared) {
  const char* fn = "cohort_trainer_evaluate";
  bindings in, out;
  if (bind_named(&in, inputs, declared, 0, fn, "input", 0, 0, NULL) < 0) return NULL;
  int64_t batch, declared_batch;
  input_batch(&in, inputs, declared, &batch, &declared_batch);
  PyObject* results = PyDict_New();
  if (results == NULL || bind_named(&out, outputs, declared, 1, fn, "output", batch, declared_batch, results) < 0) {
    Py_XDECREF(results);
    bindings_release(&in);
    return NULL;
  }
  cohort_status status;
  Py_BEGIN_ALLOW_THREADS
    status = cohort_trainer_evaluate(trainer, in.refs, in.count, out.refs, out.count);
  Py_END_ALLOW_THREADS
  if (status != COHORT_OK) {
    pyc_raise(status);
    Py_CLEAR(results);
  }
  bindings_release(&out);
  bindings_release(&in);
  return results;
}

/* get (writable) or set one parameter through a one-entry binding. */
static PyObject* parameter_call(cohort_trainer* trainer, PyObject* name, PyObject* buffer, PyObject* declared,
                                int get) {
  const char* fn = get ? "cohort_trainer_get_parameter" : "cohort_trainer_set_parameter";
  PyObject* named = PyDict_New();
  PyObject* declared_map = PyDict_New();
  PyObject* results = get ? PyDict_New() : NULL;
  PyObject* result = NULL;
  bindings b;
  if (named == NULL || declared_map == NULL || (get && results == NULL)) goto done;
  if (PyDict_SetItem(named, name, buffer) < 0 || PyDict_SetItem(declared_map, name, declared) < 0) goto done;
  if (get && buffer == Py_None) {
    /* Parameters are read as f32 whatever their storage (cohort converts bf16). */
    cohort_dtype dtype;
    int64_t shape[8];
    int32_t rank;
    const int have = pyc_parse_declared(declared, &dtype, shape, &rank);
    if (have < 0) goto done;
    if (have == 1) {
      PyObject* as_f32 = Py_BuildValue("(iO)", (int)COHORT_F32, PyTuple_GET_ITEM(declared, 1));
      if (as_f32 == NULL || PyDict_SetItem(declared_map, name, as_f32) < 0) {
        Py_XDECREF(as_f32);
        goto done;
      }
      Py_DECREF(as_f32);
    }
  }
  if (bind_named(&b, named, declared_map, get, fn, "parameter", 0, 0, results) < 0) goto done;
  cohort_status status;
  Py_BEGIN_ALLOW_THREADS
    status =
        get ? cohort_trainer_get_parameter(trainer, &b.refs[0]) : cohort_trainer_set_parameter(trainer, &b.refs[0]);
  Py_END_ALLOW_THREADS
  if (status != COHORT_OK) {
    pyc_raise(status);
  } else if (get) {
    result = PyDict_GetItemWithError(results, name);
    Py_XINCREF(result);
  } else {
    result = Py_NewRef(Py_None);
  }
  bindings_release(&b);
done:
  Py_XDECREF(named);
  Py_XDECREF(declared_map);
  Py_XDECREF(results);
  return result;
}

PyObject* pyc_trainer_get_parameter(cohort_trainer* trainer, PyObject* name, PyObject* out, PyObject* declared) {
  return parameter_call(trainer, name, out, declared, 1);
}

PyObject* pyc_trainer_set_parameter(cohort_trainer* trainer, PyObject* name, PyObject* value, PyObject* declared) {
  return parameter_call(trainer, name, value, declared, 0);
}

/* ---- datasets ----------------------------------------------------------------------------- */

/* A buffer whose shape came from nowhere ([count]) becomes [batch] or [batch, count / batch]. */
static void shape_as_batch(pyc_tensor* t, int flat, int64_t batch) {
  if (!flat || batch <= 0) return;
  const int64_t count = t->shape[0];
  if (count == batch) return;
  if (count % batch != 0) return; /* cohort names the mismatch */
  t->rank = 2;
  t->shape[0] = batch;
  t->shape[1] = count / batch;
}

PyObject* pyc_dataset_next_batch(cohort_dataset* dataset, cohort_sampler* sampler, PyObject* features, PyObject* labels,
                                 int64_t batch) {
  const char* fn = "cohort_dataset_next_batch";
  pyc_tensor t[2];
  if (pyc_tensor_acquire(&t[0], features, Py_None, 1, fn, "features") < 0) return NULL;
  if (pyc_tensor_acquire(&t[1], labels, Py_None, 1, fn, "labels") < 0) {
    pyc_tensor_release(&t[0]);
    return NULL;
  }
  /* Flat: a 1-D buffer with no shape given (cohort.Tensor's shape counts as given). */
  int flat[2];
  for (int i = 0; i < 2; ++i) {
    PyObject* v = i == 0 ? features : labels;
    flat[i] = t[i].rank == 1 && !(PyTuple_Check(v) && PyTuple_GET_SIZE(v) == 3 && PyTuple_GET_ITEM(v, 2) != Py_None);
  }
  if (batch <= 0)
    batch = !flat[0] && t[0].rank >= 1 ? t[0].shape[0] : !flat[1] && t[1].rank >= 1 ? t[1].shape[0] : t[1].shape[0];
  shape_as_batch(&t[0], flat[0], batch);
  shape_as_batch(&t[1], flat[1], batch);
  cohort_tensor_ref refs[2];
  pyc_tensor_ref(&t[0], "features", &refs[0]);
  pyc_tensor_ref(&t[1], "labels", &refs[1]);
  cohort_status status;
  Py_BEGIN_ALLOW_THREADS
    status = cohort_dataset_next_batch(dataset, sampler, refs, 2);
  Py_END_ALLOW_THREADS
  PyObject* result = status == COHORT_OK ? Py_NewRef(Py_None) : pyc_raise(status);
  pyc_tensor_release(&t[1]);
  pyc_tensor_release(&t[0]);
  return result;
}

/* ---- operator list and log callback ------------------------------------------------------ */

/* "a,b,c" as ["a", "b", "c"]. */
static PyObject* split_commas(const char* text) {
  PyObject* all = PyUnicode_FromString(text);
  PyObject* comma = all ? PyUnicode_FromString(",") : NULL;
  PyObject* names = comma ? PyUnicode_Split(all, comma, -1) : NULL;
  Py_XDECREF(comma);
  Py_XDECREF(all);
  return names;
}

PyObject* pyc_op_list(void) {
  char small[4096];
  size_t needed = 0;
  cohort_status status = cohort_op_list(small, sizeof small, &needed);
  if (status == COHORT_OK) return split_commas(small);
  if (needed <= sizeof small) return pyc_raise(status);
  char* big = PyMem_Malloc(needed);
  if (big == NULL) return PyErr_NoMemory();
  status = cohort_op_list(big, needed, NULL);
  PyObject* names = status == COHORT_OK ? split_commas(big) : pyc_raise(status);
  PyMem_Free(big);
  return names;
}

/* A tuple of `count` str from C strings (NULL entries as None). */
static PyObject* str_tuple(const char* const* names, int32_t count) {
  PyObject* t = PyTuple_New(count > 0 ? count : 0);
  for (int32_t i = 0; t != NULL && i < count; ++i) {
    PyObject* s = names[i] ? PyUnicode_FromString(names[i]) : Py_NewRef(Py_None);
    if (s == NULL) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, i, s);
  }
  return t;
}

/* An attribute's default as the Python value of its type; None when it is required. */
static PyObject* attr_default(const cohort_op_attr_info* a) {
  if (a->required) Py_RETURN_NONE;
  switch (a->type) {
    case COHORT_ATTR_INT: return PyLong_FromLongLong(a->default_int);
    case COHORT_ATTR_FLOAT: return PyFloat_FromDouble(a->default_float);
    case COHORT_ATTR_STRING: return PyUnicode_FromString(a->default_string ? a->default_string : "");
    case COHORT_ATTR_INTS:
    case COHORT_ATTR_FLOATS: {
      PyObject* t = PyTuple_New(a->default_count);
      for (int32_t i = 0; t != NULL && i < a->default_count; ++i) {
        PyObject* v = a->type == COHORT_ATTR_INTS ? PyLong_FromLongLong(a->default_ints[i])
                                                  : PyFloat_FromDouble(a->default_floats[i]);
        if (v == NULL) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, i, v);
      }
      return t;
    }
  }
  Py_RETURN_NONE;
}

PyObject* pyc_op_describe(const char* op) {
  cohort_op_info info;
  memset(&info, 0, sizeof info);
  info.size = sizeof info;
  cohort_status status = cohort_op_describe(op, &info);
  if (status != COHORT_OK) return pyc_raise(status);
  PyObject* attrs = PyTuple_New(info.num_attrs);
  for (int32_t i = 0; attrs != NULL && i < info.num_attrs; ++i) {
    cohort_op_attr_info a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    status = cohort_op_describe_attr(op, i, &a);
    if (status != COHORT_OK) {
      Py_DECREF(attrs);
      return pyc_raise(status);
    }
    PyObject* entry = Py_BuildValue("(siNN)", a.name, (int)a.type, PyBool_FromLong(a.required), attr_default(&a));
    if (entry == NULL) Py_CLEAR(attrs);
    else PyTuple_SET_ITEM(attrs, i, entry);
  }
  if (attrs == NULL) return NULL;
  const int32_t outputs = info.num_outputs < 0 ? 1 : info.num_outputs;
  return Py_BuildValue("(sNiNzN)", info.name, str_tuple(info.input_names, info.max_inputs), (int)info.min_inputs,
                       str_tuple(info.output_names, outputs), info.outputs_attr, attrs);
}

/* Every callable ever registered: a cohort thread may be about to call one already replaced. */
static PyObject* g_log_callbacks = NULL;

static void log_trampoline(int level, const char* message, void* user) {
#if PY_VERSION_HEX >= 0x030D0000
  if (Py_IsFinalizing()) return;
#else
  if (_Py_IsFinalizing()) return;
#endif
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* text = PyUnicode_DecodeUTF8(message, (Py_ssize_t)strlen(message), "replace");
  PyObject* result = text ? PyObject_CallFunction((PyObject*)user, "iO", level, text) : NULL;
  if (result == NULL) PyErr_WriteUnraisable((PyObject*)user);
  Py_XDECREF(result);
  Py_XDECREF(text);
  PyGILState_Release(gil);
}

PyObject* pyc_set_log_callback(PyObject* fn) {
  cohort_status status;
  if (fn == Py_None) {
    status = cohort_set_log_callback(NULL, NULL);
  } else {
    if (!PyCallable_Check(fn)) {
      PyErr_SetString(PyExc_TypeError, "set_log_callback: expected a callable (level, message) or None");
      return NULL;
    }
    if (g_log_callbacks == NULL && (g_log_callbacks = PyList_New(0)) == NULL) return NULL;
    if (PyList_Append(g_log_callbacks, fn) < 0) return NULL;
    Py_BEGIN_ALLOW_THREADS
      status = cohort_set_log_callback(log_trampoline, fn);
    Py_END_ALLOW_THREADS
  }
  if (status != COHORT_OK) return pyc_raise(status);
  Py_RETURN_NONE;
}
