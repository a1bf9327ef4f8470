"""A Ctrl-C while `tinylm` is still importing (torch takes a second or more) ends it as every later one does:
"tinylm: interrupted" and exit status 130, never a KeyboardInterrupt traceback (nor an exit by the signal,
status -2, which `python -m` gave when the interrupt passed through torch's import)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path


def test_ctrl_c_during_the_imports_is_an_interrupt_not_a_traceback(tmp_path: Path) -> None:
    interrupted = 0
    for delay in (0.2, 0.35, 0.5):
        process = subprocess.Popen([sys.executable, "-m", "tinylm", "export", "--checkpoint", str(tmp_path / "run"),
                                    "--out", str(tmp_path / "gguf"), "--format", "gguf"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        sent = process.poll() is None  # still starting (on a fast machine a late delay may find it done)
        if sent:
            process.send_signal(signal.SIGINT)
            interrupted += 1
        _, err = process.communicate(timeout=60)
        assert "Traceback" not in err, err
        if sent:
            assert process.returncode == 130 and err.strip().endswith("tinylm: interrupted"), (delay, err)
    assert interrupted, "every delay came after tinylm had finished: nothing was interrupted"
