"""Unit tests of graph breaks: liveness, resume functions, and the transformed code around a break."""
import dis

import torch

import kiln
from kiln.capture import bytecode as bc
from kiln.capture.resume import live_locals, make_resume_code


def setup_function():
    kiln.reset()


def sample(a, b):
    c = a + 1
    print(c)
    d = c * b
    return d


def test_live_locals_after_a_point():
    insts = bc.decode(sample.__code__)
    call_print = [i for i in insts if i.opname in ("CALL", "PRECALL")][-1]
    after = insts[insts.index(call_print) + 1]
    names = set(sample.__code__.co_varnames)
    assert live_locals(insts, after, names) == {"b", "c"}  # a is dead, d is written before read


def test_resume_code_runs_the_rest_of_the_function():
    insts = bc.decode(sample.__code__)
    # resume right after `print(c)` returns: the print's result is the one stack value (popped next)
    pop = next(i for i in insts if i.opname == "POP_TOP" and i.offset > insts[4].offset)
    code = make_resume_code(sample.__code__, pop.offset, [True], ["b", "c"])
    assert code.co_varnames[:3] == ("___stack0", "b", "c") and code.co_argcount == 3
    fn = type(sample)(code, sample.__globals__)
    assert fn(None, 3, 2) == 6
    assert make_resume_code(sample.__code__, pop.offset, [True], ["b", "c"]) is code  # cached


def test_break_at_print_gives_two_graphs_and_same_result(capsys):
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    def f(x):
        y = x.sin()
        print("middle", y.shape)
        return y.cos() + 1

    x = torch.randn(4)
    out = kiln.compile(f, backend=backend)(x)
    torch.testing.assert_close(out, f(x))
    assert capsys.readouterr().out.count("middle") == 2
    assert len(graphs) == 2
    report = kiln.explain(f)(x)
    assert report.graph_break_count == 1 and "print" in report.break_reasons[0].reason


def test_data_dependent_branch_takes_both_paths():
    def f(x):
        y = x * 2
        if y.sum() > 0:
            return y + 1
        return y - 1

    cf = kiln.compile(f, backend="eager")
    for sign in (1.0, -1.0, 1.0, -1.0):
        x = torch.ones(3) * sign
        torch.testing.assert_close(cf(x), f(x))


def test_item_used_in_python_arithmetic():
    def f(x):
        n = int(x.sum().item()) % 3
        return x * n + 1

    x = torch.arange(4.0)
    torch.testing.assert_close(kiln.compile(f, backend="eager")(x), f(x))


def test_break_inside_no_grad_block_keeps_grad_mode_right():
    def f(x, w):
        y = x @ w
        with torch.no_grad():
            z = y * 2
            print("inside", torch.is_grad_enabled())
            z = z + 1
        return y + z, torch.is_grad_enabled()

    x, w = torch.randn(2, 2), torch.randn(2, 2, requires_grad=True)
    out, mode = kiln.compile(f, backend="eager")(x, w)
    expected, expected_mode = f(x, w)
    torch.testing.assert_close(out, expected)
    assert mode is expected_mode is True and torch.is_grad_enabled()
    assert out.requires_grad


def test_exception_inside_no_grad_block_restores_grad_mode():
    def boom(x):
        raise ValueError("boom")

    def f(x):
        with torch.no_grad():
            y = x * 2
            boom(y)  # not traceable (raises): the graph breaks at the call
        return y

    try:
        kiln.compile(f, backend="eager")(torch.ones(2))
    except ValueError:
        pass
    assert torch.is_grad_enabled()


def test_object_shared_by_local_and_global_stays_one_object():
    registry = {}

    class Entry:
        def __init__(self, v):
            self.v = v

    def f(x):
        e = Entry(x * 2)
        registry["e"] = e
        kiln.graph_break()
        e.v = e.v + 1
        return registry["e"].v

    x = torch.ones(2)
    out = kiln.compile(f, backend="eager")(x)
    torch.testing.assert_close(out, torch.full((2,), 3.0))
    assert registry["e"].v is out


def test_training_step_with_optimizer_and_logging():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    ref.load_state_dict(model.state_dict())
    opts = {id(model): torch.optim.SGD(model.parameters(), lr=0.1), id(ref): torch.optim.SGD(ref.parameters(), lr=0.1)}
    logged = []

    def step(m, x, y):
        opt = opts[id(m)]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        logged.append(round(loss.item(), 5))
        return loss

    compiled = kiln.compile(step, backend="eager")
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    for _ in range(3):
        torch.testing.assert_close(compiled(model, x, y), step(ref, x, y))
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)
    assert logged[0::2] == logged[1::2]


def test_attributes_of_objects_kiln_does_not_model_are_never_guessed():
    # objects of torch's own classes are opaque to kiln: `== "auto"` and `is None` on their attributes
    # must run as Python (a graph break), not be decided by identity while tracing.
    class Options:
        def __init__(self, chunking_method="auto", batch_chunk_size=None):
            self.chunking_method = chunking_method
            self.batch_chunk_size = batch_chunk_size

    Options.__module__ = "torch.nn.modules.some_options"  # looks like torch's to kiln: opaque

    def f(o, x):
        y = x * 2
        if o.chunking_method == "auto" and o.batch_chunk_size is None:
            return y + 1
        return y - 1

    cf = kiln.compile(f, backend="eager")
    x = torch.ones(2)
    for opts in (Options(), Options(batch_chunk_size=4), Options("aspect_ratio")):
        torch.testing.assert_close(cf(opts, x), f(opts, x))


def test_break_inside_try_runs_the_handler_when_the_instruction_raises(capsys):
    def parse(s):
        return int(s)

    def f(x, s):
        y = x * 2
        try:
            n = parse(s)  # raises while tracing for "x": the graph breaks at this call, inside the try
            y = y + n
        except ValueError:
            y = y - 1
        finally:
            y = y * 3
        return y

    cf = kiln.compile(f, backend="eager")
    for s in ("3", "x", "4", "y"):
        torch.testing.assert_close(cf(torch.ones(2), s), f(torch.ones(2), s))


def test_autocast_block_is_captured_with_eager_dtypes():
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
            z = torch.relu(y)
        return z.float() + 1, y.dtype

    x, w = torch.randn(4, 4), torch.randn(4, 4)
    out, dtype = kiln.compile(f, backend=backend)(x, w)
    expected, expected_dtype = f(x, w)
    torch.testing.assert_close(out, expected)
    assert dtype is expected_dtype is torch.bfloat16
    assert len(graphs) == 1 and not torch.is_autocast_enabled("cpu")


def test_autocast_dtype_of_the_caller_is_guarded():
    # compiled under bf16 autocast, then called under fp16: the casts were traced to bf16, so the
    # entry must not be reused
    def f(x, w):
        return x @ w

    cf = kiln.compile(f, backend="aot_eager")
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    for dtype in (torch.bfloat16, torch.float16, torch.bfloat16):
        with torch.autocast("cpu", dtype=dtype):
            out, expected = cf(x, w), f(x, w)
        assert out.dtype is expected.dtype is dtype
        torch.testing.assert_close(out, expected)
