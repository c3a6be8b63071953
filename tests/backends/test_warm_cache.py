"""The warm whole-graph cache (kiln/backends/warm_cache.py): a second compile of a captured graph --
in a new process, or after kiln.reset() -- loads the generated code instead of compiling, gives eager's
results, and a damaged or unfitting entry is removed and compiled again."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import kiln
from kiln.backends import warm_cache
from kiln.backends.warm_key import graph_key
from kiln.codegen.triton.runtime import triton_available


@pytest.fixture
def opts(tmp_path):
    warm_cache.ENTRIES.clear()
    kiln.reset()
    kiln.stats.reset()
    yield kiln.Options(cache_dir=str(tmp_path), warm_cache=True)
    warm_cache.ENTRIES.clear()


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16)).eval()


def _compile_again(fn, opts, forget_memory=True):
    kiln.reset()
    if forget_memory:
        warm_cache.ENTRIES.clear()  # read from the disk, as a new process does
    return kiln.compile(fn, options=opts)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_second_compile_loads_the_entry(opts, codegen):
    if codegen == "triton" and triton_available() is not None:
        pytest.skip(triton_available())
    opts = opts.replace(cpu_codegen=codegen)  # "triton": Triton kernels run by Triton's interpreter
    m, x = _model(), torch.randn(3, 8)
    with torch.no_grad():
        first = kiln.compile(m, options=opts)(x)
        assert kiln.stats.warm_cache["stored"] == 1 and kiln.stats.warm_cache["misses"] == 1
        kiln.stats.reset()
        second = _compile_again(m, opts)(x)
    assert kiln.stats.warm_cache["hits"] == 1
    assert "lower" not in kiln.stats.stages and "aot" not in kiln.stats.stages  # nothing traced or lowered
    torch.testing.assert_close(first, m(x))
    torch.testing.assert_close(second, m(x))


def test_loaded_runtime_uses_this_models_parameters(opts):
    m, x = _model(), torch.randn(3, 8)
    with torch.no_grad():
        kiln.compile(m, options=opts)(x)
        m2 = _model()
        m2[0].weight.mul_(2)  # same graph and metadata, other values: the same entry, new state
        out = _compile_again(m2, opts)(x)
    assert kiln.stats.warm_cache["hits"] == 1
    torch.testing.assert_close(out, m2(x))


def test_mutation_and_output_views_survive_the_cache(opts):
    def f(x, buf):
        buf.add_(x)
        return buf[1:].t(), (x * 2).relu()

    x = torch.randn(4, 3)
    ref_buf, buf, buf2 = torch.ones(4, 3), torch.ones(4, 3), torch.ones(4, 3)
    expected = f(x, ref_buf)
    kiln.compile(f, options=opts)(x, buf)
    out = _compile_again(f, opts)(x, buf2)
    assert kiln.stats.warm_cache["hits"] == 1
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(buf2, ref_buf)
    assert out[0]._base is buf2  # a view of the input, as in eager


@pytest.mark.parametrize("damage", ["random bytes", "truncated", "empty", "other key"])
def test_damaged_entry_is_rebuilt(opts, damage):
    f = lambda x: torch.tanh(x) * 3  # noqa: E731
    x = torch.randn(5)
    kiln.compile(f, options=opts)(x)
    [path] = [os.path.join(d, n) for d, _, names in os.walk(opts.cache_dir) for n in names if n.endswith(".kgraph")]
    with open(path, "rb") as fh:
        blob = fh.read()
    if damage == "random bytes":
        blob = os.urandom(len(blob))
    elif damage == "truncated":
        blob = blob[: len(blob) // 2]
    elif damage == "empty":
        blob = b""
    else:  # a whole, valid file of another entry under this name
        blob = warm_cache.encode({**warm_cache.decode(blob), "key": "0" * 64})
    with open(path, "wb") as fh:
        fh.write(blob)
    kiln.stats.reset()
    out = _compile_again(f, opts)(x)
    torch.testing.assert_close(out, f(x))
    assert kiln.stats.warm_cache["hits"] == 0 and kiln.stats.warm_cache["stored"] == 1
    assert any(k.startswith("refused") for k in kiln.stats.warm_cache)
    kiln.stats.reset()
    _compile_again(f, opts)(x)
    assert kiln.stats.warm_cache["hits"] == 1  # the rebuilt entry is good


def test_entry_that_does_not_fit_is_refused(opts):
    m, x = _model(), torch.randn(3, 8)
    with torch.no_grad():
        kiln.compile(m, options=opts)(x)
        [entry] = warm_cache.ENTRIES.values()
        entry["inputs"] = [(k, n + "_gone" if k != "user" else n, mut) for k, n, mut in entry["inputs"]]
        kiln.stats.reset()
        out = _compile_again(m, opts, forget_memory=False)(x)
    torch.testing.assert_close(out, m(x))
    assert kiln.stats.warm_cache["hits"] == 0 and any("KeyError" in k for k in kiln.stats.warm_cache)


def test_new_process_loads_the_entry(tmp_path):
    script = textwrap.dedent(f"""
        import torch, kiln
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
        x = torch.randn(2, 8)
        opts = kiln.Options(cache_dir={str(tmp_path)!r}, warm_cache=True)
        with torch.no_grad():
            torch.testing.assert_close(kiln.compile(m, options=opts)(x), m(x))
        print(dict(kiln.stats.warm_cache), sorted(kiln.stats.stages))
    """)
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(kiln.__file__))}
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
            for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    assert "'stored': 1" in runs[0].stdout
    assert "'hits': 1" in runs[1].stdout and "'lower'" not in runs[1].stdout


# -- the key ------------------------------------------------------------------------------------


def _key(fn, *args, options=None):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(graph_key(gm, example_inputs, options or kiln.Options(), "cpp"))
        return gm.forward

    kiln.reset()
    kiln.compile(fn, backend=backend)(*args)
    assert len(graphs) == 1
    return graphs[0]


def test_key_sees_everything_the_code_depends_on():
    f = lambda x, y: x + y  # noqa: E731
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    base, why = _key(f, a, b)
    assert base is not None, why
    assert _key(f, torch.randn(4, 4), torch.randn(4, 4))[0] == base  # values are not in the key
    others = [
        _key(f, a.double(), b),  # dtype
        _key(f, torch.randn(4, 5)[:, :4], b),  # strides
        _key(f, a, a),  # aliasing inputs
        _key(f, a.requires_grad_(False).clone().requires_grad_(True), b),  # requires_grad
        _key(f, a, b, options=kiln.Options(fusion=False)),  # options that change code
        _key(lambda x, y: x - y, a, b),  # the graph
    ]
    assert len({base, *[k for k, _ in others]}) == len(others) + 1
    assert _key(f, a, b, options=kiln.Options(cache_dir="/elsewhere"))[0] == base  # where files go is not


def _mine(x):
    return x * 2


@pytest.mark.parametrize("what", ["user function", "call_module"])
def test_graph_whose_code_does_not_say_everything_is_not_cached(what):
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    root = torch.nn.Module()
    if what == "user function":
        y = graph.call_function(_mine, (x,))
    elif what == "call_module":
        root.lin = torch.nn.Linear(3, 3)
        y = graph.call_module("lin", (x,))
    graph.output(y)
    key, why = graph_key(torch.fx.GraphModule(root, graph), [torch.randn(3)], kiln.Options(), "cpp")
    assert key is None
    assert {"user function": "_mine", "call_module": "call_module"}[what] in why
    plain = torch.fx.Graph()
    plain.output(plain.call_function(torch.relu, (plain.placeholder("x"),)))
    assert graph_key(torch.fx.GraphModule(root, plain), [torch.randn(3)], kiln.Options(), "cpp")[0] is not None


def test_training_graphs_are_cached(opts):
    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh(),
                                   torch.nn.Linear(8, 2)).train()

    x = torch.randn(5, 6)

    def step(model, fn):
        out = fn(x)
        out.square().sum().backward()
        return out, [p.grad for p in model.parameters()], model[1].running_mean.clone()

    eager = make()
    want = step(eager, eager)
    first = make()
    step(first, kiln.compile(first, options=opts))
    assert kiln.stats.warm_cache["stored"] == 1
    kiln.stats.reset()
    second = make()
    got = step(second, _compile_again(second, opts))
    assert kiln.stats.warm_cache["hits"] == 1 and "partition" not in kiln.stats.stages
    torch.testing.assert_close(got, want)


def test_a_training_graph_loaded_from_the_cache_is_not_raced(opts):
    # training graphs run their generated code (the race would time forwards only); a runtime loaded
    # from the warm cache has no training plan, and its second step raced the forward against eager
    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).train()

    x = torch.randn(5, 6)
    first = make()
    kiln.compile(first, options=opts)(x).sum().backward()
    kiln.stats.reset()
    second = make()
    compiled = _compile_again(second, opts)
    for _ in range(3):
        compiled(x).sum().backward()
    assert kiln.stats.warm_cache["hits"] == 1
    assert not kiln.stats.speed_choices and "stored" not in kiln.stats.warm_cache


def test_training_backward_variant_is_kept_with_the_entry(opts):
    # the loss only is differentiated: the logits and the hidden state get no gradient, and the backward
    # runs the variant compiled with their tangents as constant zeros (aot/training.py); a runtime
    # loaded from the cache runs the stored variant, and passes zeros for a set no process compiled
    class LMHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.head = torch.nn.Linear(12, 16), torch.nn.Linear(16, 20)

        def forward(self, x, labels):
            hidden = torch.tanh(self.body(x))
            logits = self.head(hidden)
            return logits, torch.nn.functional.cross_entropy(logits, labels), hidden

    def make():
        torch.manual_seed(0)
        return LMHead()

    x, labels = torch.randn(6, 12), torch.randint(0, 20, (6,))

    def step(model, fn, loss=lambda out: out[1]):
        model.zero_grad()
        loss(fn(x, labels)).backward()
        return [p.grad.clone() for p in model.parameters()]

    eager = make()
    want = step(eager, eager)
    first = make()
    got = step(first, kiln.compile(first, options=opts))
    torch.testing.assert_close(got, want)
    assert kiln.stats.warm_cache["stored"] == 2  # (the entry, then the entry with its variant)
    kiln.stats.reset()
    second = make()
    compiled = _compile_again(second, opts)
    loaded = []
    real_stored_variant = warm_cache._stored_variant
    warm_cache._stored_variant = lambda *a: loaded.append(real_stored_variant(*a)) or loaded[-1]
    try:
        torch.testing.assert_close(step(second, compiled), want)
    finally:
        warm_cache._stored_variant = real_stored_variant
    assert len(loaded) == 1 and loaded[0] is not None  # (the stored variant ran)
    assert kiln.stats.warm_cache["hits"] == 1 and "backward_variant" not in kiln.stats.stages
    # a set of absent tangents no process compiled: zeros passed to the stored backward
    other = lambda out: out[1] + out[2].sum()  # noqa: E731  (only the logits absent)
    torch.testing.assert_close(step(second, compiled, other), step(eager, eager, other))


def test_full_disk_keeps_the_compiled_code(opts, monkeypatch):
    import errno

    def full(path, blob):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(warm_cache, "write_atomically", full)
    x = torch.randn(6)
    out = kiln.compile(lambda x: x.sin() + 1, options=opts)(x)
    torch.testing.assert_close(out, x.sin() + 1)
    assert kiln.stats.warm_cache["not written: OSError"] == 1


def test_concurrent_writers_leave_a_good_entry(tmp_path):
    script = textwrap.dedent(f"""
        import torch, kiln
        x = torch.arange(12.0).reshape(3, 4)
        opts = kiln.Options(cache_dir={str(tmp_path)!r}, warm_cache=True)
        out = kiln.compile(lambda x: (x * 2).softmax(-1), options=opts)(x)
        torch.testing.assert_close(out, (x * 2).softmax(-1))
        print(dict(kiln.stats.warm_cache))
    """)
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(kiln.__file__))}
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    after = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert after.returncode == 0 and "'hits': 1" in after.stdout, after.stderr


def test_explain_says_the_code_came_from_the_cache(opts):
    f = lambda x: torch.cos(x) * 2  # noqa: E731
    x = torch.randn(4)
    kiln.compile(f, options=opts)(x)
    kiln.reset()
    warm_cache.ENTRIES.clear()
    report = kiln.explain(f, options=opts)(x)
    assert "loaded from kiln's warm cache" in str(report) and "warm_cache" in report.stages
    torch.testing.assert_close(report.result, f(x))


def test_an_op_packet_target_is_keyed_by_its_namespace():
    """torch.ops.aten.foo (a packet, no overload chosen) as a graph target: it has no .namespace (found by
    the ops21b helper: every compile calling one raised BackendError)."""
    graph = torch.fx.Graph()
    g, idx = graph.placeholder("g"), graph.placeholder("idx")
    graph.output(graph.call_function(torch.ops.aten.embedding_dense_backward, (g, idx, 10, -1, False)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    key, why = graph_key(gm, [torch.randn(4, 3), torch.tensor([1, 2, 1, 0])], kiln.Options(), "cpp")
    assert key is not None, why


def test_an_out_of_bounds_error_names_the_line_of_the_function_that_ran(tmp_path):
    """The same graph written on two lines is one warm-cache entry, and the wrapper's IndexError names
    the line of the function that ran (the marks in its message are filled in from the loading graph)."""
    import textwrap

    import kiln
    from kiln.errors import IndexOutOfBoundsError

    src = tmp_path / "two_gathers.py"
    src.write_text(textwrap.dedent("""
        def f1(x, i):
            return x.gather(1, i) * 2


        def f2(x, i):
            return x.gather(1, i) * 2


        def f3(x, i):
            return x[i] + 1


        def f4(x, i):
            return x[i] + 1
    """))
    ns: dict = {}
    exec(compile(src.read_text(), str(src), "exec"), ns)
    x, bad, rows = torch.randn(3, 4), torch.tensor([[0], [4], [1]]), torch.tensor([0, 5])
    from kiln.debug.stats import stats

    stats.reset()
    for name, line, i in (("f1", 3, bad), ("f2", 7, bad), ("f3", 11, rows), ("f4", 15, rows)):
        compiled = kiln.compile(ns[name], options={"cache_dir": str(tmp_path / "cache"), "choose_faster": False,
                                                   "warm_cache": True})
        compiled(x, i.clamp(max=2))  # compiled (f1, f3: stored) or loaded (f2, f4)
        with pytest.raises(IndexOutOfBoundsError, match=f"two_gathers.py:{line} "):
            compiled(x, i)
    assert stats.warm_cache["hits"] == 2  # (one entry per graph: the lines are filled in when it is loaded)
