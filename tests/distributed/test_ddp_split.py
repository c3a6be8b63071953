"""Unit tests of the DDP graph split (kiln/distributed/ddp_split.py, ddp_backend.py), one process."""
import types

import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln.distributed.ddp_backend import compile_split, ddp_aware, SplitGraph
from kiln.distributed.ddp_split import CutChecker, body_nodes, place_cuts, plan_buckets, split_graph
from kiln.backends.aot_eager import compile_aot_eager
from tests.distributed.ddp_workers import Net, compiled_functions_in_backward


def capture(fn, *args):
    """The FX graph kiln captures for fn(*args)."""
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm

    kiln.compile(fn, backend=record)(*args)
    assert len(graphs) == 1
    return graphs[0]


def assert_same_gradients(out, expected, net):
    """Backward of out.sum() and of expected.sum() give net's parameters the same gradients."""
    out.sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    expected.sum().backward()
    for got, want in zip(grads, [p.grad for p in net.parameters()]):
        torch.testing.assert_close(got, want)


def stub_ddp(module, cap_bytes):
    """What compile_split reads from a DDP module, without a process group."""
    return types.SimpleNamespace(bucket_bytes_cap=cap_bytes, module=module, parameters_to_ignore=set(),
                                 _bucket_config=None)


def test_buckets_in_reverse_order_of_use():
    net = Net()
    gm = capture(net, torch.randn(2, 32))
    buckets = plan_buckets(gm, 4000, 4000, lambda p: True)
    names = [b.params for b in buckets]
    # graph order: layers 0..3 then the head; from the end: head + layer 3 fill the first bucket
    assert len(buckets) == 4
    assert any("head" in n for n in names[-1]) and any("layers_3" in n for n in names[-1])
    assert any("layers_0" in n for n in names[0])
    assert sum(b.nbytes for b in buckets) == sum(p.numel() * 4 for p in net.parameters())
    # a big cap: one bucket
    assert len(plan_buckets(gm, 10**9, 10**9, lambda p: True)) == 1
    # parameters DDP does not reduce do not count
    assert len(plan_buckets(gm, 4000, 4000, lambda p: False)) == 1


def test_split_runs_like_the_graph():
    net = Net()
    x = torch.randn(3, 32)
    gm = capture(net, x)
    split = compile_split(compile_aot_eager, gm, [x], stub_ddp(net, 4000))
    assert isinstance(split, SplitGraph) and len(split.pieces) == 4
    (out,) = split(x)
    expected = net(x)
    torch.testing.assert_close(out, expected)
    functions = compiled_functions_in_backward(out)
    assert len(functions) == 4
    assert {id(p) for p in net.head.parameters()} <= functions[0]
    assert_same_gradients(out, expected, net)
    assert "4 piece(s)" in split.kiln_explain()


def test_no_active_ddp_no_split():
    calls = []

    def backend(gm, example_inputs):
        calls.append(gm)
        return gm

    wrapped = ddp_aware(backend, kiln.Options())
    net = Net()
    gm = capture(net, torch.randn(2, 32))
    assert wrapped(gm, [torch.randn(2, 32)]) is gm and calls == [gm]


def test_no_cut_inside_autocast_or_no_grad():
    lin = torch.nn.Linear(8, 8)

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = lin(x)
            y = lin(y)
        with torch.no_grad():
            z = y * 2
        return y.float() + z.float()

    gm = capture(f, torch.randn(2, 8))
    checker = CutChecker(gm, True)
    nodes = body_nodes(gm)
    enter = next(i for i, n in enumerate(nodes) if getattr(n.target, "__name__", "") == "_enter_autocast")
    exit_ = next(i for i, n in enumerate(nodes) if getattr(n.target, "__name__", "") == "_exit_autocast")
    for p in range(enter + 1, exit_ + 1):
        assert checker.cut_problem(p) == "inside an autocast block"
    grad_off = next(i for i, n in enumerate(nodes) if n.target is torch._C._set_grad_enabled)
    assert "grad mode" in checker.cut_problem(grad_off + 1)


def checker_around_write(write, write_node):
    """f(x) = write(a(x)) + b(x): the CutChecker, the body, and the positions of a(x) and the write."""
    a, b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def f(x):
        y = a(x)
        z = b(x)
        y = write(y)  # y crosses any cut between its definition and here
        return y + z

    gm = capture(f, torch.randn(2, 8))
    nodes = body_nodes(gm)
    y = next(i for i, n in enumerate(nodes) if n.name == "linear")
    where = next(i for i, n in enumerate(nodes) if n.name == write_node or n.target == write_node)
    return f, gm, CutChecker(gm, True), y, where


def test_no_cut_between_a_value_and_its_in_place_write():
    f, gm, checker, y, write = checker_around_write(lambda y: y.mul_(2), "mul_")
    for p in range(y + 1, write + 1):
        assert checker.cut_problem(p) is not None and "in place" in checker.cut_problem(p)
    assert checker.cut_problem(write + 1) is None
    # a planned cut there moves to before y's definition, and the split still computes f
    buckets = plan_buckets(gm, 1, 1, lambda p: True)
    cuts, notes = place_cuts(buckets, checker)
    assert all(not (y < c <= write) for c in cuts)
    x = torch.randn(2, 8)
    pieces = split_graph(gm, cuts)
    split = SplitGraph(gm, pieces, compile_aot_eager, "", [])
    torch.testing.assert_close(split(x)[0], f(x))


def test_no_cut_where_a_view_of_an_input_crosses():
    lin = torch.nn.Linear(8, 8)

    def f(x):
        v = x[0]  # a view of the input
        y = lin(x)
        return y + v

    # an input that requires grad: its view is not computed again (ddp_recompute.py), so it would cross
    gm = capture(f, torch.randn(2, 8, requires_grad=True))
    checker = CutChecker(gm, True)
    nodes = body_nodes(gm)
    view = next(i for i, n in enumerate(nodes) if n.name.startswith("getitem"))
    assert "views an input" in checker.cut_problem(view + 1)
    # a plain input: the later piece takes x and computes x[0] again
    gm = capture(f, torch.randn(2, 8))
    checker = CutChecker(gm, True)
    view = next(i for i, n in enumerate(body_nodes(gm)) if n.name.startswith("getitem"))
    assert checker.cut_problem(view + 1) is None and body_nodes(gm)[view] in checker.recomputable


def test_backend_failure_in_a_piece_runs_it_as_its_graph():
    net = Net()
    x = torch.randn(3, 32)
    gm = capture(net, x)
    seen = []

    def flaky(gm, example_inputs):
        seen.append(gm)
        if len(seen) == 2:
            raise RuntimeError("injected")
        return compile_aot_eager(gm, example_inputs)

    split = compile_split(flaky, gm, [x], stub_ddp(net, 4000))
    with pytest.warns(UserWarning, match="injected"):
        (out,) = split(x)
    torch.testing.assert_close(out, net(x))
    assert split.compiled[1] is split.pieces[1].gm


class ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(4, 4, 3, padding=1) for _ in range(3))
        self.norms = torch.nn.ModuleList(torch.nn.BatchNorm2d(4) for _ in range(3))
        self.drop = torch.nn.Dropout(0.3)

    def forward(self, x):
        for conv, norm in zip(self.convs, self.norms):
            x = self.drop(torch.relu_(norm(conv(x))))
        return x.mean()


def test_split_with_batch_norm_and_dropout_matches_eager():
    torch.manual_seed(0)
    net = ConvBN()
    ref = ConvBN()
    ref.load_state_dict(net.state_dict())
    x = torch.randn(2, 4, 6, 6)
    gm = capture(net, x)  # one training step already ran eagerly here: start both from the same state
    ref.load_state_dict(net.state_dict())
    split = compile_split(compile_aot_eager, gm, [x], stub_ddp(net, 600))
    assert isinstance(split, SplitGraph) and len(split.pieces) == 3
    torch.manual_seed(1)
    (out,) = split(x)
    out.backward()
    torch.manual_seed(1)
    expected = ref(x)
    expected.backward()
    torch.testing.assert_close(out, expected)  # same dropout masks: random ops run in program order
    for (name, a), b in zip(net.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)
    for a, b in zip(net.parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad)


def test_output_that_is_module_state():
    lin = torch.nn.Linear(8, 8)
    lin2 = torch.nn.Linear(8, 8)

    def f(x):
        return lin2(lin(x)), lin.weight

    x = torch.randn(2, 8)
    gm = capture(f, x)
    split = compile_split(compile_aot_eager, gm, [x], stub_ddp(torch.nn.ModuleList([lin, lin2]), 100))
    assert isinstance(split, SplitGraph) and len(split.pieces) == 2
    out = split(x)
    torch.testing.assert_close(out[0], f(x)[0])
    assert out[-1] is lin.weight or torch.equal(out[-1], lin.weight)


def test_tied_weight_counts_at_its_first_use():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(50, 16)
            self.mid = torch.nn.Linear(16, 16)
            self.head = torch.nn.Linear(16, 50, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, ids):
            return self.head(torch.relu(self.mid(self.emb(ids))))

    model = Tied()
    ids = torch.randint(0, 50, (2, 5))
    gm = capture(model, ids)
    buckets = plan_buckets(gm, 1000, 1000, lambda p: True)
    # the shared weight's gradient is complete only after the embedding's backward: first piece
    assert "L_self_emb_weight" in buckets[0].params or any("emb" in p for p in buckets[0].params)
    assert all("emb" not in p and "head" not in p for b in buckets[1:] for p in b.params)
    split = compile_split(compile_aot_eager, gm, [ids], stub_ddp(model, 1000))
    (out,) = split(ids)
    torch.testing.assert_close(out, model(ids))


def test_in_place_flag_given_positionally():
    _, _, checker, y, relu = checker_around_write(lambda y: F.relu(y, True), "relu")  # inplace=True
    assert all(checker.cut_problem(p) is not None for p in range(y + 1, relu + 1))


def test_pieces_of_repeated_layers_have_the_same_code_and_share_the_warm_cache(tmp_path, monkeypatch):
    """Pieces read module state under names of their own and carry no layer numbers in their code, so
    the pieces of identical layers are one entry of the whole-graph cache; each still reads (and
    trains) its own layer's parameters."""
    import kiln.distributed.ddp_backend as ddp_backend

    net, x = Net(), torch.randn(3, 32)
    pieces = compile_split(compile_aot_eager, capture(net, x), [x], stub_ddp(net, 4000)).pieces
    assert pieces[1].gm.code == pieces[2].gm.code and pieces[1].params != pieces[2].params
    assert "layers" not in "".join(n.target for n in pieces[1].gm.graph.nodes if n.op == "get_attr")
    monkeypatch.setattr(ddp_backend, "active_ddp_module", lambda: stub_ddp(net, 4000))
    kiln.reset()
    kiln.stats.reset()
    compiled = kiln.compile(net, options={"cache_dir": str(tmp_path), "warm_cache": True})
    out = compiled(x)
    expected = net(x)
    torch.testing.assert_close(out, expected)
    assert kiln.stats.ddp_pieces == 4 and kiln.stats.warm_cache["hits"] >= 1, kiln.stats.warm_cache
    assert_same_gradients(out, expected, net)


class Rotary(torch.nn.Module):
    """Every layer reads one slice of a buffer (as Llama's rotary cos/sin tables)."""

    def __init__(self, width=32, layers=4, write_table=False):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))
        self.register_buffer("table", torch.linspace(0, 1, 64 * width).reshape(64, width))
        self.write_table = write_table

    def forward(self, x):
        scale = self.table[: x.shape[0]].to(x.dtype)
        for layer in self.layers:
            x = torch.tanh(layer(x)) * scale
        if self.write_table:
            self.table.mul_(1.0)
        return x


def test_view_of_module_state_read_by_every_layer_is_computed_again_in_each_piece():
    torch.manual_seed(0)
    net, x = Rotary(), torch.randn(3, 32)
    gm = capture(net, x)
    split = compile_split(compile_aot_eager, gm, [x], stub_ddp(net, 4000))
    assert isinstance(split, SplitGraph) and len(split.pieces) == 4, split.kiln_explain()
    assert all(len(piece.inputs) == 1 for piece in split.pieces)  # x or the previous layer's output
    (out,) = split(x)
    expected = net(x)
    torch.testing.assert_close(out, expected)
    assert_same_gradients(out, expected, net)


def test_no_recompute_where_the_state_is_written_in_place():
    net, x = Rotary(write_table=True), torch.randn(3, 32)
    checker = CutChecker(capture(net, x), True)
    assert not checker.recomputable
    split = compile_split(compile_aot_eager, capture(net, x), [x], stub_ddp(net, 4000))
    assert not isinstance(split, SplitGraph) or len(split.pieces) < 4
