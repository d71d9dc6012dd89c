"""The model card written next to every checkpoint the project trains."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _extra_data(card: dict[str, Any]) -> str:
    """The broader mixture's sources (agentmem/train/DATA.md), when the run used them."""
    counts = card.get("counts") or {}
    lines = []
    if "squad_train_v2" in counts:
        lines.append(f"  - SQuAD 2.0 official train split, first 10 articles ({counts['squad_train_v2']} "
                     "examples; github.com/PhongNTDo/guide_train_MRC_transformers @ 631a448), CC BY-SA 4.0.")
    if "hotpotqa_train" in counts:
        lines.append(f"  - HotpotQA train questions with supporting-fact sentences, training slice "
                     f"({counts['hotpotqa_train']} passages with BM25-near distractors; "
                     "github.com/LightChen233/ECM @ aac9ae2), CC BY-SA 4.0.")
    if "musique_train" in counts:
        lines.append(f"  - MuSiQue train rows as long Wikipedia contexts ({counts['musique_train']}: "
                     "each hop's supporting paragraph among the row's retrieved distractors, the "
                     "sentences naming a hop's answer labelled; github.com/OSU-NLP-Group/HippoRAG "
                     "@ 3d95d25), CC BY 4.0.")
    if "multiparagraph" in counts:
        lines.append(f"  - Multi-paragraph passages of the SQuAD train articles above "
                     f"({counts['multiparagraph']}: a question's paragraph among 1-3 others of "
                     "its article, and same-article passages without it), CC BY-SA 4.0.")
    if "sgd_chat_qa" in counts:
        lines.append(f"  - Conversational QA passages from Schema-Guided Dialogue train files "
                     f"({counts['sgd_chat_qa']}: questions about earlier turns, with same-service "
                     "negatives; github.com/google-research-datasets/dstc8-schema-guided-dialogue "
                     "@ e852981, never the chat dev set's files), CC BY-SA 4.0.")
    if "synthetic_chat" in counts:
        lines.append(f"  - Synthetic dated chat sessions rendered from the above "
                     f"({counts['synthetic_chat']}).")
    if not lines:
        return ""
    return ("- Broader mixture (agentmem/train/DATA.md; counts after sampling: "
            f"{counts}):\n" + "\n".join(lines) + "\n")


def _calibration(card: dict[str, Any]) -> str:
    calibration = card.get("calibration")
    if not calibration:
        return ""
    rows = "\n".join(f"  - {name}: F1 {m['f1']:.3f}, kept sentences {m.get('kept_sentences', 0):.3f}, "
                     f"negative keep rate {m['negative_keep_rate']:.3f}"
                     for name, m in calibration["domains"].items())
    return (f"- Keep rule calibrated on {len(calibration['domains'])} dev file(s) (best mean F1): "
            f"rule `{calibration['rule']}`, threshold {calibration['threshold']}, token floor "
            f"{calibration['floor']}:\n{rows}\n")


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
  (Merity et al. 2016){", HotpotQA (Yang et al. 2018)" if "hotpotqa_train" in (card.get("counts") or {}) else ""}; share alike.
{_extra_data(card)}{_calibration(card)}- Initialised from: {card.get("init") or "the base encoder"}.
- Sentence rule, threshold, floor and least query cosine in config.json: rule `{dev['rule']}`,
  threshold {dev['threshold']}, floor {dev.get('floor', 0.0)} (at most {dev.get('floor_tokens')} tokens;
  None: no cap; bridge {dev.get('bridge', 0.0)}), min_similarity {dev.get('min_similarity')};
  fused score weights: cosine {dev.get('fuse_cosine', 0.0)}, BM25 {dev.get('fuse_lexical', 0.0)},
  margin {dev.get('margin')}, name bridge {dev.get('name_bridge', 0.0)} (all 0/None: the model's
  probabilities alone).
- Metrics on squad_dev (1139 records; FORMATS.md prune keys): F1 {dev['f1']:.3f},
  precision {dev['precision']:.3f}, recall {dev['recall']:.3f}, micro-F1 {dev['micro_f1']:.3f},
  negative keep rate {dev['negative_keep_rate']:.3f}, compression {dev['compression']:.3f}.
- Size: {size_mb:.1f} MB (fp16 safetensors; loaded as fp32).
- Layout: `bert.*` backbone, `pooler.dense`, `classifier` (rerank, 1 logit),
  `token_classifier` (keep/drop, 2 logits); `config.json` carries `agentmem_model_type`,
  `agentmem_sentence_rule`, `agentmem_threshold`, `agentmem_keep_floor`,
  `agentmem_keep_floor_tokens`, `agentmem_keep_bridge`, `agentmem_min_similarity`,
  `agentmem_fuse_cosine`, `agentmem_fuse_lexical`, `agentmem_keep_margin`,
  `agentmem_keep_name_bridge`.
"""
    (folder / "MODEL_CARD.md").write_text(text)
