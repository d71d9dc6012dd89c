"""Scratch (Stop 68): is a candidate's DECODE dev F1 drop beyond resampling noise? Paired
bootstrap over the records of `agentmem bench clash` JSON files (their `records`), at 0.85."""
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).parent


def load(tag):
    return {r["id"]: r for r in json.loads((HERE / tag / "decode_dev.json").read_text())["records"]}


def f1(records, ids, threshold=0.85):
    tp = fp = fn = 0
    for i in ids:
        r = records[i]
        said = r["by"] == "rule" or (r["nli"] or 0) >= threshold
        tp += said and r["label"]
        fp += said and not r["label"]
        fn += not said and r["label"]
    return 2 * tp / (2 * tp + fp + fn)


base = load("shipped")
ids = sorted(base)
for tag in sys.argv[1:] or ["c4", "c4avg", "c7"]:
    other, rng = load(tag), random.Random(0)
    draws = ([rng.choice(ids) for _ in ids] for _ in range(2000))
    diffs = sorted(f1(other, s) - f1(base, s) for s in draws)
    below = sum(d < 0 for d in diffs) / 20
    print(f"{tag}: F1 {f1(other, ids):.3f} vs shipped {f1(base, ids):.3f}; paired difference 95% "
          f"[{diffs[50]:.3f}, {diffs[1950]:.3f}], below zero in {below:.1f}% of draws")
