"""A long support session (context distraction), offline.

Ninety turns about a flaky home network: diagnostics, tool dumps, small talk. The customer's
router serial number was mentioned once, near the start. When they finally ask for a
replacement, the ``default`` policy keeps the recent exchanges whole and, from the older
history, only the sentences this question needs (inside 14.5% of their tokens), so the model
still sees the serial number without the noise.

    python examples/long_support_session.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile

import httpx

import agentmem
from agentmem.config import Settings
from agentmem.echo import serve_in_thread
from agentmem.store import SessionHandle

CHECKS = ["the DNS lookup", "the Wi-Fi channel scan", "the cable modem log", "the speed test",
          "the DHCP lease", "the firmware check", "the ping to the gateway", "the mesh node status",
          "the port scan"]


def history() -> list[dict]:
    turns = [{"role": "system", "content": "You are the support assistant of Northwind Broadband."},
             {"role": "user", "content": "My internet drops every evening. The router is a Northwind R7, "
                                         "serial number NW-R7-448120, bought in March."},
             {"role": "assistant", "content": "Thanks. Let us run some checks on the line first."}]
    for day in range(1, 30):
        check = CHECKS[day % len(CHECKS)]
        turns += [{"role": "user", "content": f"Day {day}: it dropped again at {18 + day % 5}:{day % 6}0. "
                                              f"Could you run {check} again? "
                                              "The kids had homework to submit."},
                  {"role": "assistant", "content": f"I ran {check}. Result: {day * 7 % 23} warnings, latency "
                                                   f"{20 + day % 9} ms, packet loss {day % 4}.{day % 10}%. "
                                                   "Nothing conclusive; the line itself looks stable today."},
                  {"role": "user", "content": "Alright. The weather has been terrible here, by the way. "
                                              "Our neighbour says their connection is fine."}]
    return turns + [{"role": "user", "content": "Please just send me a replacement router. "
                                                "Which serial number should I write on the return form?"}]


async def _report(hygiene, session, reply):
    return await hygiene.store().report(session, reply._hidden_params["agentmem"]["X-Agentmem-Report"])


async def main() -> None:
    api_base, _ = serve_in_thread()
    hygiene = agentmem.Hygiene("default", settings=Settings(
        data_dir=os.environ.get("AGENTMEM_DATA_DIR") or tempfile.mkdtemp()))
    session, messages = SessionHandle("default", "support-ticket-7"), history()
    reply = await hygiene.acompletion("openai/echo", messages, session_id=session.session_id,
                                      api_base=api_base, api_key="sk-local")
    report = await _report(hygiene, session, reply)
    print(f"messages {report.messages_before} -> {report.messages_after}, "
          f"tokens {report.tokens_before} -> {report.tokens_after} "
          f"({report.tokens_after / report.tokens_before:.0%}); "
          f"first call {report.latency_ms['hygiene']:.0f} ms "
          "(loads MiniLM, embeds 90 turns)")
    decisions = [d for run in report.stages for d in run.decisions]
    print(f"dropped messages: {sum(d.action == 'drop_message' for d in decisions)}, "
          f"shrunk messages: {sum(d.action == 'prune_spans' for d in decisions)}")
    sent = httpx.get(api_base.removesuffix("/v1") + "/_echo/requests").json()[-1]["messages"]
    kept_fact = any("NW-R7-448120" in (m.get("content") or "") for m in sent)
    print("the serial number reached the model:", kept_fact)
    await hygiene.drain()  # the reply's embeddings, computed after it was sent
    messages += [reply.choices[0].message.model_dump(exclude_none=True),
                 {"role": "user", "content": "And where do I drop the old one off?"}]
    reply = await hygiene.acompletion("openai/echo", messages, session_id=session.session_id,
                                      api_base=api_base, api_key="sk-local")
    print(f"next call, warm: {reply._hidden_params['agentmem']['X-Agentmem-Tokens-After']} tokens sent, "
          f"hygiene {(await _report(hygiene, session, reply)).latency_ms['hygiene']:.0f} ms")
    turns = await hygiene.store().active_turns(session)
    print(f"stored turns: {len(turns)} (all of them, verbatim)")
    await hygiene.aclose()
    hygiene.connector.close()
    raise SystemExit(0 if kept_fact else 1)


if __name__ == "__main__":
    asyncio.run(main())
