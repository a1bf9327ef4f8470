"""`tinylm studio`: watch and compare every run under a folder, in a browser, live while they train.

  tinylm studio                          runs/ at http://127.0.0.1:8765/
  tinylm studio --runs ~/exp --port 0    another folder, a free port
  tinylm studio --host 0.0.0.0 --token SECRET    off this machine: every request must carry the token

Every page is read from the run folders when it is shown (metrics.jsonl, status.json, checkpoints), so
a refresh, a second tab or a restarted studio shows exactly the same thing. Off loopback a token is
required (--token, or TINYLM_STUDIO_TOKEN), and the studio never serves a file outside --runs.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from pathlib import Path

from tinylm.cli.commands.serve import bind
from tinylm.cli.options import add_option
from tinylm.errors import TinyLMError
from tinylm.options import HOST, PORT

HELP = "watch and compare runs in a browser (live curves, config differences)"
TOKEN_ENV = "TINYLM_STUDIO_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", default="runs", metavar="DIR", help="the folder whose runs to show (default runs)")
    add_option(parser, "host", HOST, "127.0.0.1")
    add_option(parser, "port", PORT, 8765)
    parser.add_argument("--token", default=None, help=f"require this token on every request (or ${TOKEN_ENV}); "
                                                      "needed off loopback")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from tinylm.studio.app import SHUTDOWN_GRACE_S, create_app  # FastAPI and the pages load only for this command
    from tinylm.studio.follow import StudioServer  # uvicorn's server: loaded only for this command too

    root = Path(args.runs)
    if not root.is_dir():
        raise TinyLMError(f"no runs folder {root}: train something first, or give --runs DIR")
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if token is None and not is_loopback(args.host):
        raise TinyLMError(f"--host {args.host} lets other machines in: give --token (or set {TOKEN_ENV})")
    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    suffix = f"?token={token}" if token else ""
    print(f"tinylm: studio for {root.resolve()} at http://{host}:{port}/{suffix}", file=sys.stderr, flush=True)
    config = uvicorn.Config(create_app(root, token), log_level="warning", timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    StudioServer(config).run(sockets=[sock])  # SIGTERM ends the open pages' live streams first, then stops
    return 0
