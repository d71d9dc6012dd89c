"""Averaging two checkpoints (`agentmem train average-nli`): the weighted mean of every float
tensor in the first's dtype, the second's other files, and no average of different models."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from agentmem.train.average import average_checkpoints


def _checkpoint(folder: Path, scale: float, shape: tuple[int, ...] = (2, 3), config: str = "{}") -> Path:
    folder.mkdir()
    save_file({"w": torch.full(shape, scale, dtype=torch.float16),
               "ids": torch.arange(3, dtype=torch.int64) * int(scale)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(config)
    (folder / "MODEL_CARD.md").write_text("old card")
    return folder


def test_the_weighted_mean_in_the_first_dtype_with_the_second_files(tmp_path: Path) -> None:
    first = _checkpoint(tmp_path / "a", 1.0, config='{"from": "a"}')
    second = _checkpoint(tmp_path / "b", 3.0, config='{"from": "b"}')
    record = average_checkpoints(first, second, tmp_path / "out", 0.75)
    out = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert out["w"].dtype == torch.float16 and torch.allclose(out["w"].float(), torch.full((2, 3), 2.5))
    assert out["ids"].tolist() == [0, 3, 6]  # integer tensors are not averaged: the second's
    assert (tmp_path / "out" / "config.json").read_text() == '{"from": "b"}'
    assert not (tmp_path / "out" / "MODEL_CARD.md").exists()  # the caller writes the new card
    assert record["weight_of_second"] == 0.75 and record["first_sha256"] != record["second_sha256"]


def test_different_architectures_are_refused(tmp_path: Path) -> None:
    first = _checkpoint(tmp_path / "a", 1.0)
    second = _checkpoint(tmp_path / "b", 1.0, shape=(3, 2))
    with pytest.raises(ValueError, match="not the same architecture"):
        average_checkpoints(first, second, tmp_path / "out", 0.5)
    with pytest.raises(ValueError, match="not in"):
        average_checkpoints(first, first, tmp_path / "out", 1.5)
