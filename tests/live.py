"""Run an ASGI app on a real uvicorn server on 127.0.0.1, in a thread, for tests that need real I/O."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Literal

import uvicorn
from starlette.types import ASGIApp


@contextlib.contextmanager
def serve_in_thread(app: ASGIApp, *, lifespan: Literal["auto", "on", "off"] = "on") -> Iterator[str]:
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan=lifespan,
                            timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
