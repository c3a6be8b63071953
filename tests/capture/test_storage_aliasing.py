"""Inputs that share memory with each other or with held tensors, in graphs that write a tensor in place:
the compiled graph is right only for the aliasing it was traced with, so another aliasing recompiles."""
import pytest
import torch

import kiln
from kiln.capture.storage_aliasing import HeldRanges, aliasing_signature


def read_then_write(a, b):
    c = b * 2
    a.add_(1)
    return c + b


def write_then_reduce(a, b):
    a.mul_(3)
    return b.sum()


def write_into_copy(a, b):
    b2 = b + 1
    a.copy_(b2 * 2)
    return b.clone(), b2


def both_written(a, b):
    a.add_(1)
    b.mul_(2)
    return a + b


ALIASINGS = {
    "distinct": lambda: (lambda x, y: (x, y, (x, y)))(torch.arange(8.), torch.arange(8.) + 10),
    "view": lambda: (lambda x: (x, x.view(2, 4).view(8), (x,)))(torch.arange(8.)),
    "slices": lambda: (lambda x: (x[:4], x[2:6], (x,)))(torch.arange(8.)),
    "same object": lambda: (lambda x: (x, x, (x,)))(torch.arange(8.)),
}


def _run(fn, make):
    a, b, bases = make()
    out = fn(a, b)
    return out, tuple(t.clone() for t in bases)


def _same(x, y):
    if isinstance(x, tuple):
        return all(map(_same, x, y))
    return torch.equal(x, y)


@pytest.mark.parametrize("backend", ["eager", "kiln"])
@pytest.mark.parametrize("fn", [read_then_write, write_then_reduce, write_into_copy, both_written])
@pytest.mark.parametrize("first", list(ALIASINGS))
def test_calls_with_other_aliasing_match_eager(backend, fn, first):
    compiled = kiln.compile(fn, backend=backend)
    for name in [first] + [n for n in ALIASINGS if n != first]:
        want = _run(fn, ALIASINGS[name])
        got = _run(compiled, ALIASINGS[name])
        assert _same(got, want), f"traced with {first}, called with {name}"


def test_aliasing_change_names_the_guard():
    kiln.reset()
    kiln.stats.reset()
    compiled = kiln.compile(read_then_write, backend="kiln")
    x = torch.arange(8.)
    compiled(x.clone(), x.clone())
    compiled(x, x.view(8))
    reasons = " ".join(kiln.stats.recompilations)
    assert "share memory as while tracing" in reasons


def test_graph_without_writes_has_no_aliasing_guard():
    kiln.reset()
    kiln.stats.reset()

    def pure(a, b):
        return a * 2 + b

    compiled = kiln.compile(pure, backend="eager")
    x = torch.arange(8.)
    compiled(x.clone(), x.clone())
    assert torch.equal(compiled(x, x.view(8)), pure(x, x.view(8)))
    assert kiln.stats.frames_compiled == 1


class _Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(8))

    def forward(self, x, v):
        self.total.add_(x)
        return v * 2


@pytest.mark.parametrize("backend", ["eager", "kiln"])
def test_input_viewing_a_written_buffer(backend):
    model, reference = _Counter(), _Counter()
    compiled = kiln.compile(model, backend=backend)
    x = torch.ones(8)
    assert torch.equal(compiled(x, torch.ones(8)), reference(x, torch.ones(8)))
    assert torch.equal(compiled(x, model.total[:4]), reference(x, reference.total[:4]))
    assert torch.equal(model.total, reference.total)


def test_signature_groups_by_shared_storage():
    x = torch.arange(8.)
    y = torch.zeros(3)
    assert aliasing_signature((x, y, x[2:], y.view(3)), None) == (0, 1, 0, 1)


def test_signature_refuses_partial_overlap_of_storages():
    import numpy as np

    arr = np.arange(8.0)
    whole, tail = torch.from_numpy(arr), torch.from_numpy(arr[4:])  # two storages over one memory
    assert aliasing_signature((whole, tail), None) is None


def test_held_ranges_find():
    w, b = torch.zeros(4), torch.zeros(2)
    held = HeldRanges([w, b])
    assert held.find((w.untyped_storage().data_ptr(), w.untyped_storage().data_ptr() + 16)) >= 0
    assert held.find((1, 2)) == -1
    start = w.untyped_storage().data_ptr()
    assert held.find((start + 4, start + 8)) is None
    assert aliasing_signature((torch.zeros(3), w[1:]), held)[1][1] == held.find((start, start + 16))


def _shift_copy(x):
    x[1:].copy_(x[:-1])  # partly overlapping source: eager raises
    return x


def _disjoint_add(x):
    x[:3].add_(x[3:])
    return x


def _same_elements_add(x):
    x.add_(x.view(6))
    return x


def _shift_setitem(x):
    x[1:] = x[:-1]  # (setitem writes x[1:]: the same check, on that view)
    return x


def _scale_rows_in_place(x):
    x[1:] *= 2  # (imul, then x[1:] = the same view: no overlap error)
    return x


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
@pytest.mark.parametrize("fn", [_shift_copy, _disjoint_add, _same_elements_add, _shift_setitem, _scale_rows_in_place])
def test_in_place_ops_on_overlapping_memory_raise_as_eager(backend, fn):
    try:
        want, want_error = fn(torch.arange(6.)), None
    except RuntimeError as exc:
        want, want_error = None, str(exc)
    x = torch.arange(6.)
    compiled = kiln.compile(fn, backend=backend)
    if want_error is not None:
        with pytest.raises(RuntimeError, match="single memory location"):
            compiled(x)
    else:
        assert torch.equal(compiled(x), want)


def test_partial_overlap_is_atens_rule():
    from kiln.capture.storage_aliasing import partial_overlap

    x = torch.arange(12.)
    assert partial_overlap(x[1:], x[:-1]) and partial_overlap(x.view(3, 4), x.view(4, 3).t())
    assert not partial_overlap(x[:6], x[6:]) and not partial_overlap(x, x.view(12)) and not partial_overlap(x, x.clone())
    assert not partial_overlap(x.view(3, 4)[:, ::2], x.view(3, 4)[:, 1::2])  # not dense: ATen lets it pass
