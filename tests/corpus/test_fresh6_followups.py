"""Cases found while probing after round 6 of the fresh-cases test (test_fresh_cases_6.py), each with
TorchDynamo's graph count."""
import torch

from .harness import check, dynamo_bug


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


@dynamo_bug("zip(strict=True) raises with a different message than CPython's")
def test_zip_strict_message_caught():
    def fn(x):
        try:
            list(zip([1, 2], [3], strict=True))
        except ValueError as e:
            return x + 1, str(e)
        return x, ""

    check(fn, _t(3), breaks=0)


@dynamo_bug("y in [x] does not raise the ambiguous-bool RuntimeError of the == between two tensors")
def test_tensor_membership_by_equality_raises_and_is_caught():
    def fn(x, y):
        try:
            return y in [x], 0
        except RuntimeError:
            return x + 1, 1

    check(fn, _t(3), _t(3, seed=1), breaks=0)
