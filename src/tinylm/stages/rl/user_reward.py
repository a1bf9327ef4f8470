"""`--reward module:function` or `--reward path/to/file.py:function`: the user's own reward, found where they work.

`tinylm` is a console script, so its sys.path holds its own bin folder, not the working folder:
`--reward myreward:fn` beside the user's myreward.py failed without `PYTHONPATH=.`. A module name is
therefore looked up in the working folder first (as `python -m` would), and a file path is loaded
from that file, with its folder searched for the modules it imports. Either folder is on sys.path
only while the module is imported, so nothing of the user's shadows a library later.

A file's module is registered as `tinylm_reward.<stem>`, never under its bare stem, so a reward
file named like a standard module (`random.py`) cannot replace that module for the rest of the run.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from tinylm.errors import TinyLMError

FILE_MODULES = "tinylm_reward"  # the package name a reward file's module is registered under


@contextlib.contextmanager
def searched_first(folder: Path) -> Iterator[None]:
    """`folder` at the front of sys.path for the duration (unless it is there already)."""
    entry = str(folder)
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    importlib.invalidate_caches()  # a module written a moment ago must be seen
    try:
        yield
    finally:
        if added and entry in sys.path:
            sys.path.remove(entry)


def _failed(spec: str, what: str, exc: BaseException) -> TinyLMError:
    first = str(exc).splitlines()[0] if str(exc) else ""
    return TinyLMError(f"--reward {spec}: cannot import {what} ({type(exc).__name__}{': ' + first if first else ''})")


def _from_file(spec: str, path: Path) -> ModuleType:
    if not path.is_file():
        raise TinyLMError(f"--reward {spec}: no file {path}")
    name = f"{FILE_MODULES}.{path.stem}"
    found = importlib.util.spec_from_file_location(name, path)
    if found is None or found.loader is None:
        raise TinyLMError(f"--reward {spec}: {path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module  # dataclasses and pickling look a class's module up here
    try:
        with searched_first(path.resolve().parent):
            found.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - anything the user's file raises is one line
        sys.modules.pop(name, None)
        raise _failed(spec, str(path), exc) from None
    return module


def _by_name(spec: str, name: str) -> ModuleType:
    try:
        with searched_first(Path.cwd()):
            return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's module: one line
        raise _failed(spec, name, exc) from None


def load_user_function(spec: str) -> Callable[..., Any]:
    """The function `spec` ("module:function" or "file.py:function") names."""
    where, _, function_name = spec.rpartition(":")
    if not where or not function_name:
        raise TinyLMError(f"--reward {spec}: name a module and a function: module:FUNCTION or file.py:FUNCTION")
    module = _from_file(spec, Path(where)) if where.endswith(".py") else _by_name(spec, where)
    fn = getattr(module, function_name, None)
    if not callable(fn):
        raise TinyLMError(f"--reward {spec}: {where} has no function {function_name!r}")
    return fn
