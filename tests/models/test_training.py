"""Training steps (forward, loss, backward, optimizer step) through kiln.compile's joint-graph path,
against eager: losses, gradients, updated parameters and buffers; dropout under the same seeds."""
import copy

import pytest
import torch

import kiln
from kiln.aot.training import TrainingRuntime
from kiln.backends.aot_eager import compile_aot_eager

from tests.models.test_small_models import MLP, ConvNet, TransformerBlock


class Recording:
    """Backend aot_eager, keeping every runtime it made."""

    def __init__(self):
        self.runtimes = []

    def __call__(self, gm, example_inputs):
        runtime = compile_aot_eager(gm, example_inputs)
        self.runtimes.append(runtime)
        return runtime

    @property
    def training(self):
        return [r for r in self.runtimes if isinstance(r, TrainingRuntime)]


def _step(model, opt, args, kwargs):
    opt.zero_grad()
    out = model(*args, **kwargs)
    loss = out.loss if hasattr(out, "loss") else out.float().square().mean()
    loss.backward()
    opt.step()
    return loss.detach()


def train_both(model, *args, steps=2, atol=1e-5, rtol=1e-4, **kwargs):
    """Run ``steps`` SGD-with-momentum steps eagerly and compiled; compare everything; return the backend."""
    kiln.reset()
    kiln.stats.reset()
    eager, mine = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    opt_k = torch.optim.SGD(mine.parameters(), lr=0.1, momentum=0.9)
    backend = Recording()
    compiled = kiln.compile(mine, backend=backend)
    for i in range(steps):
        torch.manual_seed(i)
        expected = _step(eager, opt_e, args, kwargs)
        torch.manual_seed(i)
        got = _step(compiled, opt_k, args, kwargs)
        torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
        for (name, p), q in zip(eager.named_parameters(), mine.parameters()):
            torch.testing.assert_close(q.grad, p.grad, atol=atol, rtol=rtol, msg=f"step {i} grad {name}")
    for (name, p), q in zip(eager.named_parameters(), mine.parameters()):
        torch.testing.assert_close(q, p, atol=atol, rtol=rtol, msg=name)
    for (name, b), c in zip(eager.named_buffers(), mine.buffers()):
        torch.testing.assert_close(c, b, atol=atol, rtol=rtol, msg=name)
    assert backend.training, "the joint-graph path was not used"
    assert not [k for k in kiln.stats.eager_fallbacks if k.startswith("aot_eager")]
    for runtime in backend.training:
        part, eager_saved = runtime.plan.partition, runtime.plan.joint.eager_saved
        assert part.saved_activation_bytes <= eager_saved.activation_bytes, runtime.plan.explain()
    kiln.reset()
    return backend


def test_mlp_with_dropout():
    backend = train_both(MLP(), torch.randn(8, 16))
    assert len(backend.training) == 1


def test_convnet_batchnorm():
    backend = train_both(ConvNet(), torch.randn(4, 3, 8, 8), atol=1e-4)
    assert backend.training[0].plan.joint.mutated_inputs  # running stats written back


def test_transformer_block():
    train_both(TransformerBlock(), torch.randn(2, 6, 32), atol=1e-4)


transformers = pytest.importorskip("transformers")


def test_bert_masked_lm_with_dropout():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64)
    ids = torch.randint(0, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    train_both(transformers.BertForMaskedLM(config), input_ids=ids, attention_mask=mask, labels=ids, atol=1e-4)


def test_gpt2_lm_with_dropout():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                     bos_token_id=0, eos_token_id=0)
    ids = torch.randint(0, 100, (2, 8))
    train_both(transformers.GPT2LMHeadModel(config), input_ids=ids, labels=ids, atol=1e-4)
