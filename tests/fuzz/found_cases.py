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
