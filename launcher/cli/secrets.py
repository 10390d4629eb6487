"""Masking environment values whose names look secret, wherever dfm prints them (dry runs, local runs).

Pure functions, no I/O. A name looks secret when one of its parts (split at `_`, `-`, `.`, digits and
camelCase) is a word like KEY, TOKEN or PASSWORD: `DB_PASSWORD`, `AWS_SECRET_ACCESS_KEY`, `githubToken`
and `API_KEY_2` are masked; `KEYBOARD` and `MONKEY_PATCH` are not. Only what is shown is masked: the
request sent to AWS and the environment the script sees keep the real values.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

MASK = "****"
SECRET_WORDS = frozenset(
    {
        "KEY",
        "APIKEY",
        "SECRET",
        "TOKEN",
        "PASSWORD",
        "PASSWD",
        "PWD",
        "PASS",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDS",
        "AUTH",
        "AUTHORIZATION",
        "PRIVATE",
        "SIGNATURE",
        "COOKIE",
        "SESSION",
        "CERT",
        "DSN",
    }
)
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")


def name_parts(name: str) -> list[str]:
    """`dbPassword_2` -> ["DB", "PASSWORD"]: words split at separators, digits and camelCase."""
    return [part.upper() for part in _PARTS.findall(name)]


def is_secret_name(name: str) -> bool:
    return any(part in SECRET_WORDS or (part.endswith("S") and part[:-1] in SECRET_WORDS) for part in name_parts(name))


def mask_environment(env: Mapping[str, Any] | None, show: bool = False) -> dict[str, Any]:
    """A copy of `env` with secret-looking values replaced by MASK (unchanged with `show`)."""
    if env is None:
        return {}
    if show:
        return dict(env)
    return {
        name: MASK if is_secret_name(str(name)) and value not in ("", None) else value for name, value in env.items()
    }


ENVIRONMENT_KEYS = ("env", "environment", "Environment")  # a process's, the SDK's kwarg, the API request's


def mask_document(value: Any, show: bool = False) -> Any:
    """A dry-run document (any JSON-able value) with every environment mapping in it masked."""
    if isinstance(value, Mapping):
        return {
            k: mask_environment(v, show) if k in ENVIRONMENT_KEYS and isinstance(v, Mapping) else mask_document(v, show)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [mask_document(v, show) for v in value]
    return value
