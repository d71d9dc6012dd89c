"""What a call did to a session, for people: ``agentmem inspect SESSION`` (rich, in a terminal).

The same view as the ``/ui`` page, built from the same stored records: the session's turns,
its per-call reports and its quarantine records. Nothing here recomputes a decision; it only
lays the recorded ones over the verbatim turns, so what you see is what the model was sent.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agentmem.messages import text_of
from agentmem.quarantine.records import QuarantineRecord
from agentmem.report import Action, Report
from agentmem.store import SessionHandle, SessionStore
from agentmem.store.sessions import TurnRecord

PRUNED, QUARANTINED, DROPPED = "strike dim", "strike red", "strike dim italic"
# Without a terminal (a pipe, a log file) styles vanish, so removed text is bracketed instead.
PLAIN_MARKS = {PRUNED: ("[-", "-]"), QUARANTINED: ("[q:", "]"), DROPPED: ("[dropped:", "]")}


@dataclass
class SessionView:
    handle: SessionHandle
    meta: dict[str, Any]
    turns: list[TurnRecord]
    reports: list[Report]  # oldest first
    records: list[QuarantineRecord]


@dataclass
class CallMarks:
    """One call's decisions, by position in the history it was sent."""

    removed: dict[int, list[tuple[int, int, str]]] = field(default_factory=dict)  # spans, style
    dropped: dict[int, str] = field(default_factory=dict)  # position -> reason
    tools_kept: list[str] = field(default_factory=list)
    tools_dropped: list[tuple[str, str]] = field(default_factory=list)  # name, reason


async def load_view(store: SessionStore, handle: SessionHandle, *, reports: int = 200) -> SessionView | None:
    """Everything the view needs, read once; None if the session does not exist."""
    from agentmem.quarantine import QuarantineStore

    meta = await store.meta(handle)
    if meta is None:
        return None
    return SessionView(handle, meta, await store.active_turns(handle),
                       await store.reports(handle, limit=reports),
                       await QuarantineStore(store).all(handle))


def marks_of(report: Report) -> CallMarks:
    marks = CallMarks()
    for run in report.stages:
        for d in run.decisions:
            position = d.message_index
            if d.action is Action.PRUNE_SPANS and position is not None:
                marks.removed.setdefault(position, []).extend(
                    (a, b, PRUNED) for a, b in d.spans or ([d.span] if d.span else []))
            elif d.action is Action.QUARANTINE and position is not None and d.span:
                marks.removed.setdefault(position, []).append((*d.span, QUARANTINED))
            elif d.action is Action.DROP_MESSAGE and position is not None:
                for index in d.detail.get("unit") or [position]:
                    marks.dropped.setdefault(index, f"{run.stage}: {d.reason}")
            elif d.action is Action.KEEP_TOOLS:
                marks.tools_kept = list(d.detail.get("kept") or [])
            elif d.action is Action.DROP_TOOL and d.tool:
                marks.tools_dropped.append((d.tool, d.reason))
    return marks


def marked_text(text: str, removed: list[tuple[int, int, str]], *, plain: bool = False) -> Text:
    """The verbatim text with removed spans struck through (bracketed when ``plain``)."""
    out, cursor = Text(), 0
    for start, end, style in sorted(removed):
        start = max(start, cursor)
        if start >= end:
            continue
        out.append(text[cursor:start])
        if plain:
            before, after = PLAIN_MARKS[style]
            out.append(before + text[start:end] + after, style=style)
        else:
            out.append(text[start:end], style=style)
        cursor = end
    out.append(text[cursor:])
    return out


def _when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp).isoformat(sep=" ", timespec="seconds")


def calls_table(view: SessionView) -> Table:
    table = Table("#", "report", "when", "policy", "status", "tokens before → after", "",
                  "tools", "hygiene ms", "decisions", title="Calls", title_justify="left")
    widest = max((r.tokens_before for r in view.reports), default=1) or 1
    for number, r in enumerate(view.reports, 1):
        bar = Text("█" * max(1, round(20 * r.tokens_after / widest)), style="green")
        bar.append("░" * max(0, round(20 * (r.tokens_before - r.tokens_after) / widest)), style="dim")
        decisions = ", ".join(f"{run.stage} {len(run.decisions)}" for run in r.stages if run.decisions)
        table.add_row(str(number), r.id[:10], _when(r.created_at), r.policy, r.status,
                      f"{r.tokens_before} → {r.tokens_after}", bar,
                      f"{r.tools_before} → {r.tools_after}",
                      f"{r.latency_ms.get('hygiene', 0):.1f}", decisions or "-")
    return table


def timeline(view: SessionView, report: Report | None, *, plain: bool = False) -> Table:
    """The turns the call was sent (all active turns when there is no report)."""
    marks = marks_of(report) if report else CallMarks()
    last = report.messages_before if report else len(view.turns)
    table = Table("pos", "role", "text", title="Timeline" + (f" (call {report.id[:10]})" if report else ""),
                  title_justify="left", show_lines=True, expand=True)
    for turn in view.turns:
        if turn.position >= last and not (report and turn.position == report.reply_position):
            continue
        text = text_of(turn.message)
        calls = [c.get("function", {}).get("name") for c in turn.message.get("tool_calls") or ()]
        if calls:
            text = (text + " " if text else "") + "→ " + ", ".join(filter(None, calls))
        if turn.position in marks.dropped:
            body = marked_text(text, [(0, len(text), DROPPED)], plain=plain)
            body.append(f"\n(dropped by {marks.dropped[turn.position]})", style="yellow")
        else:
            body = marked_text(text, marks.removed.get(turn.position, []), plain=plain)
        role = turn.source if turn.role == "tool" else turn.role
        if report and turn.position == report.reply_position:
            role += " (reply)"
        table.add_row(str(turn.position), role, body)
    return table


def records_table(view: SessionView) -> Table:
    table = Table("id", "kind", "status", "score", "detector", "source", "text", "reason",
                  title="Quarantine", title_justify="left")
    for r in view.records:
        style = {"active": "red", "released": "green", "confirmed": "cyan"}.get(r.status, "")
        table.add_row(r.id, r.kind, Text(r.status, style=style),
                      f"{r.score:.2f}" if r.score is not None else "", r.detector, r.source,
                      Text(r.text), Text(r.reason))
    return table


def tools_table(report: Report) -> Table | None:
    marks = marks_of(report)
    if not marks.tools_kept and not marks.tools_dropped:
        return None
    table = Table("tool", "", "reason", title=f"Tool loadout ({report.tools_after} of "
                  f"{report.tools_before} offered)", title_justify="left")
    for name in marks.tools_kept:
        table.add_row(name, Text("kept", style="green"), "")
    for name, reason in marks.tools_dropped:
        table.add_row(Text(name, style="dim"), Text("dropped", style="dim"), reason)
    return table


def pick_report(view: SessionView, call: str | None) -> Report | None:
    """``None``: the latest call; a number: the n-th call (1-based); else a report id prefix."""
    if not view.reports:
        return None
    if call is None:
        return view.reports[-1]
    if call.isdigit() and len(call) < 6:  # a call number (ids are longer), never an id prefix
        return view.reports[int(call) - 1] if 1 <= int(call) <= len(view.reports) else None
    return next((r for r in view.reports if r.id.startswith(call)), None)


def render(view: SessionView, report: Report | None, console: Console) -> None:
    meta = view.meta
    header = Text.assemble((view.handle.session_id, "bold"), f"  tenant {view.handle.tenant}  ",
                           f"turns {len(view.turns)}  calls {len(view.reports)}  ",
                           f"policy {meta.get('policy', '-')}  model {meta.get('model', '-')}")
    plain = not console.is_terminal or console.no_color
    parts: list[Any] = [header, calls_table(view), timeline(view, report, plain=plain)]
    if report is not None and (tools := tools_table(report)) is not None:
        parts.append(tools)
    if view.records:
        parts.append(records_table(view))
    console.print(Panel(Group(*parts), title="agentmem inspect", border_style="blue"))
