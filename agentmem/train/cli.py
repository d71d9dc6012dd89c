"""`agentmem train pruner` (and the NLI model later)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

train_app = typer.Typer(help="Train the models agentmem ships.", no_args_is_help=True)

DEFAULT_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


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
           dev: Optional[Path] = typer.Option(None, help="Prune-format file for choosing thresholds "
                                              "(default: prune/squad_dev.jsonl).")):
    """Train the Provence-style pruner on MiniLM (SQuAD train + WikiText-2, licenses allow shipping)."""
    from agentmem.train.model_card import write_model_card
    from agentmem.train.pruner import train_pruner

    card = train_pruner(out, data_dir=data, base=base, epochs=epochs, batch_size=batch_size, lr=lr,
                        max_length=max_length, seed=seed, rank_weight=rank_weight, limit=limit,
                        dev_file=dev)
    command = "agentmem train pruner " + " ".join(shlex.quote(a) for a in sys.argv[3:])
    write_model_card(out, card, command.strip())
    typer.echo(f"wrote {out} (dev F1 {card['dev']['f1']:.3f} at {card['dev']['rule']} "
               f"T={card['dev']['threshold']})")


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
        work: Optional[Path] = typer.Option(None, help="Folder for resumable training state "
                                            "(state.pt, written every --save-every steps)."),
        save_every: int = typer.Option(200, help="Steps between saves of the training state."),
        resume: bool = typer.Option(False, help="Continue from --work/state.pt (same settings)."),
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
                     log=lambda line: typer.echo(line))
    card["command"] = command.strip()
    (out / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    write_nli_card(out, card, command.strip(), notes.read_text() if notes else "")
    summary = ", ".join(f"{name} acc {m['accuracy']:.3f}" for name, m in card["metrics"].items())
    typer.echo(f"wrote {out} ({summary})")
