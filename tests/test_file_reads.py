"""Which calls read a file, and which tools edit files (agentmem/file_reads.py)."""

from __future__ import annotations

import json

import pytest

from agentmem.file_reads import edits_files, file_read_answers, names_a_file, offers_file_edits


def _tool(name: str, *parameters: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {p: {"type": "string"} for p in parameters}}}}


@pytest.mark.parametrize("tool", [
    _tool("Edit", "file_path", "old_string", "new_string"),  # Claude Code
    _tool("Write", "file_path", "content"),
    _tool("MultiEdit", "file_path", "edits"),
    _tool("NotebookEdit", "notebook_path", "new_source"),
    _tool("apply_patch", "input"),  # Codex
    _tool("str_replace_editor", "command", "path"),  # OpenHands, SWE-agent
    _tool("write_to_file", "path", "content"),  # Cline
    _tool("replace_in_file", "path", "diff"),
    _tool("edit_file", "target_file", "instructions"),  # Cursor
    _tool("create_new_file", "filepath", "contents"),  # Continue
    _tool("text_editor", "command", "path"),  # Goose
])
def test_tools_that_edit_files(tool):
    assert edits_files(tool)
    assert offers_file_edits([_tool("search_web", "query"), tool])


@pytest.mark.parametrize("tool", [
    _tool("update_calendar_event", "event_id", "start"),
    _tool("create_event", "title", "date"),
    _tool("write_email", "to", "body"),
    _tool("save_note", "title", "body"),
    _tool("read_file", "path"),
    _tool("Read", "file_path"),
    _tool("shell", "command"),
    _tool("get_weather", "city"),
])
def test_tools_that_do_not(tool):
    assert not edits_files(tool)


@pytest.mark.parametrize(("arguments", "reads"), [
    ({"path": "README.md"}, True),
    ({"file_path": "/repo/docs/setup.rst", "offset": 1, "limit": 200}, True),
    ({"command": "view", "path": "/workspace/CHANGELOG"}, True),
    ({"paths": ["a.md", "b.md"]}, True),
    ({"path": "file:///home/me/notes.txt"}, True),
    ({"command": "cat docs/install.md"}, True),
    ({"command": ["bash", "-lc", "sed -n 1,120p docs/install.md"]}, True),
    ({"cmd": "head -n 80 LICENSE"}, True),
    ({"url": "https://example.org/docs/install"}, False),
    ({"path": "https://example.org/docs/install"}, False),
    ({"command": "cat docs/install.md | grep pip"}, False),
    ({"command": "pytest -q tests/test_api.py"}, False),
    ({"command": "sed -n 1,120p"}, False),
    ({"query": "install steps"}, False),
    ({"path": ""}, False),
])
def test_calls_that_read_a_file(arguments, reads):
    assert names_a_file(json.dumps(arguments)) is reads
    assert names_a_file(arguments) is reads  # the same as JSON values (a Messages tool_use input)


def _calls(*calls: tuple[str, str, object]) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": name, "arguments": arguments}}
        for i, name, arguments in calls]}


def test_the_answers_to_file_reads_are_found_by_their_call():
    history = [
        {"role": "user", "content": "Fix the docs."},
        _calls(("a", "read_file", '{"path": "README.md"}'), ("b", "fetch", '{"url": "https://x.org"}')),
        {"role": "tool", "tool_call_id": "a", "content": "# Project"},
        {"role": "tool", "tool_call_id": "b", "content": "A page."},
        _calls(("c", "Read", {"file_path": "docs/a.md"})),  # arguments as JSON values
        {"role": "tool", "tool_call_id": "c", "content": "Docs."},
    ]
    assert file_read_answers(history) == {2, 5}
