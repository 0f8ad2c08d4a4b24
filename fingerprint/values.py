"""A base for immutable value types made of scalars and NumPy arrays."""

from __future__ import annotations

import dataclasses

import numpy as np


class ArrayValue:
    """Mixin for ``@dataclass(frozen=True, eq=False)`` classes: array fields are made read-only,
    and two values are equal when they are of the same class and every field is equal (arrays
    element by element). Not hashable (arrays are not)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                value.setflags(write=False)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                if not np.array_equal(a, b):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = None  # type: ignore[assignment]
