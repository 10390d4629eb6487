"""What goes into sourcedir.tar.gz: the source dir's files, less `.git/`, `__pycache__/`, `*.pyc` and what its
`.dfmignore` names. The dry run lists this, and the submit packs exactly these files.

`.dfmignore` follows gitignore's syntax, read here with fnmatch: `#` comments, `!` to re-include, a trailing `/`
for folders only, a pattern with a `/` anchored at the source dir, one without matching a name at any depth, `**`
across folders. As in git, a file inside an ignored folder cannot be re-included.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

IGNORE_FILE = ".dfmignore"
ALWAYS_SKIPPED = (".git/", "__pycache__/", "*.pyc", IGNORE_FILE)
LARGE_BYTES = 10 * 1024 * 1024  # a source dir past this is probably shipping data or build output


@dataclass(frozen=True)
class Rule:
    pattern: str
    negated: bool
    folders_only: bool
    anchored: bool

    def matches(self, path: str, is_folder: bool) -> bool:
        if self.folders_only and not is_folder:
            return False
        if self.anchored:
            return fnmatchcase(path, self.pattern) or fnmatchcase(path, self.pattern.replace("**/", ""))
        return fnmatchcase(path.rsplit("/", 1)[-1], self.pattern)


def parse_rules(lines: list[str]) -> list[Rule]:
    rules = []
    for line in lines:
        line = line.rstrip("\n").rstrip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        line = line[1:] if negated else line
        folders_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        rules.append(Rule(line.lstrip("/"), negated, folders_only, anchored))
    return rules


def _ignored(path: str, is_folder: bool, rules: list[Rule]) -> bool:
    verdict = False
    for rule in rules:
        if rule.matches(path, is_folder):
            verdict = not rule.negated
    return verdict


@dataclass(frozen=True)
class SourceListing:
    directory: str
    files: tuple[tuple[str, int], ...]  # (path relative to the directory, bytes), sorted by path
    skipped: tuple[str, ...]  # the paths left out (a folder counts once, with a trailing /)

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)

    def biggest(self, count: int = 3) -> list[tuple[str, int]]:
        return sorted(self.files, key=lambda item: (-item[1], item[0]))[:count]

    def document(self) -> dict:
        return {
            "directory": self.directory,
            "files": len(self.files),
            "bytes": self.total_bytes,
            "biggest": [{"path": path, "bytes": size} for path, size in self.biggest()],
            "skipped": list(self.skipped),
        }

    def warning(self) -> str | None:
        if self.total_bytes <= LARGE_BYTES:
            return None
        big = ", ".join(f"{path} ({human_bytes(size)})" for path, size in self.biggest())
        return (
            f"source dir {self.directory}: {human_bytes(self.total_bytes)} to upload with every job ({big}); "
            f"name what the job does not need in {IGNORE_FILE} (gitignore syntax)"
        )


def list_source(directory: str) -> SourceListing:
    """The files of `directory` that go into the tarball, and what is left out."""
    root = Path(directory)
    ignore_file = root / IGNORE_FILE
    lines = ignore_file.read_text(encoding="utf-8", errors="replace").splitlines() if ignore_file.is_file() else []
    rules = parse_rules(list(ALWAYS_SKIPPED) + lines)
    files, skipped = [], []
    for folder, subfolders, names in os.walk(root):
        relative = Path(folder).relative_to(root).as_posix()
        prefix = "" if relative == "." else f"{relative}/"
        for sub in sorted(subfolders):
            if _ignored(prefix + sub, True, rules):
                skipped.append(f"{prefix}{sub}/")
        subfolders[:] = sorted(sub for sub in subfolders if not _ignored(prefix + sub, True, rules))
        for name in sorted(names):
            path = prefix + name
            if _ignored(path, False, rules):
                skipped.append(path)
            else:
                files.append((path, (Path(folder) / name).stat().st_size))
    return SourceListing(str(directory), tuple(sorted(files)), tuple(sorted(skipped)))


def human_bytes(size: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"
