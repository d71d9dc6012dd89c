"""Evaluation-only check sets shaped like the issues' held-out ones, built from public sources.

Why: every shipped setting was chosen on a dev file, so a dev number is optimistic. These
builders turn public snapshots (sources, commits and checksums in agentmem/train/DATA.md,
"Evaluation-only checks") into bench files that share no question with the dev files, so a
shipped default can be measured once on data nothing was chosen on. They are **evaluation
data**: never train, calibrate or choose a setting on them (LoCoMo's licence is also
non-commercial: keep its file outside the repository).

- ``squad``: SQuAD 2.0 dev articles (raw JSON) that the shared ``prune/squad_dev.jsonl`` does
  not hold, every question, in the prune bench format.
- ``locomo``: LoCoMo conversations (the ``locomo10.zip`` of the LoCoMo repository) that the
  shared ``history/locomo_dev.json`` does not hold, in its sample layout.
- ``metatool``: MetaTool queries outside the shared dev sample (``metatool_dev_queries.jsonl``,
  by row id or text): a seeded draw of single-tool queries plus every two-tool query left, all
  tools offered, with the warm-up traffic the issue's protocol uses (the dev sample's queries
  that are not in ``metatool_dev.jsonl``).

``python -m agentmem.train.check_sets squad DEV_V2_JSON SQUAD_DEV_JSONL OUT`` /
``... locomo LOCOMO10_ZIP LOCOMO_DEV_JSON OUT`` /
``... metatool DATA_DIR SHARED_TOOLS_DIR OUT WARM_OUT [SINGLES SEED]`` (DATA_DIR holds
``all_clean_data.csv`` and ``multi_tool_query_golden.json``; 1,000 single-tool queries, seed
20261128 by default).
"""

from __future__ import annotations

import csv
import json
import random
import re
import sys
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from agentmem.train.dev_sets import read_rows, write_rows
from agentmem.train.pruner_mix import squad_json_records

LOCOMO_MEMBER = re.compile(r".*/locomo10_v2/(\d+)\.json")
LOCOMO_KEYS = re.compile(r"session_\d+(_date_time)?|speaker_[ab]")
METATOOL_SEED = 20261128


def squad(dev_json: Path, squad_dev: Path, out: Path) -> int:
    """Every question of the SQuAD dev articles whose title ``squad_dev`` does not hold."""
    seen = {row.get("title") for row in read_rows(squad_dev)}
    articles = json.loads(dev_json.read_text(encoding="utf-8"))["data"]
    unseen = [a for a in articles if a["title"].replace("_", " ") not in seen
              and a["title"] not in seen]
    records = squad_json_records(unseen)
    write_rows(out, records)
    return len(records)


def locomo(archive: Path, locomo_dev: Path, out: Path) -> int:
    """The archive's conversations that ``locomo_dev`` does not hold, as its samples are laid
    out (``qa`` and the sessions; the archive's per-session summaries and observations are
    left out, as the shared file leaves them out of ``conversation``)."""
    seen = {sample["sample_id"] for sample in json.loads(locomo_dev.read_text(encoding="utf-8"))}
    samples = []
    with zipfile.ZipFile(archive) as bundle:
        members = sorted((int(m.group(1)), name) for name in bundle.namelist()
                         if (m := LOCOMO_MEMBER.fullmatch(name)))
        for number, name in members:
            if f"conv-{number}" in seen:
                continue
            raw = json.loads(bundle.read(name))
            conversation = {k: v for k, v in raw.items() if LOCOMO_KEYS.fullmatch(k)}
            samples.append({"sample_id": f"conv-{number}", "qa": raw["qa"],
                            "conversation": conversation})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(samples), encoding="utf-8")
    return sum(len(s["qa"]) for s in samples)


def _normal(query: str) -> str:
    return " ".join(query.lower().split())


def _tool_name(name: str) -> str:
    """Tool names as the shared MetaTool files write them (shared/data/README.md)."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name)


def metatool(data_dir: Path, shared_tools: Path, out: Path, warm_out: Path, *,
             singles: int = 1000, seed: int = METATOOL_SEED) -> int:
    """``singles`` single-tool queries drawn from the CSV rows outside the dev sample (a query
    listed under two tools is left out, exact duplicates once), then every two-tool query
    outside it; each offers all the tools of ``metatool_tools.json``. ``warm_out``: the dev
    sample's queries that ``metatool_dev.jsonl`` does not hold (the issue's warm-up)."""
    sample = read_rows(shared_tools / "metatool_dev_queries.jsonl")
    tools = json.loads((shared_tools / "metatool_tools.json").read_text(encoding="utf-8"))
    names = {tool["function"]["name"] for tool in tools}
    taken_ids = {row["id"] for row in sample}
    taken_text = {_normal(row["query"]) for row in sample}
    with (data_dir / "all_clean_data.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    tools_of: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        tools_of[_normal(row["Query"])].add(row["Tool"])
    pool, used = [], set()
    for number, row in enumerate(rows):
        text = _normal(row["Query"])
        if (f"metatool-single-{number:05d}" in taken_ids or text in taken_text
                or len(tools_of[text]) > 1 or text in used):
            continue
        used.add(text)
        pool.append({"id": f"metatool-single-{number:05d}", "query": row["Query"],
                     "gold": [_tool_name(row["Tool"])]})
    golden = json.loads((data_dir / "multi_tool_query_golden.json").read_text(encoding="utf-8"))
    pairs = [{"id": f"metatool-multi-{number:03d}", "query": item["query"],
              "gold": [_tool_name(t) for t in item["tool"]]}
             for number, item in enumerate(golden)
             if f"metatool-multi-{number:03d}" not in taken_ids
             and _normal(item["query"]) not in taken_text]
    chosen = random.Random(seed).sample(pool, min(singles, len(pool))) + pairs
    unknown = {g for item in chosen for g in item["gold"]} - names
    if unknown:
        raise ValueError(f"gold tools missing from metatool_tools.json: {sorted(unknown)}")
    write_rows(out, [{"id": item["id"], "query": item["query"], "messages": None,
                        "tools": tools, "gold": item["gold"]} for item in chosen])
    write_rows(warm_out, [row for row in sample if not row["in_metatool_dev_jsonl"]])
    return len(chosen)


if __name__ == "__main__":
    kind, arguments = sys.argv[1], [Path(a) for a in sys.argv[2:6]]
    if kind == "squad":
        count = squad(*arguments[:3])
    elif kind == "locomo":
        count = locomo(*arguments[:3])
    elif kind == "metatool":
        given = [int(x) for x in sys.argv[6:8]]
        defaults = [1000, METATOOL_SEED]
        singles, seed = given + defaults[len(given):]
        count = metatool(*arguments[:4], singles=singles, seed=seed)
    else:
        raise SystemExit(f"unknown check set {kind!r}: squad, locomo or metatool")
    print(f"wrote {count} questions to {sys.argv[4]}")
