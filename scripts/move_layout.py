"""Move launcher/'s flat modules into folders by concern, and rewrite every reference to them.

    python scripts/move_layout.py            # in a clean checkout: git mv, then rewrite imports, strings, docs
    python scripts/move_layout.py --dry-run  # only print the moves

Layout: cli/ (click commands and what they print), spec/ (the schema and the YAML loader), rules/ (the checks),
plans/ (spec -> plan values), facts/ (what dfm knows of SageMaker and the bundled scripts); local/,
sagemaker_backend/ and data/ stay; errors.py and compile.py stay at the top. A module that was
a concern's entry (cli.py, spec.py, rules.py) becomes its package's __init__.py, so `launcher.cli`, `launcher.spec`
and `launcher.rules` keep their names. New modules are placed by their prefix (cli_*, spec_*, rules_*, *_plan);
any other top-level module is left where it is and named at the end.

References rewritten in every tracked text file: `from launcher import x` (one line per moved name, `as x` keeping the
local name), dotted names `launcher.x.y` in code and strings (imports, mock targets, `-m launcher.cli`), paths
`launcher/x.py`, and the names docs/CONTRACT.md's module map allows (its third column). Run it once, on a clean
tree; then run the fast tests.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "launcher"

EXPLICIT = {  # old path under launcher/ -> new path under launcher/
    "cli.py": "cli/__init__.py",
    "cli_errors.py": "cli/compile_errors.py",
    "data/cli.py": "cli/data.py",
    "data/cli_prepare.py": "cli/prepare.py",
    "render.py": "cli/render.py",
    "secrets.py": "cli/secrets.py",
    "tune_report.py": "cli/tune_report.py",
    "spec.py": "spec/__init__.py",
    "specfile.py": "spec/file.py",
    "spec_types.py": "spec/value_types.py",
    "rules.py": "rules/__init__.py",
    "findings.py": "rules/findings.py",
    "request_limits.py": "rules/request_limits.py",
    "plan.py": "plans/training.py",
    "hosts.py": "plans/hosts.py",
    "tasks.py": "plans/tasks.py",
    "recovery.py": "plans/recovery.py",
    "catalog.py": "facts/catalog.py",
    "contract.py": "facts/contract.py",
    "conventions.py": "facts/conventions.py",
    "images.py": "facts/images.py",
    "service_model.py": "facts/service_model.py",
}
PREFIXES = (("cli_", "cli/"), ("spec_", "spec/"), ("rules_", "rules/"))
# errors.py: every module raises DfmError. compile.py: spec -> rules -> plan, above both (the rules read the plans'
# cluster model, so compile inside plans/ would tie the two folders in a circle).
STAYS = {"__init__.py", "errors.py", "compile.py"}
NEW_PACKAGES = {  # folders that get a fresh __init__.py (the others receive a moved module as theirs)
    "plans": '"""Spec -> plan: what a job is, as immutable values (training, tuning, ...). Pure."""\n',
    "facts": '"""What dfm knows of SageMaker, its images and instance types, and the bundled entry points."""\n',
}
NEW_ROWS = {  # the module map's rows of the modules the move adds
    "plans/__init__.py": "the plans: spec -> immutable values of what a job is | nothing of dfm's",
    "facts/__init__.py": "what dfm knows of SageMaker and the bundled scripts | nothing of dfm's",
    "cli/__main__.py": "`python -m launcher.cli` | `cli`",
}
CLI_MAIN = '"""`python -m launcher.cli`: the dfm command."""\n\nimport sys\n\nfrom launcher.cli import main\n\nsys.exit(main())\n'
TEXT_SUFFIXES = {".py", ".md", ".cfg", ".toml", ".txt", ".sh", ".yaml", ".yml", ".ini"}
TEXT_NAMES = {"Makefile"}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def moves() -> tuple[dict[str, str], list[str]]:
    """(old path -> new path, both relative to launcher/), and the top-level modules left in place."""
    root = REPO / PACKAGE
    found, left = {}, []
    for old, new in EXPLICIT.items():
        if (root / old).is_file():
            found[old] = new
    for path in sorted(root.glob("*.py")):
        name = path.name
        if name in found or name in STAYS:
            continue
        for prefix, folder in PREFIXES:
            if name.startswith(prefix):
                found[name] = folder + name[len(prefix):]
                break
        else:
            if name.endswith("_plan.py"):
                found[name] = "plans/" + name[: -len("_plan.py")] + ".py"
            else:
                left.append(name)
    targets = list(found.values())
    duplicated = {t for t in targets if targets.count(t) > 1}
    if duplicated:
        raise SystemExit(f"two modules would move to {', '.join(sorted(duplicated))}: add an EXPLICIT entry")
    return found, left


def module(path: str) -> str:
    """launcher/-relative path -> dotted module name."""
    parts = Path(path).with_suffix("").parts
    return ".".join((PACKAGE, *(parts[:-1] if parts[-1] == "__init__" else parts)))


FROM_IMPORT = re.compile(r"^(?P<indent>[ \t]*)from launcher(?P<sub>(?:\.\w+)*) import (?P<names>\([^)]*\)|[^\n#]+)",
                         re.MULTILINE)
DOTTED = re.compile(r"(?<![\w.])launcher((?:\.\w+)+)")
SLASHED = re.compile(r"(?<![\w/])launcher/((?:\w+/)*\w+\.py)")


class Rewriter:
    def __init__(self, found: dict[str, str]):
        self.modules = {module(old): module(new) for old, new in found.items()}
        self.paths = {f"{PACKAGE}/{old}": f"{PACKAGE}/{new}" for old, new in found.items()}

    def dotted(self, name: str) -> str:
        """launcher.a.b.c -> its new name (the longest moved prefix replaced)."""
        parts = name.split(".")
        for end in range(len(parts), 1, -1):
            head = ".".join(parts[:end])
            if head in self.modules:
                return ".".join([self.modules[head], *parts[end:]])
        return name

    def _from_import(self, match: re.Match) -> str:
        indent, source = match["indent"], f"{PACKAGE}{match['sub']}"
        names = [n.strip() for n in match["names"].strip("()\n ").replace("\n", " ").split(",") if n.strip()]
        if not any(f"{source}.{item.partition(' as ')[0].strip()}" in self.modules for item in names):
            return f"{indent}from {self.dotted(source)} import {match['names']}"  # only the module moved: keep the names as written
        kept, lines = [], []
        for item in names:
            name, _, alias = (part.strip() for part in item.partition(" as "))
            target = self.modules.get(f"{source}.{name}")
            if target is None:
                kept.append(item)
                continue
            parent, _, leaf = target.rpartition(".")
            local = alias or name
            lines.append(f"{indent}from {parent} import {leaf}" + (f" as {local}" if local != leaf else ""))
        if kept:
            lines.insert(0, f"{indent}from {self.dotted(source)} import {', '.join(kept)}")
        return "\n".join(lines)

    def text(self, text: str) -> str:
        text = FROM_IMPORT.sub(self._from_import, text)
        text = DOTTED.sub(lambda m: self.dotted(m.group(0)), text)
        return SLASHED.sub(lambda m: self.paths.get(m.group(0), m.group(0)), text)

    def contract_row(self, line: str) -> str:
        """The module map's third column names modules relative to launcher/: rename the moved ones."""
        cells = line.split(" | ")
        if len(cells) < 3 or not line.startswith("| `launcher/"):
            return line

        def rename(match: re.Match) -> str:
            name = match.group(1)
            if name.endswith(".*"):
                return f"`{self.dotted(PACKAGE + '.' + name[:-2])[len(PACKAGE) + 1:]}.*`"
            new = self.dotted(f"{PACKAGE}.{name}")
            return f"`{new[len(PACKAGE) + 1:]}`"

        cells[-1] = re.sub(r"`([\w.]+(?:\.\*)?)`", rename, cells[-1])
        # `data.*` allowed every module of data/: name those that move out of it (data.cli_prepare -> cli.prepare)
        own = module(cells[0][len(f"| `{PACKAGE}/"):].rstrip("`"))
        for folder in re.findall(r"`([\w.]+)\.\*`", line.split(" | ")[-1]):
            prefix = f"{PACKAGE}.{folder}."
            for old, new in self.modules.items():
                if old.startswith(prefix) and not new.startswith(prefix) and old != own:
                    cells[-1] = cells[-1][: -len(" |")] + f", `{new[len(PACKAGE) + 1:]}` |"
        return " | ".join(cells)


def text_files() -> list[Path]:
    files = []
    for name in git("ls-files").splitlines():
        path = REPO / name
        if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES):
            files.append(path)
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="only print the moves")
    args = parser.parse_args()
    found, left = moves()
    for old, new in found.items():
        print(f"{PACKAGE}/{old} -> {PACKAGE}/{new}")
    if args.dry_run:
        return 0
    if git("status", "--porcelain", "--untracked-files=no").strip():
        raise SystemExit("the tree has uncommitted changes: commit or stash them first")
    if (REPO / PACKAGE / "plans").exists():
        raise SystemExit("launcher/plans exists already: the layout was moved")
    # The contract's row names first (they are relative names, read before any path changes).
    rewriter = Rewriter(found)
    contract = REPO / "docs" / "CONTRACT.md"
    if contract.is_file():
        lines = [rewriter.contract_row(line) for line in contract.read_text().split("\n")]
        first = next(i for i, line in enumerate(lines) if line.startswith(f"| `{PACKAGE}/__init__.py`"))
        lines[first + 1:first + 1] = [f"| `{PACKAGE}/{path}` | {row} |" for path, row in NEW_ROWS.items()]
        contract.write_text("\n".join(lines))
    for folder, docstring in NEW_PACKAGES.items():
        (REPO / PACKAGE / folder).mkdir(exist_ok=True)
    for old, new in found.items():
        (REPO / PACKAGE / new).parent.mkdir(parents=True, exist_ok=True)
        git("mv", f"{PACKAGE}/{old}", f"{PACKAGE}/{new}")
    for folder, docstring in NEW_PACKAGES.items():
        init = REPO / PACKAGE / folder / "__init__.py"
        if not init.exists():
            init.write_text(docstring)
            git("add", str(init.relative_to(REPO)))
    main_file = REPO / PACKAGE / "cli" / "__main__.py"
    if (REPO / PACKAGE / "cli" / "__init__.py").exists() and not main_file.exists():
        main_file.write_text(CLI_MAIN)
        git("add", str(main_file.relative_to(REPO)))
    changed = 0
    for path in text_files():
        if path == Path(__file__).resolve():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:  # a binary file with a text suffix
            continue
        new = rewriter.text(text)
        if new != text:
            path.write_text(new)
            changed += 1
    print(f"{len(found)} modules moved, {changed} files rewritten")
    if left:
        print("left in launcher/ (no rule places them): " + ", ".join(left))
    return 0


if __name__ == "__main__":
    sys.exit(main())
