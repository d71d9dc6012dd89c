"""Scratch: a second read of a passage with the first hop in the query (not shipped code)."""
import pickle, sys, time
from dataclasses import replace
from pathlib import Path
import numpy as np
from agentmem.bench.formats import PruneRecord, read_jsonl
from agentmem.bench.prune import pruner_scores, sentence_embeddings, pruner_keeps, prune_metrics, lexical_scores, _inputs
from agentmem.models.embedder import default_embedder
from agentmem.models.pruner import cached_pruner
from agentmem.models.registry import pruner_path

name = sys.argv[1]
records = read_jsonl(Path(f"/work/hq/{name}_dev.jsonl") if not name.startswith("/") else Path(name), PruneRecord)
cache = Path(f"/work/hq/{Path(name).stem}.scores.pkl")
pruner = cached_pruner(pruner_path(None))
rule = pruner.keep_rule()
emb = default_embedder()
sims, vecs = sentence_embeddings(emb, records)
lex = lexical_scores(records)
if cache.exists():
    s1, s2, anchors = pickle.load(open(cache, "rb"))
else:
    t = time.time(); s1 = pruner_scores(pruner, records); print("pass1", time.time() - t, flush=True)
    anchors = []
    for r, sc, cs, lx in zip(records, s1, sims, lex):
        first = 1 if r.title else 0
        idx = list(range(first, len(sc.probabilities)))
        cos = [0.0] * first + list(map(float, cs)); bm = [0.0] * first + list(map(float, lx))
        _, fused, _ = rule.fused_keep(sc, idx, cos, bm, _inputs(r), r.question)
        anchors.append(max(idx, key=lambda i: fused[i]) - first)
    t = time.time()
    s2 = pruner.score_batch([(r.question + " " + r.sentences[a], _inputs(r)) for r, a in zip(records, anchors)], batch_size=32)
    print("pass2", time.time() - t, flush=True)
    pickle.dump((s1, s2, anchors), open(cache, "wb"))

def combined(w, mode):
    out = []
    for r, a, x, y in zip(records, anchors, s1, s2):
        first = 1 if r.title else 0
        p = list(x.probabilities)
        for i in range(len(p)):
            if i - first == a: continue
            if mode == "max": p[i] = max(p[i], w * y.probabilities[i])
            elif mode == "add": p[i] = p[i] + w * max(0.0, y.probabilities[i] - p[i])
        out.append(replace(x, probabilities=p))
    return out

def rprec(scores):
    vals = []
    for r, sc in zip(records, scores):
        if not any(r.labels): continue
        first = 1 if r.title else 0
        p = np.array(sc.probabilities[first:]); g = sum(r.labels)
        top = np.argsort(-p)[:g]; vals.append(sum(r.labels[i] for i in top) / g)
    return np.mean(vals)

print(name, "anchor is gold:", np.mean([r.labels[a] for r, a in zip(records, anchors) if any(r.labels)]))
for tag, sc in [("base", s1), ("max1", combined(1.0, "max")), ("max.8", combined(0.8, "max")), ("max.6", combined(0.6, "max")), ("add.5", combined(0.5, "add"))]:
    keeps = pruner_keeps(records, sc, rule, sims, vecs, lex)
    m = prune_metrics(records, keeps, rule.threshold)
    print(f"{tag:6s} F1 {m['f1']:.3f} P {m['precision']:.3f} R {m['recall']:.3f} rprec-model {rprec(sc):.3f}", flush=True)
