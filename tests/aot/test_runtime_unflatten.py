"""The runtime's output rebuild (``aot.runtime.unflattener``): one tensor, flat tuples and lists built
directly, anything else through pytree, always the structure the graph returned."""
import collections

import torch
from torch.utils._pytree import tree_flatten

from kiln.aot.runtime import unflattener

Pair = collections.namedtuple("Pair", "a b")


def test_unflattener_rebuilds_every_structure():
    t = [torch.ones(1), torch.zeros(2), torch.full((3,), 2.0)]
    for value in (t[0], (t[0],), (t[0], t[1]), [t[0], t[1], t[2]], (t[0], [t[1]]), {"a": t[0], "b": t[1]},
                  Pair(t[0], t[1]), torch.return_types.max((t[0], t[1])), ()):
        leaves, spec = tree_flatten(value)
        rebuilt = unflattener(spec)(list(leaves))
        assert type(rebuilt) is type(value), (value, rebuilt)
        assert tree_flatten(rebuilt)[1] == spec
        assert all(a is b for a, b in zip(tree_flatten(rebuilt)[0], leaves))
