"""A `tinylm studio` app on a free loopback port in a thread, over a folder of runs the tests write."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from serve_support import free_port, uvicorn_in_thread
from tinylm.studio.app import SHUTDOWN_GRACE_S, create_app


@contextlib.contextmanager
def studio(root: Path, token: str | None = None) -> Iterator[str]:
    """The base URL of a studio serving `root`, stopped on exit."""
    port = free_port()
    config = uvicorn.Config(create_app(root, token), host="127.0.0.1", port=port, log_level="warning",
                            timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    with uvicorn_in_thread(config):
        yield f"http://127.0.0.1:{port}"
