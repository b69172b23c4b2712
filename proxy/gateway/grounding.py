"""Which knowledge base grounds a request, and under which name its model goes upstream.

A request naming a knowledge model (proxy/control/models.py) is rewritten into a request
for its base model: the name replaced, the knowledge model's options under the request's own, its
system prompt when the conversation has none (a Modelfile's SYSTEM); it is grounded in the model's
knowledge base. Any other model is grounded in GRAPHGATE_PLAIN_MODEL_KB (``default``; ``none``:
not grounded). The reply is renamed back, line by line as it streams (``rename_reply``), so the
client sees the name it asked for.

What a key may see decides too (proxy/guards/access.py): a knowledge model of a base the key may
not see, or a plain model when GRAPHGATE_SCOPED_KEYS_SEE_PLAIN_MODELS hides them, is a model that
does not exist (Ollama's own 404); a plain model whose grounding base the key may not read is
forwarded ungrounded. The reply is renamed back by proxy/gateway/renaming.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.control.principals import Principal
from proxy.core.errors import GraphGateError, NotFound, ServiceUnavailable
from proxy.gateway.chat import ChatTurn, Grounding
from proxy.guards.access import principal
from proxy.knowledge.bases import acquire_for_request

if TYPE_CHECKING:
    from starlette.requests import Request

    from proxy.control.models import KnowledgeModel
    from proxy.knowledge.service import Knowledge

NONE = "none"


def model_not_found(name: str) -> NotFound:
    return NotFound(f"model '{name}' not found")   # Ollama's words (reference/ollama-api.md)


def plain_models_visible(gateway: Any, who: Principal) -> bool:
    return who.kbs is None or gateway.settings.scoped_keys_see_plain_models


def knowledge_model(request: Request, name: str) -> KnowledgeModel | None:
    """The knowledge model ``name`` names, for this request's key: 404 (as Ollama's) for one of a
    base the key may not see, and for a plain model the key may not see."""
    gateway = request.app.state.gateway
    found = gateway.models.resolve(name) if gateway.models is not None else None
    if found is not None and gateway.models.shadowed(found):
        found = None   # the upstream has a model of that name (pulled since): it wins
    who = principal(request)
    if found is not None:
        if not who.sees(found.kb):
            raise model_not_found(name)
        return found
    if not plain_models_visible(gateway, who):
        raise model_not_found(name)
    return None


# Ollama's options that its OpenAI-compatible API takes, as its own top-level fields
OPENAI_FIELDS = {"temperature": "temperature", "top_p": "top_p", "seed": "seed", "stop": "stop",
                 "num_predict": "max_tokens", "frequency_penalty": "frequency_penalty",
                 "presence_penalty": "presence_penalty"}


def apply_model(body: dict[str, Any], found: KnowledgeModel, *, system_field: bool = False,
                openai: bool = False) -> dict[str, Any]:
    """``body`` for the base model: renamed, with the knowledge model's options under the request's
    and its system prompt when the request has none (``system_field``: /api/generate's field).
    ``openai``: a /v1 body, which has no ``options``: those /v1 takes become its top-level fields
    (unless the request sets them), the others cannot be sent that way."""
    out = {**body, "model": found.model}
    if found.options and openai:
        for option, name in OPENAI_FIELDS.items():
            if option in found.options and name not in body:
                out[name] = found.options[option]
    elif found.options:
        given = body.get("options")
        out["options"] = {**found.options, **(given if isinstance(given, dict) else {})}
    if found.system:
        if system_field:
            if not body.get("system"):
                out["system"] = found.system
        else:
            messages = body.get("messages")
            if isinstance(messages, list) and not any(isinstance(m, dict) and m.get("role") == "system"
                                                      for m in messages):
                out["messages"] = [{"role": "system", "content": found.system}, *messages]
    return out


async def ground(request: Request, found: KnowledgeModel | None) -> Grounding:
    """The knowledge base that grounds a chat with ``found`` (a knowledge model, or None for a plain
    model), opened and leased for the request. Never an error for a plain model: a chat is
    forwarded whatever happens to its grounding."""
    gateway = request.app.state.gateway
    if found is not None:
        kb, mode = found.kb, found.mode
    else:
        kb, mode = gateway.settings.plain_model_kb, None
        if kb == NONE:
            return Grounding(None, reason="plain models are not grounded (GRAPHGATE_PLAIN_MODEL_KB=none)")
        if not principal(request).can(kb, "read"):
            return Grounding(None, reason="this API key may not read the knowledge base of plain models")
    try:
        knowledge = await _open(gateway, kb, request)
    except NotFound:
        if found is not None:   # its base was deleted: the model is gone with it
            raise NotFound(f"model '{found.alias}' not found: its knowledge base '{kb}' no longer exists") from None
        return Grounding(None, reason=f"GRAPHGATE_PLAIN_MODEL_KB names no knowledge base ({kb!r})")
    except GraphGateError as exc:
        return Grounding(kb, reason=f"knowledge base {kb!r} unavailable: {exc.message}", mode=mode, model=found)
    return Grounding(kb, knowledge, mode=mode, model=found)


async def _open(gateway: Any, kb: str, request: Request) -> Knowledge:
    if gateway.bases is None:   # the lifespan has not made the bases (a gateway starting or stopping)
        raise ServiceUnavailable("the knowledge bases are unavailable")
    return await acquire_for_request(gateway.bases, kb, request.scope)   # default's included


async def ground_turn(turn: ChatTurn) -> ChatTurn:
    """The chat pipeline's first stage: the turn for its base model, with its grounding. A
    completion is grounded only when it names a knowledge model or completions are augmented
    (GRAPHGATE_AUGMENT_GENERATE); a knowledge model's base is opened either way (a 404 when it was
    deleted)."""
    found = knowledge_model(turn.request, turn.model)
    if found is not None:
        turn.body = apply_model(turn.body, found, openai=turn.flavour == "openai",
                                system_field=turn.flavour == "generate")
        turn.changed = True
    elif turn.flavour == "generate" and not turn.request.app.state.gateway.settings.augment_generate:
        return turn
    turn.grounding = await ground(turn.request, found)
    return turn
