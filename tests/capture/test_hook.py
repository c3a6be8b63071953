"""Tests of kiln's PEP 523 frame hook (kiln.capture.hook and its C extension).

They run on CPython 3.11 and 3.12 and do not need torch.
"""
from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
import threading
import weakref

import pytest

from kiln.capture import hook
from kiln.errors import KilnError

pytestmark = pytest.mark.skipif(not hook.available(), reason="kiln.capture._eval_frame not built")


@pytest.fixture(autouse=True)
def _no_callback_left():
    assert hook.get_callback() is None
    yield
    leftover = hook.set_callback(None)
    assert leftover is None, "a test left a frame callback set"


class Recorder:
    """A callback that records what it is offered and optionally substitutes code."""

    def __init__(self, substitutes=None):
        self.calls = []
        self.substitutes = substitutes or {}

    def __call__(self, code, f_locals, f_globals, f_builtins, closure):
        self.calls.append((code, f_locals, f_globals, f_builtins, closure))
        return self.substitutes.get(code)

    def codes(self):
        """Offered codes of this test file (pytest's own helpers are offered too)."""
        return [c[0] for c in self.calls if c[0].co_filename == __file__]

    def offered(self, fn):
        return [c for c in self.calls if c[0] is fn.__code__]


# ----------------------------------------------------------------------------------------
# What the callback sees
# ----------------------------------------------------------------------------------------


def all_kinds(a, b=2, *args, c, d=4, **kw):
    local_not_an_arg = a
    return (a, b, args, c, d, kw, local_not_an_arg)


def test_locals_positional_defaults_kwonly_varargs_varkw():
    rec = Recorder()
    with hook.callback_active(rec):
        result = all_kinds(1, 5, 6, 7, c=3, e=9)
    assert result == (1, 5, (6, 7), 3, 4, {"e": 9}, 1)
    [(code, f_locals, f_globals, f_builtins, closure)] = rec.offered(all_kinds)
    assert code is all_kinds.__code__
    assert f_locals == {"a": 1, "b": 5, "args": (6, 7), "c": 3, "d": 4, "kw": {"e": 9}}
    assert list(f_locals) == list(code.co_varnames[:6])
    assert f_globals is globals()
    assert f_builtins["len"] is len
    assert closure is None


def test_locals_defaults_only():
    rec = Recorder()
    with hook.callback_active(rec):
        all_kinds(1, c=0)
    [(_, f_locals, *_rest)] = rec.offered(all_kinds)
    assert f_locals == {"a": 1, "b": 2, "args": (), "c": 0, "d": 4, "kw": {}}


def test_closure_and_cell_arguments():
    x = 10

    def uses_closure(y):
        return x + y

    def arg_is_cell(a):
        def inner():
            return a

        return inner()

    rec = Recorder()
    with hook.callback_active(rec):
        assert uses_closure(5) == 15
        assert arg_is_cell("v") == "v"
    [(_, loc, _, _, closure)] = rec.offered(uses_closure)
    assert loc == {"y": 5}
    assert closure is uses_closure.__closure__
    assert closure[0].cell_contents == 10
    # A cell argument is offered raw (MAKE_CELL has not run yet).
    [(_, loc, _, _, _)] = rec.offered(arg_is_cell)
    assert loc == {"a": "v"}


def test_method_and_nested_calls_are_offered():
    class K:
        def method(self, v):
            return helper(v) * 2

    def helper(v):
        return v + 1

    k = K()
    rec = Recorder()
    with hook.callback_active(rec):
        assert k.method(1) == 4
    assert rec.codes() == [K.method.__code__, helper.__code__]
    assert rec.calls[0][1] == {"self": k, "v": 1}


def test_none_runs_original_and_no_callback_no_offer():
    rec = Recorder()
    assert hook.get_callback() is None
    assert all_kinds(1, c=2)[0] == 1
    with hook.callback_active(rec):
        assert hook.get_callback() is rec
        assert all_kinds(7, c=2)[0] == 7
    assert hook.get_callback() is None
    all_kinds(1, c=2)
    assert len(rec.calls) == 1


def test_hook_module_frames_not_offered():
    rec = Recorder()
    with hook.callback_active(rec):
        with hook.callback_active(rec):
            leaf(1)
    assert [c[0].co_filename for c in rec.calls] == [__file__]


def test_set_callback_returns_previous_and_validates():
    a, b = Recorder(), Recorder()
    assert hook.set_callback(a) is None
    assert hook.set_callback(b) is a
    assert hook.set_callback(None) is b
    with pytest.raises(TypeError):
        hook.set_callback(42)
    assert hook.get_callback() is None


# ----------------------------------------------------------------------------------------
# Substitution
# ----------------------------------------------------------------------------------------


def add(a, b):
    return a + b


def mul(a, b):
    return a * b


def test_substitute_runs_replacement_not_original():
    rec = Recorder({add.__code__: mul.__code__})
    with hook.callback_active(rec):
        assert add(3, 4) == 12
    # The substitute itself is not offered back to the callback.
    assert rec.codes() == [add.__code__]
    assert add(3, 4) == 7


def test_substitute_code_is_not_permanently_skipped():
    rec = Recorder({add.__code__: mul.__code__})
    with hook.callback_active(rec):
        assert add(3, 4) == 12
        assert mul(3, 4) == 12  # called directly: offered like any code
    assert rec.codes() == [add.__code__, mul.__code__]
    assert not hook.is_skipped(mul.__code__)


def make_pair(k):
    def orig(a, *args, b, **kw):
        def cell_user():
            return a

        return ("orig", k, cell_user(), args, b, kw)

    def repl(a, *args, b, **kw):
        def cell_user():
            return a

        return ("repl", k, cell_user(), args, b, kw)

    return orig, repl


def test_substitute_with_freevars_cells_varargs_kwonly_varkw():
    orig, repl = make_pair(k=42)
    assert orig.__code__.co_freevars == repl.__code__.co_freevars == ("k",)
    assert "a" in orig.__code__.co_cellvars
    rec = Recorder({orig.__code__: repl.__code__})
    with hook.callback_active(rec):
        assert orig(1, 2, 3, b=4, z=5, y=6) == ("repl", 42, 1, (2, 3), 4, {"z": 5, "y": 6})
        assert orig(1, b=4) == ("repl", 42, 1, (), 4, {})
        many = tuple(range(40))
        big_kw = {f"k{i}": i for i in range(30)}
        assert orig(*many, b=0, **big_kw) == ("repl", 42, 0, many[1:], 0, big_kw)
    assert orig(1, b=2) == ("orig", 42, 1, (), 2, {})


def posonly(a, b=1, /, **kw):
    return ("orig", a, b, kw)


def posonly_repl(a, b=1, /, **kw):
    return ("repl", a, b, kw)


def test_substitute_positional_only_name_also_in_kwargs():
    rec = Recorder({posonly.__code__: posonly_repl.__code__})
    with hook.callback_active(rec):
        assert posonly(1, a=2) == ("repl", 1, 1, {"a": 2})


def test_substitute_keeps_callback_for_nested_frames():
    def inner(v):
        return v + 1

    def outer(v):
        return inner(v)

    def outer_repl(v):
        return inner(v) * 10

    rec = Recorder({outer.__code__: outer_repl.__code__})
    with hook.callback_active(rec):
        assert outer(1) == 20
    assert rec.codes() == [outer.__code__, inner.__code__]


def test_substitute_signature_mismatch_raises():
    def one(a):
        return a

    rec = Recorder({add.__code__: one.__code__})
    with hook.callback_active(rec):
        with pytest.raises(TypeError, match="same arguments"):
            add(1, 2)
    assert hook.get_callback() is None


def test_callback_returning_junk_raises_type_error():
    def junk(code, *rest):
        return 123 if code is add.__code__ else None

    with hook.callback_active(junk):
        with pytest.raises(TypeError, match="None or a code object"):
            add(1, 2)


def test_returning_the_original_code_runs_it():
    rec = Recorder({add.__code__: add.__code__})
    with hook.callback_active(rec):
        assert add(1, 2) == 3
    assert not hook.is_skipped(add.__code__)


# ----------------------------------------------------------------------------------------
# Skipping, unsetting, call_without_hook
# ----------------------------------------------------------------------------------------


def leaf(v):
    return v


def skipped_caller(v):
    return leaf(v) + 1


def test_mark_skip_skips_frame_but_not_callees():
    code = skipped_caller.__code__
    rec = Recorder()
    hook.mark_skip(code)
    try:
        assert hook.is_skipped(code)
        with hook.callback_active(rec):
            assert skipped_caller(1) == 2
        assert rec.codes() == [leaf.__code__]
    finally:
        hook.unmark(code)
    assert not hook.is_skipped(code)
    rec.calls.clear()
    with hook.callback_active(rec):
        skipped_caller(1)
    assert rec.codes() == [code, leaf.__code__]
    with pytest.raises(TypeError):
        hook.mark_skip(skipped_caller)
    hook.unmark(leaf.__code__)  # unmarking unmarked code is fine


def test_callback_is_unset_while_callback_runs():
    seen = []

    def cb(code, *rest):
        seen.append(hook.get_callback())
        leaf(0)  # kiln's own Python code called here must not be offered
        return None

    with hook.callback_active(cb):
        skipped_caller(1)
        assert hook.get_callback() is cb
    assert seen == [None, None]  # skipped_caller and leaf, each offered once


def test_callback_setting_a_callback_is_undone():
    other = Recorder()

    def cb(code, *rest):
        hook.set_callback(other)
        return None

    with hook.callback_active(cb):
        leaf(1)
        assert hook.get_callback() is cb
    assert other.calls == []


def test_call_without_hook():
    rec = Recorder()
    with hook.callback_active(rec):
        assert hook.call_without_hook(all_kinds, 1, 2, 3, c=4, z=5) == (1, 2, (3,), 4, 4, {"z": 5}, 1)
        assert hook.call_without_hook(hook.get_callback) is None
        assert hook.get_callback() is rec
        with pytest.raises(ZeroDivisionError):
            hook.call_without_hook(lambda: 1 / 0)
        assert hook.get_callback() is rec
    assert rec.codes() == []
    with pytest.raises(TypeError):
        hook.call_without_hook()


# ----------------------------------------------------------------------------------------
# Errors and nesting
# ----------------------------------------------------------------------------------------


def boom(a, b):
    raise ValueError("from substitute")


def test_exception_in_callback_propagates_and_restores():
    def cb(code, *rest):
        if code is add.__code__:
            raise RuntimeError("from callback")

    outer = Recorder()
    with hook.callback_active(outer):
        with pytest.raises(RuntimeError, match="from callback"):
            with hook.callback_active(cb):
                add(1, 2)
        assert hook.get_callback() is outer
    assert hook.get_callback() is None


def test_exception_in_substitute_propagates():
    rec = Recorder({add.__code__: boom.__code__})
    with hook.callback_active(rec):
        with pytest.raises(ValueError, match="from substitute"):
            add(1, 2)
        assert hook.get_callback() is rec
        assert add.__code__ in rec.codes()
    assert hook.get_callback() is None


_inner_rec = Recorder()


def nested_inner(v):
    return v + 1


def nested_outer(v):
    return v


def nested_outer_compiled(v):
    # What a compiled function's runtime does: switch to its own callback.
    with hook.callback_active(_inner_rec):
        r = nested_inner(v)
    return r * 100


def nested_outer_compiled_raises(v):
    with hook.callback_active(_inner_rec):
        nested_inner(v)
        raise KeyError(v)


def test_nested_compiled_functions_with_different_callbacks():
    _inner_rec.calls.clear()
    outer_rec = Recorder({nested_outer.__code__: nested_outer_compiled.__code__})
    with hook.callback_active(outer_rec):
        assert nested_outer(1) == 200
        assert hook.get_callback() is outer_rec
        outer_rec.substitutes[nested_outer.__code__] = nested_outer_compiled_raises.__code__
        with pytest.raises(KeyError):
            nested_outer(2)
        assert hook.get_callback() is outer_rec
    assert outer_rec.codes() == [nested_outer.__code__, nested_outer.__code__]
    assert _inner_rec.codes() == [nested_inner.__code__, nested_inner.__code__]


# ----------------------------------------------------------------------------------------
# Recursion, leaks, datastack chunks
# ----------------------------------------------------------------------------------------


def fact(n):
    return 1 if n == 0 else n * fact(n - 1)


def fact_repl(n):
    # Calls `fact` by name: every level is offered and substituted again.
    return 1 if n == 0 else n * fact(n - 1)


def test_deep_recursion_substituted_every_level():
    rec = Recorder({fact.__code__: fact_repl.__code__})
    expected = _math_fact(500)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 3000))
    try:
        with hook.callback_active(rec):
            for _ in range(3):
                assert fact(500) == expected
    finally:
        sys.setrecursionlimit(limit)
    assert rec.codes() == [fact.__code__] * (3 * 501)


def _math_fact(n):
    import math

    return math.factorial(n)


def test_recursion_error_is_clean():
    def forever(n):
        return forever(n + 1)

    def forever_repl(n):
        return forever(n + 1)

    rec = Recorder({forever.__code__: forever_repl.__code__})
    with hook.callback_active(rec):
        with pytest.raises(RecursionError):
            forever(0)
        assert hook.get_callback() is rec
        assert add(1, 2) == 3


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.12 disposes skipped frames itself")
def test_substituted_frame_first_in_fresh_datastack_chunk():
    # Deep substituted recursion crosses datastack chunk boundaries; with varying
    # padding, some chunk starts with a frame that kiln disposes (without running it),
    # so kiln must pop and free the chunk the way CPython does.
    rec = Recorder({fact.__code__: fact_repl.__code__})
    before = hook._C._debug_counters()["chunk_pops"]

    def pad(k, n):
        return pad(k - 1, n) if k else fact(n)

    expected = _math_fact(200)
    with hook.callback_active(rec):
        for k in range(40):
            assert pad(k, 200) == expected
            if hook._C._debug_counters()["chunk_pops"] > before:
                break
    assert hook._C._debug_counters()["chunk_pops"] > before
    assert add(1, 2) == 3


class Token:
    pass


def takes(a, *args, k, **kw):
    return a


def takes_repl(a, *args, k, **kw):
    return k


def test_no_reference_leaks():
    tok = Token()
    rec = Recorder({takes.__code__: takes_repl.__code__})

    def raising(code, *rest):
        if code is takes.__code__:
            raise LookupError

    def run():
        with hook.callback_active(rec):
            for _ in range(200):
                assert takes(tok, tok, tok, k=tok, x=tok) is tok
                assert fact(3) == 6  # offered, runs original
        rec.calls.clear()
        with hook.callback_active(raising):
            for _ in range(200):
                with pytest.raises(LookupError):
                    takes(tok, tok, k=tok, x=tok)

    run()  # warm up caches
    gc.collect()
    before = sys.getrefcount(tok)
    run()
    gc.collect()
    assert sys.getrefcount(tok) == before


# ----------------------------------------------------------------------------------------
# Generators, coroutines, threads, tracing
# ----------------------------------------------------------------------------------------


def test_generators_and_coroutines_untouched():
    def gen(n):
        for i in range(n):
            yield leaf(i)

    async def coro(v):
        return leaf(v)

    def gen_repl(n):
        return "should not run"

    rec = Recorder({gen.__code__: gen_repl.__code__})
    with hook.callback_active(rec):
        assert list(gen(3)) == [0, 1, 2]
        assert asyncio.run(coro(5)) == 5
    assert gen.__code__ not in rec.codes()
    assert coro.__code__ not in rec.codes()
    assert rec.codes().count(leaf.__code__) == 4  # their callees are offered


def test_other_threads_unaffected():
    main_rec = Recorder({add.__code__: mul.__code__})
    thread_rec = Recorder()
    results = {}

    def plain_thread():
        results["plain_cb"] = hook.get_callback()
        results["plain"] = add(3, 4)

    def hooked_thread():
        with hook.callback_active(thread_rec):
            results["hooked"] = add(5, 6)

    with hook.callback_active(main_rec):
        for target in (plain_thread, hooked_thread):
            t = threading.Thread(target=target)
            t.start()
            t.join()
        assert add(3, 4) == 12
    assert results == {"plain_cb": None, "plain": 7, "hooked": 11}
    assert thread_rec.codes() == [add.__code__]
    assert main_rec.codes().count(add.__code__) == 1


def test_thread_exit_releases_references():
    ns = {}
    exec("def orig(x):\n    return x\ndef repl(x):\n    return -x\n", ns)
    marker = ns["marker"] = Token()
    orig, repl = ns["orig"], ns["repl"]
    cb = Recorder({orig.__code__: repl.__code__})
    out = []

    def worker():
        hook.set_callback(cb)  # deliberately left set when the thread ends
        out.append(orig(3))  # also leaves repl's function in the thread's cache

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert out == [-3]
    refs = [weakref.ref(cb), weakref.ref(marker)]
    del cb, ns, orig, repl, marker
    gc.collect()
    assert [r() for r in refs] == [None, None]


def test_substitutes_with_different_globals():
    src = "def orig(x):\n    return x\ndef repl(x):\n    return (x, tag)\n"
    a, b = {"tag": "a"}, {"tag": "b"}
    exec(src, a)
    exec(src, b)
    # Same substitute code object, different globals: each call sees its own globals.
    b_orig = type(a["orig"])(a["orig"].__code__, b)
    rec = Recorder({a["orig"].__code__: a["repl"].__code__})
    with hook.callback_active(rec):
        assert [a["orig"](1), b_orig(2), a["orig"](3)] == [(1, "a"), (2, "b"), (3, "a")]


def test_not_offered_under_settrace():
    rec = Recorder({add.__code__: mul.__code__})

    def tracer(frame, event, arg):
        return None

    old = sys.gettrace()
    with hook.callback_active(rec):
        sys.settrace(tracer)
        try:
            assert add(3, 4) == 7
        finally:
            sys.settrace(old)
        assert add(3, 4) == 12


# ----------------------------------------------------------------------------------------
# Fresh interpreters: specialized call sites, missing extension
# ----------------------------------------------------------------------------------------


def _run_python(source):
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_call_sites_specialized_before_install_are_offered():
    # The first set_callback installs the hook; call sites that the specializing
    # interpreter already turned into inlined Python calls must still reach it.
    stdout = _run_python(
        """
        from kiln.capture import hook
        def f(x):
            return x + 1
        def g(x):
            return x * 100
        def loop():
            return [f(i) for i in range(200)][-1]
        for _ in range(50):
            loop()
        seen = []
        def cb(code, *rest):
            seen.append(code.co_name)
            return g.__code__ if code is f.__code__ else None
        with hook.callback_active(cb):
            r = loop()
        print(r, seen.count("f"))
        """
    )
    assert stdout.split() == ["19900", "200"]


def test_missing_extension_gives_kiln_error():
    stdout = _run_python(
        """
        import sys
        sys.modules["kiln.capture._eval_frame"] = None   # makes the import fail
        from kiln.capture import hook
        from kiln.errors import KilnError
        assert hook.available() is False
        def enter():
            with hook.callback_active(None):
                pass
        for fn, args in [(hook.set_callback, (None,)), (hook.get_callback, ()),
                         (hook.mark_skip, (None,)), (hook.call_without_hook, (print,)),
                         (enter, ())]:
            try:
                fn(*args)
            except KilnError as e:
                assert "kiln.capture._eval_frame" in str(e) and "pip install -e ." in str(e)
                assert e.__cause__ is None and e.__context__ is None
            else:
                raise AssertionError(fn)
        print("ok")
        """
    )
    assert stdout.strip() == "ok"
