"""Tensor methods and properties: views, sizes, dtype/device, indexing, setitem, splitting, conversions."""
import torch

from .harness import check


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def test_view_reshape_permute_transpose():
    def fn(x):
        a = x.view(2, 12)
        b = x.reshape(4, -1)
        c = x.permute(2, 0, 1)
        d = x.transpose(0, 1).contiguous()
        e = x.flatten(1)
        return a, b, c, d, e, x.unsqueeze(0).squeeze(0)

    check(fn, _t(2, 3, 4))


def test_size_and_shape_arithmetic():
    def fn(x):
        b, t, c = x.size()
        n = x.shape[0] * x.shape[-1]
        return x.reshape(b * t, c) * n + x.size(1) + x.size(-1)

    check(fn, _t(2, 3, 4))


def test_dim_ndim_numel():
    def fn(x):
        return x.sum() * x.dim() + x.ndim + x.numel() + x.nelement() + len(x)

    check(fn, _t(2, 5))


def test_shape_returned_as_torch_size():
    def fn(x):
        y = x.transpose(0, 1)
        return y, y.shape, y.size(), tuple(y.shape)

    check(fn, _t(2, 3))


def test_dtype_and_device_properties():
    def fn(x):
        y = torch.zeros(3, dtype=x.dtype, device=x.device)
        z = torch.ones_like(x, dtype=torch.float64)
        return y + 1, z, x.dtype, x.device, x.is_floating_point(), x.dtype.is_floating_point

    check(fn, _t(3))


def test_multihead_split_view():
    def fn(x):
        batch, seq, hidden = x.shape
        heads = 4
        q = x.view(batch, seq, heads, hidden // heads).transpose(1, 2)
        return q.reshape(batch * heads, seq, -1)

    check(fn, _t(2, 5, 16))


def test_indexing_ints_and_slices():
    def fn(x):
        return x[0], x[-1], x[1:3], x[:, 0], x[:, ::2], x[1, 2], x[..., -1], x[:, 1:-1]

    check(fn, _t(4, 6))


def test_indexing_none_and_ellipsis():
    def fn(x):
        return x[None], x[:, None], x[..., None], x[None, ..., 0], x[..., 1:, None]

    check(fn, _t(3, 4, 5))


def test_indexing_with_tensor_indices():
    def fn(x, idx):
        return x[idx], x[:, idx], x[idx, idx], x[idx[:2], 1:]

    check(fn, _t(4, 4), torch.tensor([3, 0, 2]))


def test_indexing_with_python_list():
    def fn(x):
        return x[[0, 2]], x[:, [1, 3]]

    check(fn, _t(4, 4))


def test_setitem_on_fresh_tensor():
    def fn(x):
        out = torch.zeros(4, 6)
        out[0] = 1.0
        out[1, 2:4] = x[0, :2]
        out[:, -1] = x[:, 0]
        out[2:, :3] += 5
        return out

    check(fn, _t(4, 3))


def test_setitem_with_mask_on_clone():
    def fn(x):
        y = x.clone()
        y[y < 0] = 0.0
        return y

    check(fn, _t(3, 4))


def test_setitem_on_input_is_a_mutation():
    def fn(x, v):
        x[0] = v
        return x * 2

    check(fn, _t(3, 2), _t(2, seed=1), inputs_mutated=True)


def test_chunk_split_unbind():
    def fn(x):
        a, b = x.chunk(2, dim=-1)
        c = x.split(2, dim=0)
        d = x.split([1, 3], dim=-1)
        e = x.unbind(0)
        return a * b, c, d, e[0] + e[-1]

    check(fn, _t(4, 4))


def test_cat_and_stack():
    def fn(x, y):
        return torch.cat([x, y], dim=0), torch.cat((x, y), -1), torch.stack([x, y]), torch.stack((x, y), dim=1)

    check(fn, _t(2, 3), _t(2, 3, seed=1))


def test_masked_fill_with_causal_mask():
    def fn(scores):
        t = scores.shape[-1]
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        return scores.masked_fill(mask, float("-inf")).softmax(dim=-1)

    check(fn, _t(2, 4, 4))


def test_softmax_log_softmax_methods():
    def fn(x):
        return x.softmax(-1), x.log_softmax(dim=1), x.exp().sum(-1, keepdim=True)

    check(fn, _t(3, 5))


def test_type_conversions():
    def fn(x):
        i = (x * 10).long()
        return i, i.float(), x.double(), x.half().float(), x.to(torch.float64), x.to(dtype=torch.int32), x.bool(), x.type(torch.float64)

    check(fn, _t(5))


def test_to_same_dtype_and_like():
    def fn(x, y):
        return x.to(y.dtype) + y, x.to(y), x.type_as(y)

    check(fn, _t(3), torch.arange(3, dtype=torch.float64))


def test_reductions_and_keepdim():
    def fn(x):
        return (x.sum(), x.mean(dim=0), x.amax(-1, keepdim=True), x.var(dim=1), x.std(),
                x.max(dim=-1).values, x.argmax(-1), x.min(0)[1], x.norm(dim=-1), x.prod(1))

    check(fn, _t(3, 4))


def test_max_returns_named_tuple():
    def fn(x):
        out = x.max(dim=1)
        vals, idx = x.topk(2, dim=-1)
        return out, vals, idx, out.values + 1

    check(fn, _t(3, 5))


def test_expand_repeat_and_broadcast():
    def fn(x):
        return x.expand(3, -1, -1), x.repeat(2, 1, 1), x.unsqueeze(1).expand_as(torch.empty(2, 5, 4))

    check(fn, _t(1, 4))


def test_clamp_and_pointwise_methods():
    def fn(x):
        return x.clamp(-0.5, 0.5), x.clamp_min(0), x.sigmoid(), x.tanh(), x.relu(), x.rsqrt().nan_to_num(0.0), x.sqrt().isnan()

    check(fn, _t(8))


def test_new_tensor_constructors_and_fill():
    def fn(x):
        z = x.new_zeros(2, 3)
        o = x.new_ones((3,))
        f = x.new_full((2,), 7.0)
        e = torch.empty_like(x).fill_(2.0)
        return z, o, f, e * x

    check(fn, _t(4))


def test_gather_scatter_index_select():
    def fn(x, idx):
        g = x.gather(1, idx)
        s = torch.zeros_like(x).scatter(1, idx, 1.0)
        return g, s, x.index_select(0, idx[:, 0])

    check(fn, _t(3, 4), torch.tensor([[0, 1], [2, 3], [1, 1]]))


def test_tensor_iteration_over_first_dim():
    def fn(x):
        out = []
        for row in x:
            out.append(row * 2)
        return out

    check(fn, _t(3, 2))


def test_requires_grad_tensor_methods():
    def fn(w, x):
        y = x @ w
        return y, y.detach(), y.requires_grad, w.is_leaf

    check(fn, _t(4, 4).requires_grad_(), _t(2, 4, seed=1))
