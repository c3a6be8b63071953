"""Strings: f-strings as dict keys, str methods on constants, `in` on strings and dicts, %-format."""
import torch

from .harness import check, dynamo_bug


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def test_fstring_dict_keys():
    def fn(x):
        out = {}
        for i in range(3):
            out[f"layer_{i}"] = x * i
        return out

    check(fn, _t(2))


def test_fstring_with_format_spec():
    def fn(x):
        eps = 1e-5
        n = x.shape[0]
        key = f"norm{n:03d}-{eps:.1e}-{'on'!s}-{'x'!r}"
        return {key: x + eps}

    check(fn, _t(2))


def test_fstring_lookup_in_argument_dict():
    def fn(feats, idx):
        return feats[f"block{idx}.out"] * 2

    check(fn, {"block0.out": _t(2), "block1.out": _t(2, seed=1)}, 1)


def test_string_methods_on_constants():
    def fn(x, act):
        name = act.lower().strip()
        if name.startswith("gelu"):
            y = torch.nn.functional.gelu(x)
        elif name in ("relu", "swish"):
            y = x.relu()
        else:
            y = x
        parts = "a.b.c".split(".")
        return y, name.upper(), "-".join(parts), name.replace("u", "U"), len(name), name.endswith("u")

    check(fn, _t(3), "  GELU ")
    check(fn, _t(3), "relu")


def test_in_on_strings_and_dicts():
    def fn(x, mode):
        table = {"sum": 1, "mean": 2}
        if "ea" in mode:
            x = x.mean()
        if mode in table:
            x = x * table[mode]
        return x, "none" not in table

    check(fn, _t(3), "mean")
    check(fn, _t(3), "sum")


def test_string_concat_and_percent_format():
    def fn(x):
        prefix = "enc" + "oder"
        name = "%s.%d" % (prefix, 3)
        return {name: x, prefix * 2: x + 1}, "{}/{}".format(prefix, 2)

    check(fn, _t(2))


def test_string_comparisons_select_branch():
    def fn(x, reduction="mean"):
        loss = (x - 1) ** 2
        if reduction == "mean":
            return loss.mean()
        if reduction == "sum":
            return loss.sum()
        return loss

    check(fn, _t(4))
    check(fn, _t(4), "sum")
    check(fn, _t(4), kwargs={"reduction": "none"})


def test_string_indexing_and_iteration():
    def fn(x):
        spec = "bhqd"
        dims = [spec.index(c) for c in "bqhd"]
        return x.permute(*dims), spec[0], spec[-2:], spec[::-1]

    check(fn, _t(2, 3, 4, 5))


def test_string_module_attribute_key():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.name = "attn"
            self.proj = torch.nn.Linear(3, 3)

        def forward(self, x):
            return {f"{self.name}.out": self.proj(x), self.name.title(): x}

    check(Block(), _t(2, 3))


@dynamo_bug("int.__add__(1, 2) gives NotImplemented")
def test_methods_of_builtin_types_called_on_constants():
    def fn(x):
        table = str.maketrans("ab", "xy")
        return (x + 1, "abc".translate(table), str.upper("q"), int.from_bytes(b"\x01\x00", "little"),
                float.fromhex("0x1p-2"), int.__add__(1, 2), tuple.count((1, 1, 2), 1))

    check(fn, torch.randn(2))
