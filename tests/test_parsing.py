"""proxy.parsing.files: names, types, limits, and text extraction from real files of each format."""

from __future__ import annotations

import io
import random
import unicodedata
import zipfile

import docx
import pytest
from pypdf import PdfReader

from proxy.core.errors import BadRequest, GraphGateError, PayloadTooLarge, UnsupportedMedia
from proxy.parsing import files as parsing
from proxy.parsing.files import SUPPORTED_TYPES, ParsedDocument, normalise_text, parse_document, safe_name
from tests.pdf_helpers import encrypt_pdf, make_pdf

MAX = 50 * 1024 * 1024
DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
FRENCH = "Le café était très chaud, déjà servi à l'hôtel. " * 20
JAPANESE = "東京は日本の首都です。今日はとても良い天気ですね。私は毎朝コーヒーを飲みます。" * 5


def parse(name: str, data: bytes, max_bytes: int = MAX) -> ParsedDocument:
    return parse_document(name, data, max_bytes=max_bytes)


def refused(name: str, data: bytes, kind: type[GraphGateError] = BadRequest, max_bytes: int = MAX) -> str:
    with pytest.raises(kind) as info:
        parse_document(name, data, max_bytes=max_bytes)
    assert type(info.value) is kind
    return info.value.message


# ------------------------------------------------------------------------------------ fixtures

def docx_bytes(document: docx.document.Document) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def sample_docx() -> bytes:
    document = docx.Document()
    document.add_heading("Annual Report", level=0)          # style "Title"
    document.add_heading("Introduction", level=1)
    document.add_paragraph("GraphGate reads Word files.")
    document.add_heading("Details", level=2)
    table = document.add_table(rows=3, cols=3)
    for r, row in enumerate([["Name", "Role", "City"], ["Ada", "Engineer", "London"], ["Merged", "", "Paris"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    table.cell(2, 0).merge(table.cell(2, 1))
    document.add_heading("Deep", level=4)
    document.add_paragraph("After the table.")
    return docx_bytes(document)


# ---------------------------------------------------------------------------------- safe_name

@pytest.mark.parametrize(("raw", "expected"), [
    ("../../etc/passwd.txt", "passwd.txt"),
    ("C:\\Users\\x\\report.pdf", "report.pdf"),
    ("C:report.pdf", "report.pdf"),
    ("/var/tmp/notes.md", "notes.md"),
    ("..\\..\\windows\\system32\\a.txt", "a.txt"),
    ("dir/sub\\mixed/final.docx", "final.docx"),
    ("a\x00b\x07c\x7f.txt", "abc.txt"),
    ("  my \t\n  file   name.txt  ", "my file name.txt"),
    ("résumé 2024.md", "résumé 2024.md"),
    (unicodedata.normalize("NFD", "résumé 2024.md"), "résumé 2024.md"),
    ("東京.txt", "東京.txt"),
    ("<script>.txt", "<script>.txt"),
    ("../<img src=x onerror=alert(1)>.txt", "<img src=x onerror=alert(1)>.txt"),
    ("evil\u202etxt.exe", "eviltxt.exe"),
    (".hidden.md", ".hidden.md"),
])
def test_safe_name(raw: str, expected: str) -> None:
    assert safe_name(raw) == expected


def test_safe_name_results_are_nfc() -> None:
    assert unicodedata.is_normalized("NFC", safe_name(unicodedata.normalize("NFD", "résumé.md")))


@pytest.mark.parametrize(("raw", "fragment"), [
    ("", "is empty"),
    ("   ", "is empty"),
    ("\x00\x01", "is empty"),
    ("dir/", "is empty"),
    ("C:\\", "is empty"),
    ("..", "only dots"),
    ("...", "only dots"),
    ("foo/..", "only dots"),
    ("/etc/../..", "only dots"),
])
def test_safe_name_refuses_unusable_names(raw: str, fragment: str) -> None:
    with pytest.raises(BadRequest) as info:
        safe_name(raw)
    assert info.value.status == 400
    assert fragment in info.value.message
    assert info.value.message.startswith("file name ")


def test_safe_name_caps_length_keeping_the_extension() -> None:
    name = safe_name("a" * 300 + ".pdf")
    assert len(name) == 200
    assert name == "a" * 196 + ".pdf"
    assert safe_name("b" * 200 + ".md") == "b" * 197 + ".md"
    assert safe_name("c" * 200) == "c" * 200


def test_safe_name_caps_a_huge_extension_plainly() -> None:
    assert safe_name("x." + "y" * 300) == ("x." + "y" * 300)[:200]


def test_unicode_names_survive_parsing() -> None:
    assert parse("résumé 2024.md", b"# CV").name == "résumé 2024.md"
    assert parse("東京.txt", "東京".encode()).name == "東京.txt"
    doc = parse("../../<script>alert(1)</script>.txt", b"hello")
    assert doc.name == "script>.txt"          # "/" of the closing tag is a path separator
    assert parse("<script>.txt", b"hello").name == "<script>.txt"


# --------------------------------------------------------------------------- types and limits

def test_supported_types() -> None:
    assert SUPPORTED_TYPES == {
        ".txt": "text/plain", ".md": "text/markdown", ".markdown": "text/markdown",
        ".html": "text/html", ".htm": "text/html", ".pdf": "application/pdf", ".docx": DOCX_MIME,
    }


@pytest.mark.parametrize(("name", "mime"), [
    ("a.txt", "text/plain"), ("A.TXT", "text/plain"), ("b.md", "text/markdown"),
    ("c.Markdown", "text/markdown"), ("d.htm", "text/html"), ("e.HTML", "text/html"),
])
def test_type_by_extension_case_insensitive(name: str, mime: str) -> None:
    doc = parse(name, b"plain words")
    assert (doc.name, doc.mime) == (name, mime)


def test_unsupported_extension() -> None:
    message = refused("x.exe", b"MZ\x90\x00", UnsupportedMedia)
    assert message == ("unsupported file type '.exe' for 'x.exe' "
                       "(supported: .txt, .md, .markdown, .html, .htm, .pdf, .docx)")
    assert UnsupportedMedia.status == 415


def test_unsupported_extension_is_lowercased_and_name_is_safe() -> None:
    message = refused("../dir/Photo.JPEG", b"\xff\xd8", UnsupportedMedia)
    assert message.startswith("unsupported file type '.jpeg' for 'Photo.JPEG' (supported: .txt")


@pytest.mark.parametrize("name", ["README", "Makefile", "notes.", ".txt"])
def test_no_extension(name: str) -> None:
    message = refused(name, b"hello", UnsupportedMedia)
    assert f"file '{name}' has no extension" in message
    assert "(supported: .txt, .md, .markdown, .html, .htm, .pdf, .docx)" in message


def test_type_is_checked_before_content() -> None:
    refused("x.exe", b"", UnsupportedMedia)


def test_empty_file() -> None:
    assert refused("x.txt", b"") == "file 'x.txt' is empty"
    assert refused("dir/y.pdf", b"") == "file 'y.pdf' is empty"


def test_size_limit_boundary() -> None:
    data = b"a" * 1000
    assert parse("x.txt", data, max_bytes=1000).size == 1000
    message = refused("x.txt", data + b"b", PayloadTooLarge, max_bytes=1000)
    assert message == "file 'x.txt' is 1001 bytes, over the limit of 1000 bytes"
    assert PayloadTooLarge.status == 413


def test_size_limit_applies_to_every_format() -> None:
    refused("x.pdf", make_pdf([["hello"]]), PayloadTooLarge, max_bytes=100)


def test_large_text_parses() -> None:
    line = "The quick brown fox jumps over the lazy dog. Grüße aus München!\n"
    data = (line * (1024 * 1024 // len(line.encode()) + 1)).encode()
    assert len(data) > 1024 * 1024
    doc = parse("big.txt", data, max_bytes=2 * 1024 * 1024)
    assert doc.size == len(data)
    assert doc.text == (line * (1024 * 1024 // len(line.encode()) + 1)).strip()


def test_result_shape() -> None:
    doc = parse("a.txt", b"  hello  \n")
    assert doc == ParsedDocument(name="a.txt", mime="text/plain", text="hello", size=10)
    with pytest.raises(AttributeError):
        doc.text = "x"  # type: ignore[misc]


# ----------------------------------------------------------------------------------- text

def test_utf8() -> None:
    text = "Grüße aus 東京 — naïve café ✓ 🎉"
    assert parse("a.txt", text.encode()).text == text


def test_utf8_bom_is_removed() -> None:
    assert parse("a.txt", b"\xef\xbb\xbf" + "Grüße".encode()).text == "Grüße"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_with_bom(encoding: str) -> None:
    text = "Hello wörld, 東京.\nSecond line."
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data
    assert parse("a.txt", data).text == text


def test_cp1252_french() -> None:
    assert parse("fr.txt", FRENCH.encode("cp1252")).text == FRENCH.strip()


def test_latin1_french() -> None:
    assert parse("fr.txt", FRENCH.encode("latin-1")).text == FRENCH.strip()


def test_short_latin1() -> None:
    assert parse("a.txt", "Café".encode("latin-1")).text == "Café"


def test_shift_jis_japanese() -> None:
    assert parse("jp.txt", JAPANESE.encode("shift_jis")).text == JAPANESE


def test_cp1251_russian() -> None:
    text = "Привет, как дела? Всё хорошо. Сегодня хорошая погода."
    assert parse("ru.md", text.encode("cp1251")).text == text


def test_random_bytes_are_not_text() -> None:
    message = refused("noise.txt", random.Random(1).randbytes(4096))
    assert message.startswith("file 'noise.txt' is not readable text (")


def test_random_bytes_without_nul_are_not_text() -> None:
    data = random.Random(1).randbytes(4096).replace(b"\x00", b"")
    assert refused("noise.txt", data).startswith("file 'noise.txt' is not readable text (")


def test_png_saved_as_txt() -> None:
    png = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x06\x00\x00\x00"
           b"\x1f\xf3\xffa\x00\x00\x00\x0cIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N"
           b"\x00\x00\x00\x00IEND\xaeB`\x82")
    message = refused("image.txt", png)
    assert message == "file 'image.txt' is not readable text (it contains NUL bytes, so it looks like a binary file)"


def test_control_characters_are_not_text() -> None:
    data = bytes(range(1, 9)) * 50 + b"some words"
    message = refused("ctl.txt", data)
    assert message.startswith("file 'ctl.txt' is not readable text (")
    assert "control characters" in message


def test_ansi_coloured_log_is_text() -> None:
    line = "\x1b[32mINFO\x1b[0m 2024-05-01 12:00:00 request served in 12 ms from the cache layer\n"
    text = parse("app.txt", (line * 20).encode()).text
    assert text.startswith("INFO 2024-05-01 12:00:00 request served")
    assert "[32m" not in text


@pytest.mark.parametrize("data", [b"   \n\t\n  ", b"\xef\xbb\xbf\r\n\r\n", "\u00a0\u3000".encode()])
def test_whitespace_only_text(data: bytes) -> None:
    assert refused("blank.txt", data) == "file 'blank.txt' contains no text"


def test_markdown_is_kept_verbatim() -> None:
    text = "# Title\n\nSome *emphasis*.\n\n## Section\n\n- item\n- item\n\n```\ncode  \n```"
    assert parse("doc.md", text.encode()).text == text.replace("code  ", "code")


# ----------------------------------------------------------------------------- normalising

def test_normalisation_rules() -> None:
    raw = "  \n line one   \r\nline two\t \rline\x00 three\x07\x1b\x7f\x9f\n\n\n\n\nafter\u2028next\fpage\x0bv\x85n\n  "
    assert normalise_text(raw) == "line one\nline two\nline three\n\nafter\nnext\npage\nv\nn"


def test_normalisation_keeps_tabs_and_single_blank_lines() -> None:
    assert normalise_text("a\tb\n\nc\n\n\nd") == "a\tb\n\nc\n\nd"


def test_normalisation_nfc_and_bom() -> None:
    assert normalise_text("cafe\u0301 \ufeffx") == "café x"
    assert unicodedata.is_normalized("NFC", parse("a.txt", "cafe\u0301".encode()).text)


def test_crlf_text_file() -> None:
    assert parse("win.txt", b"one  \r\ntwo\r\n\r\n\r\n\r\nthree\r\n").text == "one\ntwo\n\nthree"


# ------------------------------------------------------------------------------------ HTML

PAGE = """<!DOCTYPE html>
<html><head><title>Page title</title><style>body { color: red }</style>
<script>var secret = 1;</script></head>
<body>
<!-- a comment -->
<noscript>Enable JavaScript</noscript>
<template><p>template text</p></template>
<svg><text>svg text</text></svg>
<h1>Main <b>title</b></h1>
<p>Hello   <i>world</i>,
   spread over<br>two lines &amp; an &eacute;ntity.</p>
<h2>List</h2>
<ul><li>one</li><li><p>two</p></li><li></li><li>three <b>bold</b></li></ul>
<h3></h3>
<table>
  <tr><th>Name</th><th>City</th></tr>
  <tr><td><p>Ada</p></td><td>London</td></tr>
  <tr><td></td><td></td></tr>
</table>
<pre>  code
    indented</pre>
<div>in a <span>div</span></div><div>next div</div>
<h6>Small heading</h6>
<script>alert("xss")</script>
</body></html>"""

PAGE_TEXT = """# Main title

Hello world, spread over
two lines & an éntity.

## List

- one
- two
- three bold

Name | City
Ada | London

  code
    indented

in a div
next div

###### Small heading"""


def test_html_structure() -> None:
    doc = parse("page.html", PAGE.encode())
    assert doc.mime == "text/html"
    assert doc.text == PAGE_TEXT


@pytest.mark.parametrize("hidden", ["Page title", "color: red", "secret", "Enable JavaScript",
                                    "template text", "svg text", "a comment", "alert"])
def test_html_drops_invisible_parts(hidden: str) -> None:
    assert hidden not in parse("page.html", PAGE.encode()).text


def test_html_declared_charset() -> None:
    page = '<html><head><meta charset="windows-1252"></head><body><p>Café crème, 5 €</p></body></html>'
    assert parse("a.html", page.encode("cp1252")).text == "Café crème, 5 €"


def test_html_declared_latin1_is_read_as_cp1252() -> None:
    page = ('<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1">'
            '<p>Prix : 5 € – « très » bon</p>')
    assert parse("a.html", page.encode("cp1252")).text == "Prix : 5 € – « très » bon"


@pytest.mark.parametrize("label", ["latin1", "ISO_8859-1", "us-ascii", "no-such-charset"])
def test_html_charset_labels(label: str) -> None:
    page = f'<meta charset="{label}"><p>' + FRENCH + "</p>"
    assert parse("a.html", page.encode("cp1252")).text == FRENCH.strip()


def test_html_declared_shift_jis() -> None:
    page = '<html><head><meta charset="Shift_JIS"></head><body><p>東京</p></body></html>'
    assert parse("jp.htm", page.encode("shift_jis")).text == "東京"


def test_html_undeclared_charset_is_detected() -> None:
    page = "<html><body><p>" + FRENCH + "</p></body></html>"
    assert parse("fr.html", page.encode("cp1252")).text == FRENCH.strip()


def test_html_utf8_wins_over_a_wrong_declaration() -> None:
    page = '<meta charset="iso-8859-1"><p>Grüße</p>'
    assert parse("a.html", page.encode()).text == "Grüße"


def test_broken_html() -> None:
    doc = parse("broken.html", b"<p>unclosed <b>bold <div>inner</p></i><li>stray item<td>cell")
    assert doc.text == "unclosed bold\ninner\n- stray item | cell"       # lxml nests the <td> in the <li>


def test_html_without_text() -> None:
    page = b"<html><head><title>Only a title</title></head><body><script>x()</script><img src=a.png></body></html>"
    assert refused("empty.html", page) == "file 'empty.html' contains no text"


def test_html_of_random_bytes() -> None:
    assert refused("noise.html", random.Random(1).randbytes(2048)).startswith(
        "file 'noise.html' is not readable text (")


def test_deeply_nested_html() -> None:
    page = "<div>" * 5000 + "deep" + "</div>" * 5000
    assert parse("deep.html", page.encode()).text == "deep"


def test_html_heading_inside_a_table_cell_stays_on_its_row() -> None:
    page = "<table><tr><td><h2>Key</h2></td><td>value<br>more</td></tr></table>"
    assert parse("t.html", page.encode()).text == "Key | value more"


# ------------------------------------------------------------------------------------- PDF

def test_pdf_text() -> None:
    doc = parse("hello.pdf", make_pdf([["Hello PDF world.", "Second line (with parentheses)."]]))
    assert doc.mime == "application/pdf"
    assert doc.text == "Hello PDF world.\nSecond line (with parentheses)."


def test_pdf_pages_are_joined_with_blank_lines() -> None:
    doc = parse("pages.pdf", make_pdf([["Page one."], ["Page two."], None, ["Page four: café."]]))
    assert doc.text == "Page one.\n\nPage two.\n\nPage four: café."


def test_pdf_without_text() -> None:
    message = refused("scan.pdf", make_pdf([None, None]))
    assert message == "no text found in 'scan.pdf' (scanned documents need OCR, which GraphGate does not do)"


def test_pdf_of_random_bytes() -> None:
    assert refused("noise.pdf", random.Random(1).randbytes(4096)).startswith(
        "could not read PDF 'noise.pdf': it does not start like a PDF; ")


def test_truncated_pdf() -> None:
    data = make_pdf([["Some text that will be cut off."]])
    for cut in (data[: len(data) // 3], data[: len(data) * 2 // 3], data[:-30]):
        assert refused("cut.pdf", cut).startswith(
            "could not read PDF 'cut.pdf': it looks truncated (no end-of-file marker); ")


def test_text_file_named_pdf() -> None:
    assert refused("fake.pdf", b"just some text, not a PDF").startswith(
        "could not read PDF 'fake.pdf': it does not start like a PDF; ")


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-128", "AES-256"])
def test_pdf_encrypted_with_a_password(algorithm: str) -> None:
    data = encrypt_pdf(make_pdf([["Secret text."]]), user_password="open-sesame", algorithm=algorithm)
    message = refused("locked.pdf", data)
    assert message.startswith("PDF 'locked.pdf' is encrypted and needs a password to open")


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-128", "AES-256"])
def test_pdf_encrypted_with_an_empty_password_is_read(algorithm: str) -> None:
    data = encrypt_pdf(make_pdf([["Only editing is restricted."]]), user_password="", algorithm=algorithm)
    assert PdfReader(io.BytesIO(data)).is_encrypted
    assert parse("restricted.pdf", data).text == "Only editing is restricted."


# ------------------------------------------------------------------------------------ DOCX

def test_docx_paragraphs_headings_and_tables() -> None:
    doc = parse("report.docx", sample_docx())
    assert doc.mime == DOCX_MIME
    assert doc.text == ("# Annual Report\n\n# Introduction\n\nGraphGate reads Word files.\n\n## Details\n\n"
                        "Name | Role | City\nAda | Engineer | London\nMerged | Paris\n\n"
                        "#### Deep\n\nAfter the table.")


def test_docx_deep_heading_levels_are_capped() -> None:
    document = docx.Document()
    document.add_heading("Level nine", level=9)
    assert parse("h.docx", docx_bytes(document)).text == "###### Level nine"


def test_docx_line_breaks_and_tabs() -> None:
    document = docx.Document()
    paragraph = document.add_paragraph("first\tcolumn")
    paragraph.add_run().add_break()
    paragraph.add_run("after break   ")
    assert parse("b.docx", docx_bytes(document)).text == "first\tcolumn\nafter break"


def test_empty_docx() -> None:
    assert refused("empty.docx", docx_bytes(docx.Document())) == "file 'empty.docx' contains no text"


def test_docx_of_random_bytes() -> None:
    message = refused("noise.docx", random.Random(1).randbytes(4096))
    assert message.startswith("could not read Word document 'noise.docx': ")


def test_docx_zip_without_document_xml() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(sample_docx())) as source, zipfile.ZipFile(buffer, "w") as target:
        for item in source.infolist():
            if item.filename != "word/document.xml":
                target.writestr(item, source.read(item))
    message = refused("hollow.docx", buffer.getvalue())
    assert message.startswith("could not read Word document 'hollow.docx': ")


def test_docx_plain_zip() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "hello")
    assert refused("zip.docx", buffer.getvalue()).startswith("could not read Word document 'zip.docx': ")


def test_old_doc_renamed_docx() -> None:
    data = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504)
    message = refused("old.docx", data)
    assert message.startswith("could not read Word document 'old.docx': it is an old binary .doc")


def test_docx_unpacking_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parsing, "DOCX_MAX_UNPACKED", 1000)
    message = refused("bomb.docx", sample_docx())
    assert message.startswith("could not read Word document 'bomb.docx': it unpacks to ")
    assert "more than the 1000-byte limit" in message


# ------------------------------------------------------------------------------ error statuses

def test_every_refusal_carries_its_status() -> None:
    cases = [("x.exe", b"x", 415), ("x.txt", b"", 400), ("x.txt", b"xx" * 10, 413), ("x.pdf", b"junk", 400)]
    for name, data, status in cases:
        with pytest.raises(GraphGateError) as info:
            parse_document(name, data, max_bytes=10)
        assert info.value.status == status, name
