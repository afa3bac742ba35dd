"""The harness's import graph (issue 49): every `from .x import` and `from . import x` of its
modules, those inside functions included, read from the source; it has no circle."""
import ast

from harness import REPO_ROOT

HARNESS = REPO_ROOT / "harness"


def import_graph() -> dict[str, set[str]]:
    modules = {p.stem for p in HARNESS.glob("*.py")}
    graph = {}
    for name in modules:
        tree = ast.parse((HARNESS / f"{name}.py").read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                found |= {node.module} if node.module else {a.name for a in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def a_circle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path + [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [node])
                if found:
                    return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found[found.index(found[-1]):]
    return None


def test_the_harness_has_no_import_circle():
    graph = import_graph()
    assert len(graph) > 30 and graph["lane"] and "build" in graph["recipes"]  # the graph is read
    assert a_circle(graph) is None, " -> ".join(a_circle(graph))


def test_a_circle_is_found_where_there_is_one():
    assert a_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert a_circle({"a": {"b"}, "b": set()}) is None
