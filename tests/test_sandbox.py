"""The code sandbox runs honest programs and stops hostile ones: no writes or reads outside its scratch
directory, no sockets, no new processes, no ctypes, bounded time and memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinylm.sandbox import network_namespace_prefix, run_python


def test_an_honest_program_runs_and_may_use_its_scratch_directory() -> None:
    result = run_python("import math, json\nopen('notes.txt', 'w').write('9')\n"
                        "print(json.dumps(math.isqrt(int(open('notes.txt').read()))))")
    assert result.ok and result.stdout == "3\n"


def test_writing_outside_the_scratch_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "owned.txt"
    for snippet in (f"open({str(target)!r}, 'w').write('x')",
                    f"import os; os.close(os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT))",
                    f"import pathlib; pathlib.Path({str(tmp_path)!r}, 'sub').mkdir()",
                    "import os; os.symlink('/etc', 'escape'); open('escape/x', 'w')"):
        result = run_python(snippet)
        assert not result.ok and "sandbox:" in result.stderr, snippet
    assert list(tmp_path.iterdir()) == []


def test_deleting_a_users_file_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "keep.txt"
    victim.write_text("precious")
    assert not run_python(f"import os; os.remove({str(victim)!r})").ok
    assert not run_python(f"import shutil; shutil.rmtree({str(tmp_path)!r})").ok
    assert victim.read_text() == "precious"


def test_reading_the_home_directory_and_the_users_files_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    for snippet in (f"print(open({str(secret)!r}).read())", f"import os; print(os.listdir({str(Path.home())!r}))",
                    f"import os; print(os.listdir({str(tmp_path)!r}))", "print(open('/etc/passwd').read())",
                    f"print(open({str(Path.home() / '.bashrc')!r}).read())"):
        result = run_python(snippet)
        assert not result.ok and "hunter2" not in result.stdout and "root:" not in result.stdout, snippet


def test_no_network() -> None:
    for snippet in ("import socket; socket.create_connection(('127.0.0.1', 22), timeout=1)",
                    "import urllib.request; urllib.request.urlopen('http://127.0.0.1/')"):
        result = run_python(snippet)
        assert not result.ok and "sandbox:" in result.stderr


def test_a_network_namespace_is_used_where_the_system_allows_it() -> None:
    prefix = network_namespace_prefix()
    if not prefix:
        pytest.skip("this system does not allow unshare -n: the socket ban alone guards the network")
    assert "-n" in prefix[1] or prefix[1] == "-rn"


def test_no_new_processes() -> None:
    for snippet in ("import os\nwhile True: os.fork()", "import subprocess; subprocess.run(['ls', '/'])",
                    "import os; os.system('touch /tmp/pwned-by-sandbox')", "import ctypes; ctypes.CDLL(None)"):
        result = run_python(snippet)
        assert not result.ok and "sandbox:" in result.stderr, snippet
    assert not Path("/tmp/pwned-by-sandbox").exists()


def test_an_infinite_loop_is_killed_by_the_timeout() -> None:
    result = run_python("while True: pass", timeout=1.0, cpu_s=10)
    assert result.timed_out and not result.ok


def test_cpu_time_is_limited_even_when_the_wall_clock_timeout_is_long() -> None:
    result = run_python("while True: pass", timeout=20.0, cpu_s=1)
    assert not result.timed_out and not result.ok  # SIGXCPU after one CPU second


def test_a_huge_allocation_fails_inside_the_child() -> None:
    result = run_python("x = bytearray(8 * 1024**3)\nprint('allocated')", memory_mb=256)
    assert not result.ok and "allocated" not in result.stdout and "MemoryError" in result.stderr
