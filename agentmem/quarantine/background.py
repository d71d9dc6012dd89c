"""Detection after the reply: the work no call waits for.

Runs once per call, on the call's new turns (the reply included), after their embeddings are
stored: clashes of the new statements (NLI) and recurring unsupported claims (poison) over
the session. The next call applies whatever records this writes. In the usual flow the
reply is the only new assistant turn, so the call path has no poison work left to do.
"""

from __future__ import annotations

from agentmem.models.runtime import run_inference
from agentmem.quarantine.clash import find_clashes
from agentmem.quarantine.records import QuarantineStore
from agentmem.quarantine.statements import statements_of
from agentmem.report import Report, StageRun
from agentmem.stages.base import StageContext
from agentmem.stages.corpus import corpus_for


async def detect_after(call, turns) -> int:
    """Find clashes and poison involving the new turns; returns the records written."""
    from agentmem.quarantine.clash import load_nli
    from agentmem.stages.quarantine import QuarantineStage, clash_records

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
    qstore = QuarantineStore(call.store)
    records = await qstore.all(call.handle)
    known = {record.key: record for record in records}
    turn_ids = await context.turn_ids(len(history))
    fresh = []
    new_positions = {turn.position for turn in turns}
    new_rows = [row for row in range(statements.size) if int(statements.position[row]) in new_positions]
    if settings.clash and new_rows:
        nli = await run_inference(load_nli, settings)
        clashes = await run_inference(find_clashes, statements, new_rows, nli, settings)
        fresh += clash_records(clashes, statements, turn_ids, known, settings, detector="nli")
    if settings.poison and new_rows:
        row_of = {(turn_ids[int(p)], *span): row
                  for row, (p, span) in enumerate(zip(statements.position, statements.spans))}
        fresh += QuarantineStage.poison_records(statements, records, row_of, known, turn_ids, settings)
    await qstore.add(call.handle, fresh, ttl=policy.ttl_seconds)
    return len(fresh)
