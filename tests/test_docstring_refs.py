"""Every Sphinx cross-reference in the package's docstrings and comments names something that exists.

A reference is resolved as the documentation tools resolve it: as a full import path, as a
name of the module it is written in, or as an attribute of one of that module's classes (a
method or field named from inside its class). Built-in names (``str.casefold``) resolve too.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import inspect
import re
from types import ModuleType
from typing import Any

from tests.test_layers import modules

ROLES = "mod|func|class|meth|data|attr|exc|obj"
#: ``:func:`~a.b``, ``:func:`a.b()``, and the titled form ``:class:`title <a.b>``.
REFERENCE = re.compile(rf":(?:{ROLES}):`~?\.?([\w.]+)(?:\(\))?`|:(?:{ROLES}):`[^`<]*<~?\.?([\w.]+)>`")


def _attribute_path(obj: Any, names: list[str]) -> bool:
    for position, name in enumerate(names):
        if hasattr(obj, name):
            obj = getattr(obj, name)
        elif inspect.isclass(obj) and (name in getattr(obj, "__annotations__", {})
                                       or (dataclasses.is_dataclass(obj)
                                           and name in {f.name for f in dataclasses.fields(obj)})):
            return position == len(names) - 1   # a field without a class-level default ends the path
        else:
            return False
    return True


def _absolute(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return _attribute_path(module, parts[cut:])
    return False


def resolves(module: ModuleType, name: str) -> bool:
    parts = name.split(".")
    if _absolute(name) or _attribute_path(module, parts) or _attribute_path(builtins, parts):
        return True
    classes = [value for value in vars(module).values() if inspect.isclass(value)]
    return any(_attribute_path(cls, parts) for cls in classes)


def unresolved() -> list[str]:
    found = []
    for name, path in modules().items():
        if name == "neardup.__main__":
            continue   # running it is the CLI
        module = importlib.import_module(name)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in REFERENCE.finditer(line):
                target = match.group(1) or match.group(2)
                if not resolves(module, target):
                    found.append(f"{name}:{number}: {target}")
    return found


def test_every_cross_reference_resolves():
    assert unresolved() == []


def test_a_reference_to_nothing_is_found():
    module = importlib.import_module("neardup.fingerprint.hashing")
    assert resolves(module, "neardup.fingerprint.hashing.minhash_batch")
    assert resolves(module, "minhash_batch")
    assert resolves(module, "str.casefold")
    assert not resolves(module, "fingerprint.hashing.minhash_batch")   # the bare folder name is not the package
    assert not resolves(module, "neardup.fingerprint.hashing.no_such_function")
    config = importlib.import_module("neardup.config")
    assert resolves(config, "Config.fingerprint")                # a field of the model
    assert not resolves(config, "fingerprint.tfidf")             # not a path through that field
    assert REFERENCE.search(":class:`the window <~neardup.proxy.handlers.search_plan.Window>`")
