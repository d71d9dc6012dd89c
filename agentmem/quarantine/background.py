"""Clash detection after the reply: the NLI work no call waits for.

Runs once per call, on the call's new turns (the reply included), after their embeddings are
stored. The next call applies whatever records this writes.
"""

from __future__ import annotations

from agentmem.models.runtime import run_inference
from agentmem.quarantine.clash import find_clashes
from agentmem.quarantine.records import QuarantineStore
from agentmem.quarantine.statements import statements_of
from agentmem.report import Report, StageRun
from agentmem.stages.base import StageContext
from agentmem.stages.corpus import corpus_for


async def detect_clashes_after(call, turns) -> int:
    """Find clashes of the new turns with earlier statements; returns records written."""
    from agentmem.quarantine.clash import load_nli
    from agentmem.stages.quarantine import clash_records

    policy, settings = call.policy, call.policy.quarantine
    history = list(call.history)
    chains = list(call.chains)
    for turn in sorted(turns, key=lambda t: t.position):
        if turn.position == len(history):  # the reply
            history.append(turn.message)
            chains.append(turn.chain)
    context = StageContext(policy, call.body.get("model", ""), history, call.handle,
                           Report(tenant=call.handle.tenant, session_id=call.handle.session_id,
                                  policy=policy.name), StageRun(stage="quarantine"), call.store,
                           stored_positions=len(history), chains=chains)
    corpus = await corpus_for(context, len(history))
    statements = statements_of(corpus, history, len(history), settings.untrusted_tools)
    new_positions = {turn.position for turn in turns}
    new_rows = [row for row in range(statements.size) if int(statements.position[row]) in new_positions]
    if not new_rows:
        return 0
    nli = await run_inference(load_nli, settings)
    clashes = await run_inference(find_clashes, statements, new_rows, nli, settings)
    if not clashes:
        return 0
    qstore = QuarantineStore(call.store)
    known = {record.key: record for record in await qstore.all(call.handle)}
    turn_ids = await context.turn_ids(len(history))
    fresh = clash_records(clashes, statements, turn_ids, known, settings, detector="nli")
    await qstore.add(call.handle, fresh, ttl=policy.ttl_seconds)
    return len(fresh)
