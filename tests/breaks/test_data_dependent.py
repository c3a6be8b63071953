"""Data-dependent Python: .item(), .tolist(), bool()/int()/float() of tensors, `if` and `while` on
tensor conditions. The graph breaks where the value has to become a Python object; later calls
whose inputs take the other branch run it correctly (through guards or the other continuation)."""
import torch
import torch.nn as nn

from .support import check_breaks, t


def _pos(*shape, seed=0):
    return t(*shape, seed=seed).abs() + 0.5


def _neg(*shape, seed=0):
    return -(t(*shape, seed=seed).abs() + 0.5)


def test_item_used_in_arithmetic():
    def fn(x):
        total = x.sum().item()  # BREAK:item_arith
        return x / (abs(total) + 1.0)

    check_breaks(fn, t(6), graphs=2, breaks=1, where=["BREAK:item_arith"])


def test_item_in_python_branch_both_ways():
    def fn(x):
        y = x * 3
        peak = y.abs().max().item()
        if peak > 2.0:
            return y / peak
        return y * 2

    check_breaks(fn, arg_sets=[(t(5) * 4,), (t(5) * 0.01,)], graphs=3, breaks=1)


def test_tolist_builds_python_values():
    def fn(x):
        y = x.round()
        vals = y.tolist()
        scale = sum(abs(v) for v in vals) + 1
        return y / scale, len(vals)

    check_breaks(fn, t(4) * 3, graphs=2, breaks=1)


def test_bool_of_tensor():
    def fn(x):
        y = x - 0.1
        if bool((y > 0).all()):
            return y.log()
        return y.relu()

    check_breaks(fn, arg_sets=[(_pos(4),), (t(4),)], graphs=3, breaks=1)


def test_int_of_tensor_as_index():
    def fn(x):
        scores = x.softmax(0)
        best = int(scores.argmax())
        return scores[best] * 2, best

    # the continuation may be specialized on `best` (a recompile when the argmax moves)
    check_breaks(fn, arg_sets=[(t(5),), (t(5, seed=3),)], graphs=(2, 3), breaks=1)


def test_float_of_tensor_as_scale():
    def fn(x):
        m = x.abs().max()
        scale = float(m)
        return x / scale, scale > 1.0

    check_breaks(fn, t(6) * 2, graphs=2, breaks=1)


def test_if_sum_positive_both_branches():
    def fn(x):
        y = x * 2
        if y.sum() > 0:  # BREAK:if_sum
            z = y + 1
        else:
            z = y - 1
        return z.sin()

    check_breaks(fn, arg_sets=[(_pos(4),), (_neg(4),)], graphs=3, breaks=1, where=["BREAK:if_sum"])


def test_if_tensor_truthiness_any():
    def fn(x, mask):
        if (mask > 0).any():
            x = x.masked_fill(mask > 0, 0.0)
        return x.exp()

    check_breaks(fn, arg_sets=[(t(5), t(5, seed=1)), (t(5), -_pos(5))], graphs=3, breaks=1)


def test_if_with_python_and_tensor_condition():
    def fn(x, flag):
        if flag and (x > 0).any():
            return x.relu()
        return x.neg()

    # flag False never evaluates the tensor: no break on that path (a recompile for the new flag).
    check_breaks(fn, arg_sets=[(t(4), True), (t(4), False), (_neg(4), True)], graphs=4, breaks=1)


def test_while_on_tensor_condition():
    def fn(x):
        steps = 0
        while x.norm() > 1.0:  # BREAK:while
            x = x * 0.5
            steps += 1
        return x, steps

    # dynamo: 3 graphs (root; the loop-body continuation, compiled again once `steps` changes and
    # then kept dynamic), explain: 2 breaks. Shapes and ints are static in kiln: the continuation
    # may be compiled for each value of `steps` (up to the recompile limit).
    check_breaks(fn, arg_sets=[(t(8) * 4,), (t(8) * 0.01,), (t(8) * 20,)], graphs=tuple(range(2, 10)),
                 breaks=tuple(range(2, 10)), dynamo_graphs=3, dynamo_breaks=2, where=["BREAK:while"])


def test_while_with_tensor_and_python_condition():
    def fn(x, limit):
        it = 0
        while x.abs().max() > 1 and it < limit:
            x = x - x.sign() * 0.5
            it += 1
        return x, it

    # dynamo: 1 graph (it gives up splitting the loop). kiln: root graph, then continuations of the
    # loop body (possibly one per value of `it`).
    check_breaks(fn, arg_sets=[(t(6) * 3, 4), (t(6) * 3, 1)], graphs=tuple(range(2, 10)), breaks=tuple(range(2, 10)),
                 dynamo_graphs=1, dynamo_breaks=0)


def test_early_return_in_range_loop_on_tensor_condition():
    def fn(x):
        for i in range(4):
            x = x * 2
            if x.abs().sum() > 20:
                return x, i
        return x, -1

    # dynamo: 4 graphs, explain 2 breaks; kiln may specialize continuations on `i`
    check_breaks(fn, arg_sets=[(t(4),), (t(4) * 0.01,)], graphs=tuple(range(4, 10)), breaks=(2, 3, 4),
                 dynamo_graphs=4, dynamo_breaks=2)


def test_assert_on_tensor():
    def fn(x):
        probs = x.softmax(-1)
        assert (probs >= 0).all(), "negative probability"
        return probs.log()

    check_breaks(fn, t(2, 3), graphs=2, breaks=1)


def test_item_sum_of_tolist():
    def fn(x):
        vals = x.tolist()
        hi = max(vals)
        lo = min(vals)
        return (x - lo) / (hi - lo + 1e-6)

    check_breaks(fn, t(5), graphs=1, breaks=1, dynamo_breaks=0)


class _Router(nn.Module):
    """Mixture-of-experts style routing decided in Python from a gate value."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(4, 1)
        self.small = nn.Linear(4, 4)
        self.big = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        g = torch.sigmoid(self.gate(x)).mean()
        if g.item() > 0.5:
            return self.big(x) * g
        return self.small(x) * (1 - g)


def test_module_routing_on_item_both_branches():
    torch.manual_seed(0)
    router = _Router()
    with torch.no_grad():
        router.gate.weight.fill_(1.0)
        router.gate.bias.zero_()
    check_breaks(router, arg_sets=[(_pos(3, 4),), (_neg(3, 4),)], graphs=3, breaks=1)


def test_data_dependent_output_shape_mask():
    # x[x > 0] has a data-dependent size: dynamo breaks before the indexing (unless
    # capture_dynamic_output_shape_ops); kiln keeps it in one graph with an unbacked size (u0).
    def fn(x):
        y = x * 2
        pos = y[y > 0]
        return pos.sum() + y.mean()

    check_breaks(fn, t(6), graphs=1, breaks=0)


def test_nonzero_indices_used_in_python():
    def fn(x):
        idx = torch.nonzero(x > 0.5).flatten().tolist()
        picked = [x[i] * 2 for i in idx]
        return torch.stack(picked).sum() if picked else x.sum()

    # dynamo: 4 graphs (x > 0.5 | flatten | stack + sum | the empty case's sum), 2 breaks. kiln keeps
    # nonzero and flatten in the first graph (an unbacked size) and breaks only at tolist(): 3.
    check_breaks(fn, arg_sets=[(t(6),), (_neg(6),)], graphs=3, breaks=1, dynamo_graphs=4)
