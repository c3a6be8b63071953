"""Several breaks in one function, of different kinds, in sequence, in branches and in combination
with loops, helpers and context managers."""
import torch
import torch.nn as nn

from .support import check_breaks, disable, graph_break, t

TRACE: list = []


def _clear():
    TRACE.clear()


def _trace():
    return list(TRACE)


def test_three_kinds_in_sequence():
    def fn(x):
        a = x * 2
        print("a ready")  # BREAK:seq_print
        b = a + a.sum().item()  # BREAK:seq_item
        graph_break()  # BREAK:seq_forced
        return b.relu()

    # graphs: x*2 | a.sum() | a + v | relu
    check_breaks(fn, t(4), graphs=4, breaks=3, where=["BREAK:seq_print", "BREAK:seq_item", "BREAK:seq_forced"])


def test_breaks_in_both_branches():
    def fn(x, use_log):
        y = x.abs() + 1
        if use_log:
            print("log branch")
            y = y.log()
        else:
            graph_break()
            y = y.sqrt()
        return y * 2

    check_breaks(fn, arg_sets=[(t(3), True), (t(3), False)], graphs=4, breaks=1)


def test_break_then_tensor_branch_then_break():
    def fn(x):
        y = x * 3
        print("stage 1")
        if y.mean() > 0:
            y = y - 1
        else:
            y = y + 1
        print("stage 2")
        return y.exp()

    check_breaks(fn, arg_sets=[(t(4).abs(),), (-t(4).abs(),)], graphs=5, breaks=3)


def test_ten_forced_breaks():
    def fn(x):
        for k in range(10):
            x = x * 1.1 + k
            graph_break()
        return x

    # dynamo runs a frame with a break inside a loop unsplit (0 graphs). kiln: the root graph, then
    # the continuation of the loop body, specialized on k, until the recompile limit runs the rest
    # eagerly.
    check_breaks(fn, t(3), graphs=tuple(range(2, 12)), breaks=tuple(range(2, 12)), dynamo_graphs=0,
                 dynamo_breaks=-1)


def test_unrolled_breaks_with_ops_between():
    def fn(x):
        x = x + 1
        graph_break()
        x = x * 2
        graph_break()
        x = x - 3
        graph_break()
        x = x / 4
        graph_break()
        return x.sin()

    check_breaks(fn, t(3), graphs=5, breaks=4)


@disable
def _opaque(v):
    TRACE.append(tuple(v.shape))
    return v * 1.5


def test_disabled_calls_in_helper_in_loop_in_no_grad():
    def helper(v, i):
        v = v + i
        return _opaque(v)

    def fn(x):
        with torch.no_grad():
            for i in range(3):
                x = helper(x, i)
        return x * 2

    # dynamo: 2 graphs (fn unsplit: a break inside a loop; helper's v + i, specialized on i
    # then dynamic; x * 2 never compiled). kiln may compile more continuations.
    check_breaks(fn, t(2, 2), graphs=tuple(range(2, 10)), breaks=tuple(range(1, 10)), setup=_clear,
                 observe=_trace, dynamo_graphs=2, dynamo_breaks=1)


def test_return_of_disabled_call_result():
    def fn(x):
        y = x.softmax(0)
        return _opaque(y)

    # nothing after the break: one graph; dynamo's explain counts graphs - 1 = 0
    check_breaks(fn, t(4), graphs=1, breaks=1, setup=_clear, observe=_trace, dynamo_breaks=0)


class _Pipeline(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 4)
        self.dec = nn.Linear(4, 4)

    def forward(self, x):
        h = self.enc(x)
        print("encoded", tuple(h.shape))
        n = h.norm().item()
        h = h / (n + 1)
        graph_break()
        return self.dec(h)


def test_module_with_three_breaks():
    torch.manual_seed(0)
    check_breaks(_Pipeline(), t(2, 4), graphs=4, breaks=3)


def test_break_between_side_effects_and_return_tuple():
    def fn(x, out):
        out["pre"] = x.sum()
        print("between")
        out["post"] = x.prod()
        n = x.argmax().item()
        return out["pre"] + out["post"], n

    # (4: the returned item() is first traced as an unbacked number; handing it on needs its value, so
    # the frame is traced again with the graph broken at item(): the first graph is compiled and dropped)
    check_breaks(fn, t(3), {}, graphs=4, breaks=2, inputs_mutated=True)
