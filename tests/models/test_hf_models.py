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
