"""`agentmem bench`: the overhead bench and the benchmark kinds of FORMATS.md."""
