from agentmem.cli import app

app()
