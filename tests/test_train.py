"""`agentmem train pruner` end to end on a few examples: a loadable checkpoint and its card."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentmem.models.pruner import Pruner

# The training data lives in the workplace's shared/ folder beside the repository.
SHARED_DATA = Path(os.environ.get("AGENTMEM_SHARED_DATA",
                                  Path(__file__).resolve().parents[2] / "shared" / "data"))


def test_train_pruner_smoke(tmp_path):
    if not (SHARED_DATA / "prune" / "squad_train.jsonl").exists():
        if os.environ.get("CI"):
            pytest.fail(f"training data not found at {SHARED_DATA} (set AGENTMEM_SHARED_DATA)")
        pytest.skip(f"training data not found at {SHARED_DATA}")
    dev = tmp_path / "dev.jsonl"
    dev.write_text(json.dumps({"id": "d", "question": "Where is Paris?", "title": "Paris",
                               "sentences": ["Paris is in France.", "It is big."], "labels": [1, 0]}) + "\n")
    out = tmp_path / "ckpt"
    run = subprocess.run([sys.executable, "-m", "agentmem", "train", "pruner", "--out", str(out),
                          "--limit", "16", "--epochs", "1", "--batch-size", "8", "--max-length", "128",
                          "--dev", str(dev), "--data", str(SHARED_DATA)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    card = (out / "MODEL_CARD.md").read_text()
    assert "agentmem train pruner" in card and "Seed: 13" in card and "CC BY-SA" in card
    training = json.loads((out / "training.json").read_text())
    assert training["examples"] == 16 and training["wall_time_s"] > 0
    assert (out / "model.safetensors").stat().st_size < 50_000_000
    pruner = Pruner.load(out)
    assert pruner.rule in {"paper", "mean_prob"} and 0 < pruner.threshold < 1
    scores = pruner.score_batch([("where is paris", ["Paris is in France.", "It is big."])])[0]
    assert len(scores.probabilities) == 2
