"""Breaks inside functions the caller inlines: the caller compiles the part before the call and the
part after it; the callee runs as its own frame, which kiln offers to the backend in turn (its own
graphs before and after its break). Graph counts include the callee's frames.

Break counts: kiln counts break events, one per frame that breaks (the caller at the call, the
callee at its unsupported line); dynamo's explain reports graph_count - 1 (``dynamo_breaks``)."""
import torch
import torch.nn as nn

from .support import check_breaks, disable, graph_break, t


def _normalize_and_report(y):
    mu = y.mean()
    print("normalize: mean computed")  # BREAK:helper_print
    return (y - mu) / (y.std() + 1e-5)


def test_break_in_helper_caller_compiles_around():
    def fn(x):
        h = x * 2 + 1
        n = _normalize_and_report(h)
        return n.relu() * 3

    # graphs: caller before the call, helper before/after its print, caller after the call.
    check_breaks(fn, t(6), graphs=4, breaks=2, dynamo_breaks=3, where=["BREAK:helper_print"])


def _inner_with_break(y):
    y = y.sin()
    graph_break()
    return y.cos()


def _middle(y):
    z = y * 2
    w = _inner_with_break(z)
    return w + z


def test_break_two_levels_deep():
    def fn(x):
        a = x.exp()
        b = _middle(a)
        return b.sum(0)

    check_breaks(fn, t(3, 2), graphs=6, breaks=3, dynamo_breaks=5)


def test_helper_with_break_called_twice():
    def fn(x):
        a = _normalize_and_report(x)
        b = _normalize_and_report(x * 2)
        return a + b

    # graphs: helper before/after its print (compiled once, reused for the second call), the caller
    # between the calls (x * 2) and after them (a + b); nothing in the caller before the first call.
    check_breaks(fn, t(5), graphs=4, breaks=3)


def _clip_if_large(y):
    if y.abs().max() > 3:
        return y.clamp(-3, 3)
    return y


def test_data_dependent_branch_in_helper():
    def fn(x):
        y = x * 4
        y = _clip_if_large(y)
        return y.tanh()

    check_breaks(fn, arg_sets=[(t(5),), (t(5) * 0.01,)], graphs=4, breaks=2, dynamo_breaks=3)


class _Tracker:
    def __init__(self):
        self.calls = 0

    def update(self, y):
        self.calls += 1
        print("tracker update", self.calls)
        return y * self.calls


def test_break_in_method_of_user_object():
    def fn(x, tracker):
        y = x + 1
        y = tracker.update(y)
        return y.neg()

    # graphs: x + 1 | update after its print | neg (nothing in update before the print)
    check_breaks(fn, t(3), _Tracker(), graphs=3, breaks=2, inputs_mutated=True)


def test_break_in_closure_helper():
    def fn(x, k):
        def scaled(v):
            v = v * k
            graph_break()
            return v + k

        a = x.abs()
        return scaled(a) - a

    check_breaks(fn, t(4), 3, graphs=4, breaks=2, dynamo_breaks=3)


def _early_exit(y, limit):
    y = y + 1
    print("early exit check")
    if limit < 0:
        return y
    return y * limit


def test_helper_returning_early_after_break():
    def fn(x, limit):
        a = x.sigmoid()
        return _early_exit(a, limit) * 2

    # kiln: `limit` is only handed on to the break inside _early_exit, so the root frame does not guard its value
    check_breaks(fn, arg_sets=[(t(3), 2), (t(3), -1)], graphs=4, breaks=2, dynamo_graphs=6, dynamo_breaks=3)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        graph_break()
        return x + h.relu()


class _Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([_Block() for _ in range(3)])
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


def test_break_in_submodule_forward_inside_module_list():
    torch.manual_seed(0)
    # dynamo: 4 graphs, explain 3 breaks: it runs _Stack.forward unsplit (a break inside a loop) and
    # compiles each block's forward (before/after the break, shared by the three blocks) and the head.
    # kiln splits _Stack.forward too; blocks may get graphs each (parameters guarded by identity).
    check_breaks(_Stack(), t(2, 4), graphs=tuple(range(3, 9)), breaks=tuple(range(2, 9)), dynamo_graphs=4,
                 dynamo_breaks=3)


@disable
def _eager_stat(y):
    return y.var()


def _helper_calls_disabled(y):
    s = _eager_stat(y)
    return y / (s + 1)


def test_disabled_call_inside_helper():
    def fn(x):
        y = x * x
        z = _helper_calls_disabled(y)
        return z - y

    check_breaks(fn, t(4), graphs=3, breaks=2)


def test_break_in_helper_under_no_grad():
    def fn(w, x):
        y = x @ w
        with torch.no_grad():
            n = _normalize_and_report(y)
        return y * n

    check_breaks(fn, t(3, 3, requires_grad=True), t(2, 3, seed=1), graphs=4, breaks=2, dynamo_breaks=3)
