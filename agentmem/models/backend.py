"""Which runtime the models run on: torch, or ONNX Runtime. The one place that decides.

Why two: torch (with transformers and sentence-transformers) is ~1 GB of install and 3-4 s of
import, and serving three small MiniLM models needs none of it. ``pip install
agentmem-hygiene`` installs ONNX Runtime and the ``tokenizers`` library and runs the ONNX
files shipped next to the checkpoints; the ``[torch]`` extra (included in ``[dev]``) adds the
torch path, which training, ONNX export and the parity tests need.

The setting: ``model_runtime`` in the server's YAML settings, else the environment variable
``AGENTMEM_MODEL_RUNTIME``; each is ``auto`` (the default: a model with an ONNX export, as
every shipped one has, runs on ONNX Runtime; others on torch when it is installed; see
``runtime_for``), ``torch`` or ``onnx``. The choice is process-wide, like the loaded models it governs,
and read when a model loads: set it before the first load (``Hygiene`` and the server set it
from their settings when those name one); models already loaded keep the runtime they were
loaded with.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Literal, cast

from agentmem.errors import PolicyError

Runtime = Literal["torch", "onnx"]
Choice = Literal["auto", "torch", "onnx"]
CHOICES: tuple[str, ...] = ("auto", "torch", "onnx")
ENV = "AGENTMEM_MODEL_RUNTIME"

_configured: Choice | None = None


def configure(choice: str | None) -> None:
    """The server's setting (None or "auto": the environment variable, else auto)."""
    global _configured
    _configured = _check(choice) if choice else None


def _check(choice: str) -> Choice:
    value = choice.strip().lower()
    if value not in CHOICES:
        raise PolicyError(f"model runtime {choice!r}: use one of {', '.join(CHOICES)}")
    return cast(Choice, value)


def torch_available() -> bool:
    """torch and transformers importable (found without importing them: import costs seconds)."""
    try:
        return all(importlib.util.find_spec(name) is not None
                   for name in ("torch", "transformers", "sentence_transformers"))
    except (ImportError, ValueError):  # an import hook refusing it; a broken half-install
        return False


def runtime() -> Runtime:
    """The runtime models load on now (see the module docstring for the order of settings)."""
    choice: Choice = _configured or _check(os.environ.get(ENV) or "auto")
    if choice == "auto":
        return "torch" if torch_available() else "onnx"
    if choice == "torch" and not torch_available():
        raise RuntimeError("model runtime 'torch' was asked for but torch, transformers or "
                           "sentence-transformers is not installed: install agentmem-hygiene[torch], "
                           "or use model_runtime: onnx")
    return choice


def runtime_for(folder: str | os.PathLike[str] | None) -> Runtime:
    """The runtime one model loads on. A runtime named in the settings decides. Under
    ``auto``, a model with an ONNX export next to it (the shipped checkpoints; ``None`` is
    the shipped embedder) runs on ONNX Runtime even when torch is installed: on this 2-core
    CPU it embeds a query in 6.6 ms instead of 13-22 ms and loads in 0.3 s instead of 5 s,
    with the same decisions (parity tests). Any other model (a hub name, a folder without
    ``model.onnx``) runs on torch when it is installed. A model that exists only as ONNX (the
    int8 NLI screen: no torch weights to load) runs on ONNX Runtime whatever the setting."""
    if folder is not None and onnx_only(folder):
        return "onnx"
    choice: Choice = _configured or _check(os.environ.get(ENV) or "auto")
    if choice != "auto":
        return runtime()
    exported = folder is None or (Path(folder) / "model.onnx").is_file()
    if exported and importlib.util.find_spec("onnxruntime") is not None:
        return "onnx"
    return "torch" if torch_available() else "onnx"


def threads() -> int:
    """Threads per inference (``AGENTMEM_TORCH_THREADS``, default 1): one inference per core,
    one thread each, does best on a small machine (see agentmem.models.runtime)."""
    return int(os.environ.get("AGENTMEM_TORCH_THREADS", "1"))


def onnx_only(folder: str | os.PathLike[str]) -> bool:
    """An exported model with no torch weights of its own (its record names weights elsewhere)."""
    path = Path(folder)
    return (path / "model.onnx").is_file() and (path / "onnx.json").is_file() \
        and not (path / "model.safetensors").is_file() and (path / "config.json").is_file()
