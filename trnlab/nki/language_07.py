"""NKI 0.7's `nki.language` names that AWS's NKI Library imports and trnlab lacked: more activation
functions, `NKIObject` (configuration classes a kernel builds by keyword), and the aliases the
library spells (`nl.bool`, `nl.range`). `language.py` re-exports everything here with one import.

Sources (AWS's NKI pages, checked against SDK 2.33 / NKI 0.7):
- nki.language.gelu_apprx_sigmoid, gelu_apprx_sigmoid_dx, gelu_dx, silu_dx, erf_dx, mish: element-wise
  activation functions, ``f(x, *, dtype=None, mask=None)``, one Scalar-engine `activation` each (the
  functions' NumPy forms are in `trnlab.hardware.ops.ACTIVATION`). GELU's sigmoid approximation is
  ``x * sigmoid(1.702 x)``, the form the NKI Library's PyTorch references use for it.
- nki.language.NKIObject ("Base class for NKI kernel dataclasses and configuration objects",
  ``__init__(self, **kwargs)``) and the NKI Language Guide's "classes" section: a subclass without an
  ``__init__`` of its own gets one taking its annotated fields in order or any attribute by keyword
  (a field not given takes its class default, else None) and then calls ``__post_init__``; ``@dataclass``
  subclasses keep the dataclass's ``__init__``, a field without a default defaulting to None there too
  (the NKI Library builds such a dataclass leaving a field out: mlp_tkg's dimension sizes).
"""
from __future__ import annotations

from trnlab.nki.language_math import _make_unary
from trnlab.nki.language_tiles import bool_, static_range

# -- activation functions (Scalar engine) -------------------------------------------------------------
gelu_apprx_sigmoid = _make_unary("gelu_apprx_sigmoid")          # x * sigmoid(1.702 x)
gelu_apprx_sigmoid_dx = _make_unary("gelu_apprx_sigmoid_dx")    # its derivative
gelu_dx = _make_unary("gelu_dx")                                # d/dx x * Phi(x)
silu_dx = _make_unary("silu_dx")                                # d/dx x * sigmoid(x)
erf_dx = _make_unary("erf_dx")                                  # d/dx erf(x) = 2/sqrt(pi) exp(-x^2)
mish = _make_unary("mish")                                      # x * tanh(softplus(x))

# -- names the NKI Library spells ------------------------------------------------------------------
bool = bool_            # noqa: A001  (nl.bool: the library's spelling of nl.bool_, a byte per element)
range = static_range    # noqa: A001  (nl.range: a specialization-time loop, as static_range is in 0.7)


class NKIObject:
    """Base class of kernel configuration objects (``class TileConfig(nl.NKIObject): ...``).

    A subclass without an ``__init__`` of its own is built from its annotated fields::

        class Dims(nl.NKIObject):
            B: int
            H: int
            tiles: int = 1
            def __post_init__(self):
                self.tiles = self.H // 128

        Dims(B=4, H=512).tiles   # 4

    Positional arguments fill the fields in the order they are annotated (base classes first); a
    field not given takes its class default, else None; a keyword sets the attribute of its name,
    annotated or not (AWS's ``__init__(self, **kwargs)``: the NKI Library builds classes whose fields
    are plain class attributes this way). ``@dataclass`` subclasses (frozen or not) get the
    dataclass's own ``__init__``, with None the default of every field that has none.
    """

    def __init_subclass__(cls, **kwargs):
        # Fields, as AWS's NKI reads a configuration class: every annotated name, and every plain class
        # attribute (a number, string, None, tuple...: the NKI Library writes some field lists that way,
        # under @dataclass too). A field without a default defaults to None (the language guide:
        # ``x: int`` gives ``__init__(self, x=None)``). Done here, at class creation, so a @dataclass
        # decorator applied next sees them and its __init__ takes each by keyword.
        super().__init_subclass__(**kwargs)
        annotations = dict(vars(cls).get("__annotations__", {}))
        for name, annotation in annotations.items():
            if name not in vars(cls) and "ClassVar" not in str(annotation) and "InitVar" not in str(annotation):
                setattr(cls, name, None)
        for name, value in list(vars(cls).items()):
            if name not in annotations and _is_plain_field(name, value):
                annotations[name] = "object"
        cls.__annotations__ = annotations

    def __init__(self, *args, **kwargs):
        fields = _fields(type(self))
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__}() takes {len(fields)} fields in order "
                            f"({', '.join(fields) or 'none annotated'}), got {len(args)} positional arguments")
        values = dict(zip(fields, args))
        for name, value in kwargs.items():
            if name in values:
                raise TypeError(f"{type(self).__name__}() got field {name!r} twice")
            values[name] = value          # any keyword: AWS's NKIObject.__init__(self, **kwargs)
        for name in fields:
            if name not in values:
                setattr(self, name, getattr(type(self), name, None))
        for name, value in values.items():
            setattr(self, name, value)
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


def _is_plain_field(name: str, value) -> bool:
    """A class attribute that is a field's default: not a dunder, method, property, nested class or
    mutable container (a dataclass refuses those as defaults)."""
    if name.startswith("__") or callable(value) or isinstance(value, (classmethod, staticmethod, property)):
        return False
    return not isinstance(value, (list, dict, set))


def _fields(cls) -> list:
    """The annotated field names of `cls` and its bases, base classes first, each once."""
    names: list = []
    for klass in reversed(cls.__mro__):
        for name in vars(klass).get("__annotations__", {}):
            if name not in names and klass is not NKIObject:
                names.append(name)
    return names


__all__ = ["gelu_apprx_sigmoid", "gelu_apprx_sigmoid_dx", "gelu_dx", "silu_dx", "erf_dx", "mish", "bool", "range",
           "NKIObject"]
