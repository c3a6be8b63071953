"""Backward-op decompositions (kiln/decomp/backward.py) against the ATen ops they replace."""
import pytest
import torch

from kiln.decomp import decomposition_table

aten = torch.ops.aten
TABLE = decomposition_table()
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def r(*shape, dtype=torch.float32):
    return (torch.rand(*shape, dtype=torch.float64) * 4 - 2).to(dtype)


def cases(dt):
    x, g = r(3, 4, 5, dtype=dt), r(3, 4, 5, dtype=dt)
    y_soft = torch.softmax(x.double(), -1).to(dt)
    y_log = torch.log_softmax(x.double(), -1).to(dt)
    w, b = r(5, dtype=dt), r(5, dtype=dt)
    _, mean, rstd = aten.native_layer_norm.default(x, [5], w, b, 1e-5)
    ids = torch.tensor([[0, 2, 2, 5], [1, 0, 5, 3], [2, 2, 2, 2]])
    return [
        (aten.threshold_backward.default, (g, x, 0)),
        (aten.tanh_backward.default, (g, torch.tanh(x))),
        (aten.sigmoid_backward.default, (g, torch.sigmoid(x))),
        (aten.silu_backward.default, (g, x)),
        (aten.gelu_backward.default, (g, x)),
        (aten.gelu_backward.default, (g, x), {"approximate": "tanh"}),
        (aten._softmax_backward_data.default, (g, y_soft, -1, dt)),
        (aten._softmax_backward_data.default, (g, y_soft, 1, dt)),
        (aten._log_softmax_backward_data.default, (g, y_log, -1, dt)),
        (aten.native_layer_norm_backward.default, (g, x, [5], mean, rstd, w, b, [True, True, True])),
        (aten.native_layer_norm_backward.default, (g, x, [5], mean, rstd, None, None, [True, False, False])),
        (aten.embedding_dense_backward.default, (r(3, 4, 5, dtype=dt), ids, 7, -1, False)),
        (aten.embedding_dense_backward.default, (r(3, 4, 5, dtype=dt), ids, 7, 2, False)),
    ]


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_backward_decompositions_match_aten(dt):
    tol = dict(atol=2e-2, rtol=2e-2) if dt == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    for op, args, *kwargs in cases(dt):
        kwargs = kwargs[0] if kwargs else {}
        expected = op(*args, **kwargs)
        got = TABLE[op](*args, **kwargs)
        assert got is not NotImplemented, op
        torch.testing.assert_close(got, expected, **tol, msg=lambda m: f"{op}: {m}")
