"""Zero-edit runs: an unmodified NKI script or test imports AWS's module names and gets trnlab.nki.

AWS's kernels import ``nki`` / ``nki.language`` / ``nki.isa`` (NKI 0.3 and later, "beta 2"),
``neuronxcc.nki`` / ``neuronxcc.nki.language`` (beta 1), or — in the NKI Library's test harness,
``--test-mode simulation`` — ``nki_cpu_simulator.nki.*``, which the harness then aliases to ``nki.*``.
`install()` puts one import hook (a meta-path finder, first on `sys.meta_path`) that serves every
one of those names from trnlab:

    nki.X.Y, neuronxcc.nki.X.Y, nki_cpu_simulator.nki.X.Y  ->  trnlab.nki.<X_Y or RENAMED[X.Y]>

Each AWS name is a module of its own (an `_Alias`) that reads every attribute from the trnlab module
and writes assignments through to it, so ``nl.add is trnlab.nki.language.add`` and the trnlab module
is never changed by the import system (importing ``nki.tensor`` binds the submodule on the alias
``nki``, not over ``trnlab.nki.tensor``, the tile type). Names without a trnlab module fail with
ModuleNotFoundError naming the trnlab module that would serve them.

The hook also serves ``neuron_dtypes`` (AWS's host dtype helpers, which the NKI Library's tests
import) from `trnlab.nki.neuron_dtypes`, and — where no real torch_xla is installed — torch_xla's device
calls (``from torch_xla.core import xla_model as xm; xm.xla_device()``), with which AWS's guides and labs
call a kernel from PyTorch, from `trnlab.nki.torch_xla_host` (the device is the host; the kernel runs on the
simulated core). A real installation is never shadowed unasked: if ``nki``,
``neuronxcc``, ``nki_cpu_simulator`` or ``neuron_dtypes`` is importable (or imported) from elsewhere
— a package with an ``__init__.py``, not a bare folder of that name — `install()` refuses with
`RealInstallationError` unless ``force=True`` or ``TRNLAB_NKI_FORCE=1`` (`trnlab.config`, switch
``nki_force``).

Entry points: ``python -m trnlab.nki run script.py`` / ``... pytest [args]`` (cli.py), or in a
notebook or program ``from trnlab.nki import zero_edit; zero_edit.install()``, or for any pytest
``python -m pytest -p trnlab.nki.zero_edit`` (this module is also a pytest plugin that installs the
hook before the first conftest is imported).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

from trnlab import config

# The AWS package names that hold NKI, each served by trnlab.nki.
ROOTS = ("nki", "neuronxcc.nki", "nki_cpu_simulator.nki")
# Packages around them with nothing of their own here (beta 1's compiler package, the harness's simulator).
OUTER = ("neuronxcc", "nki_cpu_simulator")
# AWS submodule paths whose trnlab module has another name (the rest: dots become underscores).
RENAMED = {
    "": "",
    "dtype": "language_dtypes",                 # the NKI Library: `import nki.dtype as nt`; `x: nki.dtype`
    "language.dtypes": "language_dtypes",
    "isa.constants": "isa_constants",
}
# Names under an OUTER package that are not NKI but that AWS's tests import (beta-1 compiler internals).
# `neuron_dtypes`: host dtype helpers from AWS's Neuron packages, imported by the NKI Library's tests.
EXTRA = {"neuronxcc.starfish.support.dtype": "trnlab.nki.language_dtypes",
         "neuron_dtypes": "trnlab.nki.neuron_dtypes"}
# torch_xla's device calls, which AWS's guides and labs use to call a kernel from PyTorch: served where no real
# torch_xla is installed (then the real one is left alone, with no refusal: it is not NKI).
TORCH_XLA = {"torch_xla": "trnlab.nki.torch_xla_host", "torch_xla.core": "trnlab.nki.torch_xla_host",
             "torch_xla.core.xla_model": "trnlab.nki.torch_xla_host"}
TOP_LEVEL = ("nki", "neuronxcc", "nki_cpu_simulator", "neuron_dtypes")   # checked for real installations


class RealInstallationError(ImportError):
    """Rule: the zero-edit hook never shadows a real AWS installation unless forced."""


def trnlab_name(name: str) -> str | None:
    """The trnlab module serving AWS module `name`, or None if `name` is not AWS's NKI."""
    if name in EXTRA:
        return EXTRA[name]
    if name in TORCH_XLA:
        return TORCH_XLA[name] if _serve_torch_xla() else None
    for root in ROOTS:
        if name == root or name.startswith(root + "."):
            rest = name[len(root) + 1:]
            mapped = RENAMED.get(rest, rest.replace(".", "_"))
            return "trnlab.nki" + ("." + mapped if mapped else "")
    return None


class _Alias(types.ModuleType):
    """AWS's module `name` standing for a trnlab module: reads come from it, writes go to it.
    Submodules the import system binds on the alias stay on the alias."""

    def __init__(self, name: str, target: types.ModuleType):
        super().__init__(name, target.__doc__)
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "__path__", [])         # a package: its submodules come through the hook
        object.__setattr__(self, "__file__", getattr(target, "__file__", None))

    def __getattr__(self, attr: str):
        target = object.__getattribute__(self, "_target")
        try:
            return getattr(target, attr)
        except AttributeError:
            pass
        if attr == "__all__":
            return [n for n in dir(target) if not n.startswith("_")]
        child = f"{self.__name__}.{attr}"
        if not attr.startswith("_") and _module_exists(trnlab_name(child)):
            return importlib.import_module(child)         # `nki.dtype` used before `import nki.dtype`
        raise AttributeError(f"module {self.__name__!r} (trnlab: {target.__name__}) has no attribute {attr!r}")

    def __setattr__(self, attr: str, value) -> None:
        if isinstance(value, types.ModuleType) or attr.startswith("__"):
            object.__setattr__(self, attr, value)         # the import system binding a submodule
        else:
            setattr(object.__getattribute__(self, "_target"), attr, value)

    def __dir__(self):
        return sorted(set(dir(object.__getattribute__(self, "_target"))) | set(self.__dict__))

    def __repr__(self) -> str:
        return f"<module {self.__name__!r} (trnlab: {object.__getattribute__(self, '_target').__name__})>"


def _serve_torch_xla() -> bool:
    """Whether to serve torch_xla: not where a real one is importable or imported."""
    module = sys.modules.get("torch_xla")
    if module is not None:
        return _is_ours(module)
    spec = importlib.machinery.PathFinder.find_spec("torch_xla")
    return spec is None or spec.origin in (None, "namespace")


def _module_exists(name: str | None) -> bool:
    if name is None:
        return False
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, module: types.ModuleType):
        self.module = module

    def create_module(self, spec):
        return self.module

    def exec_module(self, module) -> None:
        pass


class ZeroEditFinder(importlib.abc.MetaPathFinder):
    """Serves AWS's NKI module names from trnlab.nki (see the module docstring)."""

    def find_spec(self, name, path=None, target=None):
        if name in OUTER or any(extra.startswith(name + ".") for extra in EXTRA):
            module = types.ModuleType(name, f"{name}: served by trnlab's zero-edit layer (trnlab.nki.zero_edit)")
            module.__path__ = []
            if name == "neuronxcc":
                _neuronxcc_logging_level()
            return importlib.util.spec_from_loader(name, _AliasLoader(module), is_package=True)
        source = trnlab_name(name)
        if source is None:
            if any(name.startswith(outer + ".") for outer in OUTER):
                raise ModuleNotFoundError(f"No module named {name!r}: trnlab's zero-edit layer serves "
                                          f"{', '.join(ROOTS)} only", name=name)
            return None
        try:
            module = importlib.import_module(source)
        except ModuleNotFoundError as error:
            if error.name != source:
                raise
            raise ModuleNotFoundError(f"No module named {name!r}: trnlab's zero-edit layer would serve it from "
                                      f"{source}, which trnlab does not have", name=name) from None
        return importlib.util.spec_from_loader(name, _AliasLoader(_Alias(name, module)), is_package=True)


def _neuronxcc_logging_level() -> None:
    """`logging.OFF`, which the standard library lacks but AWS's Neuron images have once `neuronxcc` is
    imported: Stanford CS149's Trainium harness (asst4-trainium2, part 2) calls `logging.disable(logging.OFF)`
    right after `import neuronxcc.nki` and runs on trn2 as published. Set only if absent, above CRITICAL
    (so `logging.disable` turns every level off)."""
    import logging
    if not hasattr(logging, "OFF"):
        logging.OFF = logging.CRITICAL + 10


_FINDER: ZeroEditFinder | None = None


def real_installations() -> dict[str, str]:
    """AWS's packages importable (or imported) from outside trnlab: top-level name -> where."""
    found = {}
    for top in TOP_LEVEL:
        module = sys.modules.get(top)
        if module is not None:
            if not isinstance(module, _Alias) and not _is_ours(module):
                found[top] = getattr(module, "__file__", None) or repr(module)
            continue
        spec = importlib.machinery.PathFinder.find_spec(top)
        if spec is not None and spec.origin not in (None, "namespace"):   # a bare folder named nki is no install
            found[top] = spec.origin
    return found


def _is_ours(module: types.ModuleType) -> bool:
    return isinstance(getattr(module, "__spec__", None), importlib.machinery.ModuleSpec) and \
        isinstance(module.__spec__.loader, _AliasLoader)


_SET_SPILL = False     # whether install() set TRNLAB_SPILL (uninstall() takes it back)


def installed() -> bool:
    return _FINDER is not None and _FINDER in sys.meta_path


def install(force: bool | None = None) -> ZeroEditFinder:
    """Serve AWS's NKI module names from trnlab.nki in this process (idempotent). Refuses, naming
    what it found, if a real `nki` / `neuronxcc` / `nki_cpu_simulator` is importable, unless
    `force` (default: the ``TRNLAB_NKI_FORCE`` switch)."""
    global _FINDER
    if installed():
        return _FINDER
    force = config.get("nki_force") if force is None else force
    real = real_installations()
    if real and not force:
        where = "; ".join(f"{name} at {path}" for name, path in real.items())
        raise RealInstallationError(
            f"zero-edit runs would shadow a real AWS installation ({where}): trnlab leaves it alone. "
            f"To run on trnlab anyway: --force, install(force=True) or TRNLAB_NKI_FORCE=1")
    for name in real:                                   # forced: the real modules give way
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[loaded]
    # AWS's compiler places what does not fit (spilling to HBM); trnlab's own course refuses an SBUF
    # overflow to teach it. An unmodified AWS script gets the compiler's behaviour unless asked not to
    # (the environment, not an override, so pytest-xdist workers and subprocesses see it too).
    global _SET_SPILL
    _SET_SPILL = config.SWITCHES["spill"].env not in os.environ
    os.environ.setdefault(config.SWITCHES["spill"].env, "1")
    _FINDER = ZeroEditFinder()
    sys.meta_path.insert(0, _FINDER)
    return _FINDER


def uninstall() -> None:
    """Remove the hook and every AWS module name it served (trnlab's modules stay imported)."""
    global _FINDER, _SET_SPILL
    if _FINDER is not None and _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    _FINDER = None
    if _SET_SPILL:
        os.environ.pop(config.SWITCHES["spill"].env, None)
        _SET_SPILL = False
    for name in [m for m in sys.modules if trnlab_name(m) is not None or m in OUTER or m.split(".")[0] in OUTER]:
        module = sys.modules[name]
        if isinstance(module, _Alias) or _is_ours(module):
            del sys.modules[name]


# -- as a pytest plugin: `pytest -p trnlab.nki.zero_edit` --------------------------------------------
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    """Install the hook before pytest imports the first conftest (which may import nki)."""
    install()
