"""The sort family on CPU (sort, argsort, msort, topk, kthvalue, median, mode): generated C++ running
ATen's CPU algorithms, checked against eager -- values and the indices of equal elements and NaN --
and through the loop-IR reference evaluator."""
import pytest
import torch

from kiln.loopir.sort import is_row_sort
from kiln.lower.graph import lower_graph
from tests.lower.helpers import check, sample, trace, ties_nans_infs



def _family(x):
    a, b = torch.sort(x, 1), torch.sort(x, dim=0, descending=True, stable=True)
    c, d = torch.topk(x, 3, 1), torch.topk(x, x.shape[1] - 2, 1, largest=False)
    e, m, mo = torch.kthvalue(x, 7, 1), torch.median(x, 1), torch.mode(x, 0)
    return (*a, *b, *c, *d, *e, *m, *mo, torch.median(x), torch.argsort(x, 1, descending=True), torch.msort(x))


@pytest.mark.parametrize("shape", [(6, 300), (13, 17)])
def test_family_with_ties_and_nans_matches_eager_indices(shape):
    cg = check(_family, ties_nans_infs(shape))
    assert "extern" not in cg.sched.format()


def test_integer_bool_and_half_inputs():
    def f(i, b, h):
        s, si = torch.sort(i, 1)
        t = torch.topk(i, 4, 1, largest=False)
        k = torch.kthvalue(b.to(torch.uint8), 3, 1, keepdim=True)
        m = torch.mode(h, 1)
        return s, si, *t, *k, *m, torch.sort(b, dim=1, stable=True)[1], *torch.median(h, 0, keepdim=True)

    check(f, ties_nans_infs((5, 70), torch.int64), ties_nans_infs((5, 70), torch.bool), ties_nans_infs((5, 70), torch.float16, specials=False))


def test_sort_along_middle_dim_of_transposed_input_with_producer_inlined():
    def f(x):
        return torch.sort((x.transpose(0, 2) * 2).relu(), 1, descending=True)

    cg = check(f, ties_nans_infs((4, 9, 5)), kernels=1)
    check(lambda x: torch.topk(x.transpose(0, 2), 2, 1, sorted=False), ties_nans_infs((4, 9, 5)), kernels=1)
    assert all(is_row_sort(m) for g in cg.sched.groups() for m in g.members)


def test_unused_result_is_not_computed_and_one_sort_per_call():
    cg = check(lambda x: (torch.argsort(x, 1), torch.msort(x)), ties_nans_infs((8, 40)), kernels=2)
    assert all(len(g.members) == 1 for g in cg.sched.groups())


def test_lowering_prints_the_sort():
    ag = trace(lambda x: torch.topk(x * 2, 3, 1), [torch.randn(4, 50)])
    text = lower_graph(ag.gm).format()
    assert "values of topk along dim 1 of [4, 50] (k=3, largest)" in text
    assert "indices of topk" in text


def test_nanmedian_with_all_nan_rows():
    x = ties_nans_infs((7, 30))
    x[2] = float("nan")
    x[4, ::2] = float("nan")

    def f(x):
        return *torch.nanmedian(x, 1), *torch.nanmedian(x, 0, keepdim=True), torch.nanmedian(x)

    check(f, x)


def test_zero_dim_inputs():
    def f(x):
        return (*torch.sort(x), *torch.topk(x, 1), *torch.kthvalue(x, 1), *torch.median(x, 0), *torch.mode(x),
                torch.median(x), *torch.nanmedian(x, 0), torch.nanmedian(x))

    check(f, torch.tensor(1.5))


def test_empty_and_zero_k_stay_library_calls():
    cg = check(lambda x: torch.topk(x, 0, 1), torch.randn(3, 4))
    assert "extern" in cg.sched.format()


def test_k_out_of_range_is_never_lowered():
    from kiln.lower.registry import Unlowerable
    from kiln.lower.sort import _checked
    from kiln.loopir.nodes import Lazy

    class G:
        codegen = "cpp"

    x = Lazy((3, 5), torch.float32, torch.device("cpu"), None)
    _checked(G(), x, 5, 1)  # k == n: fine
    for k, low in ((6, 0), (0, 1), (-1, 0)):
        with pytest.raises(Unlowerable, match="ATen checks it"):
            _checked(G(), x, k, 1, low=low)
