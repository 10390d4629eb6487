"""The imports of dfm's own modules, read with ast (function-level imports included): for the module-map test."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("sagemaker", "tensorflow", "pyspark", "optuna", "horovod", "boto3", "botocore", "matplotlib")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def launcher_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((REPO / "launcher").rglob("*.py"))}


def _import_nodes(path: Path, module_level: bool) -> list[ast.stmt]:
    """The module's import statements; `module_level`: those run when it loads (none inside a function)."""
    found, todo = [], [ast.parse(path.read_text())]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif not (module_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))):
            todo.extend(ast.iter_child_nodes(node))
    return found


def top_level_packages(path: Path, module_level: bool = False) -> set[str]:
    """The first name of every absolute import of the module at `path` (stdlib ones too)."""
    found: set[str] = set()
    for node in _import_nodes(path, module_level):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def imports(path: Path, known: set[str], name: str | None = None, module_level: bool = False) -> set[str]:
    """launcher modules and heavy third-party packages that module `name` (default: from `path`) imports, its
    source read from `path` (`from launcher import x` names module x); `module_level`: only the imports made
    when the module loads (not those inside functions)."""
    found: set[str] = set()
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in _import_nodes(path, module_level):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for imported in names:
            top = imported.split(".")[0]
            if top == "launcher" and imported != "launcher":
                while imported not in known and "." in imported:
                    imported = imported.rpartition(".")[0]
                found.add(imported)
            elif top in HEAVY:
                found.add(top)
    return found - {name}
