"""HF BERT and GPT-2 (tiny random configs, no downloads) under kiln.compile(backend="aot_eager")."""
import copy

import pytest
import torch

import kiln

transformers = pytest.importorskip("transformers")


def _aot_fallbacks():
    return {k: v for k, v in kiln.stats.eager_fallbacks.items() if k.startswith("aot_eager")}


@pytest.fixture(autouse=True)
def _fresh():
    kiln.reset()
    kiln.stats.reset()
    yield
    kiln.reset()


def _bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                      vocab_size=100, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0)
    return transformers.BertModel(config)


def _gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64,
                                     bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config)


def test_bert_inference_matches_eager():
    model = _bert().eval()
    ids = torch.randint(0, 100, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 7:] = 0
    compiled = kiln.compile(model, backend="aot_eager")
    got = compiled(input_ids=ids, attention_mask=mask)
    expected = model(input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.pooler_output, expected.pooler_output, atol=1e-5, rtol=1e-5)
    assert kiln.stats.graphs > 0 and not _aot_fallbacks()


def test_gpt2_inference_matches_eager():
    model = _gpt2().eval()
    ids = torch.randint(0, 100, (2, 12))
    compiled = kiln.compile(model, backend="aot_eager")
    got = compiled(input_ids=ids)
    torch.testing.assert_close(got.logits, model(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
    assert kiln.stats.graphs > 0 and not _aot_fallbacks()


def test_gpt2_training_gradients_match_eager():
    eager = _gpt2().train()
    model = copy.deepcopy(eager)
    ids = torch.randint(0, 100, (2, 8))
    compiled = kiln.compile(model, backend="aot_eager")
    compiled(input_ids=ids, labels=ids).loss.backward()
    eager(input_ids=ids, labels=ids).loss.backward()
    for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)
    assert not _aot_fallbacks()


def test_batchnorm_running_stats_through_kiln_compile():
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).train()
    model = copy.deepcopy(eager)
    compiled = kiln.compile(model, backend="aot_eager")
    for _ in range(2):
        x = torch.randn(2, 3, 8, 8)
        torch.testing.assert_close(compiled(x), eager(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model.state_dict(), eager.state_dict())
    assert model[1].num_batches_tracked.item() == 2
    assert not _aot_fallbacks()
