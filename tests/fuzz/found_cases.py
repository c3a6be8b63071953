"""Minimized programs the capture fuzzer found where kiln differs from eager (one per bug class).

Run them with ``python -m pytest tests/fuzz/found_cases.py -q -rxX`` (the file name keeps them out of
the default collection: they fail today). Each is xfail(strict=False); once a fix makes one pass,
move it into the corpus (tests/corpus/) as a regular case and delete it here.

Each case is a whole module (the fuzzer's programs are modules: globals, classes, helpers) whose
``f(x, y, lst, d)`` runs eagerly and under ``kiln.compile(f, backend=<counting eager backend>)`` on
two input sets: x, y (2, 3) tensors, lst a list of 3 (then 4) tensors, d = {'a': tensor, 'b': 2,
'c': tensor} (then 'b': 3 and an extra key 'z'). See tests/fuzz/runner.py for what is compared.
"""
from __future__ import annotations

import textwrap
import warnings

import pytest

from tests.corpus.harness import kiln_ready

pytestmark = pytest.mark.skipif(not kiln_ready(), reason="kiln.compile or its frame hook is not available")


def same_as_eager(src: str) -> None:
    from tests.fuzz.runner import run_source

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = run_source(textwrap.dedent(src), tag="found")
    assert not outcome.failed, f"{outcome.status} ({outcome.part}):\n{outcome.detail}"


# --- iterators ---------------------------------------------------------------------------------


@pytest.mark.xfail(strict=False, reason="a map() over a list that grows before the map is consumed misses "
                                        "the new items (compiled: 3 items, eager: 4)")
def test_map_over_list_grown_before_consumed():
    same_as_eager("""
        def f(x, y, lst, d):
            def m(e):
                pass
            it = map(m, lst)
            lst.append(x)
            return list(it)
    """)


@pytest.mark.xfail(strict=False, reason="a map() over a list, lazily consumed, whose function logs: the log "
                                        "is filled at map() time in the compiled run ([0, 1, 2] vs [])")
def test_map_function_side_effect_runs_lazily():
    same_as_eager("""
        def f(x, y, lst, d):
            log = []
            def m(e):
                log.append(len(log))
            it = map(m, lst)
            return log
    """)


@pytest.mark.xfail(strict=False, reason="returning an unconsumed map object returns kiln's internal "
                                        "ResumeIterator instead of a map")
def test_return_unconsumed_map():
    same_as_eager("""
        def f(x, y, lst, d):
            def m(e):
                return e * 2
            it = map(m, lst)
            return it
    """)


# --- dict views --------------------------------------------------------------------------------


@pytest.mark.xfail(strict=False, reason="d.values() of an argument dict, read after d['a'] = 1, returns "
                                        "the old tensor value")
def test_values_view_of_argument_after_store():
    same_as_eager("""
        def f(x, y, lst, d):
            vals = d.values()
            d['a'] = 1
            return list(vals)
    """)


@pytest.mark.xfail(strict=False, reason="d.keys() of an argument dict, read after an insertion, misses the "
                                        "new key (len 3 vs 4)")
def test_keys_view_of_argument_after_insertion():
    same_as_eager("""
        def f(x, y, lst, d):
            ks = d.keys()
            d['late'] = 1
            return len(ks), list(ks), x + 1
    """)


@pytest.mark.xfail(strict=False, reason="values() of a dict made in the function, read after an insertion, "
                                        "misses the new value ([3] vs [3, 3])")
def test_values_view_of_new_dict_after_insertion():
    same_as_eager("""
        def f(x, y, lst, d):
            v = dict(k=3)
            vals = v.values()
            v['zz'] = 3
            return list(vals)
    """)


# --- exceptions --------------------------------------------------------------------------------


@pytest.mark.xfail(strict=False, reason="a TypeError the program raises and catches (len(5)) is taken for "
                                        "an internal error of kiln: warning, and the frame runs eagerly")
def test_caught_type_error_is_not_an_internal_error():
    same_as_eager("""
        def f(x, y, lst, d):
            try:
                len(5)
            except TypeError:
                pass
            return x + 1
    """)


@pytest.mark.xfail(strict=False, reason="an IndexError the program raises (storing into a list a helper "
                                        "cleared) is an internal error of kiln instead of the program's error")
def test_store_into_list_cleared_by_helper_raises_index_error():
    same_as_eager("""
        def h(seq, t):
            seq.clear()

        def f(x, y, lst, d):
            lst[1] = h(lst, y)
    """)


@pytest.mark.xfail(strict=False, reason="d.items() read after d['a'] = <int> still holds the old tensor")
def test_items_view_of_argument_after_store():
    same_as_eager("""
        def f(x, y, lst, d):
            items = d.items()
            d['a'] = x.shape[1]
            return list(items)
    """)


# --- identity and default equality of fresh objects --------------------------------------------


@pytest.mark.xfail(strict=False, reason="`C(x, x) is C(x, x)` (two fresh objects) is True in the compiled run")
def test_fresh_objects_are_not_identical():
    same_as_eager("""
        class C:
            def __init__(self, a, b):
                pass

        def f(x, y, lst, d):
            if C(x, x) is C(x, x):
                lst.insert(1, True)
            return x + 1
    """)


@pytest.mark.xfail(strict=False, reason="`C(x, 2) == C(x, 2)` of a class without __eq__ (identity) is True "
                                        "in the compiled run")
def test_fresh_objects_default_equality():
    same_as_eager("""
        class C:
            def __init__(self, a, b):
                pass

        def f(x, y, lst, d):
            d['a'] = C(x, 2) == C(x, 2)
            return x + 1
    """)


# --- side effects around graph breaks and exceptions -------------------------------------------


@pytest.mark.xfail(strict=False, reason="lst.reverse() before an op that raises (in-place add into an "
                                        "expanded tensor): the compiled run loses the reverse")
def test_list_mutation_before_raising_op_is_kept():
    same_as_eager("""
        def f(x, y, lst, d):
            lst.reverse()
            v = y.sum(0).expand(2, 3)
            v += d['a']
    """)


@pytest.mark.xfail(strict=False, reason="lst[:1] = [y], then y rebound to x, then a call that breaks: lst[0] "
                                        "is x in the compiled run (the store used y's later value)")
def test_slice_store_then_rebind_keeps_stored_value():
    same_as_eager("""
        import functools

        def h(t, u):
            pass

        def f(x, y, lst, d):
            lst[:1] = [y]
            y = x
            fn = functools.partial(h, u=y)
            return [y]
    """)


@pytest.mark.xfail(strict=False, reason="`x += lst[1]` on an argument, followed by [torch.Tensor.size(x)]: "
                                        "the in-place update of x is lost")
def test_inplace_add_to_argument_then_tensor_size():
    same_as_eager("""
        import torch

        def f(x, y, lst, d):
            x += lst[1]
            [torch.Tensor.size(x)]
    """)


@pytest.mark.xfail(strict=False, reason="after len(torch.Tensor.size(x)), the in-place store y[1] = 0 into "
                                        "an argument is lost (no graph is made; y comes back unchanged)")
def test_inplace_store_after_unbound_tensor_size():
    same_as_eager("""
        import torch

        def f(x, y, lst, d):
            n = len(torch.Tensor.size(x))
            y[1] = 0
            return y
    """)


@pytest.mark.xfail(strict=False, reason="torch.Tensor.size(x) (unbound, no dim) returns a tuple instead of a "
                                        "torch.Size")
def test_unbound_tensor_size_is_a_torch_size():
    same_as_eager("""
        import torch

        def f(x, y, lst, d):
            return x + 1, torch.Tensor.size(x)
    """)


@pytest.mark.xfail(strict=False, reason="h(**{'t': ...}) where h breaks the graph inside (t.max() > 1): the "
                                        "compiled run raises TypeError 'missing 1 required positional argument'")
def test_call_with_double_star_dict_around_break():
    same_as_eager("""
        import functools

        def h1(seq, t):
            if t.max() > 1:
                pass

        def h5(t):
            return h1([t], t)

        def f(x, y, lst, d):
            v = h5(**{'t': functools.reduce(lambda p, q: p, lst, y)})
    """)


@pytest.mark.xfail(strict=False, reason="{**d, 'n': functools.reduce(...)}: the key 'n' is missing from the "
                                        "compiled result")
def test_dict_display_with_unpack_and_reduce():
    same_as_eager("""
        import functools

        def f(x, y, lst, d):
            v = {**d, 'n': functools.reduce(lambda p, q: p, lst, x)}
            return (v,)
    """)


@pytest.mark.xfail(strict=False, reason="a closure's nonlocal counter, bumped by a call whose argument is "
                                        "functools.reduce(...): the increment is lost (0 vs 1)")
def test_nonlocal_increment_with_reduce_argument():
    same_as_eager("""
        import functools

        def f(x, y, lst, d):
            n = 0

            def inner(t):
                nonlocal n
                n += 1
            inner(functools.reduce(lambda p, q: p, lst, y))
            return [n]
    """)


# --- sets --------------------------------------------------------------------------------------


@pytest.mark.xfail(strict=False, reason="a set of ints {3, 1, 4} is iterated in insertion order (3 first), "
                                        "not in CPython's hash order (1, 3, 4)")
def test_set_iteration_order():
    same_as_eager("""
        def f(x, y, lst, d):
            s = {y.shape[1], 1, 4}
            return [a for a, b in zip(s, s)], {v: v for v in s}, x + 1
    """)


# --- graph breaks inside loops -----------------------------------------------------------------


@pytest.mark.xfail(strict=False, reason="a data-dependent branch (graph break) inside `for i, e in "
                                        "enumerate(lst)`: the indices seen are [1, 2, 2] instead of [0, 1, 2]")
def test_enumerate_loop_with_break_inside():
    same_as_eager("""
        def f(x, y, lst, d):
            out = []
            for i, e in enumerate(lst):
                if y.sum() > 0:
                    pass
                out.append(i)
            return out, x + 1
    """)


@pytest.mark.xfail(strict=False, reason="d.pop('a') before an op that raises (in-place add into an expanded "
                                        "tensor): the compiled run loses the pop")
def test_dict_pop_before_raising_op_is_kept():
    same_as_eager("""
        def f(x, y, lst, d):
            v = lst[1].sum(0).expand(2, 3)
            d.pop('a', None)
            v += lst[1]
    """)
