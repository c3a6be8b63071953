"""Fake tensors: shape, stride, dtype, device and requires_grad, no data."""
from kiln.fake.tensor import FakeTensor, FakeTensorMode, UnsupportedFakeOp, fake_from_real

__all__ = ["FakeTensor", "FakeTensorMode", "UnsupportedFakeOp", "fake_from_real"]
