"""Adding a stage takes one file and one registration: the test stage in tests/stages/redact.py
runs on the call path, reads its own settings from the policy, gets its after-reply hook, and
its declared order is enforced."""

from __future__ import annotations

import pytest

from agentmem import Hygiene
from agentmem.config import Settings
from agentmem.errors import PolicyError
from agentmem.policy import load_policy, policy_from_dict
from agentmem.stages import available_stages, register_stage, unregister_stage
from tests.stages.redact import RedactStage


@pytest.fixture
def redact():
    register_stage(RedactStage)  # the one line (an entry point does the same for a package)
    yield RedactStage
    unregister_stage(RedactStage.name)


async def test_a_new_stage_runs_with_its_settings_and_hooks(redact, data_dir):
    policy = policy_from_dict({"name": "r", "stages": ["redact", "budget"],
                               "options": {"redact": {"mask": "<hidden>"}}})
    hygiene = Hygiene(policy, settings=Settings(data_dir=data_dir))
    messages = [{"role": "user", "content": "Who handles billing?"},
                {"role": "assistant", "content": "Write to billing@example.com for invoices."},
                {"role": "user", "content": "Thanks, and refunds?"}]
    redact.replies_seen.clear()
    try:
        result = await hygiene.apply(messages, session_id="redact-1")
        await hygiene.drain()
    finally:
        await hygiene.aclose()
        hygiene.connector.close()
    assert result.messages[1]["content"] == "Write to <hidden> for invoices."
    assert messages[1]["content"] == "Write to billing@example.com for invoices."  # caller's dict kept
    assert [s.stage for s in result.report.stages] == ["redact", "budget"]
    assert redact.replies_seen == [3]  # after_reply saw the call's three new turns


def test_stage_order_and_options_are_checked(redact):
    with pytest.raises(PolicyError, match="'quarantine' must run before 'redact'"):
        policy_from_dict({"name": "bad", "stages": ["redact", "quarantine"]})
    with pytest.raises(PolicyError, match="mask"):
        policy_from_dict({"name": "bad", "stages": ["redact"], "options": {"redact": {"mask": 3}}})
    with pytest.raises(PolicyError, match="'quarantine' must run before 'prune'"):
        policy_from_dict({"name": "bad", "stages": ["prune", "quarantine"]})


def test_unregistering_leaves_the_registry_as_it_was(redact):
    assert "redact" in available_stages()
    unregister_stage("redact")
    assert "redact" not in available_stages()
    assert {"quarantine", "prune", "tools", "budget"} <= available_stages()
    register_stage(RedactStage)


def test_a_policy_file_that_extends_reads_as_its_author_meant(tmp_path, monkeypatch):
    """A relative ``extends`` is read next to the file that names it; a file's policy without
    a ``name`` is named by its file, not its parent; an unquoted ``off`` (YAML's false) is
    the preset; a parent with broken YAML is a one-line policy error."""
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "base.yaml").write_text("extends: default\ntools:\n  max_tools: 3\n")
    (folder / "child.yaml").write_text("extends: base.yaml\nbudget:\n  max_prompt_tokens: 777\n")
    (folder / "quiet.yaml").write_text("extends: off\n")
    (folder / "broken.yaml").write_text("extends: [default\n")
    (folder / "on_broken.yaml").write_text("extends: broken.yaml\n")
    monkeypatch.chdir(tmp_path)  # not the files' folder
    child = load_policy(folder / "child.yaml")
    assert child.name == "child" and child.tools.max_tools == 3
    assert child.budget.max_prompt_tokens == 777
    assert load_policy("policies/base.yaml").name == "base"
    quiet = load_policy(folder / "quiet.yaml")
    assert quiet.name == "quiet" and quiet.stages == load_policy("off").stages
    with pytest.raises(PolicyError, match=r"broken.yaml: invalid YAML at line 2"):
        load_policy(folder / "on_broken.yaml")
    assert Settings.model_validate({"policy": False}).policy == "off"


def test_presets_extend_default():
    default, chat = load_policy("default"), load_policy("chat")
    assert chat.prune.neighbours == 1 and chat.prune.history_fraction == 0.25
    assert chat.prune.turn_spread == default.prune.turn_spread  # inherited, written once
    assert chat.ttl_seconds == default.ttl_seconds
