"""Side effects around breaks: writes to globals, attributes, closure cells, lists, dicts and sets
made before a break must be visible to the code that runs at the break (a print, a disabled
function), writes after it must land too, in program order; in-place ops on inputs across a break
leave the inputs as eager does."""
import torch
import torch.nn as nn

from .support import check_breaks, disable, graph_break, t

STEP = 0
HISTORY: list = []
REGISTRY: dict = {}
RUNNING = None  # a global tensor (running statistic) rebound around breaks


def _reset_globals():
    global STEP, RUNNING
    STEP = 0
    RUNNING = torch.zeros(3)
    HISTORY.clear()
    REGISTRY.clear()


def _globals():
    return {"STEP": STEP, "HISTORY": list(HISTORY), "REGISTRY": dict(REGISTRY), "RUNNING": RUNNING}


@disable
def _read_step():
    return STEP


def test_global_incremented_before_break_seen_by_disabled_fn():
    def fn(x):
        global STEP
        STEP += 1
        y = x * 2
        seen = _read_step()  # must see STEP already incremented
        STEP += 10
        return y * seen, seen

    check_breaks(fn, t(3), graphs=2, breaks=1, setup=_reset_globals, observe=_globals)


class _Mode:
    def __init__(self):
        self.mode = "train"
        self.scale = 1.0


@disable
def _describe(obj):
    return f"{obj.mode}:{obj.scale}"


def test_attribute_set_before_break_read_by_disabled_fn():
    def fn(x, state):
        state.mode = "eval"
        state.scale = 0.5
        y = x * state.scale
        desc = _describe(state)
        state.scale = 2.0
        return y * state.scale, desc

    check_breaks(fn, t(3), _Mode(), graphs=2, breaks=1, inputs_mutated=True)


def test_list_appended_then_printed():
    def fn(x, names):
        names.append("encoder")
        y = x.relu()
        names.append("decoder")
        print("modules so far:", names)  # must print both names
        names.append("head")
        return y + 1

    check_breaks(fn, t(3), ["embed"], graphs=2, breaks=1, inputs_mutated=True)


def test_dict_updated_then_printed():
    def fn(x, metrics):
        metrics["loss"] = 0.25
        metrics.update(acc=0.9, step=3)
        y = x.sigmoid()
        print("metrics:", sorted(metrics.items()))
        del metrics["step"]
        return y * 2

    check_breaks(fn, t(3), {"lr": 0.1, "step": 0}, graphs=2, breaks=1, inputs_mutated=True)


def test_global_list_order_of_effects_around_break():
    def fn(x):
        HISTORY.append("before")
        y = x * 2
        print("history at break:", HISTORY)
        HISTORY.append("after")
        HISTORY.extend(["tail1", "tail2"])
        return y + 1

    check_breaks(fn, t(3), graphs=2, breaks=1, setup=_reset_globals, observe=_globals)


def test_global_tensor_rebound_around_break():
    def fn(x):
        global RUNNING
        RUNNING = RUNNING * 0.9 + x * 0.1
        graph_break()
        RUNNING = RUNNING + 1
        return RUNNING * 2

    # dynamo: 1 graph (it runs the continuation, which rebinds the global, without a graph)
    check_breaks(fn, t(3), graphs=2, breaks=1, setup=_reset_globals, observe=_globals, dynamo_graphs=1,
                 dynamo_breaks=0)


def test_global_dict_registry_written_before_and_after():
    def fn(x, name):
        REGISTRY[name] = x.shape[0]
        y = x.cumsum(0)
        graph_break()
        REGISTRY[name + "_done"] = True
        return y * 2, len(REGISTRY)

    check_breaks(fn, t(4), "layer", graphs=2, breaks=1, setup=_reset_globals, observe=_globals)


def test_object_attributes_mutated_before_and_after_break():
    class Stats:
        def __init__(self):
            self.n = 0
            self.last = None
            self.seen = []

    def fn(x, stats):
        stats.n += 1
        stats.last = x.sum()
        stats.seen.append(stats.n)
        print("stats n", stats.n)
        stats.n += 1
        stats.last = stats.last * 2
        stats.seen.append(stats.n)
        return x * stats.n

    check_breaks(fn, t(3), Stats(), graphs=2, breaks=1, inputs_mutated=True)


def test_closure_cell_mutated_around_break():
    def make():
        calls = 0
        total = torch.zeros(3)

        def fn(x):
            nonlocal calls, total
            calls += 1
            total = total + x
            print("calls", calls)
            total = total * 2
            return total, calls

        def state():
            return calls, total

        def reset():
            nonlocal calls, total
            calls = 0
            total = torch.zeros(3)

        return fn, state, reset

    fn, state, reset = make()
    check_breaks(fn, t(3), graphs=2, breaks=1, setup=reset, observe=state)


def test_argument_list_mutations_around_break():
    def fn(x, buf):
        buf.append(x * 2)
        buf[0] = buf[0] + 1
        graph_break()
        buf.insert(0, x.neg())
        last = buf.pop()
        buf.extend([last, last])
        return len(buf)

    check_breaks(fn, t(3), [t(3, seed=1)], graphs=2, breaks=1, inputs_mutated=True)


def test_argument_dict_and_set_mutations_around_break():
    def fn(x, cache, seen):
        cache["a"] = x + 1
        seen.add("a")
        graph_break()
        cache["b"] = cache.pop("a") * 2
        seen.discard("old")
        seen.add("b")
        return cache["b"].sum()

    check_breaks(fn, t(3), {"old": t(2)}, {"old"}, graphs=2, breaks=1, inputs_mutated=True)


def test_new_object_stored_to_global_then_mutated_after_break():
    class Entry:
        def __init__(self, v):
            self.v = v
            self.tags = []

    def fn(x):
        e = Entry(x * 2)
        REGISTRY["entry"] = e
        graph_break()
        e.tags.append("seen")
        e.v = e.v + 1
        return REGISTRY["entry"].v, e.tags

    def observe():
        e = REGISTRY.get("entry")
        return None if e is None else (e.v, list(e.tags))

    # dynamo: 1 graph (as for the global tensor above, it runs the continuation without a graph)
    check_breaks(fn, t(3), graphs=2, breaks=1, setup=_reset_globals, observe=observe, dynamo_graphs=1,
                 dynamo_breaks=0)


def test_inplace_ops_on_input_across_break():
    def fn(x):
        x.add_(1)
        y = x * 2
        print("after add_")
        x.mul_(3)
        return y + x

    check_breaks(fn, t(4), graphs=2, breaks=1, inputs_mutated=True)


def test_inplace_on_view_of_input_across_break():
    def fn(x):
        x[0].zero_()
        graph_break()
        x[1:] *= 2
        return x.sum(0)

    check_breaks(fn, t(3, 2), graphs=2, breaks=1, inputs_mutated=True)


def test_inplace_seen_by_disabled_function():
    @disable
    def snapshot(v):
        return v.clone()

    def fn(x):
        x.mul_(2)
        s = snapshot(x)  # must see the doubled values
        x.sub_(1)
        return s, x

    check_breaks(fn, t(3), graphs=2, breaks=1, inputs_mutated=True)


class _TwoBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn1 = nn.BatchNorm1d(4)
        self.lin = nn.Linear(4, 4)
        self.bn2 = nn.BatchNorm1d(4)

    def forward(self, x):
        h = self.bn1(x)
        graph_break()
        return self.bn2(self.lin(h))


def test_batchnorm_running_stats_across_break():
    torch.manual_seed(0)
    check_breaks(_TwoBN(), t(6, 4), graphs=2, breaks=1, calls=3)


class _CountingModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.calls = 0
        self.last_norm = None

    def forward(self, x):
        self.calls += 1
        h = self.lin(x)
        print("call", self.calls)
        self.last_norm = h.detach().norm()
        self.calls += 1
        return h * self.calls


def test_module_attribute_counter_around_break():
    torch.manual_seed(0)
    model = _CountingModule()

    def fn(m, x):
        out = m(x)
        return out, m.calls, m.last_norm

    # m.calls is an int attribute that changes on every call: each call may recompile, so the case
    # runs one call (graphs: lin | h * calls; the resume function in fn after m(x) has no op).
    check_breaks(fn, model, t(2, 3), graphs=2, breaks=(1, 2), calls=1)


def test_side_effects_in_branch_taken_after_item():
    def fn(x, log):
        v = x.mean().item()
        if v > 0:
            log.append("pos")
            y = x * 2
        else:
            log.append("neg")
            y = x / 2
        graph_break()
        log.append(len(log))
        return y

    check_breaks(fn, arg_sets=[(t(3).abs(), []), (-t(3).abs(), ["x"])], graphs=(3, 4, 5), breaks=2,
                 dynamo_breaks=1, inputs_mutated=True)


SEEN_NAMES: set = set()


def test_global_set_mutations_without_break_are_replayed():
    def fn(x, name):
        SEEN_NAMES.add(name)
        SEEN_NAMES.discard("stale")
        SEEN_NAMES.update(["u1", "u2"])
        return x * len(SEEN_NAMES), name in SEEN_NAMES

    def setup():
        SEEN_NAMES.clear()
        SEEN_NAMES.add("stale")

    check_breaks(fn, t(3), "layer", graphs=1, breaks=0, setup=setup, observe=lambda: set(SEEN_NAMES))


def test_argument_set_added_to_and_returned_keeps_identity():
    def fn(x, seen):
        seen.add("x")
        graph_break()
        seen.remove("x")
        seen.add("y")
        return x + 1, seen

    check_breaks(fn, t(3), {"a"}, graphs=1, breaks=1, inputs_mutated=True,
                 post=lambda out: (out[0], sorted(out[1])))
    seen = {"a"}
    from .support import compile_fn, reset, CountingBackend

    reset()
    assert compile_fn(fn, CountingBackend())(t(3), seen)[1] is seen


def test_set_remove_of_missing_member_raises_as_in_eager():
    import pytest

    def fn(x, seen):
        seen.remove("missing")
        return x + 1

    from .support import compile_fn, reset, CountingBackend

    reset()
    seen = {"a"}
    with pytest.raises(KeyError):
        compile_fn(fn, CountingBackend())(t(3), seen)
    assert seen == {"a"}
