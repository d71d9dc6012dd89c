"""The evaluation-only check sets hold nothing of the dev files they stand beside."""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path

import pytest

from agentmem.train import check_sets


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _article(title: str, context: str, question: str, answer: str) -> dict:
    return {"title": title, "paragraphs": [{"context": context, "qas": [
        {"id": f"{title}-q", "question": question, "is_impossible": False,
         "answers": [{"text": answer, "answer_start": context.index(answer)}]}]}]}


def test_squad_keeps_only_articles_the_dev_file_lacks(tmp_path: Path) -> None:
    dev = {"data": [_article("Yuan_dynasty", "The Yuan ruled China. It fell in 1368.", "When?", "1368"),
                    _article("Steam_engine", "Steam engines burn coal. Watt improved them.",
                             "Who improved steam engines?", "Watt")]}
    (tmp_path / "dev.json").write_text(json.dumps(dev))
    (tmp_path / "squad_dev.jsonl").write_text(json.dumps(
        {"id": "x", "question": "When?", "title": "Yuan dynasty", "sentences": ["a"], "labels": [0]}) + "\n")
    count = check_sets.squad(tmp_path / "dev.json", tmp_path / "squad_dev.jsonl", tmp_path / "out.jsonl")
    [record] = _lines(tmp_path / "out.jsonl")
    assert count == 1 and record["title"] == "Steam engine"
    assert record["sentences"] == ["Steam engines burn coal.", "Watt improved them."]
    assert record["labels"] == [0, 1]


def test_locomo_skips_dev_conversations_and_their_summaries(tmp_path: Path) -> None:
    def conversation(speaker: str) -> dict:
        return {"speaker_a": speaker, "speaker_b": "Bo", "session_1_date_time": "1 May 2023",
                "session_1": [{"speaker": speaker, "dia_id": "D1:1", "text": "Hi"}],
                "session_1_summary": "they met", "events_session_1": [],
                "qa": [{"question": "Who?", "answer": speaker, "evidence": ["D1:1"], "category": 4}]}
    archive = tmp_path / "locomo10.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for number, speaker in ((26, "Ann"), (44, "Cy")):
            bundle.writestr(f"data/multimodal_dialog/locomo10_v2/{number}.json",
                            json.dumps(conversation(speaker)))
        bundle.writestr("data/multimodal_dialog/locomo10_v2/", "")
    (tmp_path / "dev.json").write_text(json.dumps([{"sample_id": "conv-26", "qa": [], "conversation": {}}]))
    assert check_sets.locomo(archive, tmp_path / "dev.json", tmp_path / "out.json") == 1
    [sample] = json.loads((tmp_path / "out.json").read_text())
    assert sample["sample_id"] == "conv-44" and sample["qa"][0]["answer"] == "Cy"
    assert sorted(sample["conversation"]) == ["session_1", "session_1_date_time", "speaker_a", "speaker_b"]


def _metatool_inputs(tmp_path: Path, tools: list[str]) -> tuple[Path, Path]:
    data, shared = tmp_path / "data", tmp_path / "shared"
    data.mkdir()
    shared.mkdir()
    rows = [("Find a paper", "ResearchHelper"),       # row 0: in the dev sample by id
            ("Track my parcel", "PackageTool"),        # row 1: in the dev sample by text
            ("Convert this PDF", "PDF&URLTool"),       # row 2: kept, name sanitised
            ("Convert this pdf", "PDF&URLTool"),       # row 3: a duplicate of row 2
            ("Weather in Oslo?", "WeatherTool"),       # rows 4-5: listed under two tools
            ("Weather in Oslo?", "NewsTool"),
            ("Latest headlines", "NewsTool")]          # row 6: kept
    with (data / "all_clean_data.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Query", "Tool"])
        writer.writerows(rows)
    (data / "multi_tool_query_golden.json").write_text(json.dumps([
        {"query": "News and weather", "tool": ["NewsTool", "WeatherTool"]},
        {"query": "Papers and PDFs", "tool": ["ResearchHelper", "PDF&URLTool"]}]))
    sample = [{"id": "metatool-single-00000", "query": "Find a paper", "gold": ["ResearchHelper"],
               "in_metatool_dev_jsonl": True},
              {"id": "metatool-single-00099", "query": "track my  parcel", "gold": ["PackageTool"],
               "in_metatool_dev_jsonl": False},
              {"id": "metatool-multi-000", "query": "News and weather",
               "gold": ["NewsTool", "WeatherTool"], "in_metatool_dev_jsonl": False}]
    (shared / "metatool_dev_queries.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sample))
    (shared / "metatool_tools.json").write_text(json.dumps(
        [{"type": "function", "function": {"name": name, "description": name}} for name in tools]))
    return data, shared


def test_metatool_draws_outside_the_dev_sample(tmp_path: Path) -> None:
    names = ["ResearchHelper", "PackageTool", "PDF_URLTool", "WeatherTool", "NewsTool"]
    data, shared = _metatool_inputs(tmp_path, names)
    count = check_sets.metatool(data, shared, tmp_path / "out.jsonl", tmp_path / "warm.jsonl")
    records = _lines(tmp_path / "out.jsonl")
    assert count == 3
    assert sorted((r["id"], tuple(r["gold"])) for r in records) == [
        ("metatool-multi-001", ("ResearchHelper", "PDF_URLTool")),
        ("metatool-single-00002", ("PDF_URLTool",)),
        ("metatool-single-00006", ("NewsTool",))]
    assert all(len(r["tools"]) == len(names) and r["messages"] is None for r in records)
    warm = [r["id"] for r in _lines(tmp_path / "warm.jsonl")]
    assert warm == ["metatool-single-00099", "metatool-multi-000"]
    # the draw is seeded: the same call gives the same file
    check_sets.metatool(data, shared, tmp_path / "again.jsonl", tmp_path / "warm2.jsonl", singles=1)
    check_sets.metatool(data, shared, tmp_path / "again2.jsonl", tmp_path / "warm3.jsonl", singles=1)
    assert (tmp_path / "again.jsonl").read_text() == (tmp_path / "again2.jsonl").read_text()
    assert len(_lines(tmp_path / "again.jsonl")) == 2


def test_metatool_refuses_gold_the_tool_list_lacks(tmp_path: Path) -> None:
    data, shared = _metatool_inputs(tmp_path, ["ResearchHelper", "NewsTool"])
    with pytest.raises(ValueError, match="PDF_URLTool"):
        check_sets.metatool(data, shared, tmp_path / "out.jsonl", tmp_path / "warm.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
