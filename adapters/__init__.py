"""Framework adapters (LiteLLM proxy plugin, LangChain/LangGraph, OpenAI Agents SDK).

Shipped as ``agentmem.adapters``; each adapter is a thin user of ``agentmem.Hygiene``.
"""
