"""The shape of the house, checked: no import circles, and each layer imports only downwards.

Module-level imports (those that run when a module loads; imports under ``TYPE_CHECKING`` are
for annotations only) form the graph. Layers:
- stages, the store, models and state never import the engine (``agentmem.api``), the proxy,
  the CLI or the adapters;
- the engine and the proxy reach stages only through ``agentmem.stages`` (the registry) and
  ``agentmem.stages.base`` (the interface), never a stage module.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"agentmem": ROOT / "agentmem", "agentmem.adapters": ROOT / "adapters",
            "agentmem.policies": ROOT / "policies"}


def _modules() -> dict[str, Path]:
    out = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def _runtime_imports(path: Path, module: str, known: set[str]) -> set[str]:
    """Modules this one imports when it loads (not inside functions, not TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = module.split(".")
                    keep = len(parts) - node.level + (1 if path.name == "__init__.py" else 0)
                    base = ".".join([*parts[:keep], *([base] if base else [])])
                submodules = {f"{base}.{alias.name}" for alias in node.names} & known
                # "from package import submodule" needs the submodule; names need the module
                if len(submodules) < len(node.names):
                    found.add(base)
                found.update(submodules)

    visit(tree.body)
    return {name for name in found if name in known and name != module}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _runtime_imports(path, name, known) for name, path in modules.items()}


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)


def test_lower_layers_never_import_the_engine_proxy_or_adapters():
    graph = _graph()
    lower = ("agentmem.stages", "agentmem.store", "agentmem.models", "agentmem.state",
             "agentmem.quarantine")
    upper = ("agentmem.api", "agentmem.proxy", "agentmem.adapters", "agentmem.cli", "agentmem.sync",
             "agentmem.streaming")
    bad = [f"{a} -> {b}" for a, targets in graph.items() if _within(a, lower)
           for b in targets if _within(b, upper)]
    assert not bad, bad


def test_engine_and_proxy_reach_stages_only_through_the_interface():
    graph = _graph()
    interface = {"agentmem.stages", "agentmem.stages.base"}
    bad = [f"{a} -> {b}" for a, targets in graph.items()
           if _within(a, ("agentmem.api", "agentmem.proxy"))
           for b in targets if _within(b, ("agentmem.stages",)) and b not in interface]
    assert not bad, bad


def test_the_checker_sees_imports():
    """The graph is not empty by accident: the engine imports the registry."""
    graph = _graph()
    assert "agentmem.stages" in graph["agentmem.api"]
    assert "agentmem.stages.base" in graph["agentmem.stages.prune"]
