"""The wheel holds every package: an editable install hides a module missing from
pyproject's list (the light install's ``agentmem serve`` failed on ``agentmem.assembly``)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed_in_pyproject():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    renamed = {folder: name for name, folder in tool.get("package-dir", {}).items()}
    found = set()
    for init in ROOT.glob("agentmem/**/__init__.py"):
        found.add(".".join(init.parent.relative_to(ROOT).parts))
    for folder, name in renamed.items():
        for init in (ROOT / folder).glob("**/__init__.py"):
            found.add(".".join([name, *init.parent.relative_to(ROOT / folder).parts]))
    assert found - listed == set(), "add these to [tool.setuptools] packages"


def test_the_onnx_files_are_package_data():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {p.relative_to(ROOT / "agentmem" / "models").as_posix()
               for pattern in data["agentmem.models"]
               for p in (ROOT / "agentmem" / "models").glob(pattern)}
    for folder in ("minilm-embedder", "pruner-minilm", "nli-minilm"):
        assert {f"checkpoints/{folder}/model.onnx", f"checkpoints/{folder}/onnx.json",
                f"checkpoints/{folder}/tokenizer.json"} <= shipped
