"""Break reasons are for people: torch's C++ backtraces are not pasted into them."""
import torch

import kiln


def test_fake_tensor_failure_reason_has_no_cpp_backtrace():
    kiln.reset()
    kiln.stats.reset()

    def f(x):
        n = x.size(0)
        return x.reshape(-1)[: n * 2].view(n, 2)

    compiled = kiln.compile(f, backend="aot_eager", dynamic=True)
    for shape in [(2, 3), (1, 2)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x), f(x))
    reasons = list(kiln.stats.graph_breaks)
    assert reasons and all("Exception raised from" not in r and "frame #" not in r for r in reasons), reasons
