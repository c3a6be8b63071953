"""The same boolean mask used twice (``pred[m] - target[m]``): both sizes count the nonzero elements of
one tensor at one version, so they are one unbacked symbol and broadcast without a data-dependent
decision (fake/unbacked.py's count_source). A mask written in place between the uses counts again."""
import pytest
import torch

from .test_dyn_unbacked import BACKENDS, one_graph, run


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_regression_loss(backend):
    def f(pred, target):
        m = target > 0
        d = pred[m] - target[m]
        return (d * d).mean(), d

    one_graph(run(f, lambda: (torch.randn(8, 3), torch.randn(8, 3)), backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_mask_with_nonzero_and_masked_select(backend):
    def f(x, y):
        m = x > 0.2
        rows = torch.nonzero(m)  # (u0, 2): the same count
        return x[m] * torch.masked_select(y, m) + rows[:, 0].float()

    one_graph(run(f, lambda: (torch.randn(6, 4), torch.randn(6, 4)), backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_mask_written_in_place_between_uses_counts_again(backend):
    """The count after the write is another symbol (the mask's version changed), so the results keep
    their own sizes (eager's: the counts differ)."""
    def f(x):
        m = x > 0
        a = x[m].sum()
        m.logical_not_()
        return a + x[m].sum(), x[m] * 2

    g = run(f, lambda: (torch.randn(12),), backend)
    one_graph(g)
