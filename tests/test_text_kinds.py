"""Machine text (code, diffs, logs, tables) is told from prose, and kept text keeps its layout."""

from __future__ import annotations

import difflib
import inspect

import pytest

import agentmem.stages.prune
import agentmem.structured
import agentmem.text
from agentmem.text import kept_text, split_sentences
from agentmem.text_kinds import reads_as_prose, text_kind

PAGE = """# The Normans

The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, a
region in France. They were descended from Norse raiders and pirates from Denmark, Iceland and
Norway who, under their leader Rollo, agreed to swear fealty to King Charles III of West Francia.

## Language

- The Norman dialect differed from the [language of Paris](https://example.org/paris) in many ways.
- Its speakers kept **a number of Norse words** for ships, fishing and the sea.

Through generations of assimilation and mixing with the native Frankish and Roman-Gaulish
populations, their descendants would gradually merge with the Carolingian-based cultures of
West Francia. The distinct cultural and ethnic identity of the Normans emerged initially in
the first half of the 10th century, and it continued to evolve over the succeeding centuries.
"""


@pytest.mark.parametrize("module", [agentmem.stages.prune, agentmem.structured, agentmem.text])
def test_source_files_are_machine_text_whatever_their_docstrings(module):
    source = inspect.getsource(module)
    assert text_kind(source) == "machine"
    numbered = "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(source.splitlines(), 1))
    assert text_kind(numbered) == "machine"  # as a file reader numbers its lines


def test_a_page_of_prose_is_prose_plain_wrapped_or_in_markdown():
    assert text_kind(PAGE) == "prose"
    assert text_kind(PAGE.replace("\n", " ")) == "prose"  # one line
    assert reads_as_prose("- Its speakers kept **a number of Norse words** for ships, fishing.")
    assert not reads_as_prose("result = self._prune(draft, context, step_start)  # the older turns")


def test_diffs_logs_and_tables_are_machine_text():
    edited = PAGE.replace("many ways", "spelling and sound")
    diff = "".join(difflib.unified_diff(PAGE.splitlines(True), edited.splitlines(True),
                                        "a/page.md", "b/page.md"))
    assert text_kind(diff) == "machine"  # a diff of prose is still a diff
    log = "\n".join(f"2026-12-02T10:00:{i:02d} INFO worker-{i % 4} processed batch {i} in {20 + i % 7} ms"
                    for i in range(40))
    assert text_kind(log) == "machine"
    rows = (f"{i},red mug {i},{i * 3},{4 + i / 10:.2f}" for i in range(30))
    table = "id,name,stock,price\n" + "\n".join(rows)
    assert text_kind(table) == "machine"
    assert text_kind("def f():\n    return 1\n") == "prose"  # too short to tell: the splitter keeps it whole


def test_long_text_on_a_line_or_two_is_read_by_its_words():
    """Minified code and one-line data used to count as prose (fewer than six lines), and the
    pruner cut them at every ". " it found; a page's text on one line is still prose."""
    minified = "".join(f"function f{i}(a,b){{var c=a.x{i}||b[{i}];return c?c.y({i}):null}};"
                       for i in range(40)) + "\n//# sourceMappingURL=app.min.js.map"
    assert len(minified) > 1_000 and text_kind(minified) == "machine"
    assert text_kind(";".join(f"{i},red mug {i},{i * 3}" for i in range(120))) == "machine"
    assert text_kind((PAGE * 2).replace("\n", " ")) == "prose"
    assert text_kind("f(a,b);" * 100) == "prose"  # short: too little to tell


def test_kept_text_keeps_each_sentence_with_the_whitespace_before_it():
    text = "First one. Second one.\n\nThird one. Fourth one.\n\nFifth one."
    spans = split_sentences(text)
    assert len(spans) == 5
    assert kept_text(text, spans, [True, False, True, True, False]) == "First one.\n\nThird one. Fourth one."
    assert kept_text(text, spans, [False, True, False, False, True]) == "Second one.\n\nFifth one."
    assert kept_text(text, spans, [True, True, False, False, False]) == "First one. Second one."
    lines = "def f():\n    x = 1\n    return x"  # spans of lines keep their indentation
    assert kept_text(lines, [(0, 8), (13, 18), (23, 31)], [True, False, True]) == "def f():\n    return x"
    assert kept_text("ab", [(0, 1), (1, 2)], [True, True]) == "a b"  # nothing between: a space


def test_cuts_in_machine_text_are_marked_where_lines_are_missing():
    source = ("import os\nimport sys\n\ndef f():\n    return 1\n\ndef g():\n    x = 2\n    return x\n"
              "\ndef h():\n    pass\n")
    spans = split_sentences(source)
    assert len(spans) == 4
    assert kept_text(source, spans, [True, False, True, False], mark_gaps=True) == (
        "import os\nimport sys\n[... 2 lines not sent ...]\n\ndef g():\n    x = 2\n    return x\n"
        "[... 2 lines not sent ...]")
    assert kept_text(source, spans, [False, True, True, True], mark_gaps=True).startswith(
        "[... 2 lines not sent ...]\n\ndef f():\n    return 1\n\ndef g():")
    assert kept_text(source, spans, [True, True, False, True], mark_gaps=True).endswith(
        "    return 1\n[... 3 lines not sent ...]\n\ndef h():\n    pass")
    assert kept_text(source, spans, [True] * 4, mark_gaps=True) == source.strip()
    assert kept_text(source, spans, [True, False, True, False]) == (  # prose: no marks
        "import os\nimport sys\n\ndef g():\n    x = 2\n    return x")
