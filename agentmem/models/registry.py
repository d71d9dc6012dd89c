"""Where the shipped checkpoints live, and which one a policy gets by default."""

from __future__ import annotations

from pathlib import Path

CHECKPOINTS = Path(__file__).parent / "checkpoints"


def default_pruner_path() -> str:
    return str(CHECKPOINTS / "pruner-minilm")


def default_nli_path() -> str:
    return str(CHECKPOINTS / "nli-minilm")
