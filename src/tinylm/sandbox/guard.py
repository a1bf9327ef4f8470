"""The first code a sandboxed child runs: an audit hook that confines it, then the untrusted program.

    python -I guard.py SCRATCH PROGRAM

CPython raises an audit event before every file open, directory change, process creation, socket
and ctypes call (PEP 578), and a hook installed with `sys.addaudithook` can never be removed. This
one refuses: writes (and deletes, renames, chmods...) outside SCRATCH; reads outside SCRATCH and the
interpreter's own library folders (so ~/ and the user's project are out of reach); every socket;
every new process (fork, exec, spawn, subprocess, os.system); ctypes (which could call the C library
directly); signals to other processes. `sandbox.py` adds resource limits, a timeout and a network
namespace around it.
"""

from __future__ import annotations

import os
import sys
import sysconfig

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
PATH_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link", "os.symlink",
               "os.truncate", "os.utime", "os.chdir", "os.chflags", "os.lchflags", "os.setxattr", "os.removexattr",
               "shutil.rmtree", "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.move",
               "shutil.chown", "os.mkfifo", "os.mknod"}
READ_EVENTS = {"os.listdir", "os.scandir", "glob.glob", "os.getxattr", "os.listxattr"}
DENIED_PREFIXES = ("socket.", "subprocess.", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                   "os.system", "os.startfile", "pty.", "ctypes.", "os.kill", "os.killpg", "signal.pthread_kill",
                   "os.putenv", "os.unsetenv", "winreg.", "_winapi.", "webbrowser.", "urllib.", "ftplib.",
                   "smtplib.", "poplib.", "imaplib.", "nntplib.", "telnetlib.", "http.client.")


def _inside(path: object, roots: tuple[str, ...]) -> bool:
    if isinstance(path, int):
        return True  # an already open descriptor
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        return False
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root + os.sep) for root in roots)


def install(scratch: str) -> None:
    scratch = os.path.realpath(scratch)
    libraries = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    readable = (scratch, *sorted(os.path.realpath(p) for p in libraries), "/dev/null", "/dev/urandom")
    writable = (scratch, "/dev/null")
    busy = [False]  # realpath itself may raise events: do not re-enter

    def refuse(event: str, detail: object) -> None:
        raise PermissionError(f"sandbox: {event} {detail!r} is not allowed")

    def hook(event: str, args: tuple[object, ...]) -> None:
        if busy[0]:
            return
        busy[0] = True
        try:
            if event.startswith(DENIED_PREFIXES):
                refuse(event, args[:1])
            if event == "open":
                path, mode, flags = (list(args) + [None, None, 0])[:3]
                writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & WRITE_FLAGS)
                if not _inside(path, writable if writing else readable):
                    refuse("open", path)
            elif event in PATH_EVENTS:
                for path in args:
                    if isinstance(path, (str, bytes)) and not _inside(path, writable):
                        refuse(event, path)
            elif event in READ_EVENTS and args and not _inside(args[0] if args[0] is not None else ".", readable):
                refuse(event, args[0])
        finally:
            busy[0] = False

    sys.addaudithook(hook)


def main() -> None:
    scratch, program = sys.argv[1], sys.argv[2]
    with open(program, encoding="utf-8") as f:
        source = f.read()
    os.chdir(scratch)
    install(scratch)
    sys.argv = [program]
    code = compile(source, "program.py", "exec")
    exec(code, {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102 - the sandboxed program


if __name__ == "__main__":
    main()
