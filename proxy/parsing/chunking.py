"""Structure-aware token chunking: Markdown sections, paragraphs and whole code blocks.

Like LightRAG, chunks are at most ``size`` tokens and overlap by about ``overlap`` tokens;
unlike its plain token windows, GraphGate cuts at headings, blank lines, lines and sentences
before it ever cuts a hard token window, and never splits a fenced code block that fits.

Overlap choice: the overlap is *inside* the budget. Every chunk, overlap included, has at
most ``size`` tokens (exactly counted). The packer reserves ``overlap`` tokens in every chunk
after the first; when a single block needs more room than that (a block of up to ``size``
tokens is kept whole), the overlap of that chunk shrinks, down to nothing if need be.
The guarantee holds for ``size >= 4`` (no character needs more than 4 cl100k tokens).
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from proxy.core.tokens import Tokenizer
from proxy.text.sentences import SENTENCE_END, first_clause_start, first_sentence_start
from proxy.text.words import first_word_start

_HEADING = re.compile(r"#{1,6}[ \t]")
_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})")
_MIN_WINDOW = 16   # smallest token window cut from a blob to top up a chunk


@dataclass(frozen=True)
class Chunk:
    id: str        # "chunk-" + sha256 hex of content: identical content, identical id
    order: int     # 0-based position in the document
    content: str
    tokens: int    # token count of content


@dataclass(frozen=True, slots=True)
class _Piece:
    text: str
    tokens: int
    sep: str        # what joins it to the previous piece in the source ("\n\n", "\n", " ", "")
    heading: bool   # a Markdown heading line: starts a section, stays with what follows


def chunk_id(content: str) -> str:
    return "chunk-" + hashlib.sha256(content.encode("utf-8")).hexdigest()


def chunk_text(text: str, tokenizer: Tokenizer, *, size: int = 1200, overlap: int = 100) -> list[Chunk]:
    """Split ``text`` into ordered chunks of at most ``size`` tokens (see the module docstring)."""
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    if overlap < 0 or overlap >= size:
        raise ValueError(f"chunk overlap must be >= 0 and < size ({size}), got {overlap}")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        return []
    pieces = list(_pieces(text, tokenizer, size, size - overlap))
    return _pack(pieces, tokenizer, size, overlap)


# --- blocks and pieces ---------------------------------------------------------------------

def _blocks(text: str) -> Iterator[tuple[str, str, bool]]:
    """(text, separator before it, is_heading) for headings, paragraphs and fenced code blocks."""
    lines = text.split("\n")
    para: list[str] = []
    para_sep = ""
    emitted = False
    blank = False

    def sep() -> str:
        return ("\n\n" if blank else "\n") if emitted else ""

    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        fence = _FENCE_OPEN.match(line)
        if fence or not line.strip() or _HEADING.match(line):
            if para:
                yield "\n".join(para), para_sep, False
                para, emitted, blank = [], True, False
            if fence:
                mark = fence.group(1)
                closing = re.compile(r" {0,3}" + re.escape(mark[0]) + "{" + str(len(mark)) + r",}[ \t]*$")
                end = i + 1
                while end < n and not closing.match(lines[end]):
                    end += 1            # an unclosed fence runs to the end of the text
                yield "\n".join(lines[i:end + 1]), sep(), False
                emitted, blank, i = True, False, end + 1
                continue
            if line.strip():
                yield line, sep(), True
                emitted, blank = True, False
            else:
                blank = True
            i += 1
            continue
        if not para:
            para_sep = sep()
        para.append(line)
        i += 1
    if para:
        yield "\n".join(para), para_sep, False


def _pieces(text: str, tok: Tokenizer, size: int, budget: int) -> Iterator[_Piece | _Blob]:
    """Blocks of at most ``size`` tokens whole; bigger ones as lines, then sentences, of at
    most ``budget`` tokens; a sentence still bigger becomes a _Blob, cut into token windows."""
    for block, sep, heading in _blocks(text):
        ids = tok.encode(block)
        if len(ids) <= size:
            yield _Piece(block, len(ids), sep, heading)
            continue
        lines = block.split("\n")
        for line in lines:
            line_ids = ids if len(lines) == 1 else tok.encode(line)
            if len(line_ids) <= budget:
                yield _Piece(line, len(line_ids), sep, heading)
            else:
                yield from _sentences(line, line_ids, sep, heading, tok, budget)
            sep, heading = "\n", False


def _sentences(line: str, ids: list[int], sep: str, heading: bool,
               tok: Tokenizer, budget: int) -> Iterator[_Piece | _Blob]:
    """The line's sentences. Each is counted from the line's own tokens (those that start within
    it or its separator), not encoded again: a long paragraph has dozens of sentences, and the
    packer counts every chunk exactly anyway."""
    bounds: list[tuple[int, int]] = []      # (end of a sentence, start of the next)
    for m in SENTENCE_END.finditer(line):
        if m.end() < len(line):
            bounds.append((m.start(1) if m.group(1) is not None else m.start(2), m.end()))
    bounds.append((len(line), len(line)))
    if len(bounds) == 1:  # one sentence: the line's own tokens are its
        yield _Piece(line, len(ids), sep, heading) if len(ids) <= budget else _Blob(line, ids, sep, heading, tok)
        return
    starts = tok.char_offsets(ids)
    pos = first = 0
    for end, nxt in bounds:
        sentence = line[pos:end]
        last = bisect.bisect_left(starts, end, first)
        count, first = max(1, last - bisect.bisect_left(starts, pos - len(sep) if pos else 0, first)), last
        if count <= budget:
            yield _Piece(sentence, count, sep, heading)
        else:
            yield _Blob(sentence, tok.encode(sentence), sep, heading, tok)
        sep, heading, pos = line[end:nxt], False, nxt


class _Blob:
    """Text with no usable break, consumed as token windows sized to the room left in a chunk."""

    __slots__ = ("heading", "ids", "offsets", "sep", "start", "text")

    def __init__(self, text: str, ids: list[int], sep: str, heading: bool, tok: Tokenizer) -> None:
        self.text, self.ids, self.sep, self.heading = text, ids, sep, heading
        self.offsets = tok.char_offsets(ids) + [len(text)]
        self.start = 0

    @property
    def tokens(self) -> int:
        return len(self.ids) - self.start

    @property
    def done(self) -> bool:
        return self.start >= len(self.ids)

    def cut(self, tok: Tokenizer, room: int) -> _Piece:
        """The next window of at most ``room`` tokens (cut before a space when one is near the end)."""
        ids, offsets, text, start = self.ids, self.offsets, self.text, self.start
        n = len(ids)
        while True:
            end = min(start + room, n)
            if end < n:
                for k in range(end, start + room // 2, -1):
                    if text[offsets[k]].isspace() and offsets[k] > offsets[start]:
                        end = k         # the next window starts with " word"
                        break
            while end < n and offsets[end] <= offsets[start]:
                end += 1                # one character needs more than `room` tokens
            window = text[offsets[start]:offsets[end]]
            sep = self.sep
            if start:                   # a continuation: its leading space is the separator
                body = window.lstrip()
                sep, window = window[:len(window) - len(body)], body
            count = tok.count(window)
            if count <= room or end - start <= 1 or room <= 1:
                break
            room = max(1, room - (count - room))   # re-encoding merged differently: go smaller
        piece = _Piece(window, count, sep, self.heading)
        self.start, self.sep, self.heading = end, "", False
        return piece


# --- packing -------------------------------------------------------------------------------

def _join(pieces: list[_Piece]) -> str:
    return pieces[0].text + "".join(p.sep + p.text for p in pieces[1:])


def _tail(tok: Tokenizer, prev: str, prev_ids: list[int], k: int) -> str:
    """About the last ``k`` tokens of ``prev``, starting where a sentence starts if one does in them,
    else where a clause does, else at the start of a word (a dictionary word in scripts written
    without spaces), so that an overlap begins where a reader could."""
    raw = tok.decode_bytes(prev_ids[-k:])
    cut = 0
    while cut < len(raw) and 0x80 <= raw[cut] < 0xC0:
        cut += 1                        # drop the rest of a character cut by the token window
    tail = raw[cut:].decode("utf-8", errors="replace")
    if len(tail) < len(prev):
        start = first_sentence_start(tail)
        if start is None:
            start = first_clause_start(tail)
        if start is not None:
            tail = tail[start:]
        elif not (prev[len(prev) - len(tail) - 1].isspace() or tail[:1].isspace()):
            tail = tail[first_word_start(prev[:len(prev) - len(tail)], tail):]
    return tail.lstrip()


def _pack(items: list[_Piece | _Blob], tok: Tokenizer, size: int, overlap: int) -> list[Chunk]:
    chunks: list[Chunk] = []
    pending = deque(items)
    prev = ""
    prev_ids: list[int] = []
    while pending:
        limit = size - overlap if chunks else size     # room reserved for the overlap
        cur: list[_Piece] = []
        used = 0
        while pending:
            item = pending[0]
            extra = 1 if cur and item.sep else 0        # estimated cost of the separator
            room = limit - used - extra
            if cur and (room < 1 or (item.heading and used > limit / 2)):
                break                   # full, or a new section once more than half full
            if isinstance(item, _Blob):
                if cur and room < min(_MIN_WINDOW, limit // 2):
                    break               # not worth a sliver of a window
                piece = item.cut(tok, max(room, 1))
                if item.done:
                    pending.popleft()
                cur.append(piece)
                used += piece.tokens + extra
                if not item.done:
                    break
                continue
            if cur and item.tokens > room:
                break
            cur.append(item)                # the first piece always goes in (it is <= size)
            pending.popleft()
            used += item.tokens + extra
        _keep_headings(cur, pending)
        k = overlap if chunks else 0
        while True:                     # exact count; shrink until it fits in `size`
            body = _join(cur)
            tail = _tail(tok, prev, prev_ids, k) if k else ""
            content = tail + cur[0].sep + body if tail else body
            ids = tok.encode(content)
            excess = len(ids) - size
            if excess <= 0:
                break
            if k > overlap // 2 or (len(cur) == 1 and k > 0):
                k = max(0, k - excess)  # the overlap gives up a few tokens first ...
            elif len(cur) > 1:
                pending.appendleft(cur.pop())   # ... then the last piece moves on
                _keep_headings(cur, pending)
            else:
                break                   # one character longer than size (only if size < 4)
        if content.strip():
            chunks.append(Chunk(chunk_id(content), len(chunks), content, len(ids)))
            prev, prev_ids = content, ids
    return chunks


def _keep_headings(cur: list[_Piece], pending: deque) -> None:
    """Move trailing heading lines to the next chunk, with the text they introduce."""
    while len(cur) > 1 and cur[-1].heading and pending:
        pending.appendleft(cur.pop())
