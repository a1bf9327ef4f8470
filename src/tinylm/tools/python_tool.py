"""The python tool: a model's program runs in the sandbox, and what it prints (or its error) is the result."""

from __future__ import annotations

from tinylm.sandbox import run_python

TIMEOUT_S = 5.0


def run_program(code: str, timeout: float = TIMEOUT_S) -> str:
    """The program's stdout; on failure its last error line (or the timeout), which the model reads back."""
    result = run_python(code, timeout=timeout, cpu_s=max(1, int(timeout)))
    if result.timed_out:
        raise RuntimeError(f"the program ran past {timeout:g} s and was stopped")
    if not result.ok:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        raise RuntimeError(lines[-1] if lines else f"the program exited with status {result.returncode}")
    return result.stdout
