/*
 * kiln.capture._eval_frame -- kiln's PEP 523 frame-evaluation hook (CPython 3.11 and 3.12).
 *
 * PEP 523 lets an extension replace the function the interpreter uses to evaluate a
 * frame (`interp->eval_frame`).  kiln installs `kiln_eval_frame` once, interpreter-wide,
 * the first time a thread sets a callback, and never uninstalls it.  A thread without a
 * callback goes straight to `_PyEval_EvalFrameDefault` after one thread-local load.
 *
 * For a thread with a callback, every plain Python function frame that is about to start
 * is offered to the callback as
 *
 *     cb(code, f_locals, f_globals, f_builtins, closure)
 *
 * with the callback unset for this thread while it runs.  It answers
 *
 *     None      -> the original frame runs with the default evaluator;
 *     a code    -> a function is built from that code (same globals, same closure) and
 *                  called with the frame's arguments; the original frame never runs.
 *
 * Python API (see kiln/capture/hook.py for the documented wrapper):
 *     set_callback(cb_or_None) -> previous      get_callback() -> cb or None
 *     mark_skip(code)  unmark(code)  is_skipped(code) -> bool
 *     call_without_hook(fn, *args, **kwargs)
 *     _debug_counters() -> dict                 (for tests)
 *
 * Only symbols marked PyAPI_FUNC/PyAPI_DATA are used: distribution builds of CPython
 * (e.g. Ubuntu's) are compiled with -fvisibility=hidden, so internal helpers such as
 * _PyFrame_ClearExceptCode or _PyThreadState_PopFrame cannot be linked against.  What we
 * need of them is re-implemented below from the internal headers (struct layouts and
 * static inline functions only), with the CPython function it mirrors named next to it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030D0000
#error "kiln's frame hook supports CPython 3.11 and 3.12 only"
#endif

#define KILN_PY312 (PY_VERSION_HEX >= 0x030C0000)

/* _PyInterpreterFrame's layout lives in the internal headers, which insist on
 * Py_BUILD_CORE.  We define it only around that include, so that Python.h above kept its
 * public (extension) configuration. */
#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

/* ------------------------------------------------------------------------------------ */
/* Version-specific frame accessors.                                                     */
/*                                                                                        */
/* 3.11 _PyInterpreterFrame: f_func (PyFunctionObject*, strong), f_globals, f_builtins,  */
/*   f_locals, f_code, frame_obj, previous, prev_instr, stacktop, is_entry, owner,        */
/*   localsplus[].                                                                        */
/* 3.12 _PyInterpreterFrame: f_code, previous, f_funcobj (PyObject*, strong), f_globals,  */
/*   f_builtins, f_locals, frame_obj, prev_instr, stacktop, return_offset, owner,         */
/*   localsplus[].                                                                        */
/* ------------------------------------------------------------------------------------ */
#if KILN_PY312
#define FRAME_FUNC(frame) ((frame)->f_funcobj)
#else
#define FRAME_FUNC(frame) ((PyObject *)(frame)->f_func)
#endif

/* co_extra API: 3.12 renamed the underscored functions to PyUnstable_* (the old names
 * remain as deprecated aliases).  All are exported. */
#if KILN_PY312
#define kiln_RequestCodeExtraIndex PyUnstable_Eval_RequestCodeExtraIndex
#define kiln_Code_GetExtra PyUnstable_Code_GetExtra
#define kiln_Code_SetExtra PyUnstable_Code_SetExtra
#else
#define kiln_RequestCodeExtraIndex _PyEval_RequestCodeExtraIndex
#define kiln_Code_GetExtra _PyCode_GetExtra
#define kiln_Code_SetExtra _PyCode_SetExtra
#endif

/* ------------------------------------------------------------------------------------ */
/* Per-thread state.                                                                      */
/* ------------------------------------------------------------------------------------ */
typedef struct {
    /* Strong reference to this thread's callback, or NULL. */
    PyObject *callback;
    /* Borrowed: a substitute code object we are about to call.  The next frame of that
     * code reaching the hook runs with the default evaluator instead of being offered
     * (one shot), so substituted code is never offered back to the callback. */
    PyCodeObject *expect;
    /* Strong reference: the function last built for a substitute without a closure,
     * reused while the same code runs with the same globals (saves an allocation per
     * substituted call).  Functions with closures are never cached, so no cell (and
     * what it holds) is kept alive by the cache. */
    PyObject *func_cache;
    /* Whether this thread's state dict holds our guard capsule (see tls_guard). */
    int guarded;
} kiln_tls_t;

/* C11 thread-local storage: one slot per OS thread, which with the GIL is one slot per
 * Python thread. */
static _Thread_local kiln_tls_t kiln_tls = {NULL, NULL, NULL, 0};

/* The strong references in kiln_tls must be dropped when the thread ends.  C TLS has
 * no destructor that may call into Python, so the first time a thread sets a callback we
 * put a capsule in its thread-state dict (PyThreadState_GetDict); CPython clears that
 * dict in PyThreadState_Clear, which a finishing thread runs itself, GIL held, and the
 * capsule's destructor then releases the thread's references. */
#define TLS_GUARD_NAME "kiln.capture._eval_frame.tls_guard"

static void
tls_guard_destructor(PyObject *capsule)
{
    (void)capsule;
    PyObject *cb = kiln_tls.callback;
    PyObject *func = kiln_tls.func_cache;
    kiln_tls.callback = NULL;
    kiln_tls.func_cache = NULL;
    kiln_tls.expect = NULL;
    kiln_tls.guarded = 0;
    Py_XDECREF(cb);
    Py_XDECREF(func);
}

static int
ensure_tls_guard(void)
{
    if (kiln_tls.guarded) {
        return 0;
    }
    PyObject *dict = PyThreadState_GetDict();
    if (dict == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "kiln frame hook: no thread state dict");
        return -1;
    }
    PyObject *capsule = PyCapsule_New(&kiln_tls, TLS_GUARD_NAME, tls_guard_destructor);
    if (capsule == NULL) {
        return -1;
    }
    int rc = PyDict_SetItemString(dict, TLS_GUARD_NAME, capsule);
    Py_DECREF(capsule);
    if (rc < 0) {
        return -1;
    }
    kiln_tls.guarded = 1;
    return 0;
}

/* co_extra slot for the per-code "skip" flag (value (void*)1 when skipped). */
static Py_ssize_t skip_index = -1;
#define SKIP_MARK ((void *)1)

/* The callback's cache tables: its attribute `_kiln_tables`, a dict {id(code): list of (check, code)}
 * (kiln/capture/convert_frame.py). On the callback, not on the code objects: a table's guards hold the
 * objects they check, which may lead back to the compiler (a module holding its own compiled method), and
 * the garbage collector follows references through the compiler's dict, not through co_extra. The
 * compiler holds each code object it has entries for, so an id in its dict is never a reused one. */
static PyObject *s_kiln_tables = NULL;
/* torch._C._autograd._top_saved_tensors_default_hooks (set_saved_hooks_probe): while saved-tensor
 * hooks are active the callback decides (a non-reentrant checkpoint's forward runs eagerly). */
static PyObject *saved_hooks_probe = NULL;

/* The checks of _tensor_guard.cpp, read on the TensorImpl (set_tensor_guard; NULL until that module,
 * built at run time by kiln/capture/tensor_guard_build.py, is loaded). Same layout as there. */
typedef struct {
    int version;
    int (*fields_match)(PyObject *t, PyObject *dtype, PyObject *device, PyObject *size, PyObject *stride,
                        PyObject *requires_grad);
} kiln_tensor_guard_api;

static kiln_tensor_guard_api *tensor_guard = NULL;
static PyObject *tensor_guard_capsule = NULL;   /* keeps the module's capsule (and so the module) alive */
static Py_ssize_t n_tensor_guard_reads = 0;      /* tensors _tensor_guard.cpp decided (for tests) */

/* Counters for tests; updated only on rare paths or with plain increments (GIL held). */
static Py_ssize_t n_offered = 0;
static Py_ssize_t n_substituted = 0;
static Py_ssize_t n_chunk_pops = 0;
static Py_ssize_t n_fast_hits = 0;   /* cache hits found by cached_substitute (kiln.stats.cache_hits) */

static PyObject *kiln_eval_frame(PyThreadState *tstate, _PyInterpreterFrame *frame,
                                 int throwflag);

/* Swap this thread's callback, returning the old strong reference (ownership moves to
 * the caller); `cb` is stolen. */
static inline PyObject *
swap_callback(PyObject *cb)
{
    PyObject *old = kiln_tls.callback;
    kiln_tls.callback = cb;
    return old;
}

/* Put `saved` (stolen) back as this thread's callback, dropping whatever was set
 * meanwhile (a callback that itself called set_callback). */
static inline void
restore_callback(PyObject *saved)
{
    PyObject *cur = swap_callback(saved);
    Py_XDECREF(cur);
}

static inline int
code_is_skipped(PyCodeObject *code)
{
    void *extra = NULL;
    if (code->co_extra == NULL) {
        return 0;   /* fast path: most code has no co_extra at all */
    }
    if (kiln_Code_GetExtra((PyObject *)code, skip_index, &extra) < 0) {
        PyErr_Clear();
        return 0;
    }
    return extra == SKIP_MARK;
}

/* ------------------------------------------------------------------------------------ */
/* Which frames are offered.                                                             */
/* ------------------------------------------------------------------------------------ */
static inline int
frame_is_offerable(PyThreadState *tstate, _PyInterpreterFrame *frame, PyCodeObject *code)
{
    const int want = CO_OPTIMIZED | CO_NEWLOCALS;
    const int gen = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE;
    /* Frames on the thread's datastack (pushed by _PyEval_Vector) only.  Generator-owned
     * frames are resumed by gen_send_ex2; frame-object-owned ones come from
     * PyEval_EvalFrame(Ex). */
    if (frame->owner != FRAME_OWNED_BY_THREAD) {
        return 0;
    }
    /* A function body; generator/coroutine code is left alone (its first frame only
     * builds the generator object). */
    if ((code->co_flags & want) != want || (code->co_flags & gen) != 0) {
        return 0;
    }
    /* No locals dict (exec/class bodies), no frame object yet (someone already looks at
     * this frame; in 3.12 we could not dispose it correctly). */
    if (frame->f_locals != NULL || frame->frame_obj != NULL) {
        return 0;
    }
    /* Not started: a fresh frame points just before its first code unit
     * (_PyFrame_Initialize / _PyFrame_InitializeSpecials). */
    if (frame->prev_instr != _PyCode_CODE(code) - 1) {
        return 0;
    }
    /* sys.settrace (debuggers, coverage) sees the original program. */
    if (tstate->tracing || tstate->c_tracefunc != NULL) {
        return 0;
    }
    PyObject *func = FRAME_FUNC(frame);
    if (func == NULL || !PyFunction_Check(func)) {
        return 0;
    }
    return 1;
}

/* Number of argument slots at the front of localsplus. */
static inline int
code_nargs(PyCodeObject *code)
{
    return code->co_argcount + code->co_kwonlyargcount +
           ((code->co_flags & CO_VARARGS) ? 1 : 0) +
           ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
}

/* f_locals for the callback: {name: value} of the arguments.  At entry, arguments sit
 * raw in localsplus[0..n) (MAKE_CELL/COPY_FREE_VARS have not run; their names are the
 * first n of co_localsplusnames, which is co_varnames' prefix).  Returns NULL with no
 * exception set if an argument slot is empty (never expected: argument binding fills
 * them all or fails), meaning "do not offer this frame". */
static PyObject *
frame_args_dict(_PyInterpreterFrame *frame, PyCodeObject *code)
{
    int n = code_nargs(code);
    PyObject *d = PyDict_New();
    if (d == NULL) {
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        PyObject *value = frame->localsplus[i];
        if (value == NULL) {
            Py_DECREF(d);
            return NULL;
        }
        PyObject *name = PyTuple_GET_ITEM(code->co_localsplusnames, i);
        if (PyDict_SetItem(d, name, value) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}

/* ------------------------------------------------------------------------------------ */
/* Disposing of a frame that will not run.                                               */
/* ------------------------------------------------------------------------------------ */
#if KILN_PY312
/* 3.12: _PyEval_Vector does not clear the frame; _PyEval_EvalFrameDefault does, on
 * return.  When we do not run the frame we must do its job.  This mirrors
 * clear_thread_frame() (Python/ceval.c) = _PyFrame_ClearExceptCode() (Python/frame.c)
 * + Py_DECREF(f_code) + _PyThreadState_PopFrame() (Python/pystate.c), none exported.
 * frame_obj is NULL (checked before offering) and the frame was never linked into
 * tstate->cframe->current_frame (the default evaluator does that), so nothing else can
 * see it. */
static void
dispose_frame(PyThreadState *tstate, _PyInterpreterFrame *frame)
{
    /* Contents first, with the frame still on the datastack: finalizers run here may push
     * frames, which go above it. */
    tstate->c_recursion_remaining--;
    for (int i = 0; i < frame->stacktop; i++) {
        Py_XDECREF(frame->localsplus[i]);
    }
    Py_XDECREF(frame->frame_obj);
    Py_XDECREF(frame->f_locals);
    Py_DECREF(frame->f_funcobj);
    Py_DECREF(frame->f_code);
    tstate->c_recursion_remaining++;

    /* _PyThreadState_PopFrame: a frame at the very start of a chunk was the first one
     * pushed into it (push_chunk); popping it frees the chunk and resumes the previous
     * one.  The root chunk is never popped this way (push_chunk guarantees it). */
    PyObject **base = (PyObject **)frame;
    _PyStackChunk *chunk = tstate->datastack_chunk;
    if (base == &chunk->data[0]) {
        _PyStackChunk *previous = chunk->previous;
        PyObjectArenaAllocator arena;
        tstate->datastack_top = &previous->data[previous->top];
        tstate->datastack_chunk = previous;
        tstate->datastack_limit = (PyObject **)(((char *)previous) + previous->size);
        /* _PyObject_VirtualFree: chunks come from the object arena allocator. */
        PyObject_GetArenaAllocator(&arena);
        arena.free(arena.ctx, chunk, chunk->size);
        n_chunk_pops++;
    }
    else {
        tstate->datastack_top = base;
    }
}
#else
/* 3.11: the only caller of eval_frame for thread-owned frames, _PyEval_Vector, calls
 * _PyEvalFrameClearAndPop itself after we return, whether or not the frame ran
 * (gen_send_ex2 only sees generator-owned frames, which we never offer).  With a custom
 * eval_frame installed, CALL does not inline Python-to-Python calls, so every offered
 * frame came through _PyEval_Vector.  Nothing to do here. */
static inline void
dispose_frame(PyThreadState *tstate, _PyInterpreterFrame *frame)
{
    (void)tstate;
    (void)frame;
}
#endif

/* ------------------------------------------------------------------------------------ */
/* Running a substitute code object.                                                     */
/* ------------------------------------------------------------------------------------ */

/* The substitute must accept the original's arguments exactly as we pass them. */
static int
check_substitute(PyCodeObject *code, PyCodeObject *new_code, PyObject *closure)
{
    const int sig = CO_VARARGS | CO_VARKEYWORDS;
    Py_ssize_t nclosure = (closure != NULL) ? PyTuple_GET_SIZE(closure) : 0;
    if (new_code->co_argcount != code->co_argcount ||
        new_code->co_posonlyargcount != code->co_posonlyargcount ||
        new_code->co_kwonlyargcount != code->co_kwonlyargcount ||
        (new_code->co_flags & sig) != (code->co_flags & sig)) {
        PyErr_Format(PyExc_TypeError,
                     "kiln frame hook: the substitute code %R does not take the same "
                     "arguments as %R", new_code, code);
        return -1;
    }
    if (new_code->co_nfreevars != 0 && new_code->co_nfreevars != nclosure) {
        PyErr_Format(PyExc_TypeError,
                     "kiln frame hook: the substitute code %R has %d free variables but "
                     "the original function's closure has %zd cells",
                     new_code, new_code->co_nfreevars, nclosure);
        return -1;
    }
    return 0;
}

/* Vectorcall `func`, making the first frame of `new_code` skip the hook. */
static inline PyObject *
call_marked(PyObject *func, PyCodeObject *new_code, PyObject *const *args, size_t nargs,
            PyObject *kwnames)
{
    kiln_tls.expect = new_code;
    PyObject *res = PyObject_Vectorcall(func, args, nargs, kwnames);
    kiln_tls.expect = NULL;   /* in case argument binding failed before the hook */
    return res;
}

/* Call `func` (built from new_code) with the arguments of `frame`: positionals in order,
 * the *args tuple spread after them, kw-only arguments and the **kwargs items as
 * keywords.  The values are borrowed from the frame, which outlives the call
 * (_PyEval_Vector takes its own references before any code runs). */
static PyObject *
call_with_frame_args(PyObject *func, PyCodeObject *new_code, _PyInterpreterFrame *frame,
                     PyCodeObject *code)
{
    const int argc = code->co_argcount;
    const int kwonly = code->co_kwonlyargcount;
    PyObject **slots = frame->localsplus;

    if (kwonly == 0 && (code->co_flags & (CO_VARARGS | CO_VARKEYWORDS)) == 0) {
        /* Common case: the slots already are a vectorcall argument array. */
        return call_marked(func, new_code, slots, (size_t)argc, NULL);
    }

    int idx = argc + kwonly;
    PyObject *varargs = (code->co_flags & CO_VARARGS) ? slots[idx++] : NULL;
    PyObject *varkw = (code->co_flags & CO_VARKEYWORDS) ? slots[idx++] : NULL;
    Py_ssize_t nvar = varargs ? PyTuple_GET_SIZE(varargs) : 0;
    Py_ssize_t nkw = varkw ? PyDict_GET_SIZE(varkw) : 0;
    Py_ssize_t npos = argc + nvar;
    Py_ssize_t nkwargs = kwonly + nkw;
    Py_ssize_t total = npos + nkwargs;

    PyObject *small[16];
    PyObject **stack = small;
    PyObject *kwnames = NULL;
    PyObject *res = NULL;
    if (total > (Py_ssize_t)(sizeof(small) / sizeof(small[0]))) {
        stack = PyMem_Malloc((size_t)total * sizeof(PyObject *));
        if (stack == NULL) {
            return PyErr_NoMemory();
        }
    }
    for (int i = 0; i < argc; i++) {
        stack[i] = slots[i];
    }
    for (Py_ssize_t i = 0; i < nvar; i++) {
        stack[argc + i] = PyTuple_GET_ITEM(varargs, i);
    }
    if (nkwargs > 0) {
        kwnames = PyTuple_New(nkwargs);
        if (kwnames == NULL) {
            goto done;
        }
        for (int i = 0; i < kwonly; i++) {
            PyObject *name = PyTuple_GET_ITEM(code->co_localsplusnames, argc + i);
            PyTuple_SET_ITEM(kwnames, i, Py_NewRef(name));
            stack[npos + i] = slots[argc + i];
        }
        Py_ssize_t pos = 0, k = kwonly;
        PyObject *key, *value;
        while (varkw != NULL && PyDict_Next(varkw, &pos, &key, &value)) {
            PyTuple_SET_ITEM(kwnames, k, Py_NewRef(key));
            stack[npos + k] = value;
            k++;
        }
    }
    res = call_marked(func, new_code, stack, (size_t)npos, kwnames);
done:
    Py_XDECREF(kwnames);
    if (stack != small) {
        PyMem_Free(stack);
    }
    return res;
}

/* A function object for `new_code` with the frame's globals and (if it has free
 * variables) the original function's closure.  New reference. */
static PyObject *
substitute_function(PyCodeObject *new_code, PyObject *globals, PyObject *closure)
{
    PyFunctionObject *cached = (PyFunctionObject *)kiln_tls.func_cache;
    if (new_code->co_nfreevars == 0 && cached != NULL &&
        cached->func_code == (PyObject *)new_code && cached->func_globals == globals) {
        return Py_NewRef((PyObject *)cached);
    }
    PyObject *func = PyFunction_New((PyObject *)new_code, globals);
    if (func == NULL) {
        return NULL;
    }
    if (new_code->co_nfreevars > 0) {
        if (PyFunction_SetClosure(func, closure) < 0) {
            Py_DECREF(func);
            return NULL;
        }
    }
    else {
        Py_XSETREF(kiln_tls.func_cache, Py_NewRef(func));
    }
    return func;
}

/* Run `new_code` in place of `frame`; returns its result (new reference) or NULL. */
static PyObject *
run_substitute(_PyInterpreterFrame *frame, PyCodeObject *code, PyCodeObject *new_code,
               PyObject *closure)
{
    if (check_substitute(code, new_code, closure) < 0) {
        return NULL;
    }
    PyObject *func = substitute_function(new_code, frame->f_globals, closure);
    if (func == NULL) {
        return NULL;
    }
    n_substituted++;
    PyObject *res = call_with_frame_args(func, new_code, frame, code);
    Py_DECREF(func);
    return res;
}

/* ------------------------------------------------------------------------------------ */
/* The eval-frame function.                                                              */
/* ------------------------------------------------------------------------------------ */

/* The callback's cache table for `code`, a new reference, or NULL (no exception): none. */
static PyObject *
cache_table(PyCodeObject *code, PyObject *cb)
{
    PyObject *tables = NULL;
    if (_PyObject_LookupAttr(cb, s_kiln_tables, &tables) <= 0) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *entries = NULL;
    if (PyDict_CheckExact(tables)) {
        PyObject *key = PyLong_FromVoidPtr(code);
        if (key != NULL) {
            entries = PyDict_GetItemWithError(tables, key);
            Py_DECREF(key);
        }
    }
    if (entries == NULL || !PyList_Check(entries)) {
        PyErr_Clear();
        Py_DECREF(tables);
        return NULL;
    }
    Py_INCREF(entries);
    Py_DECREF(tables);
    return entries;
}

/* A cache hit without calling the callback: the first entry of the callback's table for `code` whose
 * check(L, G, C, B) returns True. 1 with *found set (new reference), 0 when no entry matches (the
 * callback then decides, checking them again), -1 with an exception set (a check raised something
 * that is not an Exception: the generated checks return False on those). Runs with the thread's
 * callback unset, as the callback would. */
static int
cached_substitute(PyCodeObject *code, PyObject *cb, PyObject *f_locals, _PyInterpreterFrame *frame,
                  PyObject *closure, PyObject **found)
{
    PyObject *entries = cache_table(code, cb);   /* (held: a check may run code that changes the table) */
    if (entries == NULL) {
        return 0;
    }
    if (PyList_GET_SIZE(entries) == 0) {
        Py_DECREF(entries);
        return 0;
    }
    if (saved_hooks_probe != NULL) {
        PyObject *hooks = PyObject_CallOneArg(saved_hooks_probe, Py_False);
        int none = hooks == Py_None;
        if (hooks == NULL) {
            PyErr_Clear();
        }
        Py_XDECREF(hooks);
        if (!none) {
            Py_DECREF(entries);
            return 0;
        }
    }
    PyObject *args[4] = {f_locals, frame->f_globals, closure != NULL ? closure : Py_None,
                         frame->f_builtins};
    int rc = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries); i++) {
        PyObject *entry = PyList_GET_ITEM(entries, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 ||
            !PyCode_Check(PyTuple_GET_ITEM(entry, 1))) {
            continue;
        }
        Py_INCREF(entry);
        PyObject *ok = PyObject_Vectorcall(PyTuple_GET_ITEM(entry, 0), args, 4, NULL);
        if (ok == NULL) {
            Py_DECREF(entry);
            rc = -1;
            break;
        }
        if (ok == Py_True) {
            *found = Py_NewRef(PyTuple_GET_ITEM(entry, 1));
            rc = 1;
        }
        Py_DECREF(ok);
        Py_DECREF(entry);
        if (rc == 1) {
            n_fast_hits++;
            break;
        }
    }
    Py_DECREF(entries);
    return rc;
}

/* Offer `frame` to `cb`, then run the original, a substitute, or fail. */
static PyObject *
offer_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, PyCodeObject *code)
{
    PyObject *func = FRAME_FUNC(frame);
    PyObject *closure = ((PyFunctionObject *)func)->func_closure;  /* borrowed or NULL */
    PyObject *f_locals = frame_args_dict(frame, code);
    if (f_locals == NULL) {
        if (!PyErr_Occurred()) {
            return _PyEval_EvalFrameDefault(tstate, frame, 0);
        }
        dispose_frame(tstate, frame);
        return NULL;
    }

    /* The callback runs with this thread's callback unset, so kiln's own analysis is not
     * hooked.  We hold the thread's reference in `cb` meanwhile. */
    PyObject *cb = swap_callback(NULL);
    PyObject *answer = NULL;
    n_offered++;
    int hit = cached_substitute(code, cb, f_locals, frame, closure, &answer);
    if (hit == 0) {
        PyObject *args[5] = {
            (PyObject *)code, f_locals, frame->f_globals, frame->f_builtins,
            closure != NULL ? closure : Py_None,
        };
        answer = PyObject_Vectorcall(cb, args, 5, NULL);
    }
    restore_callback(cb);
    Py_DECREF(f_locals);

    if (answer == NULL) {
        dispose_frame(tstate, frame);
        return NULL;
    }
    if (answer == Py_None || answer == (PyObject *)code) {
        Py_DECREF(answer);
        return _PyEval_EvalFrameDefault(tstate, frame, 0);
    }
    if (!PyCode_Check(answer)) {
        PyErr_Format(PyExc_TypeError,
                     "kiln frame hook: the callback must return None or a code object, "
                     "not %.100s", Py_TYPE(answer)->tp_name);
        Py_DECREF(answer);
        dispose_frame(tstate, frame);
        return NULL;
    }
    /* The callback stays active while the substitute runs: its callees are offered. */
    PyObject *res = run_substitute(frame, code, (PyCodeObject *)answer, closure);
    Py_DECREF(answer);
    dispose_frame(tstate, frame);
    return res;
}

static PyObject *
kiln_eval_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    /* Fast path: this thread has no callback. */
    if (kiln_tls.callback == NULL) {
        return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
    }
    PyCodeObject *code = frame->f_code;
    if (code == kiln_tls.expect) {
        /* A substitute we are calling right now: never offered back. */
        kiln_tls.expect = NULL;
        return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
    }
    if (throwflag || !frame_is_offerable(tstate, frame, code) || code_is_skipped(code)) {
        return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
    }
    return offer_frame(tstate, frame, code);
}

/* ------------------------------------------------------------------------------------ */
/* Module functions.                                                                     */
/* ------------------------------------------------------------------------------------ */

static void
install_eval_frame(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    /* (Re)install if missing: another PEP 523 user may have replaced or reset it. */
    if (_PyInterpreterState_GetEvalFrameFunc(interp) != kiln_eval_frame) {
        _PyInterpreterState_SetEvalFrameFunc(interp, kiln_eval_frame);
    }
}

static PyObject *
set_callback(PyObject *module, PyObject *cb)
{
    (void)module;
    if (cb == Py_None) {
        cb = NULL;
    }
    else if (!PyCallable_Check(cb)) {
        PyErr_Format(PyExc_TypeError, "set_callback() needs a callable or None, not %.100s",
                     Py_TYPE(cb)->tp_name);
        return NULL;
    }
    else {
        if (ensure_tls_guard() < 0) {
            return NULL;
        }
        install_eval_frame();
    }
    PyObject *previous = swap_callback(Py_XNewRef(cb));
    return previous != NULL ? previous : Py_NewRef(Py_None);
}

static PyObject *
get_callback(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    PyObject *cb = kiln_tls.callback;
    return Py_NewRef(cb != NULL ? cb : Py_None);
}

static int
check_code(PyObject *obj, const char *fname)
{
    if (!PyCode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s() needs a code object, not %.100s", fname,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    return 0;
}

static PyObject *
mark_skip(PyObject *module, PyObject *code)
{
    (void)module;
    if (check_code(code, "mark_skip") < 0 ||
        kiln_Code_SetExtra(code, skip_index, SKIP_MARK) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
unmark(PyObject *module, PyObject *code)
{
    (void)module;
    if (check_code(code, "unmark") < 0) {
        return NULL;
    }
    if (((PyCodeObject *)code)->co_extra != NULL &&
        kiln_Code_SetExtra(code, skip_index, NULL) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
is_skipped(PyObject *module, PyObject *code)
{
    (void)module;
    if (check_code(code, "is_skipped") < 0) {
        return NULL;
    }
    return PyBool_FromLong(code_is_skipped((PyCodeObject *)code));
}

/* call_without_hook(fn, *args, **kwargs): vectorcall, so it costs one C call on top of
 * fn's own. */
static PyObject *
call_without_hook(PyObject *module, PyObject *const *args, Py_ssize_t nargsf,
                  PyObject *kwnames)
{
    (void)module;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "call_without_hook() needs a callable to call");
        return NULL;
    }
    PyObject *saved = swap_callback(NULL);
    PyObject *res = PyObject_Vectorcall(args[0], args + 1, (size_t)(nargs - 1), kwnames);
    restore_callback(saved);
    return res;
}

static PyObject *
set_saved_hooks_probe(PyObject *module, PyObject *probe)
{
    (void)module;
    if (!PyCallable_Check(probe)) {
        PyErr_SetString(PyExc_TypeError, "set_saved_hooks_probe() needs a callable");
        return NULL;
    }
    Py_XSETREF(saved_hooks_probe, Py_NewRef(probe));
    Py_RETURN_NONE;
}

/* set_tensor_guard(capsule_or_None): use _tensor_guard.cpp's checks (None: the attribute reads only). */
static PyObject *
set_tensor_guard(PyObject *module, PyObject *capsule)
{
    (void)module;
    if (capsule == Py_None) {
        tensor_guard = NULL;
        Py_CLEAR(tensor_guard_capsule);
        Py_RETURN_NONE;
    }
    kiln_tensor_guard_api *api = PyCapsule_GetPointer(capsule, "kiln.capture._tensor_guard.api");
    if (api == NULL) {
        return NULL;
    }
    if (api->version != 1) {
        PyErr_Format(PyExc_ValueError, "set_tensor_guard: version %d of the checks, 1 expected", api->version);
        return NULL;
    }
    Py_XSETREF(tensor_guard_capsule, Py_NewRef(capsule));
    tensor_guard = api;
    Py_RETURN_NONE;
}

static PyObject *
tensor_guard_reads(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyLong_FromSsize_t(n_tensor_guard_reads);
}

static PyObject *
fast_hits(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyLong_FromSsize_t(n_fast_hits);
}

/* call_with_callback(cb, fn, *args, **kwargs): call fn with `cb` as this thread's callback, restoring
 * the previous one afterwards (also on exceptions). */
static PyObject *
call_with_callback(PyObject *module, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    (void)module;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 2 || !PyCallable_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "call_with_callback(cb, fn, *args, **kwargs): cb must be callable");
        return NULL;
    }
    if (ensure_tls_guard() < 0) {
        return NULL;
    }
    install_eval_frame();
    PyObject *saved = swap_callback(Py_NewRef(args[0]));
    PyObject *res = PyObject_Vectorcall(args[1], args + 2, (size_t)(nargs - 2), kwnames);
    restore_callback(saved);
    return res;
}

/* HookedCall(fn, callback): calling it calls fn with `callback` as this thread's frame callback, as
 * call_with_callback does, without a Python frame of its own (kiln.compile's CompiledFunction is a
 * subclass). */
typedef struct {
    PyObject_HEAD
    PyObject *fn;
    PyObject *callback;
    vectorcallfunc vectorcall;
} HookedCallObject;

static PyObject *
hooked_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    HookedCallObject *h = (HookedCallObject *)self;
    if (h->fn == NULL || h->callback == NULL) {
        PyErr_SetString(PyExc_TypeError, "HookedCall was not initialized");
        return NULL;
    }
    if (ensure_tls_guard() < 0) {
        return NULL;
    }
    install_eval_frame();
    PyObject *saved = swap_callback(Py_NewRef(h->callback));
    PyObject *res = PyObject_Vectorcall(h->fn, args, nargsf, kwnames);
    restore_callback(saved);
    return res;
}

/* tp_call (a Python subclass on 3.11 is called through it): the same call, through the vectorcall slot
 * (PyVectorcall_Call reads it without looking at the type's flag). */
static PyObject *
hooked_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    if (((HookedCallObject *)self)->vectorcall == NULL) {
        PyErr_SetString(PyExc_TypeError, "HookedCall was not initialized");
        return NULL;
    }
    return PyVectorcall_Call(self, args, kwargs);
}

static int
hooked_init(PyObject *self, PyObject *args, PyObject *kwargs)
{
    HookedCallObject *h = (HookedCallObject *)self;
    PyObject *fn, *callback;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "HookedCall(fn, callback) takes no keyword arguments");
        return -1;
    }
    if (!PyArg_UnpackTuple(args, "HookedCall", 2, 2, &fn, &callback)) {
        return -1;
    }
    if (!PyCallable_Check(fn) || !PyCallable_Check(callback)) {
        PyErr_SetString(PyExc_TypeError, "HookedCall(fn, callback): both must be callable");
        return -1;
    }
    Py_XSETREF(h->fn, Py_NewRef(fn));
    Py_XSETREF(h->callback, Py_NewRef(callback));
    h->vectorcall = hooked_vectorcall;
    return 0;
}

static int
hooked_traverse(PyObject *self, visitproc visit, void *arg)
{
    HookedCallObject *h = (HookedCallObject *)self;
    Py_VISIT(h->fn);
    Py_VISIT(h->callback);
    return 0;   /* (a heap subclass's own traverse visits its type) */
}

static int
hooked_clear(PyObject *self)
{
    HookedCallObject *h = (HookedCallObject *)self;
    Py_CLEAR(h->fn);
    Py_CLEAR(h->callback);
    return 0;
}

static void
hooked_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    hooked_clear(self);
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
}

static PyObject *
hooked_get_fn(PyObject *self, void *closure)
{
    (void)closure;
    PyObject *fn = ((HookedCallObject *)self)->fn;
    return Py_NewRef(fn != NULL ? fn : Py_None);
}

static PyObject *
hooked_get_callback(PyObject *self, void *closure)
{
    (void)closure;
    PyObject *cb = ((HookedCallObject *)self)->callback;
    return Py_NewRef(cb != NULL ? cb : Py_None);
}

static PyGetSetDef hooked_getset[] = {
    {"hooked_fn", hooked_get_fn, NULL, "the function called", NULL},
    {"hooked_callback", hooked_get_callback, NULL, "the frame callback set while it runs", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject HookedCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kiln.capture._eval_frame.HookedCall",
    .tp_basicsize = sizeof(HookedCallObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "HookedCall(fn, callback): calling it calls fn(*args, **kwargs) with callback as this thread's "
              "frame callback (restored afterwards).",
    .tp_vectorcall_offset = offsetof(HookedCallObject, vectorcall),
    .tp_call = hooked_call,
    .tp_init = hooked_init,
    .tp_new = PyType_GenericNew,
    .tp_traverse = hooked_traverse,
    .tp_clear = hooked_clear,
    .tp_dealloc = hooked_dealloc,
    .tp_getset = hooked_getset,
};

static PyObject *
debug_counters(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return Py_BuildValue("{s:n,s:n,s:n}", "offered", n_offered, "substituted",
                         n_substituted, "chunk_pops", n_chunk_pops);
}

/* held_tensors_match(tensors, expected) -> bool: whether each tensor still has the metadata it had
 * when the guards were made; ``expected`` holds one (dtype, device, size, stride, requires_grad)
 * tuple per tensor. The guard of every parameter and buffer a graph holds (kiln/capture/guards.py):
 * the same checks as the Python expression `t.dtype is D and t.device == V and t.shape == S and
 * t.stride() == T and t.requires_grad is R`, without the interpreter between them. An exception
 * from a tensor's attribute propagates (the guard then fails). */
static PyObject *s_dtype, *s_device, *s_shape, *s_stride, *s_requires_grad;

/* 1 when t's attribute `name` (called, for a method) is `want` (identity) or equals it, 0 when not,
 * -1 with an exception set. */
static int
field_matches(PyObject *t, PyObject *name, int call, PyObject *want, int identity)
{
    PyObject *v = call ? PyObject_CallMethodNoArgs(t, name) : PyObject_GetAttr(t, name);
    if (v == NULL)
        return -1;
    int ok = identity ? v == want : PyObject_RichCompareBool(v, want, Py_EQ);
    Py_DECREF(v);
    return ok;
}

/* t's (dtype, device, size, stride, requires_grad) against want[first:first + 5]: 1, 0, or -1 with an
 * exception set. On the TensorImpl when _tensor_guard.cpp is loaded and can read this tensor; else
 * through the Python attributes, cheap reads first (shape is the getter: size() parses its arguments). */
static int
tensor_fields_match(PyObject *t, PyObject *want, Py_ssize_t first)
{
    if (tensor_guard != NULL) {
        int fast = tensor_guard->fields_match(t, PyTuple_GET_ITEM(want, first), PyTuple_GET_ITEM(want, first + 1),
                                              PyTuple_GET_ITEM(want, first + 2), PyTuple_GET_ITEM(want, first + 3),
                                              PyTuple_GET_ITEM(want, first + 4));
        if (fast == 0 || fast == 1) {
            n_tensor_guard_reads++;
            return fast;
        }
    }
    int ok = field_matches(t, s_dtype, 0, PyTuple_GET_ITEM(want, first), 1);
    if (ok == 1)
        ok = field_matches(t, s_requires_grad, 0, PyTuple_GET_ITEM(want, first + 4), 1);
    if (ok == 1)
        ok = field_matches(t, s_shape, 0, PyTuple_GET_ITEM(want, first + 2), 0);
    if (ok == 1)
        ok = field_matches(t, s_stride, 1, PyTuple_GET_ITEM(want, first + 3), 0);
    if (ok == 1)
        ok = field_matches(t, s_device, 0, PyTuple_GET_ITEM(want, first + 1), 0);
    return ok;
}

static int
held_tensor_matches(PyObject *t, PyObject *want)
{
    if (!PyTuple_Check(want) || PyTuple_GET_SIZE(want) != 5) {
        PyErr_SetString(PyExc_TypeError, "held_tensors_match: each expectation is a 5-tuple");
        return -1;
    }
    return tensor_fields_match(t, want, 0);
}

static PyObject *
held_tensors_match(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1]) ||
        PyTuple_GET_SIZE(args[0]) != PyTuple_GET_SIZE(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "held_tensors_match(tensors, expected): two tuples of the same length");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args[0]);
    for (Py_ssize_t i = 0; i < n; i++) {
        int ok = held_tensor_matches(PyTuple_GET_ITEM(args[0], i), PyTuple_GET_ITEM(args[1], i));
        if (ok < 0)
            return NULL;
        if (!ok)
            Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

/* tensor_matches(t, expected) -> bool: an input tensor's guard in one call (kiln/capture/guards.py):
 * ``expected`` is (exact type, dtype, device, size, stride, requires_grad), checked as the Python
 * expression `type(t) is T and t.dtype is D and t.device == V and t.size() == S and t.stride() == T
 * and t.requires_grad is R`. An exception from an attribute propagates (the guard then fails). */
static PyObject *
tensor_matches(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != 6) {
        PyErr_SetString(PyExc_TypeError, "tensor_matches(t, expected): expected is a 6-tuple");
        return NULL;
    }
    PyObject *t = args[0], *want = args[1];
    if ((PyObject *)Py_TYPE(t) != PyTuple_GET_ITEM(want, 0))
        Py_RETURN_FALSE;
    int ok = tensor_fields_match(t, want, 1);
    if (ok < 0)
        return NULL;
    return PyBool_FromLong(ok);
}

/* all_aligned(args, positions) -> bool: whether args[i].data_ptr() is a multiple of 16 for each i
 * in positions (Triton compiled the kernel for 16-byte aligned pointers there; see
 * kiln/codegen/triton/launch.py FastLaunch). */
static PyObject *s_data_ptr;

static PyObject *
all_aligned(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "all_aligned(args, positions): two tuples");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args[1]);
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(args[1], k));
        if (i == -1 && PyErr_Occurred())
            return NULL;
        if (i < 0 || i >= PyTuple_GET_SIZE(args[0])) {
            PyErr_SetString(PyExc_IndexError, "all_aligned: position out of range");
            return NULL;
        }
        PyObject *ptr = PyObject_CallMethodNoArgs(PyTuple_GET_ITEM(args[0], i), s_data_ptr);
        if (ptr == NULL)
            return NULL;
        unsigned long long p = PyLong_AsUnsignedLongLongMask(ptr);
        Py_DECREF(ptr);
        if (p == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
        if (p % 16)
            Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

/* guard gates: _guard_gate.c */
PyObject *kiln_gate_unchanged(PyObject *module, PyObject *state);
PyObject *kiln_gate_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *kiln_gate_snapshot(PyObject *module, PyObject *state);
PyObject *kiln_type_version(PyObject *module, PyObject *tp);

static PyMethodDef methods[] = {
    {"gate_unchanged", (PyCFunction)kiln_gate_unchanged, METH_O,
     "gate_unchanged(state) -> bool: the dicts and types a guard block reads through are unchanged "
     "since it last passed (kiln/capture/guard_gate.py)."},
    {"gate_snapshot", (PyCFunction)kiln_gate_snapshot, METH_O,
     "gate_snapshot(state) -> bytes: the watched dicts' and types' version tags now."},
    {"gate_record", (PyCFunction)(void (*)(void))kiln_gate_record, METH_FASTCALL,
     "gate_record(state, reached, snap) -> bool: store a snapshot's dict tags after the block passed."},
    {"type_version", (PyCFunction)kiln_type_version, METH_O,
     "type_version(tp) -> int: the type's version tag (assigned if needed), 0 when it has none."},
    {"all_aligned", (PyCFunction)(void (*)(void))all_aligned, METH_FASTCALL,
     "all_aligned(args, positions) -> bool: args[i].data_ptr() % 16 == 0 for each position i."},
    {"tensor_matches", (PyCFunction)(void (*)(void))tensor_matches, METH_FASTCALL,
     "tensor_matches(t, expected) -> bool: type(t) is exactly expected[0] and t's (dtype, device, "
     "size, stride, requires_grad) equal expected[1:]."},
    {"held_tensors_match", (PyCFunction)(void (*)(void))held_tensors_match, METH_FASTCALL,
     "held_tensors_match(tensors, expected) -> bool: each tensor's (dtype, device, size, stride, "
     "requires_grad) equals its expected tuple."},
    {"set_callback", (PyCFunction)set_callback, METH_O,
     "set_callback(cb_or_None) -> previous: set this thread's frame callback."},
    {"get_callback", (PyCFunction)get_callback, METH_NOARGS,
     "get_callback() -> this thread's frame callback, or None."},
    {"mark_skip", (PyCFunction)mark_skip, METH_O,
     "mark_skip(code): frames of this code are never offered to callbacks."},
    {"unmark", (PyCFunction)unmark, METH_O, "unmark(code): undo mark_skip(code)."},
    {"is_skipped", (PyCFunction)is_skipped, METH_O,
     "is_skipped(code) -> bool: whether mark_skip(code) is in effect."},
    {"call_without_hook", (PyCFunction)(void (*)(void))call_without_hook,
     METH_FASTCALL | METH_KEYWORDS,
     "call_without_hook(fn, *args, **kwargs): call fn with this thread's callback unset."},
    {"set_saved_hooks_probe", (PyCFunction)set_saved_hooks_probe, METH_O,
     "set_saved_hooks_probe(fn): cache tables are not read while fn(False) is not None."},
    {"set_tensor_guard", (PyCFunction)set_tensor_guard, METH_O,
     "set_tensor_guard(capsule_or_None): tensor guards read the TensorImpl through _tensor_guard.cpp's "
     "checks (kiln/capture/tensor_guard_build.py); None: through Python attributes only."},
    {"tensor_guard_reads", (PyCFunction)tensor_guard_reads, METH_NOARGS,
     "tensor_guard_reads() -> int: tensors whose guard fields _tensor_guard.cpp decided (for tests)."},
    {"fast_hits", (PyCFunction)fast_hits, METH_NOARGS,
     "fast_hits() -> int: cache hits found through the callbacks' _kiln_tables since the module loaded."},
    {"call_with_callback", (PyCFunction)(void (*)(void))call_with_callback, METH_FASTCALL | METH_KEYWORDS,
     "call_with_callback(cb, fn, *args, **kwargs): call fn with cb as this thread's callback."},
    {"_debug_counters", (PyCFunction)debug_counters, METH_NOARGS,
     "_debug_counters() -> dict of process-wide counters (offered, substituted, "
     "chunk_pops), for tests."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "kiln.capture._eval_frame",
    "kiln's PEP 523 frame-evaluation hook (see kiln/capture/hook.py).",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit__eval_frame(void)
{
    if (skip_index < 0) {
        /* Frees nothing: the skip flag is not a pointer. */
        skip_index = kiln_RequestCodeExtraIndex(NULL);
        if (skip_index < 0) {
            PyErr_SetString(PyExc_RuntimeError,
                            "kiln frame hook: no free co_extra index left");
            return NULL;
        }
    }
    s_kiln_tables = PyUnicode_InternFromString("_kiln_tables");
    if (!s_kiln_tables)
        return NULL;
    s_data_ptr = PyUnicode_InternFromString("data_ptr");
    if (!s_data_ptr)
        return NULL;
    s_dtype = PyUnicode_InternFromString("dtype");
    s_device = PyUnicode_InternFromString("device");
    s_shape = PyUnicode_InternFromString("shape");
    s_stride = PyUnicode_InternFromString("stride");
    s_requires_grad = PyUnicode_InternFromString("requires_grad");
    if (!s_dtype || !s_device || !s_shape || !s_stride || !s_requires_grad)
        return NULL;
    if (PyType_Ready(&HookedCallType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "HookedCall", (PyObject *)&HookedCallType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
