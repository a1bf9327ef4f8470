"""Launch, stop and resume training runs from the studio: tinylm's own stages, with options checked as the CLI does.

The forms come from the stage table (stages/__init__.py) and each stage config's option fields
(options.py), the same declarations the command line is generated from: flags, defaults, ranges,
choices and help, never a second list. A submitted form is checked field by field with each
option's own `problem()`, so a value out of range gets the CLI's line (`--batch-size must be >= 1
(got 0)`), then turned into the argv of `tinylm COMMAND` and started as

    python -m tinylm COMMAND --out ROOT/NAME --flag value ...   (no shell: an argument list)

in a new session: its own process group, stdout and stderr in RUN/console.log. It is no child of
the web request and keeps training with the browser closed or the studio stopped. Stop sends SIGTERM
to that group (torchrun and its workers included: a form's "processes" above 1 starts the command
under `torchrun --standalone --nproc-per-node N`); the run finishes its step, saves, and its
status.json says "stopped". Resume starts `tinylm COMMAND --out RUN --resume latest`, which continues
the run exactly, with any options given again (a new --max-steps, say).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tinylm.options import option_specs
from tinylm.stages import STAGES, StageSpec, command_of
from tinylm.studio.runs import CONSOLE, StudioError, resolve_run
from tinylm.train.run_lock import lock_holder
from tinylm.train.run_status import read_status

_CHILDREN: list[subprocess.Popen] = []  # runs this studio started: polled so that finished ones are reaped
RUN_NAME = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
NOT_ON_FORMS = {"out", "resume", "config"}  # set by the studio itself
MAX_PROCESSES = 64  # torchrun workers a form may ask for (one per CPU core or GPU, in practice)


def stage_forms() -> list[dict[str, Any]]:
    """Every stage of the table with its options as a form needs them (flag, kind, default, range, choices)."""
    return [stage_form(spec) for spec in STAGES.values()]


def stage_form(spec: StageSpec) -> dict[str, Any]:
    """One stage's form: its command, help and a field per option (flag, kind, default, range, choices, help)."""
    defaults = spec.default_config()
    fields = []
    for option in option_specs(spec.config):
        if option.name in NOT_ON_FORMS:
            continue
        o = option.option
        needs_base = option.name == "base" and spec.starts_from_base
        fields.append({"name": option.name, "flag": option.flag, "kind": option.kind, "optional": option.optional,
                       "default": None if needs_base else getattr(defaults, option.name),
                       "help": o.help, "group": option.group, "choices": list(o.choice_list()) or None,
                       "low": o.low, "high": o.high, "items": o.items, "required": o.required or needs_base})
    return {"stage": spec.name, "command": command_of(spec.name), "help": spec.help, "fields": fields}


def _typed(field: dict[str, Any], value: Any) -> Any:
    """The form's value as the option's type; StudioError naming the flag when it is not one."""
    kind, flag = field["kind"], field["flag"]
    if value is None or value == "" or value == {} or value == []:
        if field["required"]:
            raise StudioError(f"{flag} is required")
        return None
    if field["items"]:  # NAME=VALUE items (`--set n_kv_head=1`): a JSON object, or a list of "NAME=VALUE"
        items = [f"{k}={v}" for k, v in value.items()] if isinstance(value, dict) else value
        if not isinstance(items, list) or not all(isinstance(i, str) and "=" in i for i in items):
            raise StudioError(f"{flag} takes NAME=VALUE items, got {value!r}")
        return items
    try:
        if kind == "bool":
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            if not isinstance(value, bool):
                raise ValueError
            return value
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise StudioError(f"{flag} takes {'a whole number' if kind == 'int' else 'a ' + kind}, got {value!r}") from None


def command_line(stage: str, values: dict[str, Any], out: Path, resume: bool = False) -> list[str]:
    """The argv of `tinylm COMMAND` for these form values, each checked as the command line checks it."""
    if stage not in STAGES:
        raise StudioError(f"no stage {stage!r} (one of {', '.join(STAGES)})", 404)
    form = stage_form(STAGES[stage])
    fields = {f["name"]: f for f in form["fields"]}
    specs = {spec.name: spec for spec in option_specs(STAGES[stage].config)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise StudioError(f"{form['command']} has no option {unknown[0]!r}")
    argv = [form["command"], "--out", str(out)]
    if resume:
        argv += ["--resume", "latest"]
    for name, field in fields.items():
        if name not in values:
            if field["required"] and not resume:
                raise StudioError(f"{field['flag']} is required")
            continue
        value = _typed(field, values[name])
        if value is None:
            continue
        refusal = None if field["items"] else specs[name].refusal(value)  # the command line's own line
        if refusal is not None:
            raise StudioError(refusal)
        argv += _flag_arguments(field, value)
    return argv


def _flag_arguments(field: dict[str, Any], value: Any) -> list[str]:
    flag = field["flag"]
    if field["items"]:
        return [part for item in value for part in (flag, item)]
    if field["kind"] == "bool":
        if flag.startswith("--no-"):  # a flag that turns the option off
            return [] if value else [flag]
        return [flag] if value else []
    return [flag, str(value)]


def launch(root: Path, stage: str, name: str, values: dict[str, Any], processes: int = 1) -> dict[str, Any]:
    """Start a new run ROOT/NAME (under torchrun when `processes` > 1); refused if the name leaves the root or the
    folder holds a run already."""
    if not RUN_NAME.match(name or "") or any(part in (".", "..") for part in name.split("/")):
        raise StudioError(f"a run name is letters, digits, '.', '_', '-' and '/' between them, got {name!r}")
    out = root / name
    if out.exists() and any(out.iterdir()):
        raise StudioError(f"{name} exists already: choose another name, or resume it", 409)
    argv = command_line(stage, values, out)
    return _start(out, argv, checked_processes(processes))


def resume(root: Path, name: str, values: dict[str, Any], processes: int | None = None) -> dict[str, Any]:
    """Continue a stopped, interrupted, failed or dead run exactly (`--resume latest`), with `values` given again,
    on as many processes as it ran on (status.json's world_size) unless told otherwise."""
    folder = resolve_run(root, name)
    if lock_holder(folder) is not None:
        raise StudioError(f"{name} is running", 409)
    status = read_status(folder) or {}
    stage = status.get("stage")
    if stage not in STAGES:
        raise StudioError(f"{name} has no status.json naming its stage, so it cannot be resumed from here", 409)
    if processes is None:  # as many as it ran on, when it ran here; a run from elsewhere (Slurm) on one
        saved = status.get("world_size")
        here = status.get("host") == socket.gethostname() and isinstance(saved, int) and 1 <= saved <= MAX_PROCESSES
        processes = saved if here else 1
    return _start(folder, command_line(stage, values, folder, resume=True), checked_processes(processes))


def stop(root: Path, name: str) -> dict[str, Any]:
    """SIGTERM to the run holding the folder's lock; it saves and stops at its next step.

    A plain run gets it as a process group (with anything it started). Under torchrun only torchrun gets
    it, which forwards one SIGTERM to every worker: the workers agree to stop after the same step and
    save together. Signalling the workers too would give each a second SIGTERM (torchrun's), which
    means "stop now" and would cut the save short.
    """
    folder = resolve_run(root, name)
    status = read_status(folder) or {}
    pid, launcher_pid = status.get("pid"), status.get("launcher_pid")
    if lock_holder(folder) is None or status.get("status") != "running" or not isinstance(pid, int):
        raise StudioError(f"{name} is not running", 409)
    if status.get("host") != socket.gethostname():  # a run on shared storage, trained elsewhere: not our pid
        raise StudioError(f"{name} runs on {status.get('host')}, not on this machine: stop it there", 409)
    try:
        if isinstance(launcher_pid, int):
            os.kill(launcher_pid, signal.SIGTERM)
        else:
            os.killpg(os.getpgid(pid), signal.SIGTERM)
    except ProcessLookupError:
        raise StudioError(f"{name}'s process {pid} is gone", 409) from None
    return {"name": name, "signalled": launcher_pid if isinstance(launcher_pid, int) else pid}


def checked_processes(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PROCESSES:
        raise StudioError(f"processes must be a whole number from 1 to {MAX_PROCESSES}, got {value!r}")
    return value


def entry_point(processes: int) -> list[str]:
    """What starts `-m tinylm ...`: Python itself, or torchrun on this machine with `processes` workers."""
    if processes == 1:
        return [sys.executable]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]


def shown_command(argv: list[str], processes: int = 1) -> list[str]:
    """The command line a user would type for `argv` on `processes` processes."""
    if processes == 1:
        return ["tinylm", *argv]
    return ["torchrun", "--standalone", f"--nproc-per-node={processes}", "-m", "tinylm", *argv]


def _start(folder: Path, argv: list[str], processes: int = 1) -> dict[str, Any]:
    _CHILDREN[:] = [child for child in _CHILDREN if child.poll() is None]
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / CONSOLE).open("ab") as console:
        process = subprocess.Popen([*entry_point(processes), "-m", "tinylm", *argv, "--no-progress"],
                                   stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                   start_new_session=True, cwd=folder.parent)
    _CHILDREN.append(process)
    return {"pid": process.pid, "argv": shown_command(argv, processes)}
