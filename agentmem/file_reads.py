"""Which tool outputs are files an agent read and may edit next: those go out as read.

A coding agent reads a README, then the user asks it to fix the install section. The read is
now in the recent window, and the pruner would cut it to the sentences about installing; the
agent's edit needs the exact text around them (an editing tool matches the old text
verbatim), and a file read by path is what the agent chose to see. Source code is machine
text and already goes out whole (``agentmem.text_kinds``); this covers prose files (Markdown,
reStructuredText, plain text, a licence, a changelog) the same way.

Two conditions, both read off the request, no model:

- the output answers a call that named a local file: an argument such as ``path``,
  ``file_path`` or ``filename`` holding a path that is not a URL (a page fetched by URL is a
  document to read, and stays pruned), or a shell command that prints a file (``cat``,
  ``head``, ``sed -n``, ...);
- the request offers a tool that edits files (``Edit``/``Write``, ``edit_file``,
  ``write_to_file``, ``str_replace_editor``, ``apply_patch``, ...): an agent that cannot edit
  files (a document question-answering agent reading a 50-page report by path) still gets the
  report pruned to what its question needs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from agentmem.messages import answered_tool_calls, call_arguments

# A tool whose name has one of these words and names a file (a file word in its name, a
# path among its parameters, or the verb alone: Claude Code's "Edit" and "Write") edits files.
EDIT_VERBS = frozenset(
    "edit write replace insert create modify overwrite rewrite append save update patch".split())
FILE_WORDS = frozenset(
    "file files code text document doc notebook source content contents cell".split())
STRONG_WORDS = frozenset({"patch", "editor"})  # apply_patch, str_replace_editor, text_editor
# Parameter names that hold a file's path (and lists of paths).
PATH_KEYS = frozenset(
    "path file_path filepath file filename file_name target_file relative_path absolute_path "
    "notebook_path target_path source_path".split())
PATH_LIST_KEYS = frozenset({"paths", "files", "file_paths", "filenames"})
COMMAND_KEYS = frozenset({"command", "cmd", "commands"})
MAX_PATH = 400

_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
# A shell command that prints a file: the program, its options, then the file.
_PRINTS_FILE = frozenset({"cat", "head", "tail", "sed", "nl", "less", "more", "bat", "type",
                          "get-content"})


def name_words(name: str) -> frozenset[str]:
    """A tool name's words: ``str_replace_editor`` -> str, replace, editor; ``MultiEdit`` ->
    multi, edit."""
    return frozenset(word.lower() for word in _WORD.findall(name))


def edits_files(tool: dict[str, Any]) -> bool:
    """Whether a tool definition (chat format) is one that writes or edits files."""
    function: dict[str, Any] = tool["function"] if isinstance(tool.get("function"), dict) else tool
    name = str(function.get("name") or "")
    words = name_words(name)
    if words & STRONG_WORDS:
        return True
    if not words & EDIT_VERBS:
        return False
    if words & FILE_WORDS or len(words) == 1:
        return True
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    return isinstance(properties, dict) and any(
        str(key).lower() in PATH_KEYS | PATH_LIST_KEYS for key in properties)


def offers_file_edits(tools: Iterable[dict[str, Any]] | None) -> bool:
    return any(isinstance(tool, dict) and edits_files(tool) for tool in tools or ())


def is_local_path(value: Any) -> bool:
    """A file's path: short text on one line that is not a URL (``file://`` is a path)."""
    if not isinstance(value, str):
        return False
    value = value.strip()
    return (0 < len(value) <= MAX_PATH and "\n" not in value
            and (not _URL.match(value) or value.lower().startswith("file://")))


def names_a_file(arguments: Any) -> bool:
    """Whether a call's arguments (text or JSON values) name a local file to read."""
    if isinstance(arguments, str):
        return _names_a_file(arguments)
    if not isinstance(arguments, dict):
        return False
    for key, value in arguments.items():
        key = str(key).lower()
        if key in PATH_KEYS and is_local_path(value):
            return True
        if key in PATH_LIST_KEYS and isinstance(value, list) and value \
                and all(is_local_path(v) for v in value):
            return True
        if key in COMMAND_KEYS and prints_a_file(value):
            return True
    return False


@lru_cache(maxsize=4096)
def _names_a_file(arguments: str) -> bool:
    """Cached: every call resends the session's earlier calls."""
    parsed = call_arguments(arguments)
    return not isinstance(parsed, str) and names_a_file(parsed)


def prints_a_file(command: Any) -> bool:
    """A shell command (text, or argv as a list) that prints a file: ``cat README.md``,
    ``sed -n 1,80p docs/setup.rst``; a login shell's ``bash -lc "..."`` is read through."""
    if isinstance(command, list):
        argv = [str(part) for part in command]
        if len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in {"bash", "sh", "zsh"} \
                and argv[1].startswith("-") and "c" in argv[1]:
            return prints_a_file(argv[2])
    elif isinstance(command, str):
        if "|" in command or "&&" in command or ";" in command or ">" in command:
            return False  # a pipeline's output is not the file
        try:
            argv = shlex.split(command)
        except ValueError:
            return False
    else:
        return False
    if not argv or argv[0].rsplit("/", 1)[-1].lower() not in _PRINTS_FILE:
        return False
    operands = [part for part in argv[1:] if not part.startswith("-")]
    return bool(operands) and is_local_path(operands[-1]) and not re.fullmatch(r"[\d,$p]+", operands[-1])


def file_read_answers(history: Sequence[dict[str, Any]]) -> set[int]:
    """The positions of tool messages that answer a call naming a local file to read."""
    return {answer for _, answer, function in answered_tool_calls(history)
            if names_a_file(function.get("arguments", ""))}
