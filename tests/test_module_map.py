"""docs/CONTRACT.md's module map is true: every module of launcher/ has its row, imports only what the row allows
(function-level imports count) and everything it allows (an allowance no longer used fails too); a module the row
calls Pure starts no process, thread or connection, nor do the modules it loads; the entry points' row holds:
they import nothing of the launcher."""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

import pytest

from module_imports import HEAVY, REPO, imports, launcher_modules, module_name, top_level_packages

ROW = re.compile(r"^\| `(launcher/[^`]+\.py)` \| ([^|]*) \| (.*) \|$")
ENTRY_POINTS_ROW = re.compile(r"^\| `entrypoints/\*\.py` \| [^|]* \| (.*) \|$")
# What a Pure module (and every module it loads) never imports: processes, threads, sockets, the heavy packages.
IMPURE = {"socket", "subprocess", "threading", "signal", "multiprocessing", "asyncio", *HEAVY}


def module_map(text: str) -> dict[str, set[str]]:
    """module -> the names it may import, from the table's rows (`local.*` allows every module of local/)."""
    allowed = {}
    for line in text.splitlines():
        match = ROW.match(line)
        if match:
            names = set(re.findall(r"`([^`]+)`", match.group(3)))
            allowed[module_name(REPO / match.group(1))] = {n if n in HEAVY else f"launcher.{n}" for n in names}
    return allowed


def pure_modules(text: str) -> set[str]:
    """The modules whose row's "owns" column calls them Pure."""
    return {module_name(REPO / m.group(1)) for m in map(ROW.match, text.splitlines()) if m and "Pure" in m.group(2)}


def problems(allowed: dict[str, set[str]], modules: dict | None = None) -> list[str]:
    """What the table gets wrong about `modules` (name -> source file; default: launcher/ as it is)."""
    modules = modules or launcher_modules()
    found = [f"{name}: no row in docs/CONTRACT.md" for name in modules if name not in allowed]
    found += [f"{name}: a row, but no such module" for name in allowed if name not in modules]
    for name, path in modules.items():
        made = imports(path, set(modules), name)
        for imported in sorted(made):
            if name in allowed and not any(fnmatchcase(imported, pattern) for pattern in allowed[name]):
                found.append(f"{name} imports {imported}, which its row does not allow")
        for pattern in sorted(allowed.get(name, ())):
            if not any(fnmatchcase(imported, pattern) for imported in made):
                found.append(f"{name}: its row allows {pattern}, which it does not import")
    return found


def impure(pure: set[str], modules: dict | None = None) -> list[str]:
    """Pure modules that start processes, threads or connections: theirs, or a module's they load."""
    modules = modules or launcher_modules()
    found = []
    for name in sorted(pure):
        seen, todo = set(), [name]
        while todo:
            module = todo.pop()
            if module in seen or module not in modules:
                continue
            seen.add(module)
            bad = top_level_packages(modules[module], module_level=module != name) & IMPURE
            if bad:
                through = "" if module == name else f" (through {module})"
                found.append(f"{name} is called Pure but imports {', '.join(sorted(bad))}{through}")
            todo += imports(modules[module], set(modules), module, module_level=True)
    return found


TEXT = (REPO / "docs" / "CONTRACT.md").read_text()
MAP = module_map(TEXT)


def test_the_module_map_lists_every_module_and_every_import():
    assert problems(MAP) == []


@pytest.mark.parametrize(
    "added, arrow",
    [
        ("from launcher import sagemaker_backend", "launcher.sagemaker_backend"),
        ("def f():\n    import tensorflow", "tensorflow"),
        ("from launcher.local import runner", "launcher.local.runner"),
    ],
)
def test_an_import_against_the_table_fails(tmp_path, added, arrow):
    """plan.py, pure, with one more import (a function-level one too)."""
    modules = launcher_modules()
    changed = tmp_path / "plan.py"
    changed.write_text(modules["launcher.plans.training_plan"].read_text() + "\n" + added + "\n")
    added_problems = set(problems(MAP, {**modules, "launcher.plans.training_plan": changed})) - set(problems(MAP))
    assert added_problems == {f"launcher.plans.training_plan imports {arrow}, which its row does not allow"}


def test_a_module_missing_from_the_table_fails():
    without = problems({k: v for k, v in MAP.items() if k != "launcher.plans.training_plan"})
    assert set(without) - set(problems(MAP)) == {"launcher.plans.training_plan: no row in docs/CONTRACT.md"}


def test_an_allowed_import_no_longer_made_fails():
    allowed = {**MAP, "launcher.plans.training_plan": MAP["launcher.plans.training_plan"] | {"launcher.cli.render"}}
    assert set(problems(allowed)) - set(problems(MAP)) == {
        "launcher.plans.training_plan: its row allows launcher.cli.render, which it does not import"
    }


def test_modules_called_pure_start_no_process_thread_or_connection():
    assert pure_modules(TEXT) >= {"launcher.plans.training_plan", "launcher.plans.hosts"}
    assert impure(pure_modules(TEXT)) == []


def test_a_pure_module_that_loads_impure_ones_fails():
    """local/local_request.py reaches processes and threads through the modules it loads: it is not pure. (Its ports are
    bound by the bundled hetero_cluster, loaded at call time through facts.contract, which this reading does not
    follow.)"""
    assert sorted(impure({"launcher.local.local_request"})) == [
        "launcher.local.local_request is called Pure but imports subprocess (through launcher.local.runtime)",
        "launcher.local.local_request is called Pure but imports threading (through launcher.local.channels)",
    ]
    assert "launcher.local.local_request" not in pure_modules(TEXT)


def test_the_entry_points_import_nothing_of_the_launcher():
    (row,) = [m.group(1) for m in map(ENTRY_POINTS_ROW.match, TEXT.splitlines()) if m]
    assert "Never `launcher`" in row
    scripts = sorted((REPO / "entrypoints").glob("*.py"))
    assert scripts and [p.name for p in scripts if "launcher" in top_level_packages(p)] == []
