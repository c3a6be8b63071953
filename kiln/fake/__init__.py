"""Fake tensors: shape, stride, dtype, device and requires_grad, no data; sizes as sympy expressions."""
from kiln.fake.mode import FakeTensorMode, fake_from_real, fake_like
from kiln.fake.shapes import ShapeEnv, sym_numel, sym_offset, sym_sizes, sym_strides, to_expr
from kiln.fake.tensor import FakeTensor, UnsupportedFakeOp, meta_alias, run_on_fakes

__all__ = [
    "FakeTensor",
    "FakeTensorMode",
    "ShapeEnv",
    "UnsupportedFakeOp",
    "fake_from_real",
    "fake_like",
    "meta_alias",
    "run_on_fakes",
    "sym_numel",
    "sym_offset",
    "sym_sizes",
    "sym_strides",
    "to_expr",
]
