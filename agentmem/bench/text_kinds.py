"""`agentmem bench text-kinds`: how often ``agentmem.text_kinds`` calls files what they are.

Files matching a glob (source files, configuration, licences, pages) are drawn with a seed and
each is classified; the bench reports the share called the expected kind and the misses, so
the classifier's accuracy can be read on any machine's files (README, Benchmarks "Stop 55").
"""

from __future__ import annotations

import glob
import random
from typing import Any

from agentmem.text_kinds import TextKind, text_kind

MIN_CHARACTERS = 400  # shorter files say little either way


def run_text_kinds(patterns: list[str], expect: TextKind, *, limit: int = 600,
                   seed: int = 0) -> dict[str, Any]:
    files = sorted({path for pattern in patterns for path in glob.glob(pattern, recursive=True)})
    random.Random(seed).shuffle(files)
    right, misses, read = 0, [], 0
    for path in files:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError):
            continue
        if len(text) < MIN_CHARACTERS:
            continue
        read += 1
        if text_kind.__wrapped__(text) == expect:
            right += 1
        else:
            misses.append(path)
        if read >= limit:
            break
    return {"patterns": patterns, "expect": expect, "n": read,
            "share_expected": right / read if read else 0.0, "misses": misses}
