"""Upload fuzzing: random bytes, empty and oversized files, wrong extensions, Unicode and
path-traversal names, PDFs that fail to parse. Through ``POST /rag/documents`` (multipart and
JSON) and the console's ``POST /admin/documents`` (with its CSRF token).

Every upload gets either an acceptance or a 4xx with a readable reason, never a 5xx; a rejected
upload changes nothing in the store (checked by ``tests.fuzz_harness.exchange``, which compares
every table before and after); an accepted one is stored under a plain file name. Nothing is
ever written outside the data directory, and no file named after a traversal target appears.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.parsing.files import safe_name
from tests.fuzz_harness import Harness, Sent, exchange, fuzz_app_settings, fuzz_settings, started
from tests.fuzz_values import DEPTHS, NESTINGS, deep_object, json_bytes, lone_surrogates
from tests.pdf_helpers import encrypt_pdf, make_pdf

LIMIT = 2048  # max_upload_bytes in this module

# what a rejection says, one of these (tests/test_parsing.py checks each message in detail)
REASONS = ("is empty", "over the limit", "exceeds the limit", "unsupported file type", "has no extension",
           "not readable text", "contains no text", "could not read PDF", "no text found", "is encrypted",
           "could not read Word document", "file name", "expected multipart files", "invalid JSON",
           "missing request body", "no files in the upload", "Too many files", "Too many fields",
           "request body", "Invalid multipart data", "boundary")


def files_under(root: Path) -> set[Path]:
    return {Path(dirpath, name) for dirpath, _, names in os.walk(root) for name in names}


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    root = tmp_path_factory.mktemp("fuzz-uploads")
    outside = files_under(root)
    with started(fuzz_app_settings(root / "data", max_upload_bytes=LIMIT), seed=False) as harness:
        harness.root = root  # type: ignore[attr-defined]
        yield harness
    # nothing but the data directory was written, in the whole module
    new = files_under(root) - outside
    assert all(root / "data" in p.parents for p in new), sorted(map(str, new - {p for p in new
                                                                             if root / "data" in p.parents}))
    assert_no_traversal_targets(root)


TRAVERSAL_TARGETS = ("passwd", "passwd.txt", "x.txt", "evil.txt", "cron.d", "system32", "authorized_keys")


def assert_no_traversal_targets(root: Path) -> None:
    for base in (root, Path.cwd()):
        found = [p for p in files_under(base) | {p for p, _, _ in os.walk(base)} if Path(p).name in TRAVERSAL_TARGETS
                 and ".git" not in Path(p).parts]
        assert not found, found


def sent_name(raw: str) -> str:
    """A file name as a browser puts it in a multipart header: quotes and line breaks escaped
    (they would end the header), everything else raw UTF-8, NUL and bidi controls included."""
    return raw.replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")


def multipart(files: list[tuple[str, bytes, str]], fields: dict[str, str] | None = None) -> tuple[bytes, str]:
    """A multipart/form-data body with these files (field name "files") and fields, built by hand
    so that the names reach the server as they are (httpx would percent-encode control characters)."""
    boundary = "graphgate-fuzz-7e1f3a"
    out = bytearray()
    for name, value in (fields or {}).items():  # a lone surrogate as a client's lax encoder writes it (ED A0 80)
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        out += value.encode("utf-8", "surrogatepass") + b"\r\n"
    for name, data, kind in files:
        out += (f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{sent_name(name)}"\r\n'
                f"Content-Type: {kind}\r\n\r\n").encode("utf-8", "surrogatepass") + data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


def upload_rag(h: Harness, name: str, data: bytes, kind: str = "application/octet-stream",
               metadata: str | None = None) -> httpx.Response:
    body, content_type = multipart([(name, data, kind)], None if metadata is None else {"metadata": metadata})
    return h.run(exchange, h, Sent("POST", "/rag/documents", body=body, headers={"content-type": content_type}))


def upload_console(h: Harness, name: str, data: bytes, *, htmx: bool = False,
                   metadata: str | None = None) -> httpx.Response:
    fields = {"csrf": h.csrf, **({} if metadata is None else {"metadata": metadata})}
    body, content_type = multipart([(name, data, "application/octet-stream")], fields)
    headers = {"content-type": content_type, **({"hx-request": "true"} if htmx else {})}
    return h.run(exchange, h, Sent("POST", "/admin/documents", body=body, headers=headers))


def upload_json(h: Harness, name: str, text: str) -> httpx.Response:
    body = json_bytes({"name": name, "text": text})  # a lone surrogate as its escape, "\\ud800"
    return h.run(exchange, h, Sent("POST", "/rag/documents", body=body, headers={"content-type": "application/json"}))


def check_rag_result(response: httpx.Response, raw_name: str) -> dict:
    """One file's result: accepted under a plain name, or rejected with a readable reason."""
    assert response.status_code in (200, 202, 400, 413, 415), response.text[:300]
    body = response.json()
    result = body["documents"][0] if "documents" in body else {"outcome": "rejected", "error": body["error"]}
    if result["outcome"] == "rejected":
        assert response.status_code >= 400
        assert any(reason in result["error"] for reason in REASONS), result["error"]
    else:
        assert result["outcome"] in ("accepted", "duplicate", "replaced")
        assert result["name"] == safe_name(sent_name(raw_name))
        assert "/" not in result["name"] and "\\" not in result["name"] and "\x00" not in result["name"]
    return result


# ------------------------------------------------------------------------------ strategies

EXTENSIONS = [".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".docx", ".TXT", ".Pdf", ".exe", ".bin", ".doc",
              ".txt.exe", ".exe.txt", "", ".", ".tar.gz", ".txt ", ".txt\x00.exe", ".\u202etxt"]
STEMS = ["report", "a", "..", "...", "../../etc/passwd", "..\\..\\x", "/etc/passwd", "C:\\Windows\\system32\\x",
         "\\\\server\\share\\x", "%2e%2e%2fx", "\u202eevil", "\u200f\u200e", "📄 notes", "東京", "a\x00b", "\r\n",
         "<script>alert(1)</script>", "' OR 1=1 --", "x" * 300, " ", "\t", "CON", "nul", ".hidden"]

names = st.one_of(
    st.builds(lambda stem, ext: stem + ext, st.sampled_from(STEMS), st.sampled_from(EXTENSIONS)),
    st.builds(lambda stem, ext: stem + ext, st.text(max_size=30), st.sampled_from(EXTENSIONS)),
    st.text(max_size=40),
    lone_surrogates,
)
contents = st.one_of(
    st.binary(max_size=600),
    st.text(max_size=600).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"", b" \n\t", b"%PDF-1.4\n" + b"\x00" * 40, b"PK\x03\x04" + b"\x00" * 30, b"MZ\x90\x00",
                     b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 32, b"\xef\xbb\xbf",
                     b"\xff\xfe" + "hi".encode("utf-16-le"),
                     b"<html><script>alert(1)</script></html>", b"a" * (LIMIT + 1), b"a" * LIMIT]),
    st.builds(lambda n: b"Berlin is a city. " * n, st.integers(1, 300)),
)


# the multipart ``metadata`` field: none, a good object, JSON of the wrong shape, deep nesting, a lone
# surrogate in a key or a value (raw or escaped): every one that is not a good object is a 400 (issue 29
# items 5 and 10)
GOOD_METADATA = ['{"category": "hr", "year": 2024}', '{"tags": ["a", "b"]}', "{}", ""]
metadata_fields = st.one_of(
    st.none(), st.sampled_from(GOOD_METADATA),
    st.sampled_from(["[]", "null", '{"a": {"b": 1}}', '{"$x": 1}', "{", '{"a": NaN}', '{"a": 1e999}']),
    st.builds(lambda d, n: deep_object(d, n), st.sampled_from(DEPTHS), st.sampled_from(NESTINGS)),
    st.builds(lambda s: json.dumps({"k": s}, ensure_ascii=False), lone_surrogates),
    st.builds(lambda s: json.dumps({s: "v"}, ensure_ascii=False), lone_surrogates),
    st.builds(lambda s: json.dumps({"k": s}), lone_surrogates),  # escaped: "\\ud800"
)


def check_metadata_refused(h: Harness, response: httpx.Response, metadata: str | None) -> None:
    """Metadata that is not a good object is refused. Raw surrogate bytes (ED A0 80, not UTF-8) may
    instead be read as the replacement character, which is text: then what was stored reads back."""
    if metadata is None or metadata in GOOD_METADATA:
        return
    if re.search("[\ud800-\udfff]", metadata) and response.status_code < 400:
        listed = h.run(h.client.get, "/rag/documents")
        assert listed.status_code == 200 and listed.json()["documents"] is not None, listed.text[:300]
        return
    assert 400 <= response.status_code < 500, (metadata[:200], response.status_code, response.text[:300])


@fuzz_settings(50)
@given(name=names, data=contents, metadata=metadata_fields)
def test_random_files_through_the_rag_api(up: Harness, name: str, data: bytes, metadata: str | None) -> None:
    response = upload_rag(up, name, data, metadata=metadata)
    check_metadata_refused(up, response, metadata)
    if metadata is None or metadata in GOOD_METADATA or response.status_code < 400:
        check_rag_result(response, name)


@fuzz_settings(30)
@given(name=names, text=st.one_of(st.text(max_size=300), lone_surrogates,
                                  st.sampled_from(["", " ", "a" * (LIMIT + 1), "\x00" * 10])))
def test_random_json_uploads(up: Harness, name: str, text: str) -> None:
    response = upload_json(up, name, text)
    assert response.status_code in (200, 202, 400, 413, 415), response.text[:300]
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in name + text):  # a lone surrogate: 400, saying so
        assert response.status_code == 400 and "surrogate" in response.json()["error"], response.text[:300]
    if response.status_code < 300:
        assert response.json()["documents"][0]["name"] == safe_name(name)  # JSON: the name as it is


@fuzz_settings(30)
@given(name=names, data=contents, htmx=st.booleans(), metadata=metadata_fields)
def test_random_files_through_the_console(up: Harness, name: str, data: bytes, htmx: bool,
                                          metadata: str | None) -> None:
    response = upload_console(up, name, data, htmx=htmx, metadata=metadata)
    check_metadata_refused(up, response, metadata)
    assert response.status_code in (200, 400, 413, 415), response.text[:300]
    page = response.text
    assert "<script>alert(1)" not in page and "Traceback" not in page
    outcome = re.search(r'class="badge (\w+)"', page)
    if response.status_code >= 400 and metadata is not None and metadata not in GOOD_METADATA:
        return  # the form refused whole, its metadata said to be wrong (no file's badge)
    assert outcome, page[:500]
    if outcome.group(1) == "rejected":
        assert any(reason in page for reason in REASONS), page[:500]


# --------------------------------------------------------------------- the named cases

VALID_PDF = make_pdf([["Carol White lives in Berlin."]])
CASES = [
    # (name, bytes, status, what the reason says)
    ("zero.txt", b"", 400, "is empty"),
    ("too-big.txt", b"a" * (LIMIT + 1), 413, "limit"),
    ("way-too-big.txt", b"a" * (3 * 1024 * 1024), 413, "limit"),
    ("program.exe", b"MZ\x90\x00" * 10, 415, "unsupported file type '.exe'"),
    ("README", b"plain text", 415, "has no extension"),
    ("trailing-dot.", b"plain text", 415, "has no extension"),
    ("double.txt.exe", b"plain text", 415, "unsupported file type '.exe'"),
    ("fake.pdf", b"this is plain text, not a PDF at all", 400, "does not start like a PDF"),
    ("garbage.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 4, 400, "could not read PDF"),
    ("truncated.pdf", VALID_PDF[: len(VALID_PDF) // 2], 400, "could not read PDF"),
    ("tail-garbage.pdf", b"%PDF-1.4\n%garbage\n" + b"\x00\xff" * 500 + b"\n%%EOF\n", 400, "could not read PDF"),
    ("locked.pdf", encrypt_pdf(VALID_PDF, user_password="s3cret", algorithm="AES-128"), 400,
     "needs a password"),
    ("scan.pdf", make_pdf([None]), 400, "no text found"),
    ("random.docx", b"PK\x03\x04" + bytes(range(200)), 400, "could not read Word document"),
    ("old.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100, 400, "old binary .doc"),
    ("binary.txt", bytes(range(256)) * 8, 400, "not readable text"),
    ("blank.md", b"  \n\t\n ", 400, "contains no text"),
    ("..", b"text", 400, "only dots"),
    ("../../..", b"text", 400, "only dots"),
    ("../../etc/", b"text", 400, "empty once its path"),
    ("\x00\x01\x02", b"text", 400, "empty once its path"),
    ("../../etc/passwd", b"root:x:0:0", 415, "has no extension"),
    ("x" * 5000 + ".txt", b"text", 400, "file name is too long"),  # a 5 kB header line: over the parser's limit
]
ACCEPTED = [
    # (raw name, stored name)
    ("../../etc/passwd.txt", "passwd.txt"),
    ("..\\..\\x.txt", "x.txt"),
    ("/etc/cron.d/evil.txt", "evil.txt"),
    ("C:\\Windows\\system32\\drivers.md", "drivers.md"),
    ("\\\\server\\share\\unc.txt", "unc.txt"),
    ("%2e%2e%2f%2e%2e%2fencoded.txt", "%2e%2e%2f%2e%2e%2fencoded.txt"),
    ("evil\u202etxt.md", "eviltxt.md"),
    ("\u200fright-to-left\u200e.txt", "right-to-left.txt"),
    ("📄 notes 🚀.txt", "📄 notes 🚀.txt"),
    ("nul\x00byte.txt", "nulbyte.txt"),
    ("line\r\nbreak.txt", "line%0D%0Abreak.txt"),  # as a browser sends it
    ("tab\tand  spaces .txt", "tab and spaces .txt"),
    ("x" * 3000 + ".txt", "x" * 196 + ".txt"),
    ("<img src=x onerror=alert(1)>.txt", "<img src=x onerror=alert(1)>.txt"),
    ("text-in-a.PDF.txt", "text-in-a.PDF.txt"),
    ("valid.pdf", "valid.pdf"),
]


@pytest.mark.parametrize(("name", "data", "status", "reason"), CASES, ids=[c[0][:20] for c in CASES])
def test_bad_files_get_a_clear_4xx_and_change_nothing(up: Harness, name: str, data: bytes, status: int,
                                                      reason: str) -> None:
    response = upload_rag(up, name, data)  # exchange() checks that nothing changed
    assert response.status_code == status, response.text[:300]
    body = response.json()
    assert reason in body["error"], body
    assert [d["outcome"] for d in body.get("documents", [])] in ([], ["rejected"]), body  # [] : the form itself
    page = upload_console(up, name, data)
    assert page.status_code == status and reason.replace("'", "&#39;") in page.text, page.text[:800]


@pytest.mark.parametrize(("raw", "stored"), ACCEPTED, ids=[a[1][:20] for a in ACCEPTED])
def test_odd_names_are_stored_as_plain_file_names(up: Harness, raw: str, stored: str) -> None:
    data = VALID_PDF if raw.endswith(".pdf") else f"Unique text for {stored!r}: Berlin is a city.".encode()
    result = check_rag_result(upload_rag(up, raw, data), raw)
    assert result["name"] == stored
    document = up.run(up.client.get, f"/rag/documents/{result['id']}").json()
    assert document["name"] == stored


def test_uploads_of_a_whole_batch_and_too_many_files(up: Harness) -> None:
    files = [(f"f{i}.txt", f"Batch file {i} about Berlin.".encode(), "text/plain") for i in range(3)]
    files.append(("bad.exe", b"MZ", "application/octet-stream"))
    body, content_type = multipart(files)
    response = up.run(exchange, up, Sent("POST", "/rag/documents", body=body, headers={"content-type": content_type}))
    assert response.status_code == 202
    assert [d["outcome"] for d in response.json()["documents"]] == ["accepted"] * 3 + ["rejected"]
    body, content_type = multipart([(f"m{i}.txt", b"x", "text/plain") for i in range(101)])
    many = up.run(exchange, up, Sent("POST", "/rag/documents", body=body, headers={"content-type": content_type}))
    assert many.status_code == 400 and "Too many files" in many.json()["error"]
    empty = up.run(exchange, up, Sent("POST", "/rag/documents", body=b"--x--\r\n",
                                      headers={"content-type": "multipart/form-data; boundary=x"}))
    assert empty.status_code == 400
    no_boundary = up.run(exchange, up, Sent("POST", "/rag/documents", body=b"abc",
                                            headers={"content-type": "multipart/form-data"}))
    assert no_boundary.status_code == 400


def test_a_json_upload_over_the_limit_is_refused_before_it_is_read(up: Harness) -> None:
    response = upload_json(up, "big.txt", "a" * (LIMIT + 128 * 1024))
    assert response.status_code == 413 and "exceeds the limit" in response.json()["error"]


def test_nothing_was_written_outside_the_data_directory_so_far(up: Harness) -> None:
    root: Path = up.root  # type: ignore[attr-defined]
    outside = {p for p in files_under(root) if root / "data" not in p.parents}
    assert outside == set(), outside
    assert_no_traversal_targets(root)
    assert not Path("/etc/cron.d/evil.txt").exists()
