"""Training the models agentmem ships (`agentmem train ...`)."""
