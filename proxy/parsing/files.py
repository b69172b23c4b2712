"""Turn an uploaded file (name + bytes) into normalised plain text, or refuse it with a clear error.

Plain synchronous, CPU-bound functions: callers run :func:`parse_document` off the event loop.
Library choices, one line each:

- pypdf: pure Python and BSD-licensed (PyMuPDF is AGPL); its ``crypto`` extra opens AES-protected PDFs.
- python-docx: the maintained reader for .docx (Office Open XML) files.
- BeautifulSoup + lxml: tolerant of broken real-world HTML, and lxml is fast.
- charset-normalizer: maintained, MIT, the detector ``requests`` uses, for text that is not UTF-8.

Headings come out as Markdown ``#`` lines (HTML ``h1``-``h6``, Word ``Heading N``) so the chunker
can split on them; table rows come out one per line with their cells joined by `` | ``.
"""

from __future__ import annotations

import io
import os
import re
import unicodedata
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import docx
from docx.enum.style import WD_STYLE_TYPE
from docx.oxml.ns import nsmap
from docx.oxml.text.paragraph import CT_P
from docx.table import Table
from lxml import etree  # type: ignore[import-untyped]
from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError

from proxy.core.errors import BadRequest, PayloadTooLarge, UnsupportedMedia
from proxy.parsing.decoding import parse_text
from proxy.parsing.docx_structure import check_structure
from proxy.parsing.html_text import parse_html

__all__ = ["SUPPORTED_TYPES", "ParsedDocument", "normalise_text", "parse_document", "safe_name"]


SUPPORTED_TYPES: dict[str, str] = {
    ".txt": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
}

NAME_MAX = 200
_EXT_KEEP_MAX = 20            # a longer "extension" is not one worth keeping when a name is cut
DOCX_MAX_UNPACKED = 256 * 1024 * 1024   # a .docx that inflates beyond this is a zip bomb
_REASON_MAX = 200


@dataclass(frozen=True)
class ParsedDocument:
    name: str      # the safe file name
    mime: str
    text: str      # extracted, normalised text (never empty)
    size: int      # size of the uploaded bytes


# ---------------------------------------------------------------------------------------- names

_DRIVE = re.compile(r"^[A-Za-z]:")
# Bidirectional overrides let "txt.exe" display as "exe.txt"; they carry no meaning in a name.
_BIDI_CONTROLS = dict.fromkeys(map(ord, "\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"))


def safe_name(raw: str) -> str:
    """The final path component of ``raw``, without control characters, whitespace collapsed, capped."""
    name = unicodedata.normalize("NFC", raw)
    name = "".join(" " if ch.isspace() else ch for ch in name
                   if ch.isspace() or unicodedata.category(ch) not in ("Cc", "Cs"))
    name = name.translate(_BIDI_CONTROLS)
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = " ".join(_DRIVE.sub("", name).split())
    name = _cap_name(name)
    if not name:
        raise BadRequest(f"file name {_show(raw)} is empty once its path and control characters are removed")
    if not name.strip("."):
        raise BadRequest(f"file name {_show(raw)} is not usable: it is only dots")
    return name


def _cap_name(name: str) -> str:
    if len(name) <= NAME_MAX:
        return name
    stem, ext = os.path.splitext(name)
    if not stem or len(ext) > _EXT_KEEP_MAX:
        return name[:NAME_MAX].rstrip()
    return stem[:NAME_MAX - len(ext)].rstrip() + ext


def _show(raw: str) -> str:
    return repr(raw if len(raw) <= 80 else raw[:80] + "...")


# ------------------------------------------------------------------------------------- entry

def parse_document(name: str, data: bytes, *, max_bytes: int) -> ParsedDocument:
    """Check, parse and normalise one uploaded file. Raises a :class:`GraphGateError` subclass."""
    name = safe_name(name)
    mime = _mime_for(name)
    if not data:
        raise BadRequest(f"file '{name}' is empty")
    if len(data) > max_bytes:
        raise PayloadTooLarge(f"file '{name}' is {len(data)} bytes, over the limit of {max_bytes} bytes")
    text = normalise_text(_PARSERS[mime](name, bytes(data)))
    if not text:
        if mime == "application/pdf":
            raise BadRequest(f"no text found in '{name}' "
                             "(scanned documents need OCR, which GraphGate does not do)")
        raise BadRequest(f"file '{name}' contains no text")
    return ParsedDocument(name=name, mime=mime, text=text, size=len(data))


def _mime_for(name: str) -> str:
    ext = os.path.splitext(name)[1].lower()
    supported = ", ".join(SUPPORTED_TYPES)
    if not ext or ext == ".":
        raise UnsupportedMedia(f"file '{name}' has no extension, so its type is unknown (supported: {supported})")
    if ext not in SUPPORTED_TYPES:
        raise UnsupportedMedia(f"unsupported file type '{ext}' for '{name}' (supported: {supported})")
    return SUPPORTED_TYPES[ext]


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= _REASON_MAX else text[:_REASON_MAX] + "..."


# ------------------------------------------------------------------------------- normalising

_LINE_BREAKS = str.maketrans({"\r": "\n", "\x0b": "\n", "\x0c": "\n", "\x85": "\n",
                              "\u2028": "\n", "\u2029": "\n"})
_CONTROLS = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ufeff\ud800-\udfff]")
_BLANK_RUNS = re.compile(r"\n{3,}")


def normalise_text(text: str) -> str:
    """NFC; line breaks as ``\\n``; no control characters but ``\\n``/``\\t``; no trailing spaces;
    at most one blank line in a row; stripped. Page/section breaks (form feed...) become line breaks."""
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").translate(_LINE_BREAKS))
    text = _CONTROLS.sub("", text)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return _BLANK_RUNS.sub("\n\n", text).strip()


# --------------------------------------------------------------------------------------- PDF

def _parse_pdf(name: str, data: bytes) -> str:
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            _decrypt_pdf(name, reader)
        pages = list(reader.pages)
    except BadRequest:
        raise
    except Exception as exc:   # pypdf raises many kinds on malformed input, not only PdfReadError
        raise BadRequest(f"could not read PDF '{name}': {_pdf_hint(data)}{_reason(exc)}") from exc
    texts, failure = [], None
    for page in pages:
        try:
            texts.append(page.extract_text() or "")
        except Exception as exc:  # noqa: BLE001 - one broken page should not lose the others
            failure = failure or exc
    if failure is not None and not any(text.strip() for text in texts):
        raise BadRequest(f"could not read PDF '{name}': {_reason(failure)}") from failure
    return "\n\n".join(texts)


def _pdf_hint(data: bytes) -> str:
    """pypdf's own message for a cut-off or fake PDF is often just "Stream has ended unexpectedly"."""
    if b"%PDF-" not in data[:1024]:
        return "it does not start like a PDF; "
    if b"%%EOF" not in data[-2048:]:
        return "it looks truncated (no end-of-file marker); "
    return ""


def _decrypt_pdf(name: str, reader: PdfReader) -> None:
    """Open a PDF that is only protected against editing (empty user password); refuse the rest."""
    try:
        opened = reader.decrypt("")
    except DependencyError as exc:
        raise BadRequest(f"PDF '{name}' is encrypted with a method this server cannot decrypt "
                         f"({_reason(exc)})") from exc
    if opened == PasswordType.NOT_DECRYPTED:
        raise BadRequest(f"PDF '{name}' is encrypted and needs a password to open; "
                         "upload a copy without password protection")


# -------------------------------------------------------------------------------------- DOCX

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_WORD_HEADING = re.compile(r"heading\s*([1-9])", re.IGNORECASE)


def _parse_docx(name: str, data: bytes) -> str:
    if data.startswith(_OLE_MAGIC):
        raise BadRequest(f"could not read Word document '{name}': it is an old binary .doc "
                         "(or an encrypted document); save it as .docx without a password")
    try:
        _check_archive(name, data)
        document = docx.Document(io.BytesIO(data))
        return "\n\n".join(_docx_blocks(document))
    except PayloadTooLarge:
        raise
    except Exception as exc:   # zipfile, KeyError, lxml, python-docx's own errors...
        raise BadRequest(f"could not read Word document '{name}': {_reason(exc)}") from exc


def _check_archive(name: str, data: bytes) -> None:
    """A zip bomb, or a document of blank structure, refused before python-docx builds it."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        unpacked = sum(info.file_size for info in archive.infolist())
        if unpacked > DOCX_MAX_UNPACKED:
            raise ValueError(f"it unpacks to {unpacked} bytes, more than the {DOCX_MAX_UNPACKED}-byte limit")
        check_structure(name, archive, DOCX_MAX_UNPACKED)


# A paragraph's text as python-docx 1.2 reads it (``CT_P.text``: its runs and its hyperlinks' runs;
# ``CT_R.text``: each of these children as a string), in one compiled query: python-docx's own runs
# a query per paragraph and per run, compiled each time (6 times slower: a minute per million).
_RUN_PARTS = "*[self::w:br or self::w:cr or self::w:noBreakHyphen or self::w:ptab or self::w:t or self::w:tab]"
_PARAGRAPH_TEXT = etree.XPath(f"./w:r/{_RUN_PARTS} | ./w:hyperlink/w:r/{_RUN_PARTS}", namespaces={"w": nsmap["w"]})


def _docx_blocks(document: docx.document.Document) -> Iterator[str]:
    level_of = _heading_levels(document)
    for element in document.element.body.inner_content_elements:
        if isinstance(element, CT_P):
            text = "".join(map(str, _PARAGRAPH_TEXT(element)))
            yield _docx_paragraph(text, level_of(element.style))
        else:
            yield _docx_table(Table(element, document))


def _heading_levels(document: docx.document.Document) -> Callable[[str | None], int]:
    """A paragraph's heading level (0: none) by its style id, as python-docx resolves a style (an
    unknown id or none: the default paragraph style), the styles read once: python-docx's
    ``Paragraph.style`` scans every style for each paragraph (2 ms each: minutes for a long document)."""
    default = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
    default_level = _level(default.name) if default is not None else 0
    levels: dict[str, int] = {}
    for style in document.styles:   # the first style of an id is the one python-docx finds
        if style.style_id not in levels:
            levels[style.style_id] = _level(style.name) if style.type == WD_STYLE_TYPE.PARAGRAPH else default_level
    return lambda style_id: default_level if style_id is None else levels.get(style_id, default_level)


def _level(style: str | None) -> int:
    match = _WORD_HEADING.fullmatch(style or "")
    return int(match.group(1)) if match else 1 if style == "Title" else 0


def _docx_paragraph(text: str, level: int) -> str:
    if level and text.strip():
        return "#" * min(level, 6) + " " + " ".join(text.split())
    return text


def _docx_table(table: Table) -> str:
    rows = []
    for row in table.rows:
        cells, previous = [], None
        for cell in row.cells:                 # a merged cell is repeated once per grid column
            if cell._tc is not previous:
                cells.append(" ".join(cell.text.split()))
            previous = cell._tc
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


_PARSERS: dict[str, Callable[[str, bytes], str]] = {
    "text/plain": parse_text,
    "text/markdown": parse_text,
    "text/html": parse_html,
    "application/pdf": _parse_pdf,
    SUPPORTED_TYPES[".docx"]: _parse_docx,
}
