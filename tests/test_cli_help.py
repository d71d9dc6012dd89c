"""The CLI's help shows its text as written: square brackets are content, not markup."""

from __future__ import annotations

from typer.testing import CliRunner

from agentmem.cli import app


def test_help_keeps_square_brackets():
    runner = CliRunner()
    echo = runner.invoke(app, ["echo-upstream", "--help"])
    assert echo.exit_code == 0
    assert "[[tool:NAME {...}]]" in echo.output and "[[status:429]]" in echo.output
    export = runner.invoke(app, ["export-onnx", "--help"])
    assert export.exit_code == 0 and "``[dev]``" in " ".join(export.output.split())
