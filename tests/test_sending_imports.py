"""The import graph: `models/` imports neither `api/` nor `jobs/` (not even inside a function),
and the sending core has no circle. Read from the source, every import statement counted."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_models_import_neither_the_api_nor_the_queue():
    arrows = {(module_name(path), name) for path in (ROOT / "models").rglob("*.py")
              for name in imports(path) if name.split(".")[0] in ("api", "jobs")}
    assert arrows == set()


def test_the_sending_core_has_no_import_circle():
    paths = {module_name(path): path for path in (ROOT / "models" / "sending").glob("*.py")}
    graph = {name: {other for other in imports(path) if other in paths and other != name}
             for name, path in paths.items()}
    # Every module but the package itself imports the package first (Python runs __init__).
    for name in graph:
        if name != "models.sending":
            graph[name].add("models.sending")
    assert graph["models.sending"] == set(), "the package's __init__ must not import its modules"
    visiting, done = set(), set()

    def visit(name: str, trail: list[str]) -> None:
        assert name not in visiting, f"import circle: {' -> '.join([*trail, name])}"
        if name in done:
            return
        visiting.add(name)
        for other in sorted(graph[name]):
            visit(other, [*trail, name])
        visiting.discard(name)
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert len(done) == len(paths) >= 8
