"""``add(bias, mm)`` folds back into one ``addmm`` library call where no generated kernel reads the sum."""
import torch
import torch.nn.functional as F

from kiln.loopir.nodes import ComputedBuffer, ExternKernel
from kiln.lower.bias_fold import fold_bias_into_matmul
from kiln.lower.graph import lower_graph
from tests.lower.helpers import check, trace

aten = torch.ops.aten


def _externs(lg):
    return [n.op for n in lg.nodes if isinstance(n, ExternKernel)]


def _computed(lg):
    return [n for n in lg.nodes if isinstance(n, ComputedBuffer)]


def test_a_projection_read_through_views_by_a_library_kernel_is_one_addmm():
    x, w, b, w2 = torch.randn(6, 16), torch.randn(24, 16), torch.randn(24), torch.randn(8, 4)

    def fn(x, w, b, w2):
        q = F.linear(x, w, b).view(6, 3, 8).permute(1, 0, 2)[0]  # views, then a BLAS call
        return torch.mm(q, w2)

    lg = lower_graph(trace(fn, [x, w, b, w2]).gm)
    assert _externs(lg) == [aten.addmm.default, aten.mm.default]
    assert not _computed(lg)  # no kernel writes the sum
    check(fn, x, w, b, w2, kernels=0)


def test_a_returned_projection_is_one_addmm_with_2d_and_row_biases():
    x, w, w2 = torch.randn(5, 7), torch.randn(7, 3), torch.randn(7, 3)
    for bias in (torch.randn(3), torch.randn(1, 3), torch.randn(5, 3)):
        def fn(x, w, w2, bias):
            return (bias + x @ w).t(), x @ w2 + bias  # either order of the add's operands

        lg = lower_graph(trace(fn, [x, w, w2, bias]).gm)
        assert _externs(lg) == [aten.addmm.default, aten.addmm.default], bias.shape
        check(fn, x, w, w2, bias, kernels=0)


def test_a_bias_add_that_fuses_into_a_pointwise_reader_stays_in_the_kernel():
    x, w, b = torch.randn(4, 8), torch.randn(8, 8), torch.randn(8)

    def gelu(x, w, b):
        return F.gelu(F.linear(x, w, b))

    def returned_and_activated(x, w, b):
        y = F.linear(x, w, b)
        return y, torch.relu(y)

    for fn in (gelu, returned_and_activated):
        lg = lower_graph(trace(fn, [x, w, b]).gm)
        assert _externs(lg) == [aten.mm.default], fn.__name__
        check(fn, x, w, b, kernels=1)


def test_what_addmm_cannot_compute_exactly_is_left_alone():
    x, w = torch.randn(4, 8), torch.randn(8, 6)
    cases = [
        (lambda x, w, b: x @ w + b, torch.randn(6, dtype=torch.float64)),  # promotes to float64
        (lambda x, w, b: x @ w + b, torch.randn(2, 4, 6)),  # broadcasts to 3-D
        (lambda x, w, b: x @ w + b, torch.tensor(2.0)),  # a 0-dim "bias"
        (lambda x, w, b: b + x @ w, torch.randn(6, 4).t()),  # eager's sum follows b's column-major layout
    ]
    for fn, b in cases:
        graph = trace(fn, [x, w, b]).gm.graph
        assert fold_bias_into_matmul(graph) == 0, b
        check(fn, x, w, b)
    # 16-bit: eager rounds the product, then the sum; addmm would round once
    x16, w16, b16 = x.bfloat16(), w.bfloat16(), torch.randn(6).bfloat16()
    assert fold_bias_into_matmul(trace(lambda x, w, b: x @ w + b, [x16, w16, b16]).gm.graph) == 0


def test_a_product_read_twice_is_left_alone():
    x, w, b = torch.randn(4, 8), torch.randn(8, 6), torch.randn(6)

    def fn(x, w, b):
        p = x @ w
        return p + b, p

    graph = trace(fn, [x, w, b]).gm.graph
    assert fold_bias_into_matmul(graph) == 0
    check(fn, x, w, b)
