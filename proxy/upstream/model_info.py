"""What the upstream says about a model (capabilities, num_ctx parameter, trained context length),
from /api/show, cached briefly per model."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from proxy.upstream.client import Upstream

TTL = 60.0


@dataclass(frozen=True)
class ModelInfo:
    capabilities: tuple[str, ...]
    num_ctx: int | None          # the Modelfile's `num_ctx` parameter
    context_length: int | None   # what the model was trained for (model_info *.context_length)


def parse_show(data: dict[str, Any]) -> ModelInfo:
    """What is there of the expected fields; one of the wrong type counts as absent (a model is not
    worth failing a chat over)."""
    parameters = data.get("parameters")
    match = re.search(r"^\s*num_ctx\s+(\d+)\s*$", parameters if isinstance(parameters, str) else "", re.M)
    info = data.get("model_info")
    lengths = [v for k, v in (info.items() if isinstance(info, dict) else ())
               if k.endswith(".context_length") and isinstance(v, int) and not isinstance(v, bool)]
    capabilities = data.get("capabilities")
    return ModelInfo(tuple(c for c in capabilities if isinstance(c, str)) if isinstance(capabilities, list) else (),
                     int(match.group(1)) if match else None, max(lengths) if lengths else None)


class ModelInfoCache:
    def __init__(self, upstream: Upstream, deadline: float) -> None:
        self.upstream = upstream
        self.deadline = deadline
        self._entries: dict[str, tuple[float, ModelInfo]] = {}

    async def get(self, model: str) -> ModelInfo:
        entry = self._entries.get(model)
        if entry is not None and time.monotonic() - entry[0] < TTL:
            return entry[1]
        info = parse_show(await self.upstream.call_json("POST", "/api/show", {"model": model}, deadline=self.deadline))
        self._entries[model] = (time.monotonic(), info)
        return info
