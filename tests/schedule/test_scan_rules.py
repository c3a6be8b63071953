"""schedule/scan_rules.py: which nodes may share a kernel with a scan or a row sort."""
import torch

from kiln.lower.graph import lower_graph
from kiln.schedule.nodes import make_scheduler_nodes
from kiln.schedule.scan_rules import scan_group_ok
from tests.lower.helpers import trace


def _nodes(fn, *args):
    lg = lower_graph(trace(fn, list(args)).gm)
    dtypes = {name: b.dtype for name, b in lg.buffers().items()}
    return make_scheduler_nodes(lg.nodes, dtypes)


def test_scans_along_one_dim_and_same_index_consumers_fuse():
    def f(x):
        return torch.cumsum(x, 1).exp() + 1, torch.cumprod(x, 1), torch.cumsum(x, 0)

    along1, prod1, along0, consumer = _nodes(f, torch.randn(4, 6))  # (the output is realized last)
    assert scan_group_ok([along1], consumer) is True
    assert scan_group_ok([along1, consumer], prod1) is True
    assert scan_group_ok([along1], along0) is False  # another scanned dim


def test_consumer_at_another_index_and_reductions_stay_apart():
    def f(x):
        c = torch.cumsum(x, 1)
        return c.flip(1), c.sum(1)

    scan, total, flipped = _nodes(f, torch.randn(4, 6))
    assert scan_group_ok([scan], flipped) is False
    assert scan_group_ok([scan], total) is False


def test_row_sorts_only_with_their_sibling_and_no_scan_means_no_opinion():
    def f(x):
        v, i = torch.sort(x, 1)
        w, j = torch.sort(x, 1, descending=True)
        return v, i, w + 1, j

    values, indices, values2, indices2, plus = _nodes(f, torch.randn(4, 6))
    assert scan_group_ok([values], indices) is True
    assert scan_group_ok([values], indices2) is False  # another sort call: its own kernel
    assert scan_group_ok([values2], plus) is False
    assert scan_group_ok([plus], plus) is None
