"""User classes: instances created in the compiled function, methods, properties, class attributes,
inheritance with super(), dataclasses with methods, __call__, dunder operators."""
import dataclasses

import torch

from .harness import check


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


class Scaler:
    default_scale = 2.0

    def __init__(self, scale=None, shift=0.0):
        self.scale = scale if scale is not None else self.default_scale
        self.shift = shift

    def __call__(self, x):
        return x * self.scale + self.shift

    def inverse(self, y):
        return (y - self.shift) / self.scale


class RotaryCache:
    def __init__(self, dim, base=10000.0):
        self.dim = dim
        self.base = base

    @property
    def half(self):
        return self.dim // 2

    def inv_freq(self):
        return 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.float32) / self.dim))

    def cos_sin(self, seq_len):
        t = torch.arange(seq_len, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq())
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos(), emb.sin()


class Activation:
    name = "base"

    def __init__(self, alpha=1.0):
        self.alpha = alpha

    def apply(self, x):
        return x * self.alpha

    def describe(self):
        return f"{self.name}:{self.alpha}"


class Swish(Activation):
    name = "swish"

    def apply(self, x):
        return super().apply(x) * torch.sigmoid(x)


class ScaledSwish(Swish):
    def __init__(self, alpha=1.0, gain=3.0):
        super().__init__(alpha)
        self.gain = gain

    def apply(self, x):
        return super().apply(x) * self.gain


@dataclasses.dataclass
class AttnConfig:
    hidden: int = 8
    heads: int = 2
    causal: bool = True
    dropout: float = 0.0

    @property
    def head_dim(self):
        return self.hidden // self.heads

    def scale(self):
        return self.head_dim ** -0.5


class Vec:
    def __init__(self, data):
        self.data = data

    def __add__(self, other):
        return Vec(self.data + other.data)

    def __mul__(self, k):
        return Vec(self.data * k)

    def __len__(self):
        return self.data.shape[0]

    def __getitem__(self, i):
        return self.data[i]


def test_instance_created_and_called():
    def fn(x):
        s = Scaler(3.0, shift=1.0)
        y = s(x)
        return y, s.inverse(y), s.scale

    check(fn, _t(3))


def test_class_attribute_default():
    def fn(x):
        return Scaler()(x), Scaler.default_scale * x

    check(fn, _t(3))


def test_instance_passed_in_and_read():
    def fn(x, s):
        return s(x) + s.shift

    check(fn, _t(3), Scaler(0.5, 2.0))


def test_instance_attribute_mutation_is_visible():
    def fn(x, s):
        s.shift = s.shift + 1.0
        s.last = x.sum()
        return s(x)

    check(fn, _t(3), Scaler(0.5, 2.0), inputs_mutated=True)


def test_property_and_methods_computing_tensors():
    def fn(q):
        rope = RotaryCache(q.shape[-1])
        cos, sin = rope.cos_sin(q.shape[-2])
        q1, q2 = q[..., : rope.half], q[..., rope.half:]
        rotated = torch.cat([-q2, q1], dim=-1)
        return q * cos + rotated * sin

    check(fn, _t(2, 5, 8))


def test_inheritance_with_super_chain():
    def fn(x):
        act = ScaledSwish(alpha=0.5)
        return act.apply(x), act.describe(), act.name, isinstance(act, Activation)

    check(fn, _t(4))


def test_dataclass_with_property_and_method():
    def fn(x, cfg):
        b, t, _ = x.shape
        q = x.view(b, t, cfg.heads, cfg.head_dim).transpose(1, 2)
        scores = q @ q.transpose(-1, -2) * cfg.scale()
        if cfg.causal:
            scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        return scores.softmax(-1)

    check(fn, _t(2, 3, 8), AttnConfig())
    check(fn, _t(2, 3, 8), AttnConfig(heads=4, causal=False))


def test_dataclass_created_inside():
    def fn(x):
        cfg = AttnConfig(hidden=x.shape[-1], heads=4)
        return x.reshape(-1, cfg.heads, cfg.head_dim) * cfg.scale(), cfg

    check(fn, _t(2, 8))


def test_dunder_operators_on_user_class():
    def fn(a, b):
        v = Vec(a) + Vec(b) * 2.0
        return v.data, len(v), v[0]

    check(fn, _t(3), _t(3, seed=1))


def test_object_holding_list_of_tensors():
    class Cache:
        def __init__(self):
            self.keys = []

        def update(self, k):
            self.keys.append(k)
            return torch.cat(self.keys, dim=0)

    def fn(x):
        cache = Cache()
        cache.update(x)
        out = cache.update(x * 2)
        return out, len(cache.keys)

    check(fn, _t(1, 3))


def test_kv_cache_object_mutated_across_calls():
    class KVCache:
        def __init__(self, k):
            self.k = k

        def append(self, new):
            self.k = torch.cat([self.k, new], dim=1)
            return self.k

    def fn(cache, x):
        k = cache.append(x)
        return (x @ k.transpose(-1, -2)).softmax(-1)

    check(fn, KVCache(_t(1, 2, 4)), _t(1, 1, 4, seed=1), inputs_mutated=True)


def test_class_with_slots_and_staticmethod():
    class Spec:
        __slots__ = ("dim", "eps")

        def __init__(self, dim, eps):
            self.dim = dim
            self.eps = eps

        @staticmethod
        def norm(x, eps):
            return x / (x.abs().amax() + eps)

    def fn(x):
        s = Spec(-1, 1e-3)
        return Spec.norm(x, s.eps).sum(s.dim)

    check(fn, _t(2, 3))


def test_classmethod_constructor():
    class Grid:
        def __init__(self, h, w):
            self.h, self.w = h, w

        @classmethod
        def square(cls, n):
            return cls(n, n)

        def coords(self):
            ys = torch.arange(self.h).float()
            xs = torch.arange(self.w).float()
            return torch.stack(torch.meshgrid(ys, xs, indexing="ij"), dim=-1)

    def fn(x):
        g = Grid.square(x.shape[-1])
        return g.coords() * x.mean()

    check(fn, _t(2, 3))


def test_method_bound_then_called_later():
    def fn(x):
        s = Scaler(2.0)
        f = s.inverse
        ops = [s, f]
        for op in ops:
            x = op(x)
        return x * 3

    check(fn, _t(3))


def test_enum_like_class_constants():
    class Mode:
        SUM = "sum"
        MEAN = "mean"

    def fn(x, mode=Mode.MEAN):
        if mode == Mode.SUM:
            return x.sum(-1)
        return x.mean(-1)

    check(fn, _t(2, 3))
    check(fn, _t(2, 3), "sum")


def test_enum_members():
    import enum

    class Pool(enum.Enum):
        MAX = 1
        AVG = 2

    def fn(x, pool):
        if pool is Pool.MAX:
            return x.amax(-1)
        return x.mean(-1), pool.name

    check(fn, _t(2, 3), Pool.MAX)
    check(fn, _t(2, 3), Pool.AVG)
