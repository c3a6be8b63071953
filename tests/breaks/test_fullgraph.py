"""fullgraph=True turns the first break into GraphBreakError naming the user's file:line (the line
of the break itself, also when it is inside an inlined helper) and no graph reaches the backend."""
import random

import pytest
import torch
import torch.nn as nn

from .support import USE_DYNAMO, check_fullgraph_error, disable, graph_break, t


def _not_on_dynamo(why):
    if USE_DYNAMO:
        pytest.skip(f"reference engine: {why}")


def test_fullgraph_print_names_line():
    def fn(x):
        y = x * 2
        print("no graph for me")  # BREAK:fg_print
        return y

    check_fullgraph_error(fn, t(3), marker="BREAK:fg_print")


def test_fullgraph_item_names_line():
    _not_on_dynamo("dynamo's fullgraph captures .item() as an unbacked scalar")
    def fn(x):
        y = x.sum()
        v = y.item()  # BREAK:fg_item
        return x * v

    check_fullgraph_error(fn, t(3), marker="BREAK:fg_item")


def test_fullgraph_data_dependent_if_names_line():
    def fn(x):
        if x.mean() > 0:  # BREAK:fg_if
            return x + 1
        return x - 1

    check_fullgraph_error(fn, t(3), marker="BREAK:fg_if")


def test_fullgraph_forced_graph_break_names_line():
    def fn(x):
        a = x.cos()
        graph_break()  # BREAK:fg_forced
        return a + 1

    check_fullgraph_error(fn, t(3), marker="BREAK:fg_forced")


@disable
def _eager_fn(y):
    return y + 1


def test_fullgraph_disabled_call_names_line():
    def fn(x):
        return _eager_fn(x * 2) * 3  # BREAK:fg_disabled

    check_fullgraph_error(fn, t(3), marker="BREAK:fg_disabled")


def _helper_with_print(y):
    y = y + 1
    print("helper")  # BREAK:fg_helper
    return y


def test_fullgraph_break_in_inlined_helper_names_helper_line():
    def fn(x):
        return _helper_with_print(x.exp()) * 2

    check_fullgraph_error(fn, t(3), marker="BREAK:fg_helper")


def test_fullgraph_first_of_several_breaks_is_named():
    _not_on_dynamo("dynamo's fullgraph captures int(tensor) as an unbacked scalar")
    def fn(x):
        y = x.abs()
        n = int(y.argmax())  # BREAK:fg_first
        print("second break")
        return y * n

    check_fullgraph_error(fn, t(4), marker="BREAK:fg_first")


class _ModuleWithBreak(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        h = self.lin(x)
        if random.random() > 2:  # BREAK:fg_module
            h = h * 0
        return h


def test_fullgraph_module_forward_names_line():
    _not_on_dynamo("dynamo traces random.random() (no break there); kiln breaks at it")
    torch.manual_seed(0)
    check_fullgraph_error(_ModuleWithBreak(), t(2, 3), marker="BREAK:fg_module")


def test_fullgraph_while_on_tensor_names_line():
    def fn(x):
        while x.sum() > 1:  # BREAK:fg_while
            x = x / 2
        return x

    check_fullgraph_error(fn, t(4).abs() + 1, marker="BREAK:fg_while")
