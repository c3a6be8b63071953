"""``t.data = v`` inside a compiled function (values/tensor_data_store.py): a side effect replayed after
the graph; later uses of ``t`` in the same frame break (TorchDynamo traces them into its one graph)."""
import pytest
import torch

from .harness import USE_DYNAMO, CountingBackend, assert_same, check, compile_fn, dynamo_bug, reset


class _Swap(torch.nn.Module):
    """Gives the weight new memory (of another shape on odd steps) computed in forward, then returns."""

    def __init__(self, read_after: bool = False):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("shadow", torch.ones(3, 3))
        self.read_after = read_after

    def forward(self, x):
        out = self.lin(x)
        self.lin.weight.data = self.shadow * out.detach().mean()
        if self.read_after:
            out = out + self.lin(x)
        return out


def _run(module, backend, calls=3):
    fn = compile_fn(module, backend) if backend is not None else module
    outs = [fn(torch.full((2, 3), float(i))) for i in range(calls)]
    outs[-1].sum().backward()
    w = module.lin.weight
    return outs, w.detach().clone(), w._version, w.grad, module.lin.bias.grad


@pytest.mark.parametrize("read_after,graphs,dynamo_graphs", [(False, 1, 1), (True, 3, 1)])
def test_parameter_data_swapped_in_forward(read_after, graphs, dynamo_graphs):
    torch.manual_seed(0)
    check(_Swap(read_after), torch.randn(2, 3), graphs=graphs, dynamo_graphs=dynamo_graphs,
          breaks=0 if not read_after else 1)


@dynamo_bug("the swapped weight's version counter is 4, eager's 1")
@pytest.mark.parametrize("backend", ["aot_eager"] if USE_DYNAMO else ["aot_eager", "kiln"])
@pytest.mark.parametrize("read_after", [False, True])
def test_parameter_data_swapped_in_forward_trains_as_eager(backend, read_after):
    torch.manual_seed(0)
    want = _run(_Swap(read_after), None)
    torch.manual_seed(0)
    reset()
    assert_same(_run(_Swap(read_after), backend), want)


class _Tie(torch.nn.Module):
    """The buffer takes the memory of the input it wrote: the next call's input may be that memory."""

    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(3))

    def forward(self, x):
        x.add_(1)
        out = x + self.buf
        self.buf.data = x
        return out


@dynamo_bug("aot_eager's graph misses that the input shares memory with the buffer (5 for 6)", strict=False)
@pytest.mark.parametrize("backend", ["aot_eager"] if USE_DYNAMO else ["aot_eager", "kiln"])
def test_guards_see_the_swapped_memory_on_the_next_call(backend):
    """The aliasing guard reads the held tensors' memory afresh: call 2 passes the buffer's new memory."""
    def run(fn, module):
        x = torch.ones(3)
        return [fn(x), fn(x), fn(torch.ones(3)), fn(x)], module.buf

    module = _Tie()
    want = run(module, module)
    module = _Tie()
    reset()
    assert_same(run(compile_fn(module, backend), module), want)


def _swap_input(x, y):
    x.data = y * 2
    return x


def test_input_data_swapped_and_returned():
    def run(fn):
        x, y = torch.ones(3), torch.arange(4.0)
        out = fn(x, y)
        return out is x, x, x._version, x.shape

    want = run(_swap_input)
    reset()
    counter = CountingBackend()
    assert_same(run(compile_fn(_swap_input, counter)), want)
    assert counter.graph_count == 1


def _assign_number(x):
    x.data = 5
    return x


def _assign_int_to_parameter(p):
    p.data = torch.arange(3)
    return p


@pytest.mark.parametrize("fn,make,error", [
    pytest.param(_assign_number, lambda: torch.ones(3), TypeError,
                 marks=dynamo_bug("InternalTorchDynamoError: 'ConstantVariable' object has no attribute 'dtype'")),
    (_assign_int_to_parameter, lambda: torch.nn.Parameter(torch.ones(3)), RuntimeError)])
def test_stores_eager_refuses_raise_eagers_error(fn, make, error):
    with pytest.raises(error) as want:
        fn(make())
    reset()
    t = make()
    with pytest.raises(error) as got:
        compile_fn(fn, CountingBackend())(t)
    assert str(got.value) == str(want.value)
    assert t.dtype == torch.float32 and t.shape == (3,)
