"""A `tinylm studio` app on a free loopback port in a thread, over a folder of runs the tests write."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from serve_support import free_port
from tinylm.studio.app import SHUTDOWN_GRACE_S, create_app


@contextlib.contextmanager
def studio(root: Path, token: str | None = None) -> Iterator[str]:
    """The base URL of a studio serving `root`, stopped on exit."""
    port = free_port()
    config = uvicorn.Config(create_app(root, token), host="127.0.0.1", port=port, log_level="warning",
                            timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the studio did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
