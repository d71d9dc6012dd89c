"""The weighted average of two checkpoints of one model (a "model soup", Wortsman et al. 2022).

Why: a model continued on new data learns the new task and forgets some of the old. The NLI
backstop continued on written chat pairs went from F1 0.49 to 0.84 on their held-out share but
fell below the DECODE goal it had met (persona value swaps); the average of the continued
weights and the weights it started from kept most of both (README, Benchmarks "Stop 53"),
without another training run. Both checkpoints must share the architecture (the second is
usually trained from the first), so every tensor has a partner of the same shape.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from agentmem.models.export_onnx import sha256_of

WEIGHTS = "model.safetensors"
REGENERATED = frozenset({WEIGHTS, "MODEL_CARD.md", "training.json", "model.onnx", "onnx.json"})


def average_checkpoints(first: Path, second: Path, out: Path, weight: float) -> dict[str, Any]:
    """Write ``(1 - weight) x first + weight x second`` to ``out/model.safetensors`` (computed in
    float32, stored in the first's dtypes; integer tensors are the second's) with the second's
    other files (config, tokenizer); return what was averaged, for the model card."""
    import torch
    from safetensors.torch import load_file, save_file

    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight {weight} is not in [0, 1]")
    a, b = load_file(str(first / WEIGHTS)), load_file(str(second / WEIGHTS))
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        raise ValueError(f"{first} and {second} are not the same architecture")
    averaged = {k: ((1.0 - weight) * a[k].float() + weight * b[k].float()).to(a[k].dtype)
                if torch.is_floating_point(a[k]) else b[k] for k in a}
    out.mkdir(parents=True, exist_ok=True)
    for path in second.iterdir():
        if path.is_file() and path.name not in REGENERATED:
            shutil.copy2(path, out / path.name)
    save_file(averaged, str(out / WEIGHTS), metadata={"format": "pt"})
    return {"first": str(first), "first_sha256": sha256_of(first / WEIGHTS),
            "second": str(second), "second_sha256": sha256_of(second / WEIGHTS),
            "weight_of_second": weight}
