"""kiln.fake.autograd_kind: where a tensor sits in autograd's graph, and fakes that sit the same way (in-place
ops allowed or refused as on the real tensor, with its error)."""
import pytest
import torch

from kiln.fake.autograd_kind import autograd_kind
from kiln.fake.mode import FakeTensorMode


def _leaf():
    return torch.ones(3, requires_grad=True)


def _non_leaf():
    return _leaf() * 2


def _view_of_non_leaf():
    return _non_leaf()[1:]


def _view_of_leaf():
    return _leaf()[1:]


def _unbind_output():
    return _non_leaf().unbind(0)[0]


def _no_grad_view():
    x = _non_leaf()
    with torch.no_grad():
        return x[1:]


def _no_grad():
    return torch.ones(3)[1:]


class _ViewOfOwnBuffer(torch.autograd.Function):
    """Returns a view of a tensor made inside forward (its base does not require grad)."""

    @staticmethod
    def forward(ctx, x):
        return (x * 2).view(-1)

    @staticmethod
    def backward(ctx, g):
        return g.view(2, 2) * 2


def _custom_function_view():
    return _ViewOfOwnBuffer.apply(torch.ones(2, 2, requires_grad=True))


KINDS = [(_leaf, "leaf"), (_non_leaf, "non-leaf"), (_view_of_non_leaf, "non-leaf"),
         (_view_of_leaf, "view of a leaf"), (_unbind_output, "view (MULTI_OUTPUT_NODE)"),
         (_no_grad_view, "view (NO_GRAD_MODE)"), (_no_grad, "leaf"),
         (_custom_function_view, "view (IN_CUSTOM_FUNCTION)")]


@pytest.mark.parametrize("make,kind", KINDS)
def test_autograd_kind(make, kind):
    assert autograd_kind(make()) == kind


def _error_of_mul_(t):
    try:
        t.mul_(2)
    except RuntimeError as exc:
        return str(exc).split(".")[0].replace("AsStrided", "Unbind")
    return None


@pytest.mark.parametrize("make,kind", KINDS)
def test_fake_allows_and_refuses_in_place_ops_as_the_real_tensor(make, kind):
    real = make()
    fake = FakeTensorMode().from_real(real)
    assert fake.requires_grad == real.requires_grad and fake.shape == real.shape
    assert fake.stride() == real.stride() and fake.storage_offset() == real.storage_offset()
    if make is _custom_function_view:  # (its base has no grad: a leaf fake, refusing with another message)
        assert _error_of_mul_(fake) and _error_of_mul_(real)
        return
    assert _error_of_mul_(fake) == _error_of_mul_(real)


def test_fake_of_a_non_leaf_shares_memory_with_fakes_of_its_base():
    base = _non_leaf()
    mode = FakeTensorMode()
    view, whole = mode.from_real(base[1:]), mode.from_real(base)
    assert not whole.is_leaf and not view.is_leaf
    assert view.untyped_storage()._cdata == whole.untyped_storage()._cdata
    leaf_view = mode.from_real(_view_of_leaf())  # a view built over its base's fake
    assert leaf_view._is_view() and leaf_view._base.is_leaf
