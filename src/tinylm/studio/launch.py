"""Launch, stop and resume training runs from the studio: tinylm's own stages, with options checked as the CLI does.

The forms come from the stage table (stages/__init__.py) and each stage config's option fields
(options.py), the same declarations the command line is generated from: flags, defaults, ranges,
choices and help, never a second list. A submitted form is checked field by field with each
option's own `problem()`, so a value out of range gets the CLI's line (`--batch-size must be >= 1
(got 0)`). The values then build the stage's config, which validates them as it does for the command
line (an unknown preset, a resume whose --max-steps is behind the run), before anything starts. The
form becomes the argv of `tinylm COMMAND`, started as

    python -m tinylm COMMAND --out ROOT/NAME --flag value ...   (no shell: an argument list)

in a new session: its own process group, stdout and stderr in RUN/console.log. It is no child of
the web request and keeps training with the browser closed or the studio stopped. Stop sends SIGTERM
to that group, or under torchrun (a form's "processes" above 1 starts the command under `torchrun
--standalone --nproc-per-node N`) to each of torchrun's workers; the run finishes its step, saves, and
its status.json says "stopped". Resume starts `tinylm COMMAND --out RUN --resume latest`, which
continues the run exactly, with any options given again (a new --max-steps, say). A run this studio
started, or whose folder is locked, is refused a second start (409) until it ends.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tinylm.checkpoint import read_checkpoint_config
from tinylm.errors import USER_VALUE_ERRORS, TinyLMError
from tinylm.options import OptionSpec, option_specs
from tinylm.stages import STAGES, StageSpec, command_of
from tinylm.studio.runs import CONSOLE, StudioError, resolve_run
from tinylm.train.config import EngineConfig
from tinylm.train.resume_options import resumed_config, steps_problem
from tinylm.train.run_dir import plan_resume
from tinylm.train.run_lock import lock_holder
from tinylm.train.run_status import read_status

# the process this studio started for each run folder: polled so that finished ones are reaped, and so that a
# second start of a run whose process has not taken the folder's lock yet (Python is still importing) is refused
_CHILDREN: dict[Path, subprocess.Popen] = {}
_STARTING = threading.Lock()  # a check that a run is free and its start, as one step
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
    given: dict[str, Any] = {"out": str(out)}
    if resume:
        argv += ["--resume", "latest"]
        given["resume"] = "latest"
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
        given[name] = _field_value(specs[name], value)
    checked_config(stage, given)
    return argv


def _field_value(spec: OptionSpec, value: Any) -> Any:
    """A form value as its config field holds it: NAME=VALUE items (`--set`) as a dict, as the command line's."""
    if not spec.option.items:
        return value
    parse = spec.option.parse_item or (lambda item: tuple(item.split("=", 1)))
    try:
        return dict(parse(item) for item in value)
    except ValueError as exc:
        raise StudioError(str(exc)) from None


def checked_config(stage: str, given: dict[str, Any]) -> EngineConfig:
    """The stage's config with the options `given` (field values), validated as the command line validates it (a
    resume: with the run's own options), so a form is refused with the CLI's line before anything starts, not by a
    process that fails at once."""
    spec = STAGES[stage]
    try:
        config = spec.config(**given)
        if config.resume is not None and config.out is not None:
            config = _resumed(config, Path(config.out))
        model_config = getattr(config, "model_config", None)  # a stage that builds its model from options: the preset
        if callable(model_config):
            model_config()
    except TinyLMError as exc:
        raise StudioError(str(exc)) from None
    except ValueError as exc:  # an impossible model config or an unknown preset: the user's, as at the command line
        if not str(exc).startswith(USER_VALUE_ERRORS):
            raise
        raise StudioError(str(exc)) from None
    return config


def _resumed(config: EngineConfig, folder: Path) -> EngineConfig:
    """`config` as the engine resumes it in `folder` (train/loop.py resume_point): the run's own options for every
    one not given, and refused where the engine refuses it."""
    checkpoint = plan_resume("latest", folder).checkpoint
    if checkpoint is None:
        if problem := config.start_problem():
            raise TinyLMError(problem)
        return config
    if problem := steps_problem(config, int(read_checkpoint_config(checkpoint)["step"])):
        raise TinyLMError(problem)
    return resumed_config(config, checkpoint, folder)[0]


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
    with _STARTING:
        if out.exists() and any(out.iterdir()):
            raise StudioError(f"{name} exists already: choose another name, or resume it", 409)
        argv = command_line(stage, values, out)
        return _start(out, argv, checked_processes(processes))


def resume(root: Path, name: str, values: dict[str, Any], processes: int | None = None) -> dict[str, Any]:
    """Continue a stopped, interrupted, failed or dead run exactly (`--resume latest`), with `values` given again,
    on as many processes as it ran on (status.json's world_size) unless told otherwise."""
    folder = resolve_run(root, name)
    with _STARTING:  # the check and the start as one step: two resumes a second apart started two groups
        status = read_status(folder) or {}
        _refuse_if_running(folder, name, status)
        stage = status.get("stage")
        if stage not in STAGES:
            raise StudioError(f"{name} has no status.json naming its stage, so it cannot be resumed from here", 409)
        if processes is None:  # as many as it ran on, when it ran here; a run from elsewhere (Slurm) on one
            saved = status.get("world_size")
            here = (status.get("host") == socket.gethostname() and isinstance(saved, int)
                    and 1 <= saved <= MAX_PROCESSES)
            processes = saved if here else 1
        argv = command_line(stage, values, folder, resume=True)
        return _start(folder, argv, checked_processes(processes))


def _refuse_if_running(folder: Path, name: str, status: dict[str, Any]) -> None:
    """409 while the run's lock is held, or while the process this studio started for it has not written its
    status.json yet: it takes the lock only once Python has imported torch, seconds after it starts."""
    child = _CHILDREN.get(folder.resolve())
    starting = (child is not None and child.poll() is None
                and child.pid not in (status.get("pid"), status.get("launcher_pid")))
    if starting or lock_holder(folder) is not None:
        raise StudioError(f"{name} is running", 409)


def stop(root: Path, name: str) -> dict[str, Any]:
    """SIGTERM to the run holding the folder's lock; it saves and stops at its next step.

    A plain run gets it as a process group (with anything it started). Under torchrun each worker gets
    it, and torchrun none: the workers agree to stop after the same step, save together and exit 0, and
    torchrun, seeing its workers succeed, ends quietly. A SIGTERM to torchrun would reach the workers too
    (it forwards one), but torchrun then ends with its own 30-line SignalException traceback; and the
    whole group signalled would give each worker a second SIGTERM (torchrun's), which means "stop now".
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
            workers = children(launcher_pid) or [launcher_pid]  # no /proc to read (not Linux): through torchrun
            for worker in workers:
                os.kill(worker, signal.SIGTERM)
            return {"name": name, "signalled": launcher_pid, "workers": workers}
        os.killpg(os.getpgid(pid), signal.SIGTERM)
    except ProcessLookupError:
        raise StudioError(f"{name}'s process {pid} is gone", 409) from None
    return {"name": name, "signalled": pid}


def children(pid: int) -> list[int]:
    """The child processes of `pid` (torchrun's: its workers), from Linux's /proc; [] where it cannot be read."""
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(child) for child in (task / "children").read_text().split()]
    except OSError:
        return []
    return sorted(set(found))


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
    for ended in [path for path, child in _CHILDREN.items() if child.poll() is not None]:
        del _CHILDREN[ended]
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / CONSOLE).open("ab") as console:
        process = subprocess.Popen([*entry_point(processes), "-m", "tinylm", *argv, "--no-progress"],
                                   stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                   start_new_session=True, cwd=folder.parent)
    _CHILDREN[folder.resolve()] = process
    return {"pid": process.pid, "argv": shown_command(argv, processes)}
