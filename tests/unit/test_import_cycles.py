"""No module of shoal imports itself back, through any chain (the layering
contracts in pyproject.toml check the direction between packages; this
checks every module, inside packages too)."""

from __future__ import annotations

import grimp  # installed with import-linter (`make test` installs the dev extra)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v)):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_circle_anywhere():
    """A reader can start at any module and never meet it again below."""
    graph = grimp.build_graph("shoal", exclude_type_checking_imports=True)
    assert len(graph.modules) > 80
    assert _cycles(graph) == []
