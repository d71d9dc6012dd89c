"""A complete stage in one file, as CONTRIBUTING.md describes: it masks e-mail addresses in
what the model is sent, has its own settings, and uses the after-reply hook."""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from agentmem.report import Action, Decision
from agentmem.stages import Draft, Stage, StageContext

EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")


class RedactSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mask: str = "[email]"


class RedactStage(Stage):
    name: ClassVar[str] = "redact"
    settings_model = RedactSettings
    runs_after = frozenset({"quarantine"})
    replies_seen: ClassVar[list[int]] = []  # after_reply calls, for the test to read

    async def apply(self, draft: Draft, context: StageContext) -> None:
        settings: RedactSettings = context.policy.settings_of(self.name)
        replacements = {}
        for kept in draft.messages:
            content = kept.message.get("content")
            if isinstance(content, str) and kept.role != "user" and EMAIL.search(content):
                replacements[kept.index] = {**kept.message, "content": EMAIL.sub(settings.mask, content)}
                context.run.decisions.append(Decision(
                    action=Action.PRUNE_SPANS, message_index=kept.index, position=kept.index,
                    reason="e-mail address masked"))
        draft.replace_messages(replacements)

    async def after_reply(self, context: StageContext, turns: list) -> None:
        type(self).replies_seen.append(len(turns))
