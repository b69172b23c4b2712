"""The channels and the modes each runs in: a new channel is a file here and a line below.
The order is the fusion's: the first channel's items lead each round-robin. A channel with an
``enabled(params)`` method (``Switched``) runs only when the query's knobs turn it on."""

from __future__ import annotations

from proxy.core.modes import Mode
from proxy.retrieval.channels.chain_walk import ChainWalkChannel
from proxy.retrieval.channels.chunks import ChunkChannel
from proxy.retrieval.channels.communities import CommunityChannel
from proxy.retrieval.channels.described import DescribedChannel
from proxy.retrieval.channels.entities import EntityChannel
from proxy.retrieval.channels.expansion import ExpansionChannel
from proxy.retrieval.channels.keywords import MODES as KEYWORD_MODES
from proxy.retrieval.channels.keywords import KeywordChannel
from proxy.retrieval.channels.linked import LinkedChannel
from proxy.retrieval.channels.relations import RelationChannel
from proxy.retrieval.params import QueryParams
from proxy.retrieval.stages import Channel, Switched

CHANNELS: tuple[tuple[Channel, frozenset[Mode]], ...] = (
    # the `linking` knob (on by default); in global mode too, where the named entities' relations join
    # those the themes find: "which products does Y develop?" has no theme naming Y
    (LinkedChannel(), frozenset({Mode.LOCAL, Mode.GLOBAL, Mode.HYBRID, Mode.MIX})),
    (ExpansionChannel(), frozenset({Mode.LOCAL, Mode.HYBRID, Mode.MIX})),   # the `expansion` knob at `ppr`
    (ChainWalkChannel(), frozenset({Mode.LOCAL, Mode.HYBRID, Mode.MIX})),   # at `chains` (the light path's)
    # with `linking`: when the question names no entity, the entities its words describe
    (DescribedChannel(), frozenset({Mode.LOCAL, Mode.HYBRID, Mode.MIX})),
    (EntityChannel(), frozenset({Mode.LOCAL, Mode.HYBRID, Mode.MIX})),
    (RelationChannel(), frozenset({Mode.GLOBAL, Mode.HYBRID, Mode.MIX})),
    (ChunkChannel(), frozenset({Mode.MIX, Mode.NAIVE})),
    (KeywordChannel(), KEYWORD_MODES),   # the `keyword_search` knob: off by default
    (CommunityChannel(), frozenset({Mode.GLOBAL, Mode.HYBRID, Mode.MIX})),   # the `communities` knob: off by default
)


def channels_for(mode: Mode, params: QueryParams | None = None) -> list[Channel]:
    """The channels ``mode`` runs that ``params`` (the knobs' defaults if None) leave on."""
    params = params if params is not None else QueryParams()
    return [channel for channel, modes in CHANNELS
            if mode in modes and (not isinstance(channel, Switched) or channel.enabled(params))]
