"""Splitting a node's loop dims into a group's outer sizes: which splits, and that the split buffer
computes the same elements."""
import torch

from kiln.loopir.handlers import Evaluator, evaluate_buffer
from kiln.loopir.nodes import ComputedBuffer, Pointwise, contiguous_strides
from kiln.loopir.index import linear_index
from kiln.schedule.split import refine, split_buffer


def test_refine_splits_to_match_a_prefix():
    assert refine([32, 32], [2, 16]) == [[2, 16], [32]]
    assert refine([4, 16, 16], [2, 2, 16]) == [[2, 2], [16], [16]]
    assert refine([32, 128], [32, 128]) is None  # nothing to gain
    assert refine([30, 8], [4, 8]) is None  # 4 does not divide 30
    assert refine([8, 6], [8, 2, 3]) == [[8], [2, 3]]


def test_refine_splits_symbolic_sizes_only_where_it_holds_for_every_size():
    import sympy

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    # BERT's softmax: the output loops over [4*s0 heads, s1, s1], its statistics over [s0, 4, s1]
    assert refine([4 * s0, s1, s1], [s0, 4, s1]) == [[s0, 4], [s1], [s1]]
    assert refine([s0 * s1, 8], [s0, s1]) == [[s0, s1], [8]]
    assert refine([s0 + 1, 8], [s0, 8]) is None  # s0 does not divide s0 + 1
    assert refine([2 * s0, 8], [4, 8]) is None  # 4 divides 2*s0 only for even s0


def test_split_buffer_computes_the_same_elements():
    src = torch.randn(32 * 5)

    def body(ops, index):
        return ops.mul(ops.load("src", linear_index(index, (5, 1))), ops.constant(2.0, torch.float32))

    size = (32, 5)
    buf = ComputedBuffer("out", torch.float32, torch.device("cpu"), size, contiguous_strides(size),
                         data=Pointwise(size, body, torch.float32))
    split = split_buffer(buf, [[2, 16], [5]])
    assert split.size == (2, 16, 5) and split.stride == (80, 5, 1)
    for b in (buf, split):
        out = torch.zeros(32 * 5)
        evaluate_buffer(b, {"src": src, "out": out})
        torch.testing.assert_close(out, src * 2)


def test_refine_leaves_empty_loops_alone():
    # a zero-length piece of split_with_sizes: n % 0 raised ZeroDivisionError in the scheduler
    assert refine([0], [3, 0]) is None and refine([6], [0]) is None


def test_zero_length_split_piece_end_to_end():
    import kiln

    def f(x):
        return [t * 2 for t in x.split([3, 0, 7])]

    x = torch.randn(10)
    for got, want in zip(kiln.compile(f)(x), f(x)):
        assert torch.equal(got, want)
