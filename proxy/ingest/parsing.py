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

import codecs
import io
import os
import re
import unicodedata
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import charset_normalizer
import docx
from bs4 import BeautifulSoup, MarkupResemblesLocatorWarning, XMLParsedAsHTMLWarning
from bs4.dammit import EncodingDetector
from bs4.element import NavigableString, PreformattedString, Tag
from docx.table import Table
from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError

from proxy.errors import BadRequest, PayloadTooLarge, UnsupportedMedia

__all__ = ["SUPPORTED_TYPES", "ParsedDocument", "normalise_text", "parse_document", "safe_name"]

# An uploaded "page" is parsed as a document, never fetched, and XHTML is fine to read as HTML.
warnings.filterwarnings("ignore", category=MarkupResemblesLocatorWarning)
warnings.filterwarnings("ignore", category=XMLParsedAsHTMLWarning)

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
MAX_CONTROL_SHARE = 0.05      # decoded text with more control characters than this is binary
MAX_ACCENTED_SHARE = 0.5      # of the letters, for bytes to pass as cp1252 against a detector's guess
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


# -------------------------------------------------------------------------------- plain text

_BOMS = (  # UTF-32 LE before UTF-16 LE: the first starts with the second
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"),
)
# Without a byte-order mark these are guesses we never want: UTF-16/32 text without NUL bytes is
# vanishingly rare, and EBCDIC is not what anyone uploads; both "decode" short Latin text as junk.
_NEVER_GUESS = ["utf_16", "utf_16_be", "utf_16_le", "utf_32", "utf_32_be", "utf_32_le", "utf_7",
                "cp037", "cp273", "cp424", "cp500", "cp875", "cp1026", "cp1140"]
_BAD_CHARS = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ufffd]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_WESTERN_PUNCTUATION = frozenset("\u00a0«»‘’‚“”„–—…•€°§©®™·¡¿")


_ANSI_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")   # colour codes in saved terminal logs


def _parse_text(name: str, data: bytes) -> str:
    return _ANSI_ESCAPES.sub("", _decode(name, data))


def _decode(name: str, data: bytes, declared: str | None = None) -> str:
    """Byte-order mark, else UTF-8, else the ``declared`` charset, else detection; refuses binary."""
    text = _decode_bom(data)
    if text is None:
        if b"\x00" in data:
            raise _not_text(name, "it contains NUL bytes, so it looks like a binary file")
        text = _try_decode(data, "utf-8")
        if text is None and declared:
            text = _try_decode(data, declared)
        if text is None:
            text = _detect(name, data)
    bad = len(_BAD_CHARS.findall(text))
    if bad > MAX_CONTROL_SHARE * len(text):
        raise _not_text(name, f"{bad} of its {len(text)} characters are control characters")
    return text


def _decode_bom(data: bytes) -> str | None:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")   # bad bytes count as control characters
    return None


def _try_decode(data: bytes, encoding: str) -> str | None:
    try:
        return data.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return None


def _detect(name: str, data: bytes) -> str:
    matches = charset_normalizer.from_bytes(data, cp_exclusion=_NEVER_GUESS)
    best = matches.best()
    if best is None:
        raise _not_text(name, "its character encoding could not be detected")
    text = str(best)
    # charset-normalizer cannot tell Western from Central European/Baltic code pages apart (French
    # cp1252 comes back as cp1257, "très" as "trčs"), and short text gets any code page at all.
    # When cp1252 is in play and reads the bytes as mostly-ASCII words with a few accented letters
    # and common punctuation, it is by far the likelier encoding.
    if best.encoding != "cp1252" and (_is_latin_script(text) or _cp1252_candidate(matches)):
        western = _try_decode(data, "cp1252")
        if western is not None and _looks_western(western):
            return western
    return text


def _is_latin_script(text: str) -> bool:
    return all(unicodedata.name(ch, "").startswith("LATIN")
               for ch in set(_NON_ASCII.findall(text)) if ch.isalpha())


def _cp1252_candidate(matches: charset_normalizer.CharsetMatches) -> bool:
    return any("cp1252" in match.could_be_from_charset for match in matches)


def _looks_western(text: str) -> bool:
    """Letters and common punctuation only, and accented letters a minority (Cyrillic, Greek,
    Hebrew... read as cp1252 come out as runs of accented Latin letters)."""
    non_ascii = _NON_ASCII.findall(text)
    if not all(ch.isalpha() or ch in _WESTERN_PUNCTUATION for ch in set(non_ascii)):
        return False
    accented = sum(ch.isalpha() for ch in non_ascii)
    return accented <= MAX_ACCENTED_SHARE * sum(ch.isalpha() for ch in text)


def _not_text(name: str, why: str) -> BadRequest:
    return BadRequest(f"file '{name}' is not readable text ({why})")


# -------------------------------------------------------------------------------------- HTML

_HTML_DROP = frozenset({"script", "style", "noscript", "template", "svg", "head"})
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_PARAGRAPH_BLOCKS = frozenset({"p", "pre", "blockquote", "figure", "table", "hr"})
_LINE_BLOCKS = frozenset({
    "address", "article", "aside", "body", "caption", "center", "dd", "details", "dialog", "div",
    "dl", "dt", "fieldset", "figcaption", "footer", "form", "header", "hgroup", "html", "legend",
    "li", "main", "menu", "nav", "ol", "section", "summary", "tbody", "tfoot", "thead", "tr", "ul",
})
_CELLS = frozenset({"td", "th"})
_WHITESPACE = re.compile(r"\s+")


def _parse_html(name: str, data: bytes) -> str:
    return _HtmlText().render(BeautifulSoup(_decode(name, data, _html_charset(data)), "lxml"))


def _html_charset(data: bytes) -> str | None:
    """The charset a ``<meta>`` tag or XML declaration names, read the way browsers do."""
    declared = EncodingDetector.find_declared_encoding(data, is_html=True)
    try:
        codec = codecs.lookup(declared).name if declared else None
    except LookupError:
        return None
    if codec in ("iso8859-1", "ascii"):
        return "cp1252"          # WHATWG Encoding: both labels mean windows-1252
    if codec and codec.startswith(("utf-16", "utf-32")):
        return None              # a tag readable as ASCII cannot be right about UTF-16
    return codec


class _HtmlText:
    """Renders a parsed page as lines: blocks on their own lines, headings as ``#`` lines, table
    rows with `` | `` between cells. Iterative, so deeply nested markup cannot exhaust the stack."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.cur = ""
        self.marker = ""      # a "# " or "- " just written that still waits for its text
        self.inline = 0       # inside a heading or table cell: blocks and <br> become spaces
        self.items = 0        # inside a list item: no blank lines, items stay together
        self.pre = 0

    def render(self, root: Tag) -> str:
        stack: list[tuple[Tag | NavigableString, bool]] = [(root, False)]
        while stack:
            node, closing = stack.pop()
            if isinstance(node, Tag):
                if node.name in _HTML_DROP:
                    continue
                if closing:
                    self._close(node.name)
                else:
                    self._open(node.name)
                    stack.append((node, True))
                    stack.extend((child, False) for child in reversed(node.contents))
            elif not isinstance(node, PreformattedString):     # comments, doctype, CDATA...
                self._text(str(node))
        return "\n".join([*self.lines, self.cur])

    def _open(self, tag: str) -> None:
        if tag in _HEADINGS:
            self._block(blank=True)
            if not self.inline:
                self._mark("#" * _HEADINGS[tag] + " ")
            self.inline += 1
        elif tag in _CELLS:
            if self.cur.strip():
                self._put(" | ")
            self.inline += 1
        elif tag == "br":
            if self.inline:
                self._put(" ")
            else:
                self._newline()
        elif tag in _PARAGRAPH_BLOCKS or tag in _LINE_BLOCKS:
            self._block(blank=tag in _PARAGRAPH_BLOCKS)
            if tag == "li" and not self.inline:
                self._mark("- ")
            self.items += tag == "li"
            self.pre += tag == "pre"

    def _close(self, tag: str) -> None:
        if tag in _HEADINGS or tag in _CELLS:
            self.inline -= 1
        if tag in _HEADINGS or tag in _PARAGRAPH_BLOCKS or tag in _LINE_BLOCKS:
            if self.marker and self.cur == self.marker:      # an empty heading or list item
                self.cur = self.marker = ""
            self.items -= tag == "li"
            self.pre -= tag == "pre"
            self._block(blank=tag in _PARAGRAPH_BLOCKS or tag in _HEADINGS)

    def _text(self, text: str) -> None:
        if self.pre and not self.inline:
            first, *rest = text.split("\n")
            self.cur += first
            for line in rest:
                self._newline()
                self.cur = line
        else:
            self._put(_WHITESPACE.sub(" ", text))

    def _put(self, text: str) -> None:
        if not self.cur or self.cur.endswith(" "):
            text = text.lstrip(" ")
        self.cur += text

    def _mark(self, marker: str) -> None:
        self.cur = self.marker = marker

    def _newline(self) -> None:
        self.lines.append(self.cur.rstrip())
        self.cur = self.marker = ""

    def _block(self, *, blank: bool) -> None:
        if self.inline:
            self._put(" ")
            return
        if self.marker and self.cur == self.marker:          # keep "- " for the item's first block
            return
        if self.cur.strip():
            self._newline()
        else:
            self.cur = ""
        if blank and not self.items and self.lines and self.lines[-1]:
            self.lines.append("")


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
        except Exception as exc:   # one broken page should not lose the others
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
        _check_unpacked_size(data)
        document = docx.Document(io.BytesIO(data))
        return "\n\n".join(_docx_blocks(document))
    except Exception as exc:   # zipfile, KeyError, lxml, python-docx's own errors...
        raise BadRequest(f"could not read Word document '{name}': {_reason(exc)}") from exc


def _check_unpacked_size(data: bytes) -> None:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        unpacked = sum(info.file_size for info in archive.infolist())
    if unpacked > DOCX_MAX_UNPACKED:
        raise ValueError(f"it unpacks to {unpacked} bytes, more than the {DOCX_MAX_UNPACKED}-byte limit")


def _docx_blocks(document: docx.document.Document) -> Iterator[str]:
    for block in document.iter_inner_content():
        yield _docx_table(block) if isinstance(block, Table) else _docx_paragraph(block)


def _docx_paragraph(paragraph: docx.text.paragraph.Paragraph) -> str:
    text = paragraph.text
    style = paragraph.style.name if paragraph.style is not None else ""
    match = _WORD_HEADING.fullmatch(style or "")
    level = int(match.group(1)) if match else 1 if style == "Title" else 0
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
    "text/plain": _parse_text,
    "text/markdown": _parse_text,
    "text/html": _parse_html,
    "application/pdf": _parse_pdf,
    SUPPORTED_TYPES[".docx"]: _parse_docx,
}
