"""The model card written next to every checkpoint the project trains."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_model_card(folder: Path, card: dict[str, Any], command: str) -> None:
    dev = card["dev"]
    size_mb = sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) / 1e6
    text = f"""# agentmem pruner ({folder.name})

A Provence-style sentence pruner and reranker (token keep/drop head + rerank head) on
{card['base']}, trained by agentmem.

- Command: `{command}`
- Seed: {card['seed']}; device: {card['device']}; wall time: {card['wall_time_s']} s
- Training: {card['examples']} examples, {card['epochs']} epochs, batch {card['batch_size']},
  lr {card['lr']}, max length {card['max_length']}, rank-loss weight {card['rank_weight']}
- Data (licenses allow shipping derived weights):
  - SQuAD 2.0 train articles (`prune/squad_train.jsonl`, `squad/train_articles.json`),
    CC BY-SA 4.0: answer sentences kept; cropped and widened passages; unanswerable
    questions and other articles' paragraphs as negatives; a quarter rendered as chat turns.
  - WikiText-2 raw (`wikitext2/wiki.test.raw`), CC BY-SA 3.0: self-supervised pairs (a
    sentence's content words as the query).
  Derived weights of CC BY-SA data: attribute SQuAD (Rajpurkar et al. 2018) and WikiText-2
  (Merity et al. 2016); share alike.
- Sentence rule and threshold chosen on `prune/squad_dev.jsonl`: rule `{dev['rule']}`,
  threshold {dev['threshold']}.
- Metrics on squad_dev (1139 records; FORMATS.md prune keys): F1 {dev['f1']:.3f},
  precision {dev['precision']:.3f}, recall {dev['recall']:.3f}, micro-F1 {dev['micro_f1']:.3f},
  negative keep rate {dev['negative_keep_rate']:.3f}, compression {dev['compression']:.3f}.
- Size: {size_mb:.1f} MB (fp16 safetensors; loaded as fp32).
- Layout: `bert.*` backbone, `pooler.dense`, `classifier` (rerank, 1 logit),
  `token_classifier` (keep/drop, 2 logits); `config.json` carries `agentmem_model_type`,
  `agentmem_sentence_rule`, `agentmem_threshold`.
"""
    (folder / "MODEL_CARD.md").write_text(text)
