"""kiln/fake/scalar_checks.py: eager's checks of numbers given to integer ops run before the meta kernel;
the CPU kernels' own errors count only for CPU tensors (end to end: tests/codegen/test_cpp_int_wrap.py)."""
import pytest
import torch

from kiln.fake.scalar_checks import check_scalars, wants_check
from kiln.fake.tensor import FakeTensor

aten = torch.ops.aten


def _fake(dtype, device):
    return FakeTensor(torch.empty(3, dtype=dtype, device="meta"), device)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_host_checks_hold_on_every_device(device):
    x = _fake(torch.int32, device)
    assert wants_check(aten.clamp.default, (x, None, 2 ** 40), {})
    with pytest.raises(RuntimeError, match="without overflow"):
        check_scalars(aten.clamp.default, (x, None, 2 ** 40), {})
    with pytest.raises(RuntimeError, match="negative integer powers"):
        check_scalars(aten.pow.Tensor_Scalar, (x, -1), {})
    check_scalars(aten.clamp.default, (x, None, 7), {})  # in range: nothing
    check_scalars(aten.pow.Tensor_Scalar, (x, 2), {})


def test_cpu_kernel_errors_only_for_cpu_tensors():
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        check_scalars(aten.remainder.Scalar, (_fake(torch.int8, "cpu"), 256), {})
    check_scalars(aten.remainder.Scalar, (_fake(torch.int8, "cuda"), 256), {})  # (CUDA's kernel does not raise)


def test_float_ops_and_tensor_only_integer_ops_are_not_probed():
    x = _fake(torch.float32, "cpu")
    assert not wants_check(aten.clamp.default, (x, None, 2 ** 40), {})
    i = _fake(torch.int32, "cpu")
    assert not wants_check(aten.add.Tensor, (i, i), {})  # (no number, no bool: nothing eager checks)
    assert wants_check(aten.sub.Tensor, (i, _fake(torch.bool, "cpu")), {})
