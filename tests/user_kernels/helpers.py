"""Compile-and-compare helpers: results and arguments equal to eager's, graphs and breaks counted."""
import torch

import kiln


def counts() -> tuple[int, int]:
    s = kiln.stats.snapshot()
    return s["graphs"], sum(s["graph_breaks"].values())


def check(fn, make_args, backend, graphs=1, breaks=0):
    """Run ``fn`` compiled and eagerly on equal arguments; compare results and arguments afterwards."""
    compiled_args, eager_args = make_args(), None
    eager_args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in compiled_args)
    before = counts()
    out = kiln.compile(fn, backend=backend)(*compiled_args)
    after = counts()
    ref = fn(*eager_args)
    torch.testing.assert_close(out, ref)
    for a, b in zip(compiled_args, eager_args):
        torch.testing.assert_close(a, b)
    got = (after[0] - before[0], after[1] - before[1])
    assert got == (graphs, breaks), (got, kiln.stats.snapshot()["graph_breaks"])
    return out


class CaptureBackend:
    """A backend that keeps the captured graphs and runs them as they are."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward
