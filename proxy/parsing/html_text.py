"""HTML to text: scripts and styles dropped, headings as Markdown lines, blocks on their own lines."""

from __future__ import annotations

import codecs
import re
import warnings

from bs4 import BeautifulSoup, MarkupResemblesLocatorWarning, XMLParsedAsHTMLWarning
from bs4.dammit import EncodingDetector
from bs4.element import PageElement, PreformattedString, Tag

from proxy.parsing.decoding import decode

# An uploaded "page" is parsed as a document, never fetched, and XHTML is fine to read as HTML.
warnings.filterwarnings("ignore", category=MarkupResemblesLocatorWarning)
warnings.filterwarnings("ignore", category=XMLParsedAsHTMLWarning)

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


def parse_html(name: str, data: bytes) -> str:
    return _HtmlText().render(BeautifulSoup(decode(name, data, _html_charset(data)), "lxml"))


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
        stack: list[tuple[PageElement, bool]] = [(root, False)]
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
