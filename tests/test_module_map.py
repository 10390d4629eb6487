"""docs/CONTRACT.md's module map is true: every module of launcher/ has its row, and imports only what the row
allows (function-level imports count), so an arrow against the table fails here."""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

import pytest

from module_imports import HEAVY, REPO, imports, launcher_modules, module_name

ROW = re.compile(r"^\| `(launcher/[^`]+\.py)` \|[^|]*\| (.*) \|$")


def module_map(text: str) -> dict[str, set[str]]:
    """module -> the names it may import, from the table's rows (`local.*` allows every module of local/)."""
    allowed = {}
    for line in text.splitlines():
        match = ROW.match(line)
        if match:
            names = set(re.findall(r"`([^`]+)`", match.group(2)))
            allowed[module_name(REPO / match.group(1))] = {n if n in HEAVY else f"launcher.{n}" for n in names}
    return allowed


def problems(allowed: dict[str, set[str]], modules: dict | None = None) -> list[str]:
    """What the table gets wrong about `modules` (name -> source file; default: launcher/ as it is)."""
    modules = modules or launcher_modules()
    found = [f"{name}: no row in docs/CONTRACT.md" for name in modules if name not in allowed]
    found += [f"{name}: a row, but no such module" for name in allowed if name not in modules]
    for name, path in modules.items():
        for imported in sorted(imports(path, set(modules), name)):
            if name in allowed and not any(fnmatchcase(imported, pattern) for pattern in allowed[name]):
                found.append(f"{name} imports {imported}, which its row does not allow")
    return found


MAP = module_map((REPO / "docs" / "CONTRACT.md").read_text())


def test_the_module_map_lists_every_module_and_every_import():
    assert problems(MAP) == []


@pytest.mark.parametrize("added, arrow", [("from launcher import sagemaker_backend", "launcher.sagemaker_backend"),
                                          ("def f():\n    import tensorflow", "tensorflow"),
                                          ("from launcher.local import runner", "launcher.local.runner")])
def test_an_import_against_the_table_fails(tmp_path, added, arrow):
    """plan.py, pure, with one more import (a function-level one too)."""
    modules = launcher_modules()
    changed = tmp_path / "plan.py"
    changed.write_text(modules["launcher.plan"].read_text() + "\n" + added + "\n")
    added_problems = set(problems(MAP, {**modules, "launcher.plan": changed})) - set(problems(MAP))
    assert added_problems == {f"launcher.plan imports {arrow}, which its row does not allow"}


def test_a_module_missing_from_the_table_fails():
    without = problems({k: v for k, v in MAP.items() if k != "launcher.plan"})
    assert set(without) - set(problems(MAP)) == {"launcher.plan: no row in docs/CONTRACT.md"}
