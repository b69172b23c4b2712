"""Knowledge models: model names GraphGate adds to the upstream's list, each one an upstream model
grounded in one knowledge base, like an Ollama Modelfile's ``FROM`` (issue 20, part 2).

    PUT /rag/models/hr-assistant {"model": "llama3.2", "kb": "hr", "mode": "mix",
                                  "system": "You answer HR questions.", "options": {"temperature": 0.2}}

Any Ollama client then lists ``hr-assistant:latest`` and chats with it; the chat is grounded in
``hr`` and forwarded as ``llama3.2`` (proxy/gateway/grounding.py). The list is
``<data_dir>/models.json``, written whole (fsynced, renamed over the old one) by one writer at a
time (on PostgreSQL, a list every replica shares and follows: proxy/control/lists.py); lookups are one
dict read, on the chat path.

Names follow Ollama's: ``hr`` and ``hr:latest`` are one model, and a name is stored with its tag.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from proxy.control.held import HeldList
from proxy.control.lists import MODELS, FileLists, Lists, StoredList
from proxy.core import json_text
from proxy.core.errors import BadRequest, NotFound, ServiceUnavailable
from proxy.core.modes import MODES

log = logging.getLogger("graphgate")

MODELS_FILE = "models.json"
# Ollama's model names: an optional namespace path, a name, an optional tag
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}"
_NAME = re.compile(rf"(?:{_PART}/){{0,2}}{_PART}(?::[A-Za-z0-9_][A-Za-z0-9._-]{{0,127}})?")
SPEC_KEYS = frozenset({"model", "kb", "mode", "system", "options"})
MAX_SYSTEM_CHARS = 32_000
MAX_OPTIONS_BYTES = 8 * 1024


def canonical(name: str) -> str:
    """``name`` with its tag: Ollama's ``hr`` is ``hr:latest``."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def model_key(name: str) -> str:
    """What makes two names one model for Ollama: case, the default registry and namespace, the tag."""
    key = canonical(name.strip()).casefold()
    for prefix in ("registry.ollama.ai/", "library/"):
        key = key.removeprefix(prefix)
    return key


def check_model_name(name: Any, what: str = "model name") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BadRequest(f"invalid {what} {str(name)[:100]!r}: use Ollama's form, e.g. 'hr-assistant' or "
                         "'team/hr:v2' (letters, digits, '.', '_', '-')")
    return name


@dataclass(frozen=True)
class KnowledgeModel:
    alias: str                     # with its tag
    model: str                     # the upstream model it is forwarded as
    kb: str                        # the knowledge base that grounds its chats
    mode: str | None = None        # the retrieval mode of its chats (None: GRAPHGATE_MODE)
    system: str | None = None      # its system prompt, used when a conversation has none
    options: dict[str, Any] = field(default_factory=dict)   # defaults for the request's options
    created_at: str = ""
    updated_at: str = ""

    def entry(self) -> dict[str, Any]:
        return {"model": self.model, "kb": self.kb, "mode": self.mode, "system": self.system,
                "options": self.options, "created_at": self.created_at, "updated_at": self.updated_at}

    def describe(self, upstream_models: Iterable[str] | None = None) -> dict[str, Any]:
        """The alias as the API shows it; ``base_model_present`` is None when the upstream's list is unknown."""
        names = None if upstream_models is None else {model_key(m) for m in upstream_models}
        present = None if names is None else model_key(self.model) in names
        shadowed = None if names is None else model_key(self.alias) in names
        # shadowed: the upstream has a model of this name (pulled after the alias was made): it wins
        return {"alias": self.alias, **self.entry(), "base_model_present": present, "shadowed": shadowed}


def check_spec(alias: str, spec: dict[str, Any], known_bases: Iterable[str]) -> KnowledgeModel:
    """A knowledge model from a PUT body; 400 naming the first bad field (nothing is stored)."""
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise BadRequest(f"unknown field {unknown[0]!r}: a knowledge model has {', '.join(sorted(SPEC_KEYS))}")
    model = check_model_name(spec.get("model"), "base model")
    if model_key(model) == model_key(alias):
        raise BadRequest(f"a knowledge model cannot be its own base model ({alias!r})")
    kb = spec.get("kb", "default")
    if not isinstance(kb, str) or kb not in set(known_bases):
        raise BadRequest(f"no knowledge base named {str(kb)[:100]!r}: create it first (POST /rag/kbs)")
    mode = spec.get("mode")
    if mode is not None and mode not in MODES:
        raise BadRequest(f"invalid mode {str(mode)[:40]!r}: one of {', '.join(MODES)}")
    system = spec.get("system")
    if system is not None and (not isinstance(system, str) or len(system) > MAX_SYSTEM_CHARS):
        raise BadRequest(f"system must be a string of at most {MAX_SYSTEM_CHARS} characters")
    options = spec.get("options") or {}
    if not isinstance(options, dict):
        raise BadRequest("options must be an object, as in Ollama's requests (e.g. {\"temperature\": 0.2})")
    if len(json.dumps(options)) > MAX_OPTIONS_BYTES:
        raise BadRequest(f"options must be at most {MAX_OPTIONS_BYTES} bytes of JSON")
    bad = not_finite(options)
    if bad is not None:
        raise BadRequest(f"option {bad[0]!r} is {bad[1]}: an option's number must be finite "
                         "(JSON has no NaN or Infinity)")
    return KnowledgeModel(alias=alias, model=model, kb=kb, mode=mode, system=system or None, options=dict(options))


def not_finite(options: dict[str, Any]) -> tuple[str, str] | None:
    """The first option holding NaN or an infinity, as (where, what), or None. Stored, it would be
    written back as no valid JSON: in the list of models and in every chat sent upstream."""
    return json_text.first_not_finite(options)


def check_chain(model: KnowledgeModel, models: dict[str, KnowledgeModel]) -> None:
    """400 when ``model`` would chain with another knowledge model: its base is one, or it is the
    base of one. A chat goes upstream as its knowledge model's base, once: an alias of an alias
    would reach the upstream under a name it does not have, and two aliases of each other, never."""
    others = {model_key(alias): m for alias, m in models.items() if model_key(alias) != model_key(model.alias)}
    base = others.get(model_key(model.model))
    if base is not None and model_key(base.model) == model_key(model.alias):
        raise BadRequest(f"a cycle of knowledge models: {model.alias} -> {base.alias} -> {model.alias}; "
                         "a knowledge model's base must be an upstream model")
    if base is not None:
        raise BadRequest(f"{model.model!r} is a knowledge model: {model.alias} -> {base.alias} -> {base.model} "
                         f"would be a chain; use its base model ({base.model!r}) instead")
    user = next((m for m in others.values() if model_key(m.model) == model_key(model.alias)), None)
    if user is not None:
        raise BadRequest(f"the knowledge model {user.alias!r} has {model.alias!r} as its base model: "
                         f"{user.alias} -> {model.alias} -> {model.model} would be a chain; "
                         "a knowledge model's base must be an upstream model")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class KnowledgeModels:
    """The knowledge models of a gateway (see the module's docstring)."""

    def __init__(self, data_dir: Path, lists: Lists | None = None) -> None:
        self.path = data_dir / MODELS_FILE
        self.held: HeldList[dict[str, KnowledgeModel]] = HeldList(lists or FileLists(data_dir), MODELS, _models, {})
        self.where = self.held.where   # the file, or the list replicas share
        self.upstream_models: tuple[str, ...] | None = None   # the upstream's names when last read
        self.upstream_keys: frozenset[str] = frozenset()        # their model_key()s

    async def load(self) -> KnowledgeModels:
        """Read the list; an unreadable one is left as it is on disk (and changes to it refused), so
        that a gateway whose data directory is broken still proxies plain models."""
        if await self.held.load() is not None:
            log.error("knowledge models unavailable: %s", self.error)
        return self

    async def refresh(self, stored: StoredList) -> None:
        """A newer version of the shared list (another replica's change): aliases appear and go."""
        await self.held.refresh(stored)
        if self.error:
            log.error("knowledge models unavailable: %s", self.error)

    @property
    def models(self) -> dict[str, KnowledgeModel]:
        return self.held.value

    @property
    def version(self) -> int:
        return self.held.version

    @property
    def error(self) -> str | None:
        """Why the list could not be read (then it is not written either)."""
        failure = self.held.failure
        return None if failure is None else f"cannot read {self.where}: {failure}"

    def _writable(self) -> None:
        if self.error:
            raise ServiceUnavailable(f"the knowledge models are unavailable: {self.error}")

    async def _change(self, change: Callable[[dict[str, KnowledgeModel]], dict[str, KnowledgeModel]]) -> None:
        """Apply ``change`` to the stored list and write it; the chats use the new one once written."""
        def rewrite(models: dict[str, KnowledgeModel]) -> dict[str, Any]:
            return {"models": {alias: m.entry() for alias, m in sorted(change(models).items())}}

        try:
            await self.held.change(rewrite)
        except OSError as exc:   # a full disk, a lost lists server: nothing was written, nothing changes
            log.error("knowledge models: cannot write %s: %s", self.where, exc)
            raise ServiceUnavailable(f"the knowledge models could not be saved: {exc.strerror or exc}; "
                                     "nothing was changed") from exc

    def note_upstream(self, names: tuple[str, ...]) -> None:
        """The upstream's model names, as last read: an upstream model wins over a knowledge model of
        the same name (one pulled after the alias was made), and a new alias may not take one."""
        self.upstream_models = names
        self.upstream_keys = frozenset(model_key(name) for name in names)

    def shadowed(self, model: KnowledgeModel) -> bool:
        return model_key(model.alias) in self.upstream_keys

    def claims(self, name: str) -> KnowledgeModel | None:
        """The knowledge model that already has ``name`` in Ollama's sense (case, namespace, tag)."""
        key = model_key(name)
        return next((m for m in self.models.values() if model_key(m.alias) == key), None)

    # --- reads (the chat path: one dict lookup) ---

    def resolve(self, name: str) -> KnowledgeModel | None:
        """The knowledge model a request's model name names, if any (``hr`` or ``hr:latest``)."""
        return _resolve(self.models, name)

    def list(self, kbs: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Every knowledge model (or those grounded in ``kbs``), by name."""
        wanted = None if kbs is None else set(kbs)
        return [m.describe(self.upstream_models) for alias, m in sorted(self.models.items())
                if wanted is None or m.kb in wanted]

    def get(self, alias: str) -> dict[str, Any]:
        found = self.resolve(alias)
        if found is None:
            raise NotFound(f"no knowledge model named {alias!r}")
        return found.describe(self.upstream_models)

    # --- writes (one at a time; the list first, then the dict the chats read) ---

    async def put(self, alias: str, spec: dict[str, Any], known_bases: Iterable[str]) -> tuple[dict[str, Any], bool]:
        """Create or replace ``alias``; (its description, whether it is new)."""
        alias = canonical(check_model_name(alias, "knowledge model name"))
        model = check_spec(alias, spec, known_bases)
        self._writable()
        stored: list[tuple[KnowledgeModel, bool]] = []

        def store(models: dict[str, KnowledgeModel]) -> dict[str, KnowledgeModel]:
            check_chain(model, models)   # against the list as it is now (another replica's too)
            old = models.get(alias)
            now = _now()
            made = KnowledgeModel(**{**model.__dict__, "created_at": old.created_at if old else now,
                                     "updated_at": now})
            stored[:] = [(made, old is None)]
            return {**models, alias: made}

        await self._change(store)
        made, created = stored[0]
        return made.describe(self.upstream_models), created

    async def delete(self, alias: str) -> dict[str, Any]:
        self._writable()
        gone: list[str] = []

        def remove(models: dict[str, KnowledgeModel]) -> dict[str, KnowledgeModel]:
            found = _resolve(models, alias)
            if found is None:
                raise NotFound(f"no knowledge model named {alias!r}")
            gone[:] = [found.alias]
            return {name: m for name, m in models.items() if name != found.alias}

        await self._change(remove)
        return {"deleted": gone[0]}


def _models(body: Any) -> dict[str, KnowledgeModel]:
    """The knowledge models of the list's body; ValueError or TypeError when it is not of its shape."""
    entries = body.get("models") if isinstance(body, dict) else None
    if not isinstance(entries, dict) or not all(isinstance(e, dict) for e in entries.values()):
        raise ValueError('not a list of knowledge models ({"models": {"<name>": {...}}})')
    return {alias: KnowledgeModel(alias=alias, **_finite(alias, entry)) for alias, entry in entries.items()}


def _finite(alias: str, entry: dict[str, Any]) -> dict[str, Any]:
    """A stored entry without the options that hold NaN or an infinity (written before they were
    refused, or by hand): they would make the list and the chats invalid JSON."""
    options = entry.get("options")
    if not isinstance(options, dict) or not_finite(options) is None:
        return entry
    kept = {key: value for key, value in options.items() if not_finite({key: value}) is None}
    log.warning("knowledge model %s: options %s ignored (NaN or infinite)", alias, sorted(set(options) - set(kept)))
    return {**entry, "options": kept}


def _resolve(models: dict[str, KnowledgeModel], name: str) -> KnowledgeModel | None:
    """The knowledge model a request's model name names, if any (``hr`` or ``hr:latest``)."""
    found = models.get(name)
    if found is None and ":" not in name.rsplit("/", 1)[-1]:
        found = models.get(f"{name}:latest")
    return found
