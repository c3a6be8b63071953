"""Attention kernels with dropout_p == 0 draw no random numbers: graphs with them are raced against
eager (kiln/backends/seeded_ops.py, used by choose_faster.ops_reason)."""
import torch
import torch.fx as fx
import torch.nn.functional as F

import kiln
from kiln.backends.choose_faster import TRIALS, ops_reason
from kiln.backends.seeded_ops import draws_random_numbers
from kiln.debug.stats import stats

aten = torch.ops.aten


def _node(target, *args, **kwargs):
    g = fx.Graph()
    xs = [g.placeholder(f"x{i}") for i in range(3)]
    return g.call_function(target, (*xs, *args), kwargs)


def test_attention_without_dropout_is_not_random():
    flash_cpu = aten._scaled_dot_product_flash_attention_for_cpu.default
    efficient = aten._scaled_dot_product_efficient_attention.default
    assert not draws_random_numbers(_node(flash_cpu))  # dropout_p defaults to 0.0
    assert not draws_random_numbers(_node(flash_cpu, 0.0, True))
    assert not draws_random_numbers(_node(flash_cpu, dropout_p=0.0))
    assert draws_random_numbers(_node(flash_cpu, 0.1))
    assert draws_random_numbers(_node(flash_cpu, dropout_p=0.5))
    assert not draws_random_numbers(_node(efficient, None, True, 0.0))
    assert draws_random_numbers(_node(efficient, None, True, 0.2))
    g = fx.Graph()
    x = g.placeholder("x")
    dropout = g.call_function(aten.native_dropout.default, (x, 0.0, True))  # no dropout_p: random as tagged
    assert draws_random_numbers(dropout) and ops_reason([dropout]) == "random ops"
    assert ops_reason([_node(flash_cpu, 0.0, True)]) is None


def test_inference_graph_with_cpu_flash_attention_is_raced():
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2

    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    stats.reset()
    g = kiln.compile(f, options={"choose_faster": True})
    with torch.no_grad():
        for _ in range(3 + 2 * TRIALS):
            torch.testing.assert_close(g(q, k, v), f(q, k, v))
    assert sum(stats.speed_choices.values()) == 1, stats.speed_choices
