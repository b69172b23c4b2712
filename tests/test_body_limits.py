"""Request bodies are bounded before they are stored, anywhere, for anyone (issue 16, item 4).

A real ``graphgate serve`` process with its own TMPDIR; a raw socket streams a large body (chunked,
so no Content-Length warns the server) and, between chunks, the test adds up what the server holds
in its temporary directory: files there plus the open (unlinked) temporary files of the process.
"""

from __future__ import annotations

import json
import os
import select
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.core.settings import Settings
from proxy.guards.body_limit import LOGIN_BYTES, upload_total_bytes
from tests.conftest import gateway_client
from tests.fake_ollama import FakeOllama
from tests.reliability_harness import Gateway, ScriptedUpstream

KEY = "body-limit-key"
PASSWORD = "body-limit-password"
MAX_UPLOAD = 256 * 1024
CHUNK = 64 * 1024
BOUNDARY = "graphgateboundary"

pytestmark = pytest.mark.anyio


def temp_bytes(pid: int, tmp: Path) -> int:
    """What the process stores in ``tmp``: its files, and the deleted ones it still holds open."""
    total = 0
    for path in tmp.rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except FileNotFoundError:  # removed between the listing and the look (a worker's scratch directory)
            pass
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir():
        try:
            if os.readlink(fd).startswith(str(tmp)) and "(deleted)" in os.readlink(fd):
                total += fd.stat().st_size
        except OSError:  # closed meanwhile
            pass
    return total


def stream_body(port: int, path: str, headers: dict[str, str], prefix: bytes, total: int,
                pid: int, tmp: Path) -> tuple[int, dict, int, int]:
    """Send ``prefix`` and then ``total`` bytes of 'a', chunked, until the server answers.
    Returns (status, JSON body or {}, bytes sent, the most the server held in ``tmp``)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nTransfer-Encoding: chunked\r\n"
                 f"{head}\r\n".encode())
    sent, most = 0, 0
    pieces: Iterator[bytes] = iter([prefix, *([b"a" * CHUNK] * (total // CHUNK))])
    try:
        for piece in pieces:
            if select.select([sock], [], [], 0)[0]:
                break  # the server answered
            sock.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
            sent += len(piece)
            most = max(most, temp_bytes(pid, tmp))
        else:
            sock.sendall(b"0\r\n\r\n")  # all sent and no answer yet: end the body
    except (BrokenPipeError, ConnectionResetError):
        pass
    most = max(most, temp_bytes(pid, tmp))
    reply = b""
    try:
        while b"\r\n\r\n" not in reply or len(reply.split(b"\r\n\r\n", 1)[1]) < _length(reply):
            data = sock.recv(65536)
            if not data:
                break
            reply += data
    except (ConnectionResetError, TimeoutError):
        pass
    sock.close()
    head_part, _, body = reply.partition(b"\r\n\r\n")
    status = int(head_part.split(b" ", 2)[1]) if reply else 0
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = {"html": body.decode(errors="replace")}
    return status, parsed, sent, most


def _length(reply: bytes) -> int:
    for line in reply.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def file_part(name: str) -> bytes:
    return (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
            "Content-Type: text/plain\r\n\r\n").encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path]]:
    root = tmp_path_factory.mktemp("bodies")
    tmp = root / "tmp"
    tmp.mkdir()
    upstream = ScriptedUpstream()
    with upstream.serve():
        gateway = Gateway(root / "data", upstream.url, log_path=root / "gateway.log",
                          env={"TMPDIR": str(tmp), "GRAPHGATE_API_KEY": KEY, "GRAPHGATE_ADMIN_PASSWORD": PASSWORD,
                               "GRAPHGATE_MAX_UPLOAD_BYTES": str(MAX_UPLOAD)}).start()
        with gateway:
            yield gateway, tmp


def test_a_login_without_a_cookie_is_refused_before_its_body_is_stored(server: tuple[Gateway, Path]) -> None:
    gateway, tmp = server
    status, reply, sent, most = stream_body(
        gateway.port, "/admin/login", {"content-type": f"multipart/form-data; boundary={BOUNDARY}"},
        file_part("big.bin"), 24 * 1024 * 1024, gateway.pid, tmp)
    assert most <= LOGIN_BYTES
    assert status == 413, reply
    assert "exceeds the limit" in reply["html"]
    assert sent < 24 * 1024 * 1024  # refused while it was still being sent


def test_an_upload_is_bounded_in_all_even_with_the_key(server: tuple[Gateway, Path]) -> None:
    gateway, tmp = server
    bound = upload_total_bytes(MAX_UPLOAD)
    status, reply, sent, most = stream_body(
        gateway.port, "/rag/documents", {"content-type": f"multipart/form-data; boundary={BOUNDARY}",
                                         "authorization": f"Bearer {KEY}"},
        file_part("big.txt"), 32 * 1024 * 1024, gateway.pid, tmp)
    assert most <= bound
    assert status == 413, reply
    assert "exceeds the limit of" in reply["error"] and "GRAPHGATE_MAX_UPLOAD_BYTES" in reply["error"]
    assert sent < 32 * 1024 * 1024
    stats = httpx.get(gateway.url + "/rag/documents", headers=gateway.auth, timeout=10).json()
    assert stats["documents"] == []  # nothing was taken


def test_a_declared_length_over_the_bound_is_refused_before_any_byte(server: tuple[Gateway, Path]) -> None:
    gateway, _ = server
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        sock.sendall(f"POST /admin/login HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n"
                     "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000000000\r\n\r\n".encode())
        try:
            reply = sock.recv(65536)
        except TimeoutError:  # the server waits for the body it means to read
            reply = b""
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    # the API key's bound: an unauthenticated /rag call is still refused as unauthorized first
    response = httpx.post(gateway.url + "/rag/documents", content=b"x" * 100_000,
                          headers={"content-type": "application/json"}, timeout=10)
    assert response.status_code == 401


async def test_an_authenticated_upload_within_the_bound_is_taken_and_a_console_form_is_bounded(
        settings: Settings, fake: FakeOllama) -> None:
    small = settings.replace(max_upload_bytes=MAX_UPLOAD, api_key=KEY)
    async with gateway_client(small, fake) as client:
        auth = {"authorization": f"Bearer {KEY}"}
        files = [("file", (f"doc{i}.txt", f"Document {i} is about Berlin. ".encode() * 4000, "text/plain"))
                 for i in range(3)]  # 3 x ~120 KB: under the total bound, each under the per-file limit
        response = await client.post("/rag/documents", files=files, headers=auth)
        assert response.status_code == 202, response.text
        assert [d["outcome"] for d in response.json()["documents"]] == ["accepted"] * 3
        form = await client.post("/admin/merge", data={"keys": "x" * (2 * 1024 * 1024)}, headers=auth)
        assert form.status_code == 413
        assert "exceeds the limit" in form.text
