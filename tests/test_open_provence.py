"""OpenProvence's layout, which Zilliz's semantic-highlight-bilingual-v1 uses: ``config.json``
with ``model_type: open_provence``, the backbone's config under ``base_model_config``,
``pruning_config``; state dict ``ranking_model.*`` (an XLM-R sequence classifier, as in
bge-reranker-v2-m3) + ``pruning_head.classifier.*``. A tiny random checkpoint is written in that
layout by plain transformers/torch modules (not agentmem's), loaded by agentmem by folder, and
run through ``score_batch`` and ``process()`` on English and Chinese text; every sentence's
probability and the rerank logit must equal what the independent modules compute on
``<s> query </s></s> sentences </s>``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from agentmem.models.highlighters import OpenProvenceHighlighter, ZillizHighlighter, load_scorer
from agentmem.models.pruner import cached_pruner
from tests.conversations import backup_log_conversation

WORDS = ["what", "is", "the", "capital", "of", "france", "paris", "it", "rained", "today",
         "bees", "like", "lavender", "did", "backup", "finish", "line", "nightly", "log", "says",
         "finished", "7", "Paris", "France", "Bees", "It", "Line", "Did", "What"]
HANZI = list(dict.fromkeys("中国的首都是哪里北京今天下雨了蜜蜂喜欢薰衣草。？"))


def _xlmr_tokenizer(folder: Path) -> None:
    """transformers' own XLM-R tokenizer class over a tiny unigram vocabulary: its real pair
    template (``<s> A </s></s> B </s>``) and ids (<s>=0, <pad>=1, </s>=2, <unk>=3)."""
    from transformers import XLMRobertaTokenizer

    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -1.0)]
    vocab += [(f"▁{w}", -2.0) for w in WORDS] + [(c, -2.0) for c in [*HANZI, ".", "?"]]
    XLMRobertaTokenizer(vocab=[*vocab, ("<mask>", 0.0)]).save_pretrained(str(folder))


def _write(folder: Path, legacy_keys: bool = False, threshold: float | None = 0.5,
           max_length: int = 512):
    """The checkpoint, and the independent modules that wrote it."""
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification

    _xlmr_tokenizer(folder)
    base = XLMRobertaConfig(vocab_size=80, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=514, pad_token_id=1,
                            bos_token_id=0, eos_token_id=2, type_vocab_size=1, num_labels=1)
    torch.manual_seed(11)
    ranking = XLMRobertaForSequenceClassification(base).eval()
    head = torch.nn.Linear(32, 2)
    with torch.no_grad():  # a head that separates tokens, so keep decisions differ by sentence
        head.weight.mul_(8.0)
    prefix = "" if legacy_keys else "ranking_model."
    state = {f"{prefix}{k}": v for k, v in ranking.state_dict().items()}
    state |= {f"pruning_head.classifier.{k}": v for k, v in head.state_dict().items()}
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    config = {"model_type": "open_provence", "architectures": ["OpenProvenceForSequenceClassification"],
              "auto_map": {"AutoModel": "modeling_open_provence_standalone."
                                        "OpenProvenceForSequenceClassification"},
              "mode": "reranking_pruning", "base_model_name_or_path": "BAAI/bge-reranker-v2-m3",
              "base_model_config": base.to_dict(), "encoder_architecture": "xlm-roberta",
              "pruning_config": {"hidden_size": 32, "num_labels": 2, "classifier_dropout": 0.1},
              "num_labels": 1, "num_pruning_labels": 2, "max_length": max_length}
    if threshold is not None:
        config["default_threadshold"] = threshold  # upstream's spelling
    (folder / "config.json").write_text(json.dumps(config))
    return ranking, head


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("open-provence")
    ranking, head = _write(folder)
    return folder, ranking, head


def _direct(folder: Path, ranking, head, query: str, sentences: list[str]):
    """Per-sentence mean keep probability and the rerank logit, from the writing modules."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    pieces = [tokenizer(s if i == 0 else " " + s, add_special_tokens=False)["input_ids"]
              for i, s in enumerate(sentences)]
    query_ids = tokenizer(query, add_special_tokens=False)["input_ids"]
    ids = [0, *query_ids, 2, 2, *[t for p in pieces for t in p], 2]
    with torch.no_grad():
        out = ranking(input_ids=torch.tensor([ids]), output_hidden_states=True)
        probs = torch.softmax(head(out.hidden_states[-1]), dim=-1)[0, :, 1].numpy()
    start, means = len(query_ids) + 3, []
    for p in pieces:
        means.append(float(probs[start:start + len(p)].mean()))
        start += len(p)
    return ids, means, float(out.logits[0, 0])


@pytest.mark.parametrize("query, sentences", [
    ("What is the capital of France?", ["Paris is the capital of France.", "Bees like lavender.",
                                         "It rained today."]),  # the query as given, not lowercased
    ("中国的首都是哪里？", ["北京是中国的首都。", "今天下雨了。", "蜜蜂喜欢薰衣草。"]),
])
def test_scores_equal_the_layouts_own_computation(checkpoint, query, sentences):
    folder, ranking, head = checkpoint
    scorer = load_scorer(folder)
    assert isinstance(scorer, OpenProvenceHighlighter) and ZillizHighlighter is OpenProvenceHighlighter
    assert (scorer.rule, scorer.threshold, scorer.max_length) == ("mean_prob", 0.5, 512)
    ids, means, logit = _direct(folder, ranking, head, query, sentences)
    [block] = scorer._blocks(query, sentences)
    assert block.input_ids == ids  # raw query, XLM-R's doubled separator
    assert 3 not in ids  # every word and character is in the vocabulary (no <unk>)
    [score] = scorer.score_batch([(query, sentences)])
    np.testing.assert_allclose(score.probabilities, means, rtol=1e-5, atol=1e-6)
    assert score.ranking_score == pytest.approx(logit, rel=1e-5, abs=1e-6)

    result = scorer.process(query, sentences, title=None)
    assert [row["text"] for row in result["sentences"]] == sentences
    np.testing.assert_allclose([row["probability"] for row in result["sentences"]], means,
                               rtol=1e-5, atol=1e-6)
    assert [row["kept"] for row in result["sentences"]] == [m > 0.5 for m in means]
    assert result["pruned_context"] == " ".join(s for s, m in zip(sentences, means) if m > 0.5)


def test_decisions_differ_by_sentence(checkpoint):
    """The random head is strong enough that the test can see a wrong sentence mapping."""
    folder, ranking, head = checkpoint
    means = [_direct(folder, ranking, head, q, s)[1] for q, s in [
        ("what is the capital of france?", ["Paris is the capital of France.", "Bees like lavender.",
                                             "It rained today."]),
        ("中国的首都是哪里？", ["北京是中国的首都。", "今天下雨了。", "蜜蜂喜欢薰衣草。"])]]
    assert max(np.ptp(m) for m in means) > 0.05


def test_older_exports_and_broken_folders(checkpoint, tmp_path):
    folder = checkpoint[0]
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    _write(legacy, legacy_keys=True, threshold=None)  # no ranking_model. prefix, no threshold
    scorer = load_scorer(legacy)
    assert isinstance(scorer, OpenProvenceHighlighter) and scorer.threshold == 0.1
    sentences = ["Paris is the capital of France.", "It rained today."]
    [a] = scorer.score_batch([("capital of france", sentences)])
    [b] = load_scorer(folder).score_batch([("capital of france", sentences)])
    np.testing.assert_allclose(a.probabilities, b.probabilities, rtol=1e-6)

    no_tokenizer = tmp_path / "no-tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_tokenizer / name).write_bytes((folder / name).read_bytes())
    with pytest.raises(ValueError, match="tokenizer"):
        load_scorer(no_tokenizer)

    wrong = tmp_path / "wrong-keys"
    wrong.mkdir()
    _write(wrong)
    from safetensors.torch import load_file

    state = load_file(str(wrong / "model.safetensors"))
    state["pruning_head.token_classifier.weight"] = state.pop("pruning_head.classifier.weight")
    save_file(state, str(wrong / "model.safetensors"))
    with pytest.raises(ValueError, match="OpenProvence layout"):
        load_scorer(wrong)

    config = json.loads((folder / "config.json").read_text())
    del config["base_model_config"]
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="base_model_config"):
        load_scorer(bare)


def test_long_contexts_run_in_blocks_within_the_window(tmp_path):
    """Sentences past ``max_length`` go to further blocks with the same query head; each block
    fits the window and scores as the writing modules score that block on its own."""
    ranking, head = _write(tmp_path, max_length=24)
    scorer = load_scorer(tmp_path)
    query = "did backup 7 finish?"
    sentences = [f"Line {i} of the nightly log says backup {i} finished." for i in (7, 7)]
    sentences += ["It rained.", "Bees like lavender today.", "It rained today."]
    for window in range(16, 48):  # no block ever passes the window, whatever the boundaries
        scorer.max_length = window
        assert all(len(b.input_ids) <= window for b in scorer._blocks(query, sentences)), window
    scorer.max_length = 24
    blocks = scorer._blocks(query, sentences)
    assert len(blocks) > 1
    [score] = scorer.score_batch([(query, sentences)], batch_size=2)  # padded batches too
    expected: list[list[float]] = [[] for _ in sentences]
    with torch.no_grad():
        for block in blocks:
            assert block.input_ids[:1] == [0] and block.input_ids[-1] == 2
            out = ranking(input_ids=torch.tensor([block.input_ids]), output_hidden_states=True)
            probs = torch.softmax(head(out.hidden_states[-1]), dim=-1)[0, :, 1].tolist()
            for prob, owner in zip(probs, block.owners):
                if owner >= 0:
                    expected[owner].append(prob)
    np.testing.assert_allclose(score.probabilities, [np.mean(e) for e in expected], rtol=1e-5)


def test_hub_names_need_the_network_switch(monkeypatch):
    monkeypatch.delenv("AGENTMEM_ALLOW_NETWORK", raising=False)
    with pytest.raises(FileNotFoundError, match="AGENTMEM_ALLOW_NETWORK"):
        load_scorer("zilliz/semantic-highlight-bilingual-v1")


def test_open_provence_backend_prunes_a_tool_output_through_the_proxy(
        client, received, session_id, policy_dir, checkpoint):
    folder = checkpoint[0]
    (policy_dir / "zilliz.yaml").write_text(
        f"name: zilliz\nstages: [prune]\nprune: {{checkpoint: '{folder}', "
        "large_tool_output_tokens: 20, threshold: 0.5}\n")
    output, messages = backup_log_conversation()
    assert isinstance(cached_pruner(str(folder)), OpenProvenceHighlighter)
    client.chat.completions.create(model="echo", messages=messages, extra_headers={
        "X-Session-Id": session_id, "X-Agentmem-Policy": "zilliz"})
    [body] = received.requests()
    sent = body["messages"][-1]["content"]
    assert body["messages"][:2] == messages[:2]
    assert set(sent.split(" ")) <= set(output.split(" "))  # only the output's own sentences
