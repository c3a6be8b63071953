"""torch.tensor / torch.as_tensor of symbolic sizes (capture/values/symbolic.py: tensor_of_sizes): one
dynamic graph, the tensor built from 0-dim tensors of each number, as torch.tensor gives Python ints."""
import pytest
import torch

import kiln
from kiln.api import config_of


def compiles(compiled) -> int:
    return sum(1 for r in config_of(compiled).compiler.records if r.graph is not None)


def run(f, shapes, backend, graphs=1):
    kiln.reset()
    compiled = kiln.compile(f, backend=backend, dynamic=True)
    for s in shapes:
        x = torch.randn(*s)
        got, expected = compiled(x), f(x)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype and g.shape == e.shape and g.device == e.device
            if e.is_floating_point() and backend == "kiln":  # (kiln's sum adds in another order)
                torch.testing.assert_close(g, e)
            else:
                assert torch.equal(g, e), (g, e)
    assert compiles(compiled) == graphs


SHAPES = [(2, 3), (3, 5), (5, 7), (8, 4)]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_tensor_of_a_shape_and_of_a_size(backend):
    run(lambda x: (torch.tensor(x.shape), torch.tensor([x.shape[0], x.size(1) * 2, 7]), torch.tensor(x.shape[0]),
                   torch.as_tensor(x.size(0) - 1), x.sum() * torch.tensor(x.shape)), SHAPES, backend)


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_dtype_and_device_arguments(backend):
    run(lambda x: (torch.tensor(x.shape, dtype=torch.float32), torch.tensor([x.shape[1], 3], dtype=torch.int32,
                                                                              device="cpu"),
                   torch.tensor(x.shape[0] * 3, dtype=torch.float64)), SHAPES, backend)


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_new_tensor_of_sizes(backend):
    """``x.new_tensor(sizes)``: x's dtype and device unless given (as torch.tensor otherwise)."""
    run(lambda x: (x.new_tensor(x.shape), x.new_tensor([x.shape[0] - 1, 4]) * x.sum(),
                   x.new_tensor(x.size(1), dtype=torch.int64), x.int().new_tensor(x.shape) + 1,
                   x.new_tensor([x.shape[1], 2], dtype=torch.float64, device="cpu")), SHAPES, backend)


def test_other_data_still_specializes():
    # a bool among the sizes (torch.tensor's promotion picks int64 here, but not modelled): a constant per size
    run(lambda x: (torch.tensor([x.shape[0], True]),), SHAPES[1:], "eager", graphs=3)
