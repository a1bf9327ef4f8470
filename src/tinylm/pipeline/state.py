"""What the pipeline has finished, in OUT/pipeline.json, so a second run skips it and resumes the rest.

Each finished step records the settings it ran with (the stage's whole config, including the
checkpoint it started from) and what it produced. On the next run a step is

- skipped when it finished with the same settings;
- resumed (`--resume latest` into its own folder) when its folder holds a checkpoint but the step
  never finished: it was interrupted, and the engine continues bit-exactly;
- refused when it finished, or began, with other settings: rerunning would silently mix two
  configurations, so the one line names what changed and the folder to delete. Preparing the data
  and the evaluation hold nothing of their own and simply run again.

The file is written to a temporary name and renamed, so a crash never leaves half of it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tinylm.errors import TinyLMError

STATE = "pipeline.json"


class PipelineState:
    def __init__(self, out: Path) -> None:
        self.file = out / STATE
        self.steps: dict[str, dict[str, Any]] = {}
        if self.file.is_file():
            try:
                self.steps = json.loads(self.file.read_text(encoding="utf-8"))["steps"]
            except (OSError, ValueError, KeyError, TypeError):
                raise TinyLMError(f"{self.file} is damaged: delete it (and the stages it names) to start over") \
                    from None

    def finished(self, step: str, settings: dict[str, Any], derived: bool = False) -> dict[str, Any] | None:
        """The record of `step` if it finished with `settings`; TinyLMError if it ran with others, unless the
        step is `derived` (prepare, eval: nothing of its own to lose), which then simply runs again."""
        record = self.steps.get(step)
        if record is None or (derived and record["settings"] != settings):
            return None
        if record["settings"] != settings:
            changed = sorted(k for k in {*record["settings"], *settings}
                             if record["settings"].get(k) != settings.get(k))
            raise TinyLMError(f"pipeline step {step} {'finished' if record.get('done') else 'began'} with other "
                              f"settings (changed: {', '.join(changed)}); delete {record['folder']} and its "
                              f"entry in {self.file} to run it again, or use another out")
        return record if record.get("done") else None

    def begin(self, step: str, settings: dict[str, Any], folder: Path) -> None:
        """Mark `step` begun; the time an interrupted attempt already spent is kept."""
        spent = self.steps.get(step, {}).get("wall_s", 0.0)
        self.steps[step] = {"settings": settings, "folder": str(folder), "done": False, "wall_s": spent}
        self._write()

    def note(self, step: str, **fields: Any) -> None:
        self.steps[step].update(fields)
        self._write()

    def finish(self, step: str, **produced: Any) -> dict[str, Any]:
        """Mark `step` done with what it produced; `finished_at` tells a rerun of it from the first run."""
        self.steps[step].update(done=True, finished_at=time.time(), **produced)
        self._write()
        return self.steps[step]

    def _write(self) -> None:
        self.file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.file.with_name(f".{STATE}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps({"steps": self.steps}, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, self.file)
