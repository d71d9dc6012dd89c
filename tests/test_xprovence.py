"""XProvence's layout (naver/xprovence-reranker-bgem3-v1): an XLM-R backbone whose own pooler
(``roberta.pooler.dense``, tanh) feeds ``classifier``, plus ``token_classifier``. A tiny random
checkpoint is written in that layout by plain transformers/torch modules (not by agentmem's
model class), loaded by agentmem, and run through ``process()`` on French and Russian text; the
scores must equal the ones the independent modules compute."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from agentmem.models.provence import load_model
from agentmem.models.pruner import Pruner, normalise_query

WORDS = ["paris", "est", "la", "capitale", "de", "france", "il", "fait", "beau", "aujourd'hui",
         "quelle", "ville", "le", "fleuve", "москва", "столица", "россии", "какая", "погода",
         "хорошая", "сегодня", "город"]


def _xlmr_tokenizer(folder: Path) -> None:
    """A real (tiny) fast tokenizer with XLM-R's special tokens and ids (<s>=0, <pad>=1, </s>=2)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", *WORDS, ".", "?", ",", "'"])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", cls_token="<s>",
                                   eos_token="</s>", sep_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")
    fast.save_pretrained(str(folder))


@pytest.fixture(scope="module")
def xprovence(tmp_path_factory):
    """(folder, the independent modules that wrote it)."""
    from transformers import XLMRobertaConfig, XLMRobertaModel

    folder = tmp_path_factory.mktemp("xprovence")
    _xlmr_tokenizer(folder)
    config = XLMRobertaConfig(vocab_size=len(WORDS) + 8, hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=2, intermediate_size=64,
                              max_position_embeddings=514, pad_token_id=1, bos_token_id=0,
                              eos_token_id=2, type_vocab_size=1, num_labels=1)
    torch.manual_seed(7)
    roberta = XLMRobertaModel(config, add_pooling_layer=True).eval()
    classifier, token_classifier = torch.nn.Linear(32, 1), torch.nn.Linear(32, 2)
    state = {f"roberta.{k}": v for k, v in roberta.state_dict().items()}
    state |= {f"classifier.{k}": v for k, v in classifier.state_dict().items()}
    state |= {f"token_classifier.{k}": v for k, v in token_classifier.state_dict().items()}
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        **config.to_dict(), "model_type": "xlm-roberta",
        "architectures": ["XProvenceForSequenceClassification"],
        "auto_map": {"AutoModel": "modeling_xprovence_hf.XProvenceForSequenceClassification"}}))
    return folder, (roberta, classifier, token_classifier)


def test_xprovence_layout_loads_with_its_own_names(xprovence):
    folder, _ = xprovence
    model, _tokenizer, _config = load_model(folder)
    keys = set(model.state_dict())
    assert {"roberta.pooler.dense.weight", "roberta.embeddings.word_embeddings.weight",
            "classifier.weight", "token_classifier.weight"} <= keys
    assert model.pooler is None and not any(k.startswith("pooler.") for k in keys)


def test_xprovence_process_on_non_english_text_matches_the_reference_modules(xprovence):
    folder, (roberta, classifier, token_classifier) = xprovence
    pruner = Pruner.load(folder)
    question = "Quelle ville est la capitale de la France ?"
    context = "Paris est la capitale de la France. Il fait beau aujourd'hui. Le fleuve est beau."
    result = pruner.process(question, context, title=None, threshold=0.0, rule="mean_prob")
    assert result["pruned_context"] == context and result["compression_rate"] == 0.0
    rows = result["sentences"]
    assert [context[r["start"]:r["end"]] for r in rows] == [
        "Paris est la capitale de la France.", "Il fait beau aujourd'hui.", "Le fleuve est beau."]

    # the same input, scored by the modules that wrote the checkpoint: <s> q </s> s0 s1 s2 </s>
    tokenizer = pruner.tokenizer
    pieces = [tokenizer(normalise_query(question), add_special_tokens=False)["input_ids"]]
    sentence_ids = [tokenizer(s if i == 0 else " " + s, add_special_tokens=False)["input_ids"]
                    for i, s in enumerate(r["text"] for r in rows)]
    ids = [0, *pieces[0], 2, *[t for s in sentence_ids for t in s], 2]
    with torch.no_grad():
        out = roberta(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long))
        expected_rank = float(classifier(out.pooler_output)[0, 0])
        probs = torch.softmax(token_classifier(out.last_hidden_state), -1)[0, :, 1].numpy()
    start = len(pieces[0]) + 2
    expected = []
    for sentence in sentence_ids:
        expected.append(float(probs[start:start + len(sentence)].mean()))
        start += len(sentence)
    assert result["reranking_score"] == pytest.approx(expected_rank, abs=1e-5)
    assert np.allclose([r["probability"] for r in rows], expected, atol=1e-5)

    # Russian, pre-split, several questions: nested results, the keep rule decides
    russian = ["Москва столица России.", "Погода сегодня хорошая."]
    nested = pruner.process(["Какая столица России ?", "Какая погода ?"], [[russian], [russian]],
                            title=None, threshold=1.0, floor=0.5)
    assert [len(row) for row in nested["pruned_context"]] == [1, 1]
    for row in nested["sentences"]:  # threshold 1 keeps nothing; the floor keeps the best half
        kept = [s for s in row[0] if s["kept"]]
        assert len(kept) == 1 and kept[0]["probability"] == max(s["probability"] for s in row[0])
