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
