"""aot_eager on CUDA tensors (run on the GPU machine; skipped without a GPU)."""
import copy

import pytest
import torch
import torch.fx as fx

from kiln.backends.aot_eager import compile_aot_eager
from kiln.fake import FakeTensorMode

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_fakes_report_cuda_and_factories():
    mode = FakeTensorMode()
    x = mode.from_real(torch.randn(3, 4, device="cuda"))
    with mode:
        y = torch.zeros(4, device="cuda")
        z = x @ x.t() + y[:3]
        w = z.cpu()
    assert x.device.type == "cuda" and z.device.type == "cuda" and w.device.type == "cpu"


def test_cnn_batchnorm_train_on_cuda():
    from tests.aot.test_models import CNN, Block

    for model, x in ((CNN().train(), torch.randn(2, 3, 12, 12)), (Block().eval(), torch.randn(2, 5, 16))):
        eager = model.cuda()
        kiln_model = copy.deepcopy(eager)
        x = x.cuda()
        compiled = compile_aot_eager(fx.symbolic_trace(kiln_model), [x], fallback=False)
        torch.testing.assert_close(compiled(x), eager(x), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(kiln_model.state_dict(), eager.state_dict(), atol=1e-4, rtol=1e-4)


def test_sdpa_on_cuda_half():
    q = torch.randn(2, 2, 8, 16, device="cuda", dtype=torch.float16)
    gm = fx.symbolic_trace(lambda q: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True))
    compiled = compile_aot_eager(gm, [q], fallback=False)
    expected = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    torch.testing.assert_close(compiled(q), expected, atol=2e-3, rtol=2e-3)
