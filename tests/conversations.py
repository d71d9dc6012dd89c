"""Conversations several test files send through the proxy."""

from __future__ import annotations

from typing import Any


def backup_log_conversation() -> tuple[str, list[dict[str, Any]]]:
    """A question answered by a long tool output (twelve log lines, one of them relevant):
    the shape a highlighter backend prunes through the prune stage. Returns (output, messages)."""
    output = " ".join(f"Line {i} of the nightly log says backup {i} finished." for i in range(12))
    messages = [{"role": "user", "content": "Did backup 7 finish?"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                      "function": {"name": "logs", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": output}]
    return output, messages


# A shopping chat with a pasta digression, a stock lookup (a tool-call unit) and a closing
# question about the kettle: older turns that matter, older turns that do not.
SHOPPING_HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful shopping assistant."},
    {"role": "user", "content": "Hi! My order number is 5512 and it should ship to Lyon. "
                                "I ordered a blue kettle."},
    {"role": "assistant", "content": "Thanks, I have noted order 5512 for delivery to Lyon. "
                                     "The blue kettle is in stock."},
    {"role": "user", "content": "Can you recommend a pasta recipe? Something quick for dinner."},
    {"role": "assistant", "content": "Try spaghetti aglio e olio. Cook the pasta, fry garlic in olive "
                                     "oil, add chili flakes and parsley. It takes fifteen minutes."},
    {"role": "user", "content": "Also check the stock of the red mug [[tool:inventory]]"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "inv1", "type": "function",
         "function": {"name": "inventory", "arguments": "{\"item\": \"mug\"}"}}]},
    {"role": "tool", "tool_call_id": "inv1", "content": "Red mug: 14 in stock. Warehouse: Rotterdam. "
     "Supplier: Ceramica Ltd. Last audit: March. Shelf B4. Pallet 22. Reorder level: 5."},
    {"role": "assistant", "content": "There are 14 red mugs in stock."},
    {"role": "user", "content": "Who won the football match yesterday?"},
    {"role": "assistant", "content": "I do not have live sports results."},
    {"role": "user", "content": "Where will my kettle be delivered?"},
]

# An agent step over many tools: the question, then the weather tool's call and result (which
# speaks of the weather only, so a selection decided anew narrows to it).
WEATHER_THEN_CAR = {"role": "user", "content": "Will it rain in Oslo tomorrow? I need the weather "
                                               "forecast, then a rental car."}
WEATHER_CALLED: list[dict[str, Any]] = [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "w1", "type": "function", "function": {"name": "get_weather_forecast",
                                                      "arguments": '{"city": "Oslo"}'}}]},
    {"role": "tool", "tool_call_id": "w1", "content": "Weather forecast for Oslo tomorrow: "
                                                      "rain, 9 degrees, wind from the west."},
]
