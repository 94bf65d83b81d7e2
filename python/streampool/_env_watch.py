"""The warning for a common misconception: setting os.environ["PYTORCH_CUDA_ALLOC_CONF"] (or
"resetting" it to "") inside a running program, as if it switched the allocator. The allocator read
its config when it was created and keeps it; changing the variable afterwards changes nothing.

Note [Config variables watch]
install() and init() record the three variables streampool reads (STREAMPOOL_ALLOC_CONF, else
PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF) and the config then in effect; install(),
stats() and memory_summary() compare them with the environment now and warn once per
(variable, new value), naming the variable, its new value and the config in effect. With the
extension allocator the comparison is the extension's own (it also runs on OOM, inside the
allocator), so a change is reported once whichever path sees it first.
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import Callable, Dict, List, Mapping, Optional, Set, Tuple

VARIABLES = ("STREAMPOOL_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


class ConfigVariableChanged(UserWarning):
    """A config variable changed after the allocator read it; it has no effect."""


def read(environ: Optional[Mapping[str, str]] = None) -> Dict[str, Optional[str]]:
    env = os.environ if environ is None else environ
    return {name: env.get(name) for name in VARIABLES}


def describe_config(values: Mapping[str, Optional[str]], explicit: Optional[str] = None) -> str:
    """The config streampool builds from `values` (or from `explicit`, an install/init argument)."""
    if explicit is not None:
        return f"{explicit or '(defaults)'} (from the config argument)"
    for name in VARIABLES:
        if values.get(name) is not None:
            return f"{values[name] or '(defaults)'} (from {name})"
    return "(defaults) (no config variable was set)"


def _quoted(value: Optional[str]) -> str:
    return "unset" if value is None else repr(value)


class Watch:
    """The variables at creation and the config in effect; mismatches() lists new changes once."""

    def __init__(self, at_creation: Mapping[str, Optional[str]], config_in_effect: str,
                 environ: Optional[Mapping[str, str]] = None):
        self.at_creation = dict(at_creation)
        self.config_in_effect = config_in_effect
        self._environ = environ
        self._reported: Set[Tuple[str, Optional[str]]] = set()
        self._lock = threading.Lock()

    def mismatches(self) -> List[str]:
        now = read(self._environ)
        out = []
        with self._lock:
            for name in VARIABLES:
                if now[name] == self.at_creation.get(name) or (name, now[name]) in self._reported:
                    continue
                self._reported.add((name, now[name]))
                out.append(f"streampool: {name} is now {_quoted(now[name])} (it was {_quoted(self.at_creation.get(name))} "
                           f"when the allocator read its config), but the allocator keeps the config it was created "
                           f"with: in effect is {self.config_in_effect}. Changing the variable inside a running "
                           "program switches nothing; set it before the process starts (or pass "
                           "install(config=...)).")
        return out


_watch: Optional[Watch] = None
_extension_check: Optional[Callable[[], str]] = None


def start(config: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> Watch:
    """Records the variables now and the config they (or `config`) give; replaces an earlier watch."""
    global _watch, _extension_check
    values = read(environ)
    _watch = Watch(values, describe_config(values, config), environ)
    _extension_check = None
    return _watch


def use_extension(check: Callable[[], str]) -> None:
    """Hands the comparison to the extension allocator (its env_mismatch_warnings)."""
    global _watch, _extension_check
    _watch = None
    _extension_check = check


def stop() -> None:
    global _watch, _extension_check
    _watch = None
    _extension_check = None


def check(stacklevel: int = 3) -> List[str]:
    """Warns (ConfigVariableChanged) once per changed variable value; returns the new messages."""
    if _extension_check is not None:
        text = _extension_check()
        messages = [line for line in text.split("\n") if line]
    elif _watch is not None:
        messages = _watch.mismatches()
    else:
        return []
    for message in messages:
        warnings.warn(message, ConfigVariableChanged, stacklevel=stacklevel)
    return messages
