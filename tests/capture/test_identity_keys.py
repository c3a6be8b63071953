"""Objects compared by identity where the code picks by them: builtins handed in as arguments, and dicts
from outside keyed by classes and typing's special forms (huggingface_hub's validators by get_origin)."""
import typing

import pytest
import torch

import kiln


def setup_function():
    kiln.reset()
    kiln.stats.reset()


def test_a_builtin_handed_in_is_guarded_as_that_builtin():
    def f(x, fn):
        return x + 1, fn([1, 2])

    compiled = kiln.compile(f)
    for fn in (list, tuple, len, sum, max, list):  # each a different result: none may reuse another's code
        got, want = compiled(torch.ones(1), fn), f(torch.ones(1), fn)
        assert got[1] == want[1] and type(got[1]) is type(want[1]), (fn, got[1], want[1])


TABLE = {typing.Union: lambda: "union", typing.Literal: lambda: "literal", list: lambda: "list"}


def test_a_dict_keyed_by_classes_and_special_forms_is_looked_up_exactly():
    def f(x, origin):
        validator = TABLE.get(origin)
        return x + 1, validator() if validator is not None else None, origin in TABLE

    compiled = kiln.compile(f)
    for origin in (typing.Union, typing.Literal, list, tuple, typing.Union, dict):
        assert compiled(torch.ones(1), origin)[1:] == f(torch.ones(1), origin)[1:], origin
    assert not kiln.stats.graph_breaks, dict(kiln.stats.graph_breaks)
    TABLE[tuple] = lambda: "tuple now"  # the dict changed: its keys are guarded
    TABLE[typing.Union] = lambda: "union now"  # an entry changed: its value is guarded
    try:
        for origin in (tuple, typing.Union):
            assert compiled(torch.ones(1), origin)[1:] == f(torch.ones(1), origin)[1:], origin
    finally:
        del TABLE[tuple]
        TABLE[typing.Union] = lambda: "union"


def test_typing_constructs_are_constants_of_the_trace():
    """dataclass field types handed to typing.get_origin/get_args (huggingface_hub validates config fields
    so): computed while tracing, not a graph break; the annotation objects are pinned by identity."""
    import dataclasses
    from typing import Optional, Union, get_args, get_origin

    @dataclasses.dataclass
    class Config:
        a: Optional[int] = None
        b: list[str] = None
        c: Union[int, str] = 1
        d: "int | None" = None

    def f(x):
        kinds = [(get_origin(fld.type), get_args(fld.type), TABLE.get(get_origin(fld.type)) is not None)
                 for fld in dataclasses.fields(Config)]
        return x + len(kinds), kinds

    compiled = kiln.compile(f)
    assert compiled(torch.ones(1))[1] == f(torch.ones(1))[1]
    assert not kiln.stats.graph_breaks, dict(kiln.stats.graph_breaks)
    Config.__dataclass_fields__["a"].type = Optional[str]  # another annotation object: not taken for the old
    assert compiled(torch.ones(1))[1] == f(torch.ones(1))[1]


def test_an_object_kiln_does_not_model_is_guarded_by_type():
    """isinstance() of an argument kiln holds without looking into (a list_reverseiterator, a generator)
    answers from its type: guarded, so a later int takes its own code (it reused the iterator's: TypeError)."""
    def f(x, r):
        if not isinstance(r, int):
            r = list(r)
        return x + 1, r

    def numbers():
        yield 1

    compiled = kiln.compile(f)
    for arg in (reversed([1, 2]), 5, numbers(), 7):
        expected = f(torch.ones(1), arg if isinstance(arg, int) else list(arg))  # (a fresh copy of the items)
        got = compiled(torch.ones(1), arg if isinstance(arg, int) else
                       (reversed([1, 2]) if expected[1] == [2, 1] else numbers()))
        assert got[1] == expected[1]


def test_softmax_over_a_dimension_out_of_range_raises_eagers_error():
    from torch import nn
    from torch.nn import functional as F

    for f in (lambda x: F.softmax(x, 5), lambda x: nn.Softmax(dim=5)(x), lambda x: x.log_softmax(-3)):
        kiln.reset()
        try:
            f(torch.randn(3))
        except IndexError as exc:
            expected = str(exc)
        with pytest.raises(IndexError) as got:
            kiln.compile(f)(torch.randn(3))
        assert str(got.value) == expected
