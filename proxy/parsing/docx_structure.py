"""A .docx's structure counted before python-docx builds an object per element: a file of 100 KB
can hold a million blank paragraphs (they compress to nothing), which cost seconds of a parse
worker and hundreds of MB to build, and say nothing. The XML parts are read as a stream and
their paragraph and text tags counted, in milliseconds per MB; a document that is mostly blank
structure is refused before it is parsed.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass

from proxy.core.errors import PayloadTooLarge

# A blank line is one paragraph: this many blank paragraphs are thousands of pages of nothing.
BLANK_PARAGRAPHS_MAX = 100_000
# a paragraph's opening tag, and a run of text's (not ``<w:pPr>``, ``<w:tab/>``...), with the prefix
# Word and every writer use (counted as bytes: ten times a regular expression's speed; a document
# written with another prefix is not counted, and is bounded by the parse worker's time and memory)
_PARAGRAPH = (b"<w:p>", b"<w:p ", b"<w:p/>")
_TEXT = (b"<w:t>", b"<w:t ")
_OVERLAP = 8   # longer than any tag above: one cut by a chunk's end is found whole in the next window
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Structure:
    paragraphs: int
    texts: int   # runs of text (a paragraph may have several, a blank one none)

    @property
    def blank(self) -> int:
        """Paragraphs that cannot all have text (at least this many are blank)."""
        return max(0, self.paragraphs - self.texts)


def count_structure(archive: zipfile.ZipFile, budget: int) -> Structure:
    """The paragraph and text tags of every XML part, reading at most ``budget`` unpacked bytes."""
    paragraphs = texts = 0
    for info in archive.infolist():
        if not info.filename.endswith(".xml"):
            continue
        with archive.open(info) as part:
            tail = b""
            while budget > 0 and (chunk := part.read(min(_CHUNK, budget))):
                budget -= len(chunk)
                window = tail + chunk
                # (what lies wholly in the tail was counted with the previous window)
                paragraphs += _count(window, _PARAGRAPH) - _count(tail, _PARAGRAPH)
                texts += _count(window, _TEXT) - _count(tail, _TEXT)
                tail = window[-_OVERLAP:]
    return Structure(paragraphs, texts)


def _count(data: bytes, tags: tuple[bytes, ...]) -> int:
    return sum(data.count(tag) for tag in tags)


def check_structure(name: str, archive: zipfile.ZipFile, budget: int) -> None:
    """PayloadTooLarge for a document that is mostly blank paragraphs (see the module's docstring)."""
    found = count_structure(archive, budget)
    if found.blank > BLANK_PARAGRAPHS_MAX:
        raise PayloadTooLarge(f"'{name}' has {found.paragraphs} paragraphs, at least {found.blank} of them blank "
                              f"(more than {BLANK_PARAGRAPHS_MAX}): not read, a document of blank structure")
