"""The harness's import graph (issue 49): every relative import of its modules (`from .x import`,
`from ..part.x import`, `from . import x`), those inside functions included, read from the
source. It has no circle, and its parts (the folders under harness/) import only downward."""
import ast

from harness import REPO_ROOT

HARNESS = REPO_ROOT / "harness"
# the parts, bottom to top (docs/architecture.md): a part imports only the parts before it
FLOORS = ["core", "isolate", "verdict", "compile", "record", "run", "cli"]


def modules() -> dict[str, object]:
    """'part.module' -> its path, for every module of the parts."""
    return {f"{p.parent.name}.{p.stem}": p for part in FLOORS for p in (HARNESS / part).glob("*.py")
            if p.stem != "__init__"}


def imports_of(name: str, path, known) -> set[str]:
    part = name.split(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = [part] if node.level == 1 else []          # from .x (this part) / from ..p.x (another)
        target = ".".join(base + ([node.module] if node.module else []))
        candidates = {target} if target in known else {f"{target}.{a.name}".lstrip(".") for a in node.names}
        found |= {c for c in candidates if c in known}
    return found - {name}


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


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


def test_every_module_lives_in_a_part():
    loose = sorted(p.name for p in HARNESS.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules outside the parts' folders: {loose}"
    assert {p.name for p in HARNESS.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(FLOORS)
    for part in FLOORS:
        doc = ast.get_docstring(ast.parse((HARNESS / part / "__init__.py").read_text()))
        assert doc and "May import:" in doc, f"harness/{part}/__init__.py says what the part owns and may import"


def test_the_harness_has_no_import_circle():
    graph = import_graph()
    assert len(graph) > 30 and graph["run.lane"] and "compile.build" in graph["compile.recipes"]  # the graph is read
    assert "isolate.sandbox" in graph["run.pair"] and "verdict.sample" in graph["run.rounds"]  # both forms of import
    assert a_circle(graph) is None, " -> ".join(a_circle(graph))


def test_the_parts_import_only_downward():
    floor = {part: i for i, part in enumerate(FLOORS)}
    upward = [f"{a} -> {b}" for a, deps in import_graph().items() for b in deps
              if floor[b.split(".")[0]] > floor[a.split(".")[0]]]
    assert not upward, upward


def test_a_circle_is_found_where_there_is_one():
    assert a_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert a_circle({"a": {"b"}, "b": set()}) is None
