"""Through the proxy, an agent step's calls reach the provider with the same prefix: the
history before the step as the step's first call sent it, byte for byte (what a provider's
prompt cache needs), while the prune stage still prunes it."""

from __future__ import annotations

from tests.conversations import SHOPPING_HISTORY

OLDER = SHOPPING_HISTORY[:-1]  # all but its closing question
TOOLS = [{"type": "function", "function": {"name": "recipes", "description": "Find recipes.",
                                           "parameters": {"type": "object", "properties": {}}}}]


def test_a_steps_calls_reach_the_provider_with_one_prefix(client, received, session_id, policy_dir):
    (policy_dir / "step-prefix.yaml").write_text(
        "extends: default\nname: step-prefix\n"
        "prune: {history_floor_tokens: 0, history_fraction: 0.3, keep_recent_exchanges: 1}\n")
    headers = {"X-Session-Id": session_id, "X-Agentmem-Policy": "step-prefix"}
    question = {"role": "user", "content": "Where will my kettle be delivered? [[tool:recipes]]"}
    messages = [*OLDER, question]
    reply = client.chat.completions.create(model="echo", messages=messages, tools=TOOLS,
                                           extra_headers=headers)
    [call] = reply.choices[0].message.tool_calls
    messages += [reply.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id,
                  "content": "Spaghetti aglio e olio: pasta, garlic, olive oil, chili flakes."}]
    client.chat.completions.create(model="echo", messages=messages, tools=TOOLS, extra_headers=headers)
    first, second = (request["messages"] for request in received.requests())
    step = first.index(question)
    assert second.index(question) == step
    assert second[:step] == first[:step]  # the same prefix, byte for byte
    assert len(first[:step]) < len(OLDER)  # ... and a pruned one
    assert second[-1]["content"].startswith("Spaghetti")  # the step's own turns go as sent
