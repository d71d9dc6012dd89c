"""`agentmem train pruner` (and the NLI model later)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

train_app = typer.Typer(help="Train the models agentmem ships.", no_args_is_help=True,
                        rich_markup_mode=None)

DEFAULT_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
# the resumable-run options both trainers take (agentmem.train.loop: save_state, resume_state)
WORK_OPTION = typer.Option(None, help="Folder for resumable training state (state.pt, written "
                           "every --save-every steps).")
RESUME_OPTION = typer.Option(False, help="Continue from --work/state.pt (same settings).")


@train_app.command()
def pruner(out: Path = typer.Option(Path("agentmem/models/checkpoints/pruner-minilm"),
                                    help="Checkpoint folder to write."),
           data: Path = typer.Option(DEFAULT_DATA, exists=True, file_okay=False,
                                     help="The shared data folder (prune/, squad/, wikitext2/)."),
           epochs: int = typer.Option(2), batch_size: int = typer.Option(16),
           lr: float = typer.Option(6e-5), max_length: int = typer.Option(320),
           seed: int = typer.Option(13), rank_weight: float = typer.Option(0.2),
           limit: Optional[int] = typer.Option(None, help="Use only the first N examples (smoke runs)."),
           base: Optional[str] = typer.Option(None, help="Backbone folder (default: MiniLM from PyPI)."),
           dev: list[Path] = typer.Option([], exists=True, dir_okay=False,
                                          help="Prune-format dev file per domain for calibrating "
                                          "the keep rule (repeat; default: prune/squad_dev.jsonl)."),
           extra: Optional[Path] = typer.Option(None, exists=True, file_okay=False,
                                                help="Folder of extra training sources "
                                                "(agentmem/train/DATA.md: squad_train_v2.json, "
                                                "hotpotqa_train_evidence.jsonl)."),
           squad_limit: Optional[int] = typer.Option(None, help="At most N questions of the "
                                                     "extra SQuAD train articles."),
           shared_limit: Optional[int] = typer.Option(None, help="With --extra: a random N of the "
                                                      "shared-data examples (default all)."),
           init: Optional[str] = typer.Option(None, help="Continue from this pruner checkpoint "
                                              "folder instead of a new head on --base."),
           multiparagraph: int = typer.Option(0, help="Add N questions of the SQuAD train "
                                              "articles as multi-paragraph passages (their "
                                              "paragraph among others of the article, and "
                                              "same-article passages without it)."),
           chat_qa: int = typer.Option(0, help="Add N conversational questions from the SGD train "
                                       "dialogues in --extra/sgd (questions about earlier turns; "
                                       "agentmem/train/pruner_chat.py)."),
           musique_draws: int = typer.Option(3, help="Passages per MuSiQue row in "
                                             "--extra/musique_train.json (other distractor "
                                             "paragraphs, other order each time)."),
           hotpot_draws: int = typer.Option(2, help="Passages per HotpotQA train row in "
                                            "--extra/hotpotqa_train_distractor.json (its ten "
                                            "paragraphs; later draws in another order), each "
                                            "trained in every model window."),
           exclude: list[Path] = typer.Option([], exists=True, dir_okay=False,
                                              help="Prune-format check file: HotpotQA train rows "
                                              "with its questions are skipped (repeat; the "
                                              "--dev files' questions are skipped too; the "
                                              "other sources are split by construction, "
                                              "agentmem/train/DATA.md)."),
           work: Optional[Path] = WORK_OPTION,
           save_every: int = typer.Option(100, help="Steps between saves of the training state."),
           resume: bool = RESUME_OPTION,
           threads: Optional[int] = typer.Option(None, help="CPU threads (default: all cores).")):
    """Train the Provence-style pruner on MiniLM (SQuAD train + WikiText-2, and with --extra the
    broader mixture; licenses allow shipping); resumable with --work/--resume."""
    from agentmem.train.model_card import write_model_card
    from agentmem.train.pruner import train_pruner

    command = "agentmem train pruner " + " ".join(shlex.quote(a) for a in sys.argv[3:])
    card = train_pruner(out, data_dir=data, base=base, epochs=epochs, batch_size=batch_size, lr=lr,
                        max_length=max_length, seed=seed, rank_weight=rank_weight, limit=limit,
                        dev_files=dev, extra=extra, squad_limit=squad_limit,
                        shared_limit=shared_limit, init=init, multiparagraph=multiparagraph,
                        chat_qa=chat_qa, musique_draws=musique_draws,
                        hotpot_draws=hotpot_draws, exclude=exclude, work=work,
                        save_every=save_every, resume=resume, threads=threads,
                        log=lambda line: typer.echo(line))
    write_model_card(out, card, command.strip())
    typer.echo(f"wrote {out} (dev F1 {card['dev']['f1']:.3f} at {card['dev']['rule']} "
               f"T={card['dev']['threshold']} floor={card['dev']['floor']})")


@train_app.command()
def calibrate(checkpoint: Path = typer.Option(Path("agentmem/models/checkpoints/pruner-minilm"),
                                              exists=True, file_okay=False,
                                              help="Pruner checkpoint folder."),
              dev: list[Path] = typer.Option(..., exists=True, dir_okay=False,
                                             help="A prune-format dev file per domain (repeat)."),
              write: bool = typer.Option(True, help="Store the chosen rule in config.json."),
              floors: Optional[str] = typer.Option(None, help="Floors to try, comma-separated "
                                                   "(default: agentmem.train.calibrate.FLOORS)."),
              min_similarities: Optional[str] = typer.Option(
                  None, help="Least query cosines to try, comma-separated, 'none' for no veto "
                  "(default: MIN_SIMILARITIES)."),
              floor_tokens: Optional[str] = typer.Option(
                  None, help="Caps on the floor's tokens to try, comma-separated, 'none' for no "
                  "cap (default: none only)."),
              bridges: Optional[str] = typer.Option(
                  None, help="Weights of the floor's bridge term to try, comma-separated "
                  "(default: 0 only)."),
              fuse_weights: Optional[str] = typer.Option(
                  None, help="Also search the fused rule (model + cosine + BM25): its "
                  "COSINE:BM25 weight pairs, comma-separated, e.g. 0.6:0.7,1.0:0.7 (default: "
                  "none, the fused family is not searched)."),
              margins: Optional[str] = typer.Option(
                  None, help="Fused rule: margins to the passage's best to try, 'none' for "
                  "none (default: MARGINS)."),
              fused_thresholds: Optional[str] = typer.Option(
                  None, help="Fused rule: thresholds on the fused score to try (default: "
                  "FUSED_THRESHOLDS)."),
              name_bridges: Optional[str] = typer.Option(
                  None, help="Fused rule: weights of the second hop's name link to try "
                  "(default: 0 only).")):
    """Choose the pruner's keep rule (sentence rule, threshold, token floor and its cap, least
    query cosine, and with --fuse-weights the fused rule's weights and margin) for the best
    mean F1 over the dev files, one per domain; the stage, the bench and /v1/highlight then
    use it."""
    import json

    from agentmem.models.pruner import cached_pruner
    from agentmem.train import calibrate as calibration

    def pair(text: str) -> tuple[float, float]:
        cosine, _, lexical = text.partition(":")
        return float(cosine), float(lexical or 0)

    def values(text: Optional[str], cast, default):
        if text is None:
            return default
        return [None if item.strip() == "none" else cast(item) for item in text.split(",")]

    result = calibration.calibrate(
        cached_pruner(str(checkpoint)), dev, log=lambda line: typer.echo(line),
        floors=values(floors, float, calibration.FLOORS),
        min_similarities=values(min_similarities, float, calibration.MIN_SIMILARITIES),
        floor_tokens=values(floor_tokens, int, calibration.FLOOR_TOKENS),
        bridges=values(bridges, float, calibration.BRIDGES),
        fuse_weights=[pair(item) for item in fuse_weights.split(",")] if fuse_weights else (),
        margins=values(margins, float, calibration.MARGINS),
        fused_thresholds=values(fused_thresholds, float, calibration.FUSED_THRESHOLDS),
        name_bridges=values(name_bridges, float, calibration.NAME_BRIDGES))
    if write:
        calibration.store(checkpoint, result)
    typer.echo(json.dumps(result, indent=2))


@train_app.command("average-nli")
def average_nli(first: Path = typer.Argument(..., exists=True, file_okay=False,
                                             help="NLI checkpoint the second was trained from."),
                second: Path = typer.Argument(..., exists=True, file_okay=False,
                                              help="NLI checkpoint written by `agentmem train nli`."),
                out: Path = typer.Option(..., help="Checkpoint folder to write."),
                weight: float = typer.Option(0.5, min=0.0, max=1.0, help="Weight of the second "
                                             "checkpoint (the first gets 1 - weight)."),
                data: Path = typer.Option(DEFAULT_DATA, exists=True, file_okay=False,
                                          help="The shared data folder (nli/), for the card's metrics."),
                notes: Optional[Path] = typer.Option(None, exists=True, dir_okay=False,
                                                     help="Markdown file added to the card's Notes.")):
    """Average two NLI checkpoints' weights (a model soup: the continued model's new skills with
    what it forgot of the old) and write the card: the second's training, this step, and the
    averaged model's held-out metrics."""
    import json

    from agentmem.models.nli import NLIModel
    from agentmem.train.average import average_checkpoints
    from agentmem.train.nli import held_out_metrics
    from agentmem.train.nli_card import write_nli_card

    command = "agentmem train average-nli " + " ".join(shlex.quote(a) for a in sys.argv[3:])
    card = json.loads((second / "training.json").read_text())
    card["averaged"] = average_checkpoints(first, second, out, weight)
    card["averaged"]["command"] = command.strip()
    model = NLIModel.load(str(out), max_length=card["max_length"])
    written = card.get("written")  # a path, or a list of them (several --written files)
    written_paths = [Path(w) for w in ([written] if isinstance(written, str) else written)] \
        if written else None
    small_talk = Path(card["small_talk"]) if card.get("small_talk") else None
    card["metrics"] = held_out_metrics(model, data, synthetic=1000 if card.get("synthetic") else 0,
                                       written=written_paths, small_talk=small_talk)
    (out / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    averaged = card["averaged"]
    text = (f"- Averaged weights (a model soup): `{command.strip()}` wrote {1 - weight:g} x the "
            f"first checkpoint (`{first}`, model.safetensors sha256 {averaged['first_sha256'][:16]}..., "
            f"the one the command above started from) + {weight:g} x the second (`{second}`, "
            f"sha256 {averaged['second_sha256'][:16]}..., written by the command above); the "
            "metrics are the averaged model's.")
    write_nli_card(out, card, card["command"], text + ("\n" + notes.read_text() if notes else ""))
    summary = ", ".join(f"{name} acc {m['accuracy']:.3f}" for name, m in card["metrics"].items())
    typer.echo(f"wrote {out} ({summary})")


@train_app.command()
def nli(out: Path = typer.Option(Path("agentmem/models/checkpoints/nli-minilm"),
                                 help="Checkpoint folder to write."),
        data: Path = typer.Option(DEFAULT_DATA, exists=True, file_okay=False,
                                  help="The shared data folder (nli/)."),
        epochs: int = typer.Option(2), batch_size: int = typer.Option(32),
        lr: float = typer.Option(5e-5), max_length: int = typer.Option(128),
        seed: int = typer.Option(13),
        swap_fraction: float = typer.Option(0.5, help="Share of pairs also trained premise/hypothesis "
                                            "swapped (contradiction is symmetric)."),
        dnli_max: Optional[int] = typer.Option(None, help="Cap on DNLI pairs (random sample)."),
        synthetic: int = typer.Option(0, help="Add N generated chat clash pairs (agentmem.train."
                                      "nli_synth: half contradictions, half hard negatives)."),
        init: Optional[str] = typer.Option(None, help="Warm-start from this NLI checkpoint folder "
                                           "(e.g. the shipped one) instead of a new head on --base."),
        written: Optional[list[Path]] = typer.Option(None, exists=True, dir_okay=False, help="Written "
                                                     "chat pairs (agentmem/train/data/chat_clash_"
                                                     "pairs_written*.jsonl; repeatable: read as one "
                                                     "file); 10% by hash are held out."),
        written_repeat: int = typer.Option(1, min=1, help="Times the written pairs are trained."),
        dialogue_pairs: Optional[Path] = typer.Option(None, exists=True, dir_okay=False, help="Consistent "
                                                      "same-speaker pairs of task dialogues (python -m "
                                                      "agentmem.train.sgd_pairs); 10% by hash held out."),
        dialogue_max: Optional[int] = typer.Option(None, help="Cap on --dialogue-pairs (random sample)."),
        chat_pairs: Optional[Path] = typer.Option(None, exists=True, dir_okay=False, help="Pairs of "
                                                  "written general-assistant chats (python -m "
                                                  "agentmem.train.chat_pairs); 10% by hash held out."),
        chat_max: Optional[int] = typer.Option(None, help="Cap on --chat-pairs' consistent pairs "
                                               "(random sample; every contradiction is kept)."),
        small_talk: Optional[Path] = typer.Option(None, exists=True, dir_okay=False, help="Written "
                                                  "small-talk pairs (agentmem/train/data/chat_clash_"
                                                  "pairs_small_talk.jsonl); 10% by hash held out."),
        small_talk_repeat: int = typer.Option(1, min=1, help="Times the small-talk pairs are "
                                              "trained (each with its swapped copy)."),
        init_anchor: float = typer.Option(0.0, min=0.0, help="With --init: L2 pull of the "
                                          "weights toward the warm start (L2-SP), this x the "
                                          "squared distance."),
        work: Optional[Path] = WORK_OPTION,
        save_every: int = typer.Option(200, help="Steps between saves of the training state."),
        resume: bool = RESUME_OPTION,
        notes: Optional[Path] = typer.Option(None, exists=True, dir_okay=False,
                                             help="Markdown file added to the card's Notes."),
        threads: Optional[int] = typer.Option(None, help="CPU threads (default: 2, or fewer cores)."),
        limit: Optional[int] = typer.Option(None, help="Use only the first N pairs (smoke runs)."),
        base: Optional[str] = typer.Option(None, help="Backbone folder (default: MiniLM from PyPI).")):
    """Train the 3-way NLI cross-encoder on MiniLM (DNLI, ProSeCCo, MultiNLI sample, SNLI dev,
    optional synthetic chat pairs); resumable with --work/--resume."""
    import json

    from agentmem.train.nli import train_nli
    from agentmem.train.nli_card import write_nli_card

    command = "agentmem train nli " + " ".join(shlex.quote(a) for a in sys.argv[3:])
    card = train_nli(out, data_dir=data, base=base, epochs=epochs, batch_size=batch_size, lr=lr,
                     max_length=max_length, seed=seed, swap_fraction=swap_fraction,
                     dnli_max=dnli_max, threads=threads, limit=limit, synthetic=synthetic,
                     init=init, work=work, save_every=save_every, resume=resume,
                     written=written or None, written_repeat=written_repeat,
                     dialogue_pairs=dialogue_pairs, dialogue_max=dialogue_max,
                     chat_pairs=chat_pairs, chat_max=chat_max,
                     small_talk=small_talk, small_talk_repeat=small_talk_repeat,
                     init_anchor=init_anchor, log=lambda line: typer.echo(line))
    card["command"] = command.strip()
    (out / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    write_nli_card(out, card, command.strip(), notes.read_text() if notes else "")
    summary = ", ".join(f"{name} acc {m['accuracy']:.3f}" for name, m in card["metrics"].items())
    typer.echo(f"wrote {out} ({summary})")
