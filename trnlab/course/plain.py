"""Answers as plain data: what crosses from a student's code into a comparison.

A checker never compares the objects a student's function returns. The part of a checker that runs
beside the student's code (``run``) turns each result into plain data with the functions below —
``int``, ``float``, ``str``, ``bool``, lists, string-keyed dicts and NumPy arrays of a numeric dtype —
and rejects anything else with a hint: a subclass of ``int`` whose ``__eq__`` says yes to everything,
a ``torch.Tensor`` subclass with its own ``__torch_function__``, an ``ndarray`` subclass. Types are
tested with ``type(x) is ...``, never ``isinstance``, so a subclass cannot pass for its base.

`encode` / `decode` carry that data between processes as JSON text (arrays as base64 bytes with
their dtype and shape): what the judging side reads back is built by ``json`` and NumPy from bytes,
so no object of the student's survives the trip whatever the student's process did.
"""

from __future__ import annotations

import base64
import json
import math
import sys
from typing import Any

import numpy as np

from trnlab.course.errors import CheckFailed

_NUMPY_INTS = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
_NUMPY_FLOATS = (np.float16, np.float32, np.float64)
NUMERIC_KINDS = "biuf"  # bool, signed, unsigned, float dtypes


def _kind(value: Any) -> str:
    cls = type(value)
    base = next((b.__name__ for b in cls.__mro__[1:] if b.__module__ == "builtins" and b is not object), None)
    if base and cls.__module__ in ("builtins", "numpy") and cls.__name__ == base:
        return cls.__name__
    return f"{cls.__name__} (a subclass of {base})" if base else cls.__name__


def integer(value: Any, what: str = "the answer") -> int:
    """A whole number: an exact ``int``, a NumPy integer, or a float with no fractional part."""
    cls = type(value)
    if cls is int:
        return int.__index__(value)
    if cls in _NUMPY_INTS:
        return int(value)
    if cls is float or cls in _NUMPY_FLOATS:
        number = float(value)
        if math.isfinite(number) and number.is_integer():
            return int(number)
    raise CheckFailed(f"{what} should be a whole number (an int), got {_describe(value)}")


def number(value: Any, what: str = "the answer") -> float:
    """A real number: an exact ``int`` or ``float``, or a NumPy scalar of those kinds."""
    cls = type(value)
    if cls is int:
        return float(int.__index__(value))
    if cls is float:
        return float.__float__(value)
    if cls in _NUMPY_INTS or cls in _NUMPY_FLOATS:
        return float(value)
    raise CheckFailed(f"{what} should be a number (an int or a float), got {_describe(value)}")


def text(value: Any, what: str = "the answer") -> str:
    if type(value) is str:
        return str.__str__(value)
    raise CheckFailed(f"{what} should be a str, got {_describe(value)}")


def _items(value: Any, what: str, kinds: tuple[type, ...]) -> list:
    if type(value) not in kinds:
        names = " or ".join(k.__name__ for k in kinds)
        raise CheckFailed(f"{what} should be a {names}, got {_describe(value)}")
    if type(value) in (set, frozenset):
        return list(value)
    return list.copy(list(value)) if type(value) is tuple else list.copy(value)


def integers(value: Any, what: str = "the answer") -> list[int]:
    """A list (or tuple) of whole numbers."""
    return [integer(v, f"each item of {what}") for v in _items(value, what, (list, tuple))]


def texts(value: Any, what: str = "the answer", kinds: tuple[type, ...] = (list, tuple, set, frozenset)) -> list[str]:
    """A collection of strings, as a list (sets are sorted, so the judge sees one order)."""
    items = [text(v, f"each item of {what}") for v in _items(value, what, kinds)]
    return sorted(items) if type(value) in (set, frozenset) else items


def mapping(value: Any, what: str = "the answer") -> dict:
    """An exact ``dict`` (its values still need converting)."""
    if type(value) is not dict:
        raise CheckFailed(f"{what} should be a dict, got {_describe(value)}")
    return dict.copy(value)


def array(value: Any, what: str = "the answer") -> np.ndarray:
    """A NumPy array (a copy) from an exact ``np.ndarray``, an exact ``torch.Tensor`` or a nested list of numbers."""
    cls = type(value)
    torch = sys.modules.get("torch")
    if cls is np.ndarray:
        result = np.array(value, copy=True)
    elif torch is not None and isinstance(value, torch.Tensor):
        if cls is not torch.Tensor:
            raise CheckFailed(f"{what} should be a plain torch.Tensor, got {_describe(value)}")
        result = torch.Tensor.numpy(torch.Tensor.cpu(torch.Tensor.detach(value))).copy()
    elif cls in (list, tuple):
        result = np.array(_nested_numbers(value, what, 0), dtype=np.float64)
    else:
        raise CheckFailed(f"{what} should be a NumPy array or a torch.Tensor, got {_describe(value)}")
    if type(result) is not np.ndarray:
        raise CheckFailed(f"{what} should be a NumPy array or a torch.Tensor, got {_describe(value)}")
    if result.dtype.kind not in NUMERIC_KINDS:
        if result.dtype.name.startswith(("bfloat16", "float8")):  # ml_dtypes: compared as float32
            return result.astype(np.float32)
        raise CheckFailed(f"{what} should hold numbers, got an array of dtype {result.dtype}")
    return result


def _nested_numbers(value: Any, what: str, depth: int) -> Any:
    if type(value) in (list, tuple):
        if depth > 4:
            raise CheckFailed(f"{what} is nested too deeply")
        return [_nested_numbers(v, what, depth + 1) for v in value]
    return number(value, f"each item of {what}")


def _describe(value: Any) -> str:
    kind = _kind(value)
    try:
        shown = repr(value) if type(value) in (int, float, str, bool, type(None)) else None
    except Exception:
        shown = None
    return f"{shown} ({kind})" if shown is not None and len(shown) < 60 else f"a {kind}"


# ----------------------------------------------------------------------------- between processes


def _to_json(value: Any, depth: int = 0) -> Any:
    if depth > 20:
        raise TypeError("plain data nested too deeply")
    cls = type(value)
    if value is None or cls in (bool, int, str):
        return value
    if cls is float:
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if cls is np.ndarray:
        data = np.ascontiguousarray(value)
        return {"__ndarray__": base64.b64encode(data.tobytes()).decode("ascii"), "dtype": data.dtype.str,
                "shape": list(data.shape)}
    if cls in (list, tuple):
        return [_to_json(v, depth + 1) for v in value]
    if cls is dict:
        if not all(type(k) is str for k in value):
            raise TypeError("plain dicts have str keys")
        return {k: _to_json(v, depth + 1) for k, v in value.items()}
    raise TypeError(f"not plain data: {cls.__name__}")


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        if "__ndarray__" in value:
            dtype = np.dtype(value["dtype"])
            if dtype.kind not in NUMERIC_KINDS:
                raise ValueError(f"not a numeric dtype: {dtype}")
            raw = base64.b64decode(value["__ndarray__"])
            return np.frombuffer(raw, dtype=dtype).reshape(value["shape"]).copy()
        if set(value) == {"__float__"}:
            return float(value["__float__"])
        return {k: _from_json(v) for k, v in value.items()}
    return value


def encode(value: Any) -> str:
    """Plain data → JSON text (raises TypeError for anything that is not plain data)."""
    return json.dumps(_to_json(value))


def decode(payload: str) -> Any:
    """JSON text from `encode` → plain data, built fresh by json and NumPy."""
    return _from_json(json.loads(payload))
