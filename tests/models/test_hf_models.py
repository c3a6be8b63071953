"""HuggingFace BERT and GPT-2 (small configs, random weights) under kiln, against eager.

Graph counts and the reasons for the frames that ran eagerly are printed (-s) and reported in the
closing notes; the test asserts equal outputs and that kiln captured graphs at all.
"""
import pytest
import torch

import kiln

transformers = pytest.importorskip("transformers")


from tests.corpus.harness import CountingBackend as Counter  # records each graph, runs it as is


def _check(model, inputs):
    """Compile `model`, compare with eager on three calls, print graph counts and the reasons."""
    kiln.reset()
    model.eval()
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state
        report = kiln.explain(model, backend="eager")(**inputs)
        counter = Counter()
        compiled = kiln.compile(model, backend=counter)
        got = compiled(**inputs).last_hidden_state
        again = compiled(**inputs).last_hidden_state
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(again, expected)
    torch.testing.assert_close(report.result.last_hidden_state, expected)
    print(f"\n{type(model).__name__}: {report.graph_count} graphs, ops {report.ops_per_graph}, "
          f"{len(report.break_reasons)} frames eager")
    for reason in report.break_reasons:
        print("   ", reason)
    assert report.graph_count >= 1
    n_graphs = len(counter.graphs)
    with torch.no_grad():  # same grad mode as before: no guard fails
        compiled(**inputs)
    assert len(counter.graphs) == n_graphs, "a third call must hit the cache"
    return report


def test_bert_small():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64)
    model = transformers.BertModel(config)
    ids = torch.randint(0, 100, (2, 8))
    _check(model, dict(input_ids=ids, attention_mask=torch.ones(2, 8, dtype=torch.long)))


def test_gpt2_small():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    model = transformers.GPT2Model(config)
    _check(model, dict(input_ids=torch.randint(0, 100, (2, 8))))


def test_t5_small():
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                   decoder_start_token_id=0)
    model = transformers.T5Model(config)
    ids = torch.randint(0, 100, (2, 8))
    report = _check(model, dict(input_ids=ids, decoder_input_ids=ids[:, :5]))
    # get_text_config deep-copies the config and renames attributes with delattr/setattr on every forward
    assert report.graph_count == 1 and not report.break_reasons, report.break_reasons


def test_gpt2_training_loop_with_optimizer_and_logging():
    """A training-style loop: forward, loss, backward, optimizer step and a logging print of loss.item()."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    model = transformers.GPT2LMHeadModel(config)
    reference = transformers.GPT2LMHeadModel(config)
    reference.load_state_dict(model.state_dict())
    model.train(), reference.train()
    config.attn_pdrop = config.resid_pdrop = config.embd_pdrop = 0.0
    for m in (model, reference):
        for mod in m.modules():
            if isinstance(mod, torch.nn.Dropout):
                mod.p = 0.0
    optimizers = {id(model): torch.optim.AdamW(model.parameters(), lr=1e-3),
                  id(reference): torch.optim.AdamW(reference.parameters(), lr=1e-3)}

    def train_step(m, ids):
        opt = optimizers[id(m)]
        opt.zero_grad()
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        print(f"loss {loss.item():.4f}")
        return loss.detach()

    kiln.reset()
    counter = Counter()
    compiled_step = kiln.compile(train_step, backend=counter)
    ids = torch.randint(0, 100, (2, 8))
    for _ in range(3):
        torch.testing.assert_close(compiled_step(model, ids), train_step(reference, ids))
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, msg=name)
    report = kiln.explain(train_step, backend="eager")(model, ids)
    print(f"\ntraining step: {report.graph_count} graphs, {report.graph_break_count} breaks")
    for reason in report.break_reasons:
        print("   ", reason)
    assert len(counter.graphs) >= 1


def test_model_output_built_in_one_graph():
    """transformers' ModelOutput dataclasses (OrderedDict subclasses) are traced, not broken at."""
    from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions as Output

    def fn(x):
        out = Output(last_hidden_state=x * 2, attentions=(x,))
        out["hidden_states"] = (x + 1,)
        return out.last_hidden_state + out[0] + out["last_hidden_state"], out, out.to_tuple()

    x = torch.randn(2, 3)
    kiln.reset()
    counter = Counter()
    got = kiln.compile(fn, backend=counter, fullgraph=True)(x)
    want = fn(x)
    assert len(counter.graphs) == 1
    torch.testing.assert_close(got[0], want[0])
    assert type(got[1]) is Output and list(got[1].keys()) == list(want[1].keys())
    torch.testing.assert_close(got[2], want[2])
    torch.testing.assert_close(got[1].hidden_states, want[1].hidden_states)


def test_bert_fine_tuning_with_labels_is_one_graph_per_size_kind():
    """BertForSequenceClassification with labels: the first call sets ``config.problem_type`` (a strict
    dataclass field: huggingface_hub validates it through a dict keyed by types) and builds its loss
    module in forward; neither breaks the graph. Variable sequence lengths: a static graph, then one
    dynamic one (its softmax is SDPA's math path on CPU: ``_safe_softmax`` with symbolic sizes)."""
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)  # (dropout draws differ from eager's)
    model = transformers.BertForSequenceClassification(config)
    reference = transformers.BertForSequenceClassification(config)
    reference.load_state_dict(model.state_dict())
    kiln.reset()
    kiln.stats.reset()
    compiled = kiln.compile(model)
    for length in (12, 20, 17):
        ids, labels = torch.randint(0, 100, (2, length)), torch.randint(0, 2, (2,))
        mask = torch.ones(2, length, dtype=torch.long)
        got = compiled(input_ids=ids, attention_mask=mask, labels=labels)
        want = reference(input_ids=ids, attention_mask=mask, labels=labels)
        torch.testing.assert_close(got.loss, want.loss)
        torch.testing.assert_close(got.logits, want.logits)
        got.loss.backward()
        want.loss.backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    assert model.config.problem_type == "single_label_classification"
    assert not kiln.stats.graph_breaks, dict(kiln.stats.graph_breaks)
    assert kiln.stats.graphs == 2 and not kiln.stats.dynamic_fallbacks, (kiln.stats.graphs, dict(kiln.stats.dynamic_fallbacks))
