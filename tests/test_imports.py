"""The import graph of the whole project, read from the source.

Every `import` statement counts, those inside a function too: a lazy import hides a circle from
Python, not from the design. Importing a module also imports every package above it (Python runs
each package's `__init__` first), except the importer's own packages, which are already being
imported when it runs; `test_a_models_package_init_imports_none_of_its_modules` keeps those safe.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OURS = ("api", "jobs", "svcctl", "portal", "models", "config", "messaging", "gateway", "bench")

# The packages inside models/, lowest first: a module may import its own package and those below
# it, never one above (docs/development.md, "Layout"). The kernel is the root's own modules; the
# inbox applies the platform's webhooks to every package below it, so it sits above receivables
# (its tables are numbers', where sending's recovery reads them); operations reads the state of
# every package; setup wires the store and the wallet copies, and is imported only from outside.
LAYERS = ("kernel", "store", "tenancy", "events", "numbers", "sending", "receivables", "inbox", "operations",
          "setup")
KERNEL = ("models", "models.ids", "models.errors", "models.clock", "models.inputs")

# Modules of the outer layers that serve the layer itself rather than one area; every other module
# of api/, jobs/, svcctl/ and portal/ is named after the models package it serves or a module of it.
LAYER_MODULES = {
    "api": {"app", "wsgi", "gunicorn_settings", "auth", "errors", "operation", "openapi", "pagination", "ratelimit",
            "request_metrics", "schemas"},
    "jobs": {"queue"},
    "svcctl": {"main", "lazy", "output", "feeds", "processes", "sim"},
    "portal": {"web", "overview", "signin", "team", "labels"},
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every importable module of ours: .py files in packages (migrations, loaded by path, are not)."""
    found = {}
    for top in OURS:
        for path in (ROOT / top).rglob("*.py"):
            if all((folder / "__init__.py").exists() for folder in path.parents if ROOT in folder.parents):
                found[_module_name(path)] = path
    return found


def _is_package(name: str) -> bool:
    return modules()[name].name == "__init__.py"


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def _named(node: ast.Import | ast.ImportFrom, importer: str) -> list[str]:
    """The dotted names an import statement loads (a `from x import y` may name a module y)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = importer if _is_package(importer) else importer.rpartition(".")[0]
        anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


@cache
def import_statements() -> dict[str, list[tuple[str, bool]]]:
    """For each module, the modules of ours it imports, each with whether it is inside a function."""
    found: dict[str, list[tuple[str, bool]]] = {}
    for name, path in modules().items():
        statements: list[tuple[str, bool]] = []

        def visit(node: ast.AST, in_function: bool, importer: str = name, into: list = statements) -> None:
            for child in ast.iter_child_nodes(node):
                inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                if isinstance(child, ast.Import | ast.ImportFrom):
                    for dotted in _named(child, importer):
                        if dotted in modules():
                            into.append((dotted, inside))
                visit(child, inside)

        visit(ast.parse(path.read_text(), str(path)), False)
        found[name] = statements
    return found


@cache
def graph() -> dict[str, set[str]]:
    """module -> the modules of ours importing it runs (their packages included)."""
    edges: dict[str, set[str]] = {}
    for name, statements in import_statements().items():
        own = {name, *_ancestors(name)}
        edges[name] = {target for dotted, _lazy in statements for target in (*_ancestors(dotted), dotted)
                       if target not in own}
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of two or more modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                group.append(other)
                if other == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(edges)))
    try:
        for node in sorted(edges):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def layer_of(name: str) -> str:
    if name in KERNEL:
        return "kernel"
    if name == "models.setup":
        return "setup"
    parts = name.split(".")
    if parts[0] == "models" and len(parts) > 2 and parts[1] in LAYERS and _is_package(f"models.{parts[1]}"):
        return parts[1]
    if parts[0] == "models" and len(parts) == 2 and parts[1] in LAYERS and _is_package(name):
        return parts[1]
    raise AssertionError(f"{name} belongs to no package of models/ (LAYERS)")


def test_the_circle_finder_finds_circles():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert circles(edges) == [["a", "b", "c"]]


def test_no_module_imports_another_in_a_circle():
    assert circles(graph()) == []


def test_the_graph_counts_imports_inside_functions_and_packages():
    statements = import_statements()
    assert any(lazy for module in statements.values() for _dotted, lazy in module), "function-level imports seen"
    # `from models.sending.engine import ...` runs models.sending's __init__ too.
    assert "models.sending" in graph()["jobs.sending"]


def test_models_import_none_of_the_outer_layers():
    arrows = {(name, target) for name, targets in graph().items() if name.startswith("models")
              for target in targets if target.split(".")[0] in ("api", "jobs", "portal", "svcctl", "bench")}
    assert arrows == set()


def test_the_adapters_and_the_settings_import_nothing_else_of_ours():
    allowed = {"messaging": {"messaging"}, "gateway": {"gateway"}, "config": {"config"}}
    arrows = {(name, target) for name, targets in graph().items() if name.split(".")[0] in allowed
              for target in targets if target.split(".")[0] not in allowed[name.split(".")[0]]}
    assert arrows == set()


def test_every_models_module_is_in_a_package_or_the_kernel():
    for name in modules():
        if name.split(".")[0] == "models":
            layer_of(name)


def test_no_models_package_imports_one_above_it():
    rank = {layer: position for position, layer in enumerate(LAYERS)}
    upward = sorted((name, target) for name, targets in graph().items() if name.split(".")[0] == "models"
                    for target in targets if target.split(".")[0] == "models"
                    and rank[layer_of(target)] > rank[layer_of(name)])
    assert upward == []


def test_models_import_their_own_modules_at_the_top():
    """Inside models/, an import of ours inside a function is how a circle or an upward arrow hides."""
    lazy = sorted((name, dotted) for name, statements in import_statements().items()
                  if name.split(".")[0] == "models" for dotted, inside in statements if inside)
    assert lazy == []


def test_a_models_package_init_imports_none_of_its_modules():
    own = sorted((name, dotted) for name, statements in import_statements().items()
                 if name.split(".")[0] == "models" and _is_package(name)
                 for dotted, _lazy in statements if dotted.startswith(name + "."))
    assert own == []


def test_a_models_package_init_says_what_it_holds():
    for name, path in modules().items():
        if name.split(".")[0] == "models" and _is_package(name) and name != "models":
            docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
            listed = {child.stem for child in path.parent.glob("*.py") if child.name != "__init__.py"}
            missing = sorted(module for module in listed if f"{module}.py" not in docstring)
            assert not missing, f"{name}'s docstring does not list {missing}"


def test_every_table_is_declared_in_a_tables_module():
    """A package's tables are apart from its operations: other packages import `tables` and a few
    named operations."""
    misplaced = []
    for name, path in modules().items():
        if name.split(".")[0] != "models" or name.rpartition(".")[2] == "tables":
            continue
        tree = ast.parse(path.read_text())
        table_base = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                      and node.module == "models.store.base" for alias in node.names if alias.name == "BaseModel"}
        misplaced += [f"{name}.{node.name}" for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                      and any(ast.unparse(base) in table_base for base in node.bases)]
    assert misplaced == []


def test_layer_modules_are_named_after_what_they_serve():
    served = {name.split(".")[-1] for name in modules() if name.split(".")[0] == "models"}
    for layer, own in LAYER_MODULES.items():
        for name in modules():
            parts = name.split(".")
            if parts[0] == layer and len(parts) == 2:
                assert parts[1] in served | own, f"{name} is named after nothing in models/"
