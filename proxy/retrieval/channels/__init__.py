"""The channels and the modes each runs in: a new channel is a file here and a line below.
The order is the fusion's: the first channel's items lead each round-robin."""

from __future__ import annotations

from proxy.core.modes import Mode
from proxy.retrieval.channels.chunks import ChunkChannel
from proxy.retrieval.channels.entities import EntityChannel
from proxy.retrieval.channels.relations import RelationChannel
from proxy.retrieval.stages import Channel

CHANNELS: tuple[tuple[Channel, frozenset[Mode]], ...] = (
    (EntityChannel(), frozenset({Mode.LOCAL, Mode.HYBRID, Mode.MIX})),
    (RelationChannel(), frozenset({Mode.GLOBAL, Mode.HYBRID, Mode.MIX})),
    (ChunkChannel(), frozenset({Mode.MIX, Mode.NAIVE})),
)


def channels_for(mode: Mode) -> list[Channel]:
    return [channel for channel, modes in CHANNELS if mode in modes]
