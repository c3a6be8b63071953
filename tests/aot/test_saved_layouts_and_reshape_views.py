"""Two wrong results found by a new-user trial (seventeenth session), end to end against eager.

- A backward's inputs come from the forward's generated code, not through guards: a value the trace saw
  as a slice of a wider product (strides of the product) was realized by the forward as a dense buffer
  of its own, and the backward's kernel read it with the slice's strides (gradients of garbage: 1e31,
  nan). The backward's wrapper now copies such an input into the trace's layout (``ensure_layout``).
- ``reshape`` to the same shape, or to a ``-1`` that symbolic sizes decide, is a view in eager; on
  symbolic sizes kiln made a copy (``3*s0 // 3`` was not simplified to ``s0``; ``computeStride``'s
  either-answer questions took the copying default), so an in-place change of the result did not
  reach the input.
"""
import pytest
import torch

import kiln

BACKENDS = ["kiln", "aot_eager"]


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_saved_slice_of_a_product_is_read_with_the_forward_layout(dynamic):
    torch.manual_seed(0)
    w = torch.randn(12, 4)

    def h(x, hh):
        return x * (hh @ w.t() + 1)[:, :4]
    c = kiln.compile(h, dynamic=dynamic)
    for n in (6, 5):
        x1 = torch.randn(n, 4, requires_grad=True)
        x2 = x1.detach().clone().requires_grad_(True)
        hh = torch.randn(n, 4)
        h(x1, hh).sum().backward()
        c(x2, hh).sum().backward()
        torch.testing.assert_close(x2.grad, x1.grad)


def test_gru_cell_training_matches_eager():
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(4, 4)
    twin = kiln.compile(torch.nn.GRUCell(4, 4))
    twin.load_state_dict(cell.state_dict())
    for n in (6, 5, 3):
        x, h = torch.randn(n, 4), torch.randn(n, 4)
        cell(x, h).square().sum().backward()
        twin(x, h).square().sum().backward()
        for p, q in zip(cell.parameters(), twin.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("name, view", [
    ("select_reshape_rows", lambda x: x[..., 0].reshape(x.size(0), -1)),
    ("select_reshape_flat", lambda x: x[..., 0].reshape(-1)),
    ("narrow_reshape", lambda x: x.narrow(2, 0, 1).reshape(x.size(0), -1)),
    ("transpose_reshape_same_shape", lambda x: x.transpose(0, 1).reshape(x.size(1), x.size(0), 2)),
    ("flatten", lambda x: x[..., 0].flatten()),
])
def test_reshape_that_eager_views_is_a_view(backend, dynamic, name, view):
    def f(x):
        y = view(x)
        y.add_(1)  # reaches x where y is a view of it
        return y
    c = kiln.compile(f, backend=backend, dynamic=dynamic)
    for n in (6, 4, 5):
        x, xe = torch.zeros(3, n, 2), torch.zeros(3, n, 2)
        out, expected = c(x), f(xe)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(x, xe)
