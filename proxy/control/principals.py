"""Who a key (or a console login) stands for: a principal, its role and the knowledge bases it may
use. Roles nest: ``read`` (chat, query, listings) < ``write`` (documents, curation) < ``admin`` (the
base itself: its settings, its deletion, its knowledge models; keys and new bases need an admin
principal limited to no base). The guards (proxy/guards/access.py) ask it of a request."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Role = Literal["read", "write", "admin"]
ROLES: tuple[Role, ...] = ("read", "write", "admin")


@dataclass(frozen=True)
class Principal:
    name: str                       # the key's name ("admin" for GRAPHGATE_API_KEY, "console" for a login)
    role: Role
    kbs: frozenset[str] | None      # the bases it may use; None: every base

    @property
    def unrestricted(self) -> bool:
        return self.kbs is None and self.role == "admin"

    def sees(self, kb: str) -> bool:
        return self.kbs is None or kb in self.kbs

    def can(self, kb: str, action: Role) -> bool:
        return self.sees(kb) and ROLES.index(self.role) >= ROLES.index(action)

    def visible(self, names: Iterable[str]) -> list[str]:
        return [name for name in names if self.sees(name)]


ADMIN = Principal("admin", "admin", None)
