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


TOPICS = ["the tide tables of Brest", "a sourdough starter", "the bus to Vienna airport",
          "renewing a Dutch passport", "tuning a ukulele", "the rules of petanque",
          "repotting an orchid", "the Lisbon tram 28", "descaling a kettle", "cat vaccinations",
          "a Danish pastry recipe", "the Oslo ferry timetable", "waxing cross-country skis",
          "the chess opening Ruy Lopez", "a rash after hiking", "the price of saffron",
          "bleeding a radiator", "the Rhine cycle path", "learning Finnish grammar",
          "a leaking tap washer"]


def _older_exchanges() -> list[dict]:
    out: list[dict] = [{"role": "system", "content": "You are a helpful assistant."}]
    for number, topic in enumerate(TOPICS):
        out += [{"role": "user", "content": f"Tell me about {topic}."},
                {"role": "assistant", "content": f"Here is what I know about {topic}: note {number} "
                 f"says it matters to plan ahead, and {topic} rewards patience and care."}]
    return out


def _step_call(messages: list[dict], number: int, result: str) -> list[dict]:
    call = {"id": f"s{number}", "type": "function", "function": {"name": "recipes", "arguments": "{}"}}
    return [*messages, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"s{number}", "content": result}]


def test_an_agent_near_its_budget_keeps_one_prefix_within_a_step(client, received, session_id,
                                                                   policy_dir):
    """An agent whose request is over the prompt budget: the budget stage drops older turns.
    The step's next small result fits the room it kept free, so the second call sends the
    history before the step exactly as the first did; a result larger than that room makes
    the third call drop more, never bring back a turn the step already left out."""
    from agentmem.ingest import message_tokens

    older = _older_exchanges()
    question = {"role": "user", "content": "How do I descale my kettle? [[tool:recipes]]"}
    pinned = message_tokens(older[0]) + message_tokens(question)
    budget = pinned + sum(message_tokens(m) for m in older[1:]) // 2 + 200
    (policy_dir / "step-budget.yaml").write_text(
        f"extends: default\nname: step-budget\nstages: [budget]\n"
        f"prune: {{keep_recent_exchanges: 0}}\nbudget: {{max_prompt_tokens: {budget}}}\n")
    headers = {"X-Session-Id": session_id, "X-Agentmem-Policy": "step-budget"}
    messages = [*older, question]
    client.chat.completions.create(model="echo", messages=messages, tools=TOOLS, extra_headers=headers)
    messages = _step_call(messages, 1, "Descaling: citric acid, 20 minutes, rinse twice.")
    client.chat.completions.create(model="echo", messages=messages, tools=TOOLS, extra_headers=headers)
    messages = _step_call(messages, 2, "Vinegar works too. " * 60)
    client.chat.completions.create(model="echo", messages=messages, tools=TOOLS, extra_headers=headers)
    first, second, third = (request["messages"] for request in received.requests())
    step = first.index(question)
    assert len(first[:step]) < len(older)  # the budget dropped older turns ...
    assert any("kettle" in str(m["content"]) for m in first[1:step])  # ... the least relevant
    assert second.index(question) == step and second[:step] == first[:step]  # one prefix
    later = third[:third.index(question)]
    assert len(later) < step  # over the room kept free: more dropped ...
    assert all(m in first[:step] for m in later)  # ... and none brought back
    assert sum(message_tokens(m) for m in third) <= budget


def test_the_room_kept_free_grows_to_the_sessions_latest_results(client, received, session_id,
                                                                 policy_dir):
    """An agent whose tool results are larger than the fixed share of the budget: the step's
    first call keeps room as large as the latest result, so a second result of that size
    fits and the second call sends the history before the step as the first did (with room
    of 10% of the budget it dropped more, and the prefix changed)."""
    from agentmem.ingest import message_tokens

    older = _older_exchanges()
    lookup = {"role": "user", "content": "Find me a pastry recipe. [[tool:recipes]]"}
    earlier = [*_step_call([*older, lookup], 1, "Kanelsnegle: butter, cinnamon, sugar. " * 14),
               {"role": "assistant", "content": "Kanelsnegle it is."}]
    question = {"role": "user", "content": "How do I descale my kettle? [[tool:recipes]]"}
    pinned = message_tokens(older[0]) + message_tokens(question)
    budget = pinned + sum(message_tokens(m) for m in earlier[1:]) // 2 + 200
    second_result = "Descaling: citric acid, twenty minutes, rinse twice, then boil. " * 9
    result = message_tokens(earlier[-2])
    assert 0.1 * budget < message_tokens({"role": "tool", "content": second_result}) <= result
    assert result < 0.25 * budget  # larger than the fixed share, inside the cap
    (policy_dir / "step-room.yaml").write_text(
        f"extends: default\nname: step-room\nstages: [budget]\n"
        f"prune: {{keep_recent_exchanges: 0}}\nbudget: {{max_prompt_tokens: {budget}}}\n")
    headers = {"X-Session-Id": session_id, "X-Agentmem-Policy": "step-room"}
    messages = [*earlier, question]
    client.chat.completions.create(model="echo", messages=messages, tools=TOOLS, extra_headers=headers)
    messages = _step_call(messages, 2, second_result)
    client.chat.completions.create(model="echo", messages=messages, tools=TOOLS, extra_headers=headers)
    first, second = (request["messages"] for request in received.requests())
    step = first.index(question)
    assert len(first[:step]) < len(earlier)  # the budget dropped older turns
    assert second.index(question) == step and second[:step] == first[:step]  # one prefix
    assert sum(message_tokens(m) for m in second) <= budget


def test_the_room_stays_within_its_cap_and_only_for_agents():
    from agentmem.stages.base import Draft
    from agentmem.stages.budget import BudgetSettings, reserve_for

    settings = BudgetSettings()
    history = [{"role": "user", "content": "q"}, {"role": "tool", "content": "r"},
               {"role": "tool", "content": "r"}]
    chat, agent = Draft.of(history, None), Draft.of(history, TOOLS)
    assert reserve_for(chat, settings, 10_000, history, [5, 3_000, 400]) == 0
    assert reserve_for(agent, settings, 10_000, history, [5, 300, 400]) == 1_000  # the floor
    assert reserve_for(agent, settings, 10_000, history, [5, 1_800, 400]) == 1_800  # grown
    assert reserve_for(agent, settings, 10_000, history, [5, 9_000, 400]) == 2_500  # capped
