"""Run untrusted Python (a model's answer) in a child process that cannot hurt the machine or read the user's files.

    result = run_python("print(2 + 3)", timeout=2.0)      # -> SandboxResult(stdout="5\\n", ok=True, ...)

Layers, each of which alone stops some attack:

- a fresh scratch directory (deleted afterwards) is the child's working directory and HOME, with an
  empty environment and `python -I` (no user site, no PYTHON* variables);
- `guard.py` installs an audit hook before the program runs: no file access outside the
  scratch directory (reads of the interpreter's library excepted), no sockets, no new processes, no
  ctypes (see there);
- `resource.setrlimit` in the child before exec: address space, CPU seconds, file size, open files,
  no core dumps;
- a wall-clock timeout after which the whole process group is killed;
- no network: the child runs in its own network namespace (`unshare -n`, when this system allows it)
  in addition to the socket ban.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

GUARD = Path(__file__).with_name("guard.py")
OUTPUT_LIMIT = 64 * 1024  # bytes of stdout / stderr kept


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None  # None when killed by the timeout
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


@functools.lru_cache(maxsize=1)
def network_namespace_prefix() -> tuple[str, ...]:
    """("unshare", "-n", "--") when this machine lets us create a network namespace, else ()."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    for prefix in ((unshare, "-n", "--"), (unshare, "-rn", "--")):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=5).returncode == 0:
                return prefix
        except (OSError, subprocess.SubprocessError):
            continue
    return ()


def _limits(memory_mb: int, cpu_s: int, file_mb: int) -> None:
    """Runs in the child between fork and exec."""
    os.setsid()  # its own process group, so the timeout kills everything it started
    memory = memory_mb * 1024 * 1024
    for limit, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, cpu_s),
                         (resource.RLIMIT_FSIZE, file_mb * 1024 * 1024), (resource.RLIMIT_NOFILE, 64),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))


def run_python(code: str, timeout: float = 5.0, memory_mb: int = 512, cpu_s: int = 5, file_mb: int = 16,
               stdin: str = "") -> SandboxResult:
    """Run `code` as a Python program in the sandbox; its exit status and (truncated) output."""
    scratch = tempfile.mkdtemp(prefix="tinylm-sandbox-")
    try:
        program = Path(scratch) / "program.py"
        program.write_text(code, encoding="utf-8")
        cmd = [*network_namespace_prefix(), sys.executable, "-I", str(GUARD), scratch, str(program)]
        env = {"HOME": scratch, "TMPDIR": scratch, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        child = subprocess.Popen(cmd, cwd=scratch, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, preexec_fn=lambda: _limits(memory_mb, cpu_s, file_mb))
        try:
            out, err = child.communicate(stdin.encode("utf-8"), timeout=timeout)
            timed_out, code_ = False, child.returncode
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            out, err = child.communicate()
            timed_out, code_ = True, None
        return SandboxResult(code_, out[:OUTPUT_LIMIT].decode("utf-8", "replace"),
                             err[:OUTPUT_LIMIT].decode("utf-8", "replace"), timed_out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
