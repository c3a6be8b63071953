"""Minimized programs the capture fuzzer found where kiln differs from eager (one per bug class).

They all pass now (the lazy-iterator, dict-view, object-identity, traced-raise and graph-break fixes),
and run in CI as regressions: a program the fuzzer finds later is added here, failing, with the fix.

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


def test_map_over_list_grown_before_consumed():
    same_as_eager("""
        def f(x, y, lst, d):
            def m(e):
                pass
            it = map(m, lst)
            lst.append(x)
            return list(it)
    """)


def test_map_function_side_effect_runs_lazily():
    same_as_eager("""
        def f(x, y, lst, d):
            log = []
            def m(e):
                log.append(len(log))
            it = map(m, lst)
            return log
    """)


def test_return_unconsumed_map():
    same_as_eager("""
        def f(x, y, lst, d):
            def m(e):
                return e * 2
            it = map(m, lst)
            return it
    """)


# --- dict views --------------------------------------------------------------------------------


def test_values_view_of_argument_after_store():
    same_as_eager("""
        def f(x, y, lst, d):
            vals = d.values()
            d['a'] = 1
            return list(vals)
    """)


def test_keys_view_of_argument_after_insertion():
    same_as_eager("""
        def f(x, y, lst, d):
            ks = d.keys()
            d['late'] = 1
            return len(ks), list(ks), x + 1
    """)


def test_values_view_of_new_dict_after_insertion():
    same_as_eager("""
        def f(x, y, lst, d):
            v = dict(k=3)
            vals = v.values()
            v['zz'] = 3
            return list(vals)
    """)


# --- exceptions --------------------------------------------------------------------------------


def test_caught_type_error_is_not_an_internal_error():
    same_as_eager("""
        def f(x, y, lst, d):
            try:
                len(5)
            except TypeError:
                pass
            return x + 1
    """)


def test_store_into_list_cleared_by_helper_raises_index_error():
    same_as_eager("""
        def h(seq, t):
            seq.clear()

        def f(x, y, lst, d):
            lst[1] = h(lst, y)
    """)


def test_items_view_of_argument_after_store():
    same_as_eager("""
        def f(x, y, lst, d):
            items = d.items()
            d['a'] = x.shape[1]
            return list(items)
    """)


# --- identity and default equality of fresh objects --------------------------------------------


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


def test_list_mutation_before_raising_op_is_kept():
    same_as_eager("""
        def f(x, y, lst, d):
            lst.reverse()
            v = y.sum(0).expand(2, 3)
            v += d['a']
    """)


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


def test_inplace_add_to_argument_then_tensor_size():
    same_as_eager("""
        import torch

        def f(x, y, lst, d):
            x += lst[1]
            [torch.Tensor.size(x)]
    """)


def test_inplace_store_after_unbound_tensor_size():
    same_as_eager("""
        import torch

        def f(x, y, lst, d):
            n = len(torch.Tensor.size(x))
            y[1] = 0
            return y
    """)


def test_unbound_tensor_size_is_a_torch_size():
    same_as_eager("""
        import torch

        def f(x, y, lst, d):
            return x + 1, torch.Tensor.size(x)
    """)


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


def test_dict_display_with_unpack_and_reduce():
    same_as_eager("""
        import functools

        def f(x, y, lst, d):
            v = {**d, 'n': functools.reduce(lambda p, q: p, lst, x)}
            return (v,)
    """)


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


def test_set_iteration_order():
    same_as_eager("""
        def f(x, y, lst, d):
            s = {y.shape[1], 1, 4}
            return [a for a, b in zip(s, s)], {v: v for v in s}, x + 1
    """)


# --- graph breaks inside loops -----------------------------------------------------------------


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


def test_dict_pop_before_raising_op_is_kept():
    same_as_eager("""
        def f(x, y, lst, d):
            v = lst[1].sum(0).expand(2, 3)
            d.pop('a', None)
            v += lst[1]
    """)


# --- generator functions ------------------------------------------------------------------------


def test_generator_reads_a_list_and_a_global_the_consumer_changed():
    """Seed 579 of the grammar with generator reads: kiln ran the body to its end at the call, so the
    items used the list's length and G_COUNT from before the consumer changed them."""
    same_as_eager("""
        G_COUNT = 0

        def g(seq):
            global G_COUNT
            for _i in range(len(seq)):
                yield seq[_i] * (G_COUNT + len(seq))

        def f(x, y, lst, d):
            global G_COUNT
            _gen = g(lst)
            first = next(_gen, x)
            lst.append(y)
            G_COUNT += 1
            return first, sum(_gen, x)
    """)
