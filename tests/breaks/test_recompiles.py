"""Repeated calls with the same shapes must not recompile: values that are new objects on every call
(closures, bound methods made before a break) and numbers that change every call (loop counters,
item() results, clocks) live across a break are guarded by what the continuation depends on."""
import torch
import torch.nn as nn

from .support import check_breaks, check_recompiles, graph_break, t


def test_closure_with_default_created_before_break_called_after():
    def fn(x, scale):
        def affine(v, k=scale):
            return v * k + 1

        y = affine(x)
        graph_break()
        return affine(y)

    # the default differs between calls: guarded by value through __defaults__, so the two scales
    # are two cache entries and never a wrong answer
    check_breaks(fn, t(3), 2.0, graphs=2, breaks=1)
    check_recompiles(fn, [(t(3), 2.0), (t(3), 3.0), (t(3), 2.0)], graphs=4)


def test_closure_over_changing_cell_called_after_break():
    def fn(x, offset):
        def shift(v):
            return v + offset

        graph_break()
        return shift(x)

    # the cell holds a tensor: a graph input, so new values do not recompile
    check_recompiles(fn, [(t(3), t(3, seed=1)), (t(3), t(3, seed=2)), (t(3), t(3, seed=3))], graphs=1)


def test_lambda_list_live_across_break():
    def fn(x):
        ops = [lambda v: v * 2, lambda v: v - 1]
        print("ops ready")
        for op in ops:
            x = op(x)
        return x

    check_breaks(fn, t(3), graphs=1, breaks=1, calls=3)


def test_transformer_encoder_layer_repeated_calls():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True).eval()

    def fn(x):
        return layer(x)

    counter = check_recompiles(fn, [(t(2, 4, 8),), (t(2, 4, 8, seed=1),), (t(2, 4, 8, seed=2),)],
                               graphs=range(1, 100))
    assert len(counter.graphs) == _graphs_after_first_call(fn, t(2, 4, 8)), "later calls recompiled"


def _graphs_after_first_call(fn, *args):
    from .support import CountingBackend, compile_fn, reset

    reset()
    counter = CountingBackend()
    compile_fn(fn, counter)(*args)
    return len(counter.graphs)
