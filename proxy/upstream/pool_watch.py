"""The watcher of several upstreams: each member checked by a watcher of its own (which logs its
changes), the pool's members told what was found (reachable, version, the models they list), and
one state for them all, as /rag/health and the console read it: reachable while any member is,
a model present when any reachable member has it."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio

from proxy.core.settings_sections import UpstreamSettings
from proxy.upstream.pool import Member, Upstreams
from proxy.upstream.watch import WATCH_SECONDS, ModelState, UpstreamState, UpstreamWatcher, normalize


class UpstreamsWatcher(UpstreamWatcher):
    def __init__(self, pool: Upstreams, settings: UpstreamSettings, *, interval: float = WATCH_SECONDS,
                 chosen_model: Callable[[], str | None] = lambda: None) -> None:
        super().__init__(pool, settings, interval=interval, chosen_model=chosen_model)
        self.pool = pool
        self.url = pool.url
        self.watchers = [UpstreamWatcher(m.client, settings, interval=interval, chosen_model=chosen_model)
                         for m in pool.members]

    def members(self) -> list[dict[str, Any]]:
        return [member.describe() for member in self.pool.members]

    async def _check(self) -> UpstreamState:
        started, at = time.monotonic(), datetime.now(UTC)
        states: list[UpstreamState | None] = [None] * len(self.watchers)

        async def one(i: int) -> None:
            states[i] = await self.watchers[i].latest(0)

        async with anyio.create_task_group() as group:
            for i in range(len(self.watchers)):
                group.start_soon(one, i)
        checked = [s for s in states if s is not None]
        for member, state in zip(self.pool.members, checked, strict=True):
            _learn(member, state)
        up = [s for s in checked if s.reachable]
        if not up:
            return UpstreamState(self.url, False, None, "; ".join(s.error or "" for s in checked), at, started,
                                 None, None, self._unknown_roles())
        lists = [s.models for s in up if s.models is not None]
        models = tuple(dict.fromkeys(n for names in lists for n in names)) if lists else None
        roles = tuple(_merged_role([s.roles[i] for s in up]) for i in range(len(up[0].roles)))
        problems = {role.role: problem for role in roles if not role.present
                    for problem in [next((s.model_problems[role.role] for s in up
                                          if role.role in s.model_problems), None)] if problem}
        if models is None:
            problems["models"] = up[0].model_problems.get("models", "")
        latency = min((s.latency_ms for s in up if s.latency_ms is not None), default=None)
        return dataclasses.replace(up[0], url=self.url, error=None, checked_at=at, checked=started,
                                   latency_ms=latency, models=models, roles=roles, model_problems=problems)

    def _report(self, state: UpstreamState) -> None:
        """Nothing: each member's watcher has said what changed for it."""


def _learn(member: Member, state: UpstreamState) -> None:
    """What a member's check found, for the pool's choices."""
    if state.reachable:
        member.mark_up()
        member.version = state.version
        if state.models is not None:
            member.models = frozenset(normalize(n) for n in state.models)
    else:
        member.mark_down(state.error or "unreachable")


def _merged_role(roles: list[ModelState]) -> ModelState:
    """A role over the reachable members: present if any has the model, unknown if none says."""
    found = next((r for r in roles if r.present), None)
    if found is not None:
        return found
    return next((r for r in roles if r.present is False), roles[0])
