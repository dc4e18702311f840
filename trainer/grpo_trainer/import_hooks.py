"""Run a patch when a module is imported, not before: `when_imported("verl.utils.tracking", fn)`.

Ray runs our worker_process_setup_hook in every worker of the job, and most of them never import
verl's tracking or its resource pools. Importing those modules eagerly in the hook loaded all of
verl and torch into each worker: 4.5 s per worker process on the H200 machine (bench/gpu/RESULTS.md).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType

Callback = Callable[[ModuleType], None]

_pending: dict[str, list[Callback]] = {}
_lock = threading.RLock()


class _PatchingLoader(importlib.abc.Loader):
    """Delegates to the module's own loader, then runs the callbacks waiting for that module."""

    def __init__(self, wrapped: importlib.abc.Loader) -> None:
        self.wrapped = wrapped

    def __getattr__(self, name: str) -> object:  # get_source, get_resource_reader, ...
        return getattr(self.wrapped, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.wrapped.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # The module keeps its own loader, as if it had been imported without us.
        module.__loader__ = self.wrapped
        if module.__spec__ is not None:
            module.__spec__.loader = self.wrapped
        self.wrapped.exec_module(module)
        with _lock:
            callbacks = _pending.pop(module.__name__, [])
        for callback in callbacks:  # an error propagates: the import fails rather than run unpatched
            callback(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


_finder = _Finder()


def when_imported(module_name: str, callback: Callback) -> None:
    """Call `callback(module)` now if the module is loaded, else right after its first import."""
    with _lock:
        module = sys.modules.get(module_name)
        if module is None:
            _pending.setdefault(module_name, []).append(callback)
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
            return
    callback(module)


def waiting(module_name: str) -> bool:
    return bool(_pending.get(module_name))
