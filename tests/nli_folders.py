"""The smallest shared-data folder the NLI training code reads (``build_training_set``,
``held_out_sets``, ``train_nli``), for tests that train or count on a handful of pairs."""

from __future__ import annotations

import json
from pathlib import Path


def nli_data_folder(folder: Path, dnli: list[str] | None = None) -> Path:
    """``folder`` holding ``nli/``: ``dnli`` (TSV lines; default one contradiction) as DNLI's
    training file, one DNLI, SNLI and ANLI pair as the held-out sets, the rest empty."""
    nli = folder / "nli"
    for sub in ("dnli", "prosecco", "snli", "anli/R1"):
        (nli / sub).mkdir(parents=True)
    lines = dnli or ["I own a cat.\tI own no pets.\tcontradiction\n"]
    (nli / "dnli" / "data.csv").write_text("".join(lines))
    (nli / "dnli" / "test_3_data.csv").write_text(lines[0] + lines[-1])
    (nli / "prosecco" / "ProSeCCo_final.json").write_text("")
    (nli / "prosecco" / "mnli_dev_matched_binary_42.csv").write_text("premise,hypothesis,label\n")
    (nli / "snli" / "snli_1.0_dev.jsonl").write_text("")
    (nli / "snli" / "snli_1.0_test.jsonl").write_text(json.dumps(
        {"gold_label": "contradiction", "sentence1": "A dog runs.", "sentence2": "No dog runs."}) + "\n")
    (nli / "anli" / "R1" / "dev.jsonl").write_text(json.dumps(
        {"context": "A dog runs.", "hypothesis": "No dog runs.", "label": "c"}) + "\n")
    return folder
