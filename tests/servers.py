"""A real graphgate process on a free port, started as ``python -m proxy serve`` and stopped by
signal, for the tests that need a whole process (crash recovery, the CLI, the data directory)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_SILENT: list[socket.socket] = []   # held until the test process ends


def silent_port() -> int:
    """A port on 127.0.0.1 where nothing answers for the rest of this test process: bound but never
    listening, so a connection is refused and no other test's server can take it in the meantime (a
    released free port was taken by a parallel worker's server, whose 404 a command then read)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _SILENT.append(sock)
    return int(sock.getsockname()[1])


class Server:
    def __init__(self, data_dir: Path, upstream: str, **settings: str) -> None:
        for _attempt in range(3):   # another process (a parallel test worker) may take the free port first
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            env = {**os.environ, "TIKTOKEN_CACHE_DIR": "", "GRAPHGATE_UPSTREAM": upstream,
                   "GRAPHGATE_PORT": str(self.port), "GRAPHGATE_DATA_DIR": str(data_dir), "GRAPHGATE_GLEANING": "0",
                   "GRAPHGATE_CHUNK_TOKENS": "64", "GRAPHGATE_CHUNK_OVERLAP": "0", "GRAPHGATE_LOG_LEVEL": "warning",
                   "GRAPHGATE_INDEX_SAVE_SECONDS": "0.5", "PYTHONPATH": str(ROOT), **settings}
            self.process = subprocess.Popen([sys.executable, "-m", "proxy", "serve"], env=env, cwd=ROOT)
            if self._started():
                return
        raise AssertionError("graphgate exited during start-up")

    def _started(self) -> bool:
        """Serving (True), or exited during start-up (False); 60 s only end a start that hangs."""
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                return False
            try:
                if httpx.get(self.url + "/", timeout=1).status_code == 200:  # served once started
                    return self.process.poll() is None   # ours, not another process's on that port
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "graphgate did not start"
            time.sleep(0.1)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(15)
