"""The harness' own comparisons: these run with or without kiln.compile (they need no compiler)."""
import collections

import pytest
import torch

from .harness import assert_same, marker_line

NT = collections.namedtuple("NT", ["a", "b"])


@pytest.mark.parametrize(
    "actual, expected",
    [
        ((1, 2), [1, 2]),
        (NT(1, 2), (1, 2)),
        ({"b": 1, "a": 2}, {"a": 2, "b": 1}),
        (1, True),
        (1.0, 1),
        (torch.ones(2), torch.ones(2, dtype=torch.float64)),
        (torch.ones(2), torch.ones(3)),
        (torch.ones(2), torch.zeros(2)),
        (torch.ones(2), torch.ones(2).requires_grad_()),
        (torch.Size([2]), (2,)),
        ("a", "b"),
        (None, 0),
    ],
)
def test_assert_same_catches_mismatch(actual, expected):
    with pytest.raises(AssertionError):
        assert_same(actual, expected)


def test_assert_same_accepts_equal_structures():
    class Obj:
        def __init__(self, t):
            self.t = t

    a = {"x": (torch.arange(3.0), NT(1, "s")), "y": [None, 2.5, float("nan")], "o": Obj(torch.ones(1))}
    b = {"x": (torch.arange(3.0), NT(1, "s")), "y": [None, 2.5, float("nan")], "o": Obj(torch.ones(1))}
    assert_same(a, b)


def test_marker_line():
    assert marker_line(__file__, "HARNESS:marker") == test_marker_line.__code__.co_firstlineno + 2
    # HARNESS:marker


def test_check_fails_on_a_kiln_internal_error(monkeypatch):
    """kiln recovers from its own bugs by running the frame eagerly (a warning): results are right, but
    the case must still fail, as the fuzzer counts such a fallback as a failure."""
    import warnings

    from . import harness

    def compile_with_internal_error(fn, backend, **kwargs):
        def run(*args, **kw):
            warnings.warn("kiln: internal error in kiln: BytecodeError: ...; fn runs eagerly")
            return fn(*args, **kw)
        return run

    monkeypatch.setattr(harness, "compile_fn", compile_with_internal_error)
    with pytest.raises(AssertionError, match="internal error"):
        harness.check(lambda x: x + 1, torch.ones(2), graphs=0)
