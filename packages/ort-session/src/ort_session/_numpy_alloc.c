/* Counting numpy data-buffer allocator: ort_session._numpy_alloc (built by _numpy_alloc_build.py).
 *
 * install() makes a numpy memory handler (NEP 49, PyDataMem_SetHandler) that forwards every data-buffer
 * allocation to the handler active before it and counts the bytes live through it: current, peak, and the
 * number of allocations. The handler is set in the calling context only (numpy keeps it in a context
 * variable), so other threads' and tasks' arrays are not counted. Each block carries a 16-byte header with its
 * size, so realloc and free count exactly what was allocated. An array keeps a reference to the handler that
 * allocated it, so the counter (the capsule) lives until the last such array is freed, after restore(). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#include <numpy/arrayobject.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define HEADER 16 /* keeps the 16-byte alignment of the forwarded allocator */
#define CAPSULE_NAME "mem_handler"

typedef struct {
    PyDataMem_Handler handler; /* what numpy calls; allocator.ctx points to this struct */
    PyObject *inner_capsule;   /* the handler forwarded to (a reference held) */
    PyDataMem_Handler *inner;
    _Atomic int64_t current, peak, count;
} Counter;

static void count_add(Counter *c, int64_t n) {
    int64_t now = atomic_fetch_add(&c->current, n) + n;
    int64_t peak = atomic_load(&c->peak);
    while (now > peak && !atomic_compare_exchange_weak(&c->peak, &peak, now)) {
    }
}

static void *wrap(Counter *c, char *raw, size_t size) {
    if (raw == NULL) return NULL;
    memcpy(raw, &size, sizeof size);
    count_add(c, (int64_t)size);
    atomic_fetch_add(&c->count, 1);
    return raw + HEADER;
}

static void *counting_malloc(void *ctx, size_t size) {
    Counter *c = ctx;
    if (size > SIZE_MAX - HEADER) return NULL;
    return wrap(c, c->inner->allocator.malloc(c->inner->allocator.ctx, size + HEADER), size);
}

static void *counting_calloc(void *ctx, size_t nelem, size_t elsize) {
    Counter *c = ctx;
    if (elsize != 0 && nelem > (SIZE_MAX - HEADER) / elsize) return NULL;
    size_t size = nelem * elsize;
    return wrap(c, c->inner->allocator.calloc(c->inner->allocator.ctx, size + HEADER, 1), size);
}

static void *counting_realloc(void *ctx, void *ptr, size_t new_size) {
    Counter *c = ctx;
    if (ptr == NULL) return counting_malloc(ctx, new_size);
    if (new_size > SIZE_MAX - HEADER) return NULL;
    char *raw = (char *)ptr - HEADER;
    size_t old_size;
    memcpy(&old_size, raw, sizeof old_size);
    char *moved = c->inner->allocator.realloc(c->inner->allocator.ctx, raw, new_size + HEADER);
    if (moved == NULL) return NULL; /* the old block is untouched and still counted */
    memcpy(moved, &new_size, sizeof new_size);
    count_add(c, (int64_t)new_size - (int64_t)old_size);
    if (new_size > old_size) atomic_fetch_add(&c->count, 1);
    return moved + HEADER;
}

static void counting_free(void *ctx, void *ptr, size_t size) {
    Counter *c = ctx;
    (void)size; /* the header holds what was allocated */
    if (ptr == NULL) return;
    char *raw = (char *)ptr - HEADER;
    size_t allocated;
    memcpy(&allocated, raw, sizeof allocated);
    atomic_fetch_sub(&c->current, (int64_t)allocated);
    c->inner->allocator.free(c->inner->allocator.ctx, raw, allocated + HEADER);
}

static void counter_destroy(PyObject *capsule) {
    Counter *c = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (c == NULL) {
        PyErr_Clear();
        return;
    }
    Py_XDECREF(c->inner_capsule);
    PyMem_RawFree(c);
}

static Counter *counter_of(PyObject *capsule) {
    if (!PyCapsule_IsValid(capsule, CAPSULE_NAME) ||
        PyCapsule_GetDestructor(capsule) != counter_destroy) {
        PyErr_SetString(PyExc_TypeError, "expected a counter made by ort_session._numpy_alloc.install()");
        return NULL;
    }
    return PyCapsule_GetPointer(capsule, CAPSULE_NAME);
}

/* install() -> (counter, previous): the counter is now numpy's handler in this context. */
static PyObject *install(PyObject *self, PyObject *unused) {
    PyObject *prev = PyDataMem_GetHandler();
    if (prev == NULL) return NULL;
    PyDataMem_Handler *inner = PyCapsule_GetPointer(prev, CAPSULE_NAME);
    if (inner == NULL) {
        Py_DECREF(prev);
        return NULL;
    }
    Counter *c = PyMem_RawCalloc(1, sizeof *c);
    if (c == NULL) {
        Py_DECREF(prev);
        return PyErr_NoMemory();
    }
    snprintf(c->handler.name, sizeof c->handler.name, "ort_session_counting(%s)", inner->name);
    c->handler.version = 1;
    c->handler.allocator = (PyDataMemAllocator){c, counting_malloc, counting_calloc, counting_realloc, counting_free};
    Py_INCREF(prev);
    c->inner_capsule = prev;
    c->inner = inner;
    PyObject *capsule = PyCapsule_New(&c->handler, CAPSULE_NAME, counter_destroy);
    if (capsule == NULL) {
        Py_DECREF(prev);
        Py_DECREF(prev);
        PyMem_RawFree(c);
        return NULL;
    }
    /* PyCapsule_GetPointer(capsule) is &c->handler == c (the handler is the first member) */
    PyObject *old = PyDataMem_SetHandler(capsule);
    if (old == NULL) {
        Py_DECREF(capsule);
        Py_DECREF(prev);
        return NULL;
    }
    Py_DECREF(old);
    return Py_BuildValue("(NN)", capsule, prev);
}

/* restore(previous): make `previous` (from install()) numpy's handler in this context again. */
static PyObject *restore(PyObject *self, PyObject *previous) {
    if (!PyCapsule_IsValid(previous, CAPSULE_NAME)) {
        PyErr_SetString(PyExc_TypeError, "expected the previous handler returned by install()");
        return NULL;
    }
    PyObject *old = PyDataMem_SetHandler(previous);
    if (old == NULL) return NULL;
    Py_DECREF(old);
    Py_RETURN_NONE;
}

/* counts(counter) -> (current bytes, peak bytes, allocations) */
static PyObject *counts(PyObject *self, PyObject *capsule) {
    Counter *c = counter_of(capsule);
    if (c == NULL) return NULL;
    return Py_BuildValue("(LLL)", (long long)atomic_load(&c->current), (long long)atomic_load(&c->peak),
                         (long long)atomic_load(&c->count));
}

/* reset_peak(counter) -> the peak before: the peak restarts from the bytes live now */
static PyObject *reset_peak(PyObject *self, PyObject *capsule) {
    Counter *c = counter_of(capsule);
    if (c == NULL) return NULL;
    int64_t before = atomic_exchange(&c->peak, atomic_load(&c->current));
    return PyLong_FromLongLong((long long)before);
}

static PyMethodDef methods[] = {
    {"install", install, METH_NOARGS, "install() -> (counter, previous): count numpy data buffers in this context"},
    {"restore", restore, METH_O, "restore(previous): numpy's handler before install(), in this context"},
    {"counts", counts, METH_O, "counts(counter) -> (current bytes, peak bytes, allocations)"},
    {"reset_peak", reset_peak, METH_O, "reset_peak(counter) -> the peak before; it restarts at the current bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_numpy_alloc",
                                    "Counting numpy data-buffer allocator (NEP 49 handler).", -1, methods};

PyMODINIT_FUNC PyInit__numpy_alloc(void) {
    if (_import_array() < 0) return NULL;
    return PyModule_Create(&module);
}
