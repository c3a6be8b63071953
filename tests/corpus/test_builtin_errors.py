"""Errors that builtins raise on plain values (len(5), 1 / 0, int("x")) are the program's own: a traced
`except` catches them, and uncaught they are raised as in eager, never reported as kiln's failure."""
import warnings

import pytest
import torch

from .harness import USE_DYNAMO, check, compile_fn, reset


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def _safe_len(obj):
    try:
        return len(obj)
    except TypeError:
        return -1


def _safe_div(a, b):
    try:
        return a / b
    except ZeroDivisionError as exc:
        return len(exc.args)


def _parse(text):
    try:
        return int(text)
    except ValueError:
        return 0


def test_type_error_of_len_caught_in_a_helper():
    def fn(x):
        return x * _safe_len(5) + x * _safe_len([1, 2])

    check(fn, _t(3))


def test_zero_division_caught_in_a_helper():
    def fn(x):
        return x + _safe_div(3, 0) + _safe_div(3, 2)

    check(fn, _t(3))


def test_value_error_of_int_caught_in_a_helper():
    def fn(x):
        return x * (_parse("12") + _parse("twelve"))

    check(fn, _t(3))


@pytest.mark.parametrize("case", ["len", "div", "int", "index"])
def test_uncaught_error_is_raised_as_in_eager(case):
    def fn(x, n):
        y = x + 1
        if case == "len":
            return y * len(n)
        if case == "div":
            return y * (n / 0)
        if case == "int":
            return y * int("x" * n)
        return y * [1, 2][n]

    expected = None
    try:
        fn(_t(2), 5)
    except Exception as exc:  # noqa: BLE001
        expected = exc
    assert expected is not None
    reset()
    compiled = compile_fn(fn, "eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "internal error in kiln" warning either
        with pytest.raises(type(expected), match=str(expected).replace("(", r"\(").replace(")", r"\)")):
            compiled(_t(2), 5)
    if not USE_DYNAMO:
        import kiln

        assert not any("internal error" in r for r in kiln.stats.snapshot()["eager_fallbacks"])
