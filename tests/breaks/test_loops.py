"""Breaks inside for loops over Python ranges, lists, ModuleLists, enumerate and zip: the loop's
iterator is live across the break and the continuation carries on with the next item.

TorchDynamo (torch 2.13) does not split a frame at a break inside a loop: it runs that frame unsplit
and compiles only the frames it calls (``_DYNAMO`` below: 0 graphs, explain -1 for most cases).
Issue 3 asks kiln to resume inside the loop. Counts are ranges: the continuation of the loop body
is entered with a new loop position (and new Python ints) each iteration, which kiln may compile
once or once per iteration (static ints), up to its recompile limit.
"""
import torch
import torch.nn as nn

from .support import check_breaks, graph_break, t

_DYNAMO = dict(dynamo_graphs=0, dynamo_breaks=-1)


def _upto(n):
    return tuple(range(1, n + 1))


def test_print_in_range_loop():
    def fn(x):
        for i in range(3):
            x = x * 2 + i
            print("iteration", i)
        return x.sum()

    check_breaks(fn, t(3), graphs=(2, 3, 4), breaks=(2, 3, 4), **_DYNAMO)


def test_graph_break_each_iteration_with_python_list_accumulator():
    def fn(x):
        outs = []
        for k in [1.0, 0.5, 0.25]:
            outs.append(x * k)
            graph_break()
        return torch.stack(outs).sum(0), len(outs)

    check_breaks(fn, t(4), graphs=(2, 3, 4, 5), breaks=(2, 3, 4), **_DYNAMO)


def test_item_inside_loop_over_list_of_tensors():
    def fn(xs):
        total = 0.0
        for v in xs:
            total += (v * v).sum().item()
        return total, xs[0] * total

    check_breaks(fn, [t(3, seed=i) for i in range(3)], graphs=(2, 3, 4, 5), breaks=(2, 3, 4), **_DYNAMO)


class _LoggedLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = torch.tanh(layer(x))
            print(f"layer {i} done")
        return x


def test_print_in_module_list_loop():
    torch.manual_seed(0)
    check_breaks(_LoggedLayers(), t(2, 4), graphs=(2, 3, 4), breaks=(2, 3, 4), **_DYNAMO)


def test_break_in_zip_loop():
    def fn(xs, ws):
        acc = torch.zeros(3)
        for x, w in zip(xs, ws):
            acc = acc + x * w
            graph_break()
        return acc

    check_breaks(fn, [t(3, seed=i) for i in range(3)], [0.5, 1.0, 2.0], graphs=(2, 3, 4, 5), breaks=(2, 3, 4),
                 **_DYNAMO)


def test_break_in_nested_loops():
    def fn(x):
        for i in range(2):
            for j in range(2):
                x = x + i * 10 + j
                if j == 1:
                    graph_break()
        return x * 2

    check_breaks(fn, t(3), graphs=(2, 3, 4), breaks=(2, 3), **_DYNAMO)


def test_loop_break_statement_on_item_condition():
    # early stopping: leave the loop when the loss is small enough
    def fn(x, target):
        steps = 0
        for step in range(10):
            x = x - 0.5 * (x - target)
            if ((x - target) ** 2).mean().item() < 1e-2:
                break
            steps += 1
        return x, steps

    check_breaks(fn, t(4) * 4, t(4, seed=1), graphs=tuple(range(2, 10)), breaks=_upto(9), **_DYNAMO)


def _noisy(v):
    print("noisy", tuple(v.shape))
    return v * 2


def test_list_comprehension_calling_breaking_helper():
    def fn(xs):
        ys = [_noisy(x) for x in xs]
        return torch.cat(ys).sum()

    # dynamo: 2 graphs (the comprehension unsplit; _noisy after its print; cat + sum)
    check_breaks(fn, [t(2, seed=i) for i in range(3)], graphs=(2, 3, 4), breaks=_upto(6), dynamo_breaks=1)


def test_loop_over_dict_items_with_break():
    def fn(feats):
        out = {}
        for name, v in feats.items():
            out[name] = v.relu()
            graph_break()
        return out

    check_breaks(fn, {"a": t(3), "b": t(3, seed=1), "c": t(3, seed=2)}, graphs=(1, 2, 3, 4), breaks=(2, 3, 4),
                 **_DYNAMO)


def test_list_comprehension_of_item_calls():
    # a very common pattern: Python numbers out of a tensor, one .item() per element
    def fn(x):
        vals = [v.item() for v in x.unbind(0)]
        return x * max(vals), len(vals)

    check_breaks(fn, t(4), graphs=(1, 2, 3, 4, 5), breaks=_upto(6), dynamo_graphs=2, dynamo_breaks=1)


def test_dict_comprehension_calling_breaking_helper():
    def fn(feats):
        out = {k: _noisy(v) for k, v in feats.items()}
        return out, sum(v.sum() for v in out.values())

    check_breaks(fn, {"a": t(2), "b": t(2, seed=1)}, graphs=(1, 2, 3, 4), breaks=_upto(6),
                 dynamo_graphs=1, dynamo_breaks=0)


def test_generator_expression_with_breaking_helper_in_sum():
    def fn(xs):
        total = sum(_noisy(x).sum() for x in xs)
        return total * 2

    check_breaks(fn, [t(2, seed=i) for i in range(3)], graphs=(1, 2, 3, 4), breaks=_upto(6),
                 dynamo_graphs=1, dynamo_breaks=0)


def test_nested_comprehension_with_print_helper():
    def fn(rows):
        grid = [[_noisy(v) for v in row] for row in rows]
        return torch.stack([torch.stack(r) for r in grid]).sum(), len(grid), len(grid[0])

    check_breaks(fn, [[t(2, seed=i + j) for j in range(2)] for i in range(2)], graphs=(1, 2, 3, 4, 5),
                 breaks=_upto(8), dynamo_graphs=2, dynamo_breaks=1)
