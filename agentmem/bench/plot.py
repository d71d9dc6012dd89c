"""`agentmem bench plot`: evidence recall against token fraction from history results."""

from __future__ import annotations

import json
from pathlib import Path


def plot_history(results: list[Path], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = sorted((json.loads(p.read_text()) for p in results), key=lambda r: r["token_fraction"])
    x = [r["token_fraction"] for r in runs]
    figure, axes = plt.subplots(figsize=(6, 4), dpi=120)
    axes.plot(x, [r["evidence_recall"] for r in runs], "o-", label="agentmem pipeline")
    for name, style in (("embedding_topk", "s--"), ("recency", "^:")):
        axes.plot(x, [r["baselines"][name]["evidence_recall"] for r in runs], style,
                  label=f"{name} (same tokens)")
    for run in runs:
        axes.annotate(Path(str(run.get("policy", ""))).stem, (run["token_fraction"], run["evidence_recall"]),
                      fontsize=7, xytext=(4, -10), textcoords="offset points")
    axes.axhline(0.95, color="grey", linewidth=0.8)
    axes.axvline(0.20, color="grey", linewidth=0.8)
    axes.set_xlabel("token fraction sent")
    axes.set_ylabel("evidence recall")
    axes.set_title("LoCoMo evidence kept vs tokens sent")
    axes.set_ylim(0, 1.02)
    axes.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out)
