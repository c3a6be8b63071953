"""Cases found while probing after round 6 of the fresh-cases test (test_fresh_cases_6.py), each with
TorchDynamo's graph count."""
import torch

from .harness import check


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def test_slice_object_indices_and_parts():
    # slice.indices ran the whole frame eagerly (TorchDynamo: one graph)
    def fn(x):
        sl = slice(1, None, 2)
        lst = list(range(7))
        return x[sl], lst[sl], sl.indices(7), (sl.start, sl.stop, sl.step)

    check(fn, _t(6), breaks=0)


def test_slice_object_with_a_size_part():
    def fn(x):
        sl = slice(0, x.shape[0] // 2)
        return x[sl] * 2, sl.stop

    check(fn, _t(6), breaks=0)
