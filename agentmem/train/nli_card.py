"""MODEL_CARD.md for the NLI checkpoint (the pruner's card format does not fit a classifier).

The card is generated from the training run's own record so that the command, counts and
numbers it states are the ones that produced the weights next to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_LICENSES = {
    "dnli": "DNLI `dnli/data.csv` (Ek et al. 2024), MIT",
    "prosecco": "ProSeCCo `prosecco/ProSeCCo_final.json` (Beyer et al.), CC BY-SA 4.0",
    "mnli": "MultiNLI dev-matched binary sample `prosecco/mnli_dev_matched_binary_42.csv` "
            "(Williams et al. 2018), OANC / CC BY(-SA) 3.0",
    "snli": "SNLI 1.0 dev subset `snli/snli_1.0_dev.jsonl` (Bowman et al. 2015), CC BY-SA 4.0",
}
_SYNTHETIC = {
    "synth": "Synthetic chat pairs from `agentmem/train/nli_synth.py` (templates and lexicons "
             "written for agentmem, Apache-2.0 like the package): value swaps, negations, antonyms, "
             "existence flips and profile facts as contradictions; announced updates, other "
             "people, hypotheticals, time-qualified, restatements, elaborations, questions and "
             "unrelated facts as hard negatives (restatements entailment, the rest not contradiction)",
    "written": "Chat pairs written for agentmem (`agentmem/train/data/chat_clash_pairs_written"
               ".jsonl`, DATA.md; Apache-2.0 like the package): one speaker's earlier and newer "
               "sentence, contradictions that need meaning or world knowledge and hard negatives "
               "(updates, other people, plans, elaborations, restatements), the newer side often a "
               "question presupposing the fact; 10% held out by hash",
    "sgd": "Consistent same-speaker pairs of Schema-Guided Dialogue **train** dialogues "
           "(google-research-datasets/dstc8-schema-guided-dialogue @ e852981, files 044, 051, 059, "
           "067; CC BY-SA 4.0, Rastogi et al. 2020), the pairs the clash cascade sends to NLI "
           "(`agentmem/train/sgd_pairs.py`): an assistant offering other options, a user "
           "thanking or declining, values of other entities",
    "written-swap": "their swapped copies (every kind but announced updates)",
    "general_chat": "Same-speaker pairs of chats with a general assistant written for agentmem "
                    "(`agentmem/train/data/general_chats_written.jsonl`, DATA.md; Apache-2.0 like "
                    "the package), the pairs the clash cascade sends to NLI "
                    "(`agentmem/train/chat_pairs.py`): steps, options, caveats and numbers of "
                    "different things as consistent, each chat's written self-contradiction as "
                    "contradiction; 10% held out by hash",
    "general_chat-swap": "their swapped copies",
    "small_talk": "Small-talk pairs written for agentmem (`agentmem/train/data/chat_clash_pairs_"
                  "small_talk.jsonl`, DATA.md; Apache-2.0 like the package): a speaker's own "
                  "facts, likes, abilities and life contradicted, mostly by presupposition, and "
                  "same-topic consistent pairs; 10% held out by hash",
    "small_talk-swap": "their swapped copies",
    "synth-perturbed": "Perturbed shippable sentences (`nli_synth.py`): DNLI `data.csv` hypotheses "
                       "(MIT) and SNLI dev `sentence2` (CC BY-SA 4.0) with an auxiliary negated "
                       "(contradiction) or the flipped sentence attributed to someone else, the "
                       "past, a question or a hypothetical (not contradiction)",
}


def _data_lines(counts: dict[str, dict[str, int]]) -> str:
    lines = []
    for source, text in _LICENSES.items():
        own = counts.get(source, {})
        swap = counts.get(source + "-swap", {})
        fmt = lambda c: ", ".join(f"{k} {v}" for k, v in c.items()) or "none"  # noqa: E731
        lines.append(f"  - {text}: {sum(own.values())} pairs ({fmt(own)}); "
                     f"swapped copies {sum(swap.values())} ({fmt(swap)})")
    fmt = lambda c: ", ".join(f"{k} {v}" for k, v in c.items()) or "none"  # noqa: E731
    for source, text in _SYNTHETIC.items():
        if counts.get(source):
            suffix = "" if source.startswith(("written", "general_chat", "small_talk")) \
                else "; not swapped"
            lines.append(f"  - {text}: {sum(counts[source].values())} pairs "
                         f"({fmt(counts[source])}){suffix}")
    return "\n".join(lines)


def _metric_rows(metrics: dict[str, dict[str, float]]) -> str:
    rows = ["| held-out set | n | accuracy | contradiction P | contradiction R | contradiction F1 |",
            "|---|---|---|---|---|---|"]
    for name, m in metrics.items():
        rows.append(f"| {name} | {m['n']} | {m['accuracy']:.3f} | {m['contradiction_precision']:.3f} "
                    f"| {m['contradiction_recall']:.3f} | {m['contradiction_f1']:.3f} |")
    return "\n".join(rows)


def _init_line(card: dict[str, Any]) -> str:
    if card.get("init"):
        return (f"the NLI checkpoint `{card['init']}` (warm start: its weights and head, "
                "trained further on the data below)")
    return "the base encoder with a new 3-way classification head"


def _resume_line(card: dict[str, Any]) -> str:
    if card.get("resumed_at_step"):
        return (f" The run was resumed from its saved state at step {card['resumed_at_step']} of "
                f"{card['steps']}; times add up the parts.")
    return ""


def _synth_metric_note(card: dict[str, Any]) -> str:
    if not any(name.startswith("synthetic") for name in card["metrics"]):
        return ""
    return (" `synthetic_chat (binary)` is generated with another seed from the same templates:"
            " it checks that the synthetic task was learnt, not that it generalises (contradiction"
            " vs not, argmax).")


def write_nli_card(folder: Path, card: dict[str, Any], command: str, notes: str = "") -> None:
    """Write ``folder/MODEL_CARD.md`` from the dict ``train_nli`` returned (+ free-text notes)."""
    size_mb = sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) / 1e6
    dnli_note = (f"; DNLI capped at a random {card['dnli_max']} of its 11,957 pairs to fit the CPU "
                 "budget" if card.get("dnli_max") else "")
    text = f"""# agentmem NLI cross-encoder ({folder.name})

A 3-way natural-language-inference classifier (contradiction / entailment / neutral) on
{card['base']} with a classification head{' (warm-started from an earlier agentmem checkpoint)' if card.get('init') else ''}, trained by agentmem. `config.id2label`:
0 contradiction, 1 entailment, 2 neutral. Load with `agentmem.models.nli.NLIModel.load()`.

- Command: `{command}`
- Seed: {card['seed']}; device: {card['device']} (torch threads: {card['torch_threads']});
  training time {card['train_time_s']} s, wall time with saving and evaluation {card['wall_time_s']} s.{_resume_line(card)}
- Initialised from: {_init_line(card)}
- Training: {card['examples']} pairs, {card['epochs']} epochs, batch {card['batch_size']} (grouped by
  length), AdamW lr {card['lr']} with linear warmup (10%) and decay, weight decay 0.01, max length
  {card['max_length']} (longest-first truncation).
- Data (licenses allow shipping derived weights; paths under the shared `data/nli/`){dnli_note}:
{_data_lines(card['counts'])}
- Binary sources (ProSeCCo, the MultiNLI sample) say only "contradiction" or "not": their
  negatives are trained with a loss on P(entailment) + P(neutral), i.e. they separate
  contradiction from the rest without choosing between entailment and neutral. Swapped
  copies (premise and hypothesis exchanged, {card['swap_fraction']:.0%} of the pairs, chosen at
  random) keep "contradiction" and turn every other label into "not contradiction", since only
  contradiction is symmetric.
- Derived weights of CC BY-SA data: attribute SNLI (Bowman et al. 2015), ProSeCCo and
  MultiNLI (Williams et al. 2018); share alike.

## Metrics (argmax label; the saved fp16 weights loaded in fp32)

{_metric_rows(card['metrics'])}

DNLI `test_3_data.csv` (3 previous turns as context) and the SNLI 1.0 test subset are held
out: nothing from them is trained on, and no threshold or setting was tuned on the ANLI
numbers.{_synth_metric_note(card)} ANLI R1 dev (CC BY-NC 4.0) is evaluation only: it never enters training. Chance on
the three 3-way sets is about 0.33.

## Intended use

Clash detection in agentmem: scoring (earlier statement, newer statement) pairs from one
conversation, so that a newer claim contradicting an earlier one can be quarantined or flagged.
`NLIModel.contradiction(pairs)` gives P(contradiction). Fast on CPU (6 layers, 384 wide).

## Limitations

- Small: trained on about {card['examples']} pairs on a 2-core CPU, far less than public NLI
  models (SNLI + MultiNLI are ~940k pairs). Expect errors on anything needing world knowledge,
  numbers or long reasoning; on ANLI, built to fool strong models, it is at or below chance.
- English only. Dialogue data is spoken British English (DNLI) and debate transcripts
  (ProSeCCo); written chat with an assistant differs.
- Inputs are cut to {card['max_length']} tokens; a clash in the cut part is not seen.
- Probabilities are not calibrated; choose the clash threshold on the clash benchmark.
- Size: {size_mb:.1f} MB (fp16 safetensors + tokenizer; computed in fp32).
""" + (f"\n## Notes\n\n{notes.strip()}\n" if notes.strip() else "")
    (folder / "MODEL_CARD.md").write_text(text)
