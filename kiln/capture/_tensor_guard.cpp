/*
 * kiln.capture._tensor_guard -- a tensor guard's field checks read straight from the TensorImpl.
 *
 * The guard of each input tensor and of each tensor a graph holds compares its dtype, device, size,
 * stride and requires_grad with what they were when the graph was traced (kiln/capture/guards.py).
 * _eval_frame.c does that through Python attributes (t.dtype, t.shape, t.stride(), ...): about 300 ns a
 * tensor, which for a model's parameters is most of a call's host cost. This file does the same
 * comparisons on the at::Tensor behind the Python object, in tens of nanoseconds.
 *
 * It needs torch's C++ headers, which a plain `pip install` of kiln does not compile against, so it
 * is built at run time (kiln/capture/tensor_guard_build.py, once per torch and Python version, in the
 * background) and handed to _eval_frame.c as a capsule holding `kiln_tensor_guard_api`. Until then, and
 * for every tensor this file cannot read without running Python code, _eval_frame.c reads the Python
 * attributes as before: `fields_match` answers -2 ("ask the attributes") for a tensor whose type is not
 * exactly one of the types given to `init` (a subclass may override what its attributes say), one
 * whose sizes are symbolic, a Python-dispatch, nested, sparse or other non-strided tensor, and on any C++
 * exception (a batched tensor's strides, for one: its Python attribute raises too, and the guard fails).
 */
#include <Python.h>

#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

extern "C" {

/* Keep in sync with kiln_tensor_guard_api in _eval_frame.c. */
typedef struct {
    int version;
    /* 1 when t's dtype is `dtype` (a torch.dtype), its device equals `device` (a torch.device), its
     * size and stride equal the int tuples `size` and `stride`, and requires_grad is `requires_grad`
     * (True/False); 0 when one differs; -2 when this function cannot tell. Never sets an exception. */
    int (*fields_match)(PyObject *t, PyObject *dtype, PyObject *device, PyObject *size, PyObject *stride,
                        PyObject *requires_grad);
} kiln_tensor_guard_api;

}  // extern "C"

namespace {

constexpr int kUnknown = -2;
PyObject *exact_types = nullptr;  // tuple of the types whose tensors are read here (init)

bool read_here(PyObject *t) {
    if (exact_types == nullptr) {
        return false;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(exact_types); i++) {
        if ((PyObject *)Py_TYPE(t) == PyTuple_GET_ITEM(exact_types, i)) {
            return true;
        }
    }
    return false;
}

/* 1 when the tuple of Python ints `want` equals `have`, 0 when not, kUnknown when `want` is not a
 * tuple of exact ints. */
int ints_equal(PyObject *want, c10::IntArrayRef have) {
    if (!PyTuple_Check(want)) {
        return kUnknown;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(want);
    if ((size_t)n != have.size()) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(want, i);
        if (!PyLong_CheckExact(item)) {
            return kUnknown;
        }
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return kUnknown;
        }
        if (v != have[i]) {
            return 0;
        }
    }
    return 1;
}

int fields_match(PyObject *t, PyObject *dtype, PyObject *device, PyObject *size, PyObject *stride,
                 PyObject *requires_grad) {
    if (!read_here(t) || !THPDtype_Check(dtype) || !THPDevice_Check(device) ||
        (requires_grad != Py_True && requires_grad != Py_False)) {
        return kUnknown;
    }
    try {
        const at::Tensor &tensor = THPVariable_Unpack(t);
        c10::TensorImpl *impl = tensor.unsafeGetTensorImpl();
        if (impl == nullptr || impl->layout() != c10::kStrided || impl->is_python_dispatch() ||
            impl->is_nested() || impl->has_symbolic_sizes_strides()) {
            return kUnknown;
        }
        if (tensor.scalar_type() != ((THPDtype *)dtype)->scalar_type) {
            return 0;
        }
        if (tensor.requires_grad() != (requires_grad == Py_True)) {
            return 0;
        }
        int ok = ints_equal(size, impl->sizes());
        if (ok != 1) {
            return ok;
        }
        ok = ints_equal(stride, impl->strides());
        if (ok != 1) {
            return ok;
        }
        return tensor.device() == ((THPDevice *)device)->device ? 1 : 0;
    } catch (...) {
        return kUnknown;
    }
}

kiln_tensor_guard_api api = {1, fields_match};

PyObject *init(PyObject *module, PyObject *types) {
    (void)module;
    if (!PyTuple_Check(types)) {
        PyErr_SetString(PyExc_TypeError, "init(types): a tuple of tensor types");
        return nullptr;
    }
    Py_INCREF(types);
    Py_XSETREF(exact_types, types);
    return PyCapsule_New(&api, "kiln.capture._tensor_guard.api", nullptr);
}

PyMethodDef methods[] = {
    {"init", (PyCFunction)init, METH_O,
     "init(types) -> capsule: the checks, for tensors whose type is exactly one of `types`."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_tensor_guard",
    "A tensor guard's field checks on the TensorImpl (kiln/capture/tensor_guard_build.py).", -1, methods,
};

}  // namespace

PyMODINIT_FUNC PyInit__tensor_guard(void) {
    return PyModule_Create(&module_def);
}
