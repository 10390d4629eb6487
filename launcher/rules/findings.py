"""A rule's finding: the spec field it is about, what is wrong and the fix, and how bad it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from launcher.spec import Spec


@dataclass(frozen=True)
class Finding:
    field: str  # dotted path in the spec
    message: str  # what is wrong, and the fix
    severity: Literal["error", "warning"] = "error"

    def render(self, spec: Spec) -> str:
        if self.field.startswith("--"):  # a command-line option: no place in the file
            return f"{self.field}: {self.message}"
        return (
            f"{spec.where(self.field)}: {self.field}: {self.message}"
            if self.field
            else f"{spec.where('')}: {self.message}"
        )


def error(field: str, message: str) -> Finding:
    return Finding(field, message, "error")


def warning(field: str, message: str) -> Finding:
    return Finding(field, message, "warning")
