"""What the code at a break can change, and what is half-built when it runs: the continuation must
re-read globals, attributes, containers and tensors the unsupported code changed, and values still
on the Python stack (a partly evaluated expression, call arguments, a list or dict display) must
survive the break."""
import torch

from .support import CountingBackend, check_breaks, compile_fn, disable, reset, t

SCALE = 1.0
LOG: list = []


def _reset():
    global SCALE
    SCALE = 1.0
    LOG.clear()


def _state():
    return {"SCALE": SCALE, "LOG": list(LOG)}


@disable
def _set_scale(v):
    global SCALE
    SCALE = v


def test_global_rebound_by_disabled_fn_is_reread_after():
    def fn(x):
        y = x * SCALE
        _set_scale(3.0)
        return y + x * SCALE  # must use 3.0

    check_breaks(fn, t(3), graphs=2, breaks=1, setup=_reset, observe=_state)


class _Holder:
    def __init__(self):
        self.k = 2.0
        self.items = [1, 2]
        self.table = {"a": 1}


@disable
def _mutate_holder(h):
    h.k = 5.0
    h.items.append(3)
    h.table["b"] = 2


def test_attribute_and_containers_changed_by_disabled_fn_are_reread():
    def fn(x, h):
        y = x * h.k + len(h.items)
        _mutate_holder(h)
        return y + x * h.k + len(h.items) + len(h.table)

    check_breaks(fn, t(3), _Holder(), graphs=2, breaks=1, inputs_mutated=True)


@disable
def _zero_first(v):
    v[0] = 0.0


def test_tensor_mutated_in_place_by_disabled_fn_is_reread():
    def fn(x):
        y = x * 2
        _zero_first(x)
        return y + x  # x[0] is 0 now

    check_breaks(fn, t(4), graphs=2, breaks=1, inputs_mutated=True)


@disable
def _sort_in_place(names):
    names.sort()


def test_list_sorted_by_disabled_fn_then_indexed():
    def fn(x, names):
        names.append("alpha")
        y = x.relu()
        _sort_in_place(names)
        return y * len(names[0]), names[-1]

    check_breaks(fn, t(3), ["zeta", "mu"], graphs=2, breaks=1, inputs_mutated=True)


@disable
def _double(v):
    return v * 2


def test_partly_evaluated_expression_on_stack():
    def fn(x):
        return x.sum() + _double(x).mean() * x.max()

    # graphs: x.sum() (kept on the stack across the call) | mean * max + sum
    check_breaks(fn, t(5), graphs=2, breaks=1)


def test_break_in_call_arguments_with_keywords():
    def fn(x, y):
        a = x + 1
        return torch.lerp(a, end=_double(y), weight=0.25)

    check_breaks(fn, t(3), t(3, seed=1), graphs=2, breaks=1)


def test_break_inside_list_and_dict_displays():
    def fn(x):
        a = x.sin()
        parts = [a, _double(a), a.cos()]
        named = {"first": parts[0], "second": _double(parts[2]), "n": len(parts)}
        return torch.cat(parts), named

    check_breaks(fn, t(3), graphs=3, breaks=2)


def test_break_inside_fstring_and_method_chain():
    def fn(x):
        y = x.exp()
        label = f"{y.shape[0]}-{_double(y).sum().item():.3f}"
        return y.log().add(1).mul(2), len(label) > 0

    # graphs: exp | sum | log/add/mul. dynamo runs the last continuation without a graph (2 graphs).
    check_breaks(fn, t(3), graphs=3, breaks=2, dynamo_graphs=2, dynamo_breaks=1)


@disable
def _fail_if_negative(v):
    if (v < 0).any():
        raise ValueError("negative input")
    return v


def test_exception_from_code_at_break_propagates_after_side_effects():
    # Whatever ran before the break is applied (as in eager) before the exception leaves the
    # compiled function; nothing after the break runs.
    def fn(x, log):
        log.append("before")
        x.mul_(2)
        y = _fail_if_negative(x)
        log.append("after")
        return y + 1

    for inp in (t(3).abs(), -t(3).abs()):
        e_log, c_log = [], []
        e_x, c_x = inp.clone(), inp.clone()
        e_exc = c_exc = None
        try:
            e_out = fn(e_x, e_log)
        except ValueError as exc:
            e_exc, e_out = exc, None
        reset()
        compiled = compile_fn(fn, CountingBackend())
        try:
            c_out = compiled(c_x, c_log)
        except ValueError as exc:
            c_exc, c_out = exc, None
        assert type(c_exc) is type(e_exc) and str(c_exc) == str(e_exc)
        assert c_log == e_log
        torch.testing.assert_close(c_x, e_x)
        if e_out is not None:
            torch.testing.assert_close(c_out, e_out)


def _chatty_gen(x, n):
    for i in range(n):
        print("yield", i)
        yield x * (i + 1)


def test_user_generator_with_print_consumed_in_compiled_code():
    def fn(x):
        total = torch.zeros_like(x)
        for v in _chatty_gen(x, 3):
            total = total + v
        return total

    # dynamo: 0 graphs (it runs fn unsplit: the generator cannot be inlined, a break inside a loop)
    check_breaks(fn, t(3), graphs=(0, 1, 2, 3), breaks=(0, 1, 2, 3, 4), dynamo_graphs=0, dynamo_breaks=-1)


def test_alias_of_input_mutated_across_break():
    def fn(x):
        v = x[1:]
        v.add_(1)
        print("view updated")
        x.mul_(2)
        return v.sum() + x.sum()

    check_breaks(fn, t(4), graphs=2, breaks=1, inputs_mutated=True)


def test_tensor_stored_in_list_then_mutated_in_place_after_break():
    def fn(x, keep):
        y = x * 1
        keep.append(y)
        print("kept", len(keep))
        y.add_(10)  # the tensor in the list changes too
        return keep[-1] - x

    check_breaks(fn, t(3), [], graphs=2, breaks=1, inputs_mutated=True)
