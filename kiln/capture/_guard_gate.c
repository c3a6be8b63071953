/*
 * Guard gates (kiln/capture/guard_gate.py): whether the dicts and types a block of guards reads
 * through are unchanged since that block last passed, so the block need not run again.
 *
 * A dict's ma_version_tag (PEP 509; CPython 3.11 and 3.12 still set it) takes a new, never reused
 * value on every change to the dict; a type's tp_version_tag is cleared when the type or a base
 * changes (and a new one is given later). So equal tags mean unchanged contents.
 *
 * state = (flag, dicts, tags, owners, owner_dicts, typed, types, type_tags, expected)
 *   flag        bytearray(1): 1 once tags were recorded while the objects below were current
 *   dicts       tuple of dicts whose versions are compared; tags: bytearray(8 * len(dicts))
 *   owners      tuple of objects whose __dict__ must still be owner_dicts[i]
 *   typed       tuple of objects whose type must still be types[i] (None: types[i] itself is watched, not
 *               an object's type: kiln/capture/class_guards.py), with tp_version_tag
 *               type_tags[i] (uint32 each, taken when the gate was planned; guard_gate.make_recorder
 *               replaces them after checking the reads through a changed type again)
 *   expected    tuple of objects the guards reach (identity), in the order of gate_record's tuple
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* ma_version_tag: deprecated in 3.12 */

enum { G_FLAG, G_DICTS, G_TAGS, G_OWNERS, G_OWNER_DICTS, G_TYPED, G_TYPES, G_TYPE_TAGS, G_EXPECTED, G_LEN };

/* Whether `state` has the layout above. `items`: also check that every watched dict is a dict and every
 * type a type (O(n): snapshot and record do it; gate_unchanged, on every call, reads the dicts only once
 * the flag is set, which only a record that checked them sets, and the state's tuples cannot change). */
static int
state_ok(PyObject *state, int items)
{
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != G_LEN) {
        PyErr_SetString(PyExc_TypeError, "guard gate: state must be a 9-tuple");
        return 0;
    }
    PyObject *flag = PyTuple_GET_ITEM(state, G_FLAG), *tags = PyTuple_GET_ITEM(state, G_TAGS);
    PyObject *type_tags = PyTuple_GET_ITEM(state, G_TYPE_TAGS);
    PyObject *dicts = PyTuple_GET_ITEM(state, G_DICTS), *types = PyTuple_GET_ITEM(state, G_TYPES);
    PyObject *typed = PyTuple_GET_ITEM(state, G_TYPED), *owners = PyTuple_GET_ITEM(state, G_OWNERS);
    PyObject *owner_dicts = PyTuple_GET_ITEM(state, G_OWNER_DICTS);
    if (!PyByteArray_Check(flag) || PyByteArray_GET_SIZE(flag) != 1 || !PyTuple_Check(dicts) ||
        !PyByteArray_Check(tags) || PyByteArray_GET_SIZE(tags) != 8 * PyTuple_GET_SIZE(dicts) ||
        !PyTuple_Check(typed) || !PyTuple_Check(types) || PyTuple_GET_SIZE(typed) != PyTuple_GET_SIZE(types) ||
        !PyByteArray_Check(type_tags) || PyByteArray_GET_SIZE(type_tags) != 4 * PyTuple_GET_SIZE(types) ||
        !PyTuple_Check(owners) || !PyTuple_Check(owner_dicts) ||
        PyTuple_GET_SIZE(owners) != PyTuple_GET_SIZE(owner_dicts) ||
        !PyTuple_Check(PyTuple_GET_ITEM(state, G_EXPECTED))) {
        PyErr_SetString(PyExc_TypeError, "guard gate: malformed state");
        return 0;
    }
    if (!items)
        return 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dicts); i++)
        if (!PyDict_Check(PyTuple_GET_ITEM(dicts, i))) {
            PyErr_SetString(PyExc_TypeError, "guard gate: a watched object is not a dict");
            return 0;
        }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(types); i++)
        if (!PyType_Check(PyTuple_GET_ITEM(types, i))) {
            PyErr_SetString(PyExc_TypeError, "guard gate: types must be types");
            return 0;
        }
    return 1;
}

/* 1 when every typed object still has its type, with the type's version tag of the plan, and every
 * owner still has its __dict__; 0 when not; -1 with an exception set. */
static int
types_and_owners_same(PyObject *state)
{
    PyObject *typed = PyTuple_GET_ITEM(state, G_TYPED), *types = PyTuple_GET_ITEM(state, G_TYPES);
    const uint32_t *type_tags = (const uint32_t *)PyByteArray_AS_STRING(PyTuple_GET_ITEM(state, G_TYPE_TAGS));
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(typed); i++) {
        PyTypeObject *tp = (PyTypeObject *)PyTuple_GET_ITEM(types, i);
        PyObject *obj = PyTuple_GET_ITEM(typed, i);
        if (obj != Py_None && Py_TYPE(obj) != tp)
            return 0;
        if (!(tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) || tp->tp_version_tag == 0 ||
            tp->tp_version_tag != type_tags[i])
            return 0;
    }
    PyObject *owners = PyTuple_GET_ITEM(state, G_OWNERS), *owner_dicts = PyTuple_GET_ITEM(state, G_OWNER_DICTS);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(owners); i++) {
        PyObject *d = PyObject_GenericGetDict(PyTuple_GET_ITEM(owners, i), NULL);
        if (d == NULL)
            return -1;
        int same = d == PyTuple_GET_ITEM(owner_dicts, i);
        Py_DECREF(d);
        if (!same)
            return 0;
    }
    return 1;
}

/* Gives `tp` a version tag if it has none (a lookup through the method cache assigns one). */
static void
assign_version_tag(PyTypeObject *tp)
{
    static PyObject *probe = NULL;
    if (probe == NULL && (probe = PyUnicode_InternFromString("__kiln_gate_probe__")) == NULL) {
        PyErr_Clear();
        return;
    }
    (void)_PyType_Lookup(tp, probe);
}

/* gate_unchanged(state) -> bool: tags were recorded and nothing watched changed since. */
PyObject *
kiln_gate_unchanged(PyObject *module, PyObject *state)
{
    (void)module;
    if (!state_ok(state, 0))
        return NULL;
    if (PyByteArray_AS_STRING(PyTuple_GET_ITEM(state, G_FLAG))[0] != 1)
        Py_RETURN_FALSE;
    PyObject *dicts = PyTuple_GET_ITEM(state, G_DICTS);
    const uint64_t *tags = (const uint64_t *)PyByteArray_AS_STRING(PyTuple_GET_ITEM(state, G_TAGS));
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dicts); i++)
        if (((PyDictObject *)PyTuple_GET_ITEM(dicts, i))->ma_version_tag != tags[i])
            Py_RETURN_FALSE;
    int same = types_and_owners_same(state);
    if (same < 0)
        return NULL;
    return PyBool_FromLong(same);
}

/* gate_snapshot(state) -> bytes: the watched dicts' version tags (8 bytes each), then the watched types'
 * (4 bytes each), taken before the gated guards run: what gate_record stores after they pass. (Tags taken
 * after the guards could include a change another thread made between a guard's read and the record.) */
PyObject *
kiln_gate_snapshot(PyObject *module, PyObject *state)
{
    (void)module;
    if (!state_ok(state, 1))
        return NULL;
    PyObject *dicts = PyTuple_GET_ITEM(state, G_DICTS), *types = PyTuple_GET_ITEM(state, G_TYPES);
    Py_ssize_t nd = PyTuple_GET_SIZE(dicts), nt = PyTuple_GET_SIZE(types);
    PyObject *snap = PyBytes_FromStringAndSize(NULL, 8 * nd + 4 * nt);
    if (snap == NULL)
        return NULL;
    uint64_t *dtags = (uint64_t *)PyBytes_AS_STRING(snap);
    uint32_t *ttags = (uint32_t *)(PyBytes_AS_STRING(snap) + 8 * nd);
    for (Py_ssize_t i = 0; i < nd; i++)
        dtags[i] = ((PyDictObject *)PyTuple_GET_ITEM(dicts, i))->ma_version_tag;
    for (Py_ssize_t i = 0; i < nt; i++) {
        PyTypeObject *tp = (PyTypeObject *)PyTuple_GET_ITEM(types, i);
        if (!(tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) || tp->tp_version_tag == 0)
            assign_version_tag(tp); /* (a type changed since: its new tag, as the guards' reads would give it) */
        ttags[i] = (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? tp->tp_version_tag : 0;
    }
    return snap;
}

/* gate_record(state, reached, snap) -> bool: after the gated guards passed, reading through the objects
 * in `reached`: when those are the planned objects (identity), owners keep their __dict__, objects their
 * type, and the snapshot's type tags are the planned ones, store the snapshot's dict tags (the next call
 * may skip the block while they hold) and answer True; otherwise clear the flag and answer False. */
PyObject *
kiln_gate_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3 || !PyTuple_Check(args[1]) || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "gate_record(state, reached, snap): a state, a tuple and bytes");
        return NULL;
    }
    PyObject *state = args[0], *reached = args[1], *snap = args[2];
    if (!state_ok(state, 1))
        return NULL;
    char *flag = PyByteArray_AS_STRING(PyTuple_GET_ITEM(state, G_FLAG));
    flag[0] = 0;
    PyObject *dicts = PyTuple_GET_ITEM(state, G_DICTS), *types = PyTuple_GET_ITEM(state, G_TYPES);
    Py_ssize_t nd = PyTuple_GET_SIZE(dicts), nt = PyTuple_GET_SIZE(types);
    if (PyBytes_GET_SIZE(snap) != 8 * nd + 4 * nt) {
        PyErr_SetString(PyExc_ValueError, "gate_record: a snapshot of another state");
        return NULL;
    }
    PyObject *expected = PyTuple_GET_ITEM(state, G_EXPECTED);
    if (PyTuple_GET_SIZE(expected) != PyTuple_GET_SIZE(reached))
        Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(expected); i++)
        if (PyTuple_GET_ITEM(expected, i) != PyTuple_GET_ITEM(reached, i))
            Py_RETURN_FALSE;
    const uint32_t *snap_ttags = (const uint32_t *)(PyBytes_AS_STRING(snap) + 8 * nd);
    const uint32_t *type_tags = (const uint32_t *)PyByteArray_AS_STRING(PyTuple_GET_ITEM(state, G_TYPE_TAGS));
    for (Py_ssize_t i = 0; i < nt; i++)
        if (snap_ttags[i] == 0 || snap_ttags[i] != type_tags[i])
            Py_RETURN_FALSE;
    int same = types_and_owners_same(state);
    if (same < 0)
        return NULL;
    if (!same)
        Py_RETURN_FALSE;
    memcpy(PyByteArray_AS_STRING(PyTuple_GET_ITEM(state, G_TAGS)), PyBytes_AS_STRING(snap), 8 * nd);
    flag[0] = 1;
    Py_RETURN_TRUE;
}

/* type_version(tp) -> int: tp's version tag, given one now if it has none; 0 when none can be given. */
PyObject *
kiln_type_version(PyObject *module, PyObject *tp)
{
    (void)module;
    if (!PyType_Check(tp)) {
        PyErr_SetString(PyExc_TypeError, "type_version(tp): a type");
        return NULL;
    }
    PyTypeObject *t = (PyTypeObject *)tp;
    if (!(t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) || t->tp_version_tag == 0)
        assign_version_tag(t);
    if (!(t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
        return PyLong_FromLong(0);
    return PyLong_FromUnsignedLong(t->tp_version_tag);
}
