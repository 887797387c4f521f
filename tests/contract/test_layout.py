"""The package reads one way, from data to metrics: every import (inside functions too -- a lazy import is
still an arrow) goes to a module of the same room or of a room before it in the stage order, so there are
no import cycles either.  The top of ``calengine/`` holds only its public faces."""

from __future__ import annotations

import ast
from pathlib import Path

import calengine

PACKAGE = Path(calengine.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = path
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else [base, *subs]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            edges[mod].update(t for t in targets if t in mods and t != mod)
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle)


def test_the_checker_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    # and it sees function-level imports: the graph of this package has them
    assert "calengine.fit.table" in import_graph()["calengine.cli.fit"]


#: the rooms in stage order: a module may import only from its own room or one listed before it (a
#: top-level module is a room of its own; a package's modules share its room).  This is the order of
#: dependence, which differs from the story's order (parquet -> plan -> tasks -> fit -> reductions ->
#: model -> scores -> metrics) in one respect: the primitives that both planning and tasks compute with
#: -- mergeable statistics (reductions) and the papers' algorithms on arrays (methods) -- and the fitted
#: objects tasks return (model) come before the stages that use them.
STAGES = [
    ("calengine.version", "calengine.errors"),
    ("calengine.boosters",),
    ("calengine.params", "calengine.base", "calengine.hookspecs"),
    ("calengine.plugins",),
    ("calengine.parquet",),
    ("calengine.runtime",),
    ("calengine.reductions",),
    ("calengine.methods",),
    ("calengine.plan",),
    ("calengine.model",),
    ("calengine.tasks",),
    ("calengine.decisions",),
    ("calengine.adapters",),
    ("calengine.scores",),
    ("calengine.metrics",),
    ("calengine.fit",),
    ("calengine.export",),
    ("calengine.testing",),
    ("calengine.estimator", "calengine.mlflow"),
    ("calengine.cli",),
    ("calengine", "calengine.__main__"),
]
#: what may stay at the top of calengine/: the public faces and the bottom (issue 39 §1)
TOP_LEVEL = {"__init__", "__main__", "version", "errors", "hookspecs", "base", "params", "estimator", "mlflow"}


def room(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def rank(module: str) -> int:
    r = room(module)
    for i, names in enumerate(STAGES):
        if r in names:
            return i
    raise AssertionError(f"{module} is in no room of STAGES: add its room to the stage order")


def arrows_against_the_order(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in edges.items() for b in targets
                  if room(a) != room(b) and rank(b) > rank(a))


def test_imports_follow_the_stage_order():
    bad = arrows_against_the_order(import_graph())
    assert not bad, f"{len(bad)} imports run back up the stage order:\n" + "\n".join(bad)


def test_the_order_check_sees_lazy_imports_and_every_room():
    edges = {"calengine.metrics.evaluation": {"calengine.fit.training"}, "calengine.fit.table": {"calengine.metrics.x"}}
    assert arrows_against_the_order(edges) == ["calengine.metrics.evaluation -> calengine.fit.training"]
    graph = import_graph()
    assert {rank(m) for m in graph} == set(range(len(STAGES)))  # every room holds a module, none is unknown


def test_the_top_of_the_package_holds_only_public_faces():
    loose = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert set(loose) <= TOP_LEVEL, f"loose modules at the top of calengine/: {sorted(set(loose) - TOP_LEVEL)}"
