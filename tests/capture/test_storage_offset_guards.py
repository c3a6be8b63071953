"""A tensor input's storage offset, where the program reads it as a number (``x.storage_offset()``, the
explicit offset of ``as_strided``, which counts from the start of the storage), is guarded: the tensor
guard checks sizes and strides only, so a batch ``data[i:i + 3]`` at another ``i`` reused the graph
traced at the first offset (``x * x.storage_offset()`` gave the first call's product, ``as_strided`` read
other elements). A program that does not read it compiles once for every offset."""
import pytest
import torch

import kiln
from kiln.api import config_of

DATA = torch.arange(40.0)
STARTS = (2, 3, 7, 0, 5, 2)


def compiles(compiled) -> int:
    return sum(1 for r in config_of(compiled).compiler.records if r.graph is not None)


CASES = {
    "storage_offset()": lambda x: x * x.storage_offset(),
    "a view's storage_offset()": lambda x: x[1:] * x[1:].storage_offset(),
    "unbound Tensor.storage_offset": lambda x: x + torch.Tensor.storage_offset(x),
    "the offset in a branch": lambda x: x + (1 if x.storage_offset() > 4 else 0),
    "as_strided method": lambda x: x.as_strided((2,), (1,), 1) + 1,
    "as_strided keyword": lambda x: x.as_strided((2,), (1,), storage_offset=3) * 2,
    "torch.as_strided": lambda x: torch.as_strided(x, (2, 2), (2, 1), 1) * 2,
    "as_strided_scatter": lambda x: torch.as_strided_scatter(x, torch.zeros(2), (2,), (1,), 1),
}


@pytest.mark.parametrize("backend", ["eager", "kiln"])
@pytest.mark.parametrize("name", list(CASES))
def test_programs_reading_the_offset_see_each_call_s(name, backend):
    fn = CASES[name]
    compiled = kiln.compile(fn, backend=backend)
    for i in STARTS:
        x = DATA[i:i + 6]
        assert torch.equal(compiled(x), fn(x)), (name, i)
    guards = config_of(compiled).compiler.records[-1].guards or ""
    assert "storage_offset() ==" in guards


def test_programs_not_reading_it_compile_once_for_every_offset():
    fn = lambda x: (x * 2).sum() + x[1:].as_strided((2,), (1,))[0]  # noqa: E731  (the default offset: x's own)
    compiled = kiln.compile(fn)
    for i in STARTS:
        x = DATA[i:i + 6]
        assert torch.equal(compiled(x), fn(x))
    assert compiles(compiled) == 1
