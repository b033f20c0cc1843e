"""Switch off, while a student's answer runs, the package functions the exercise asks them to write.

An exercise names what it asks for (``asks_for=("trnlab.data.tasks.problem_key",)``). While the
answer runs, every such function — and every function of ``trnlab.course.checks``, of the oracle and
of the instructor's extra checks — has its code swapped for code that raises `Unavailable`. Swapping
the code (not the module attribute) also catches references taken earlier (``from trnlab.data.tasks
import problem_key`` at the top of the notebook). Starting another process (``subprocess``,
``os.system``, ``os.fork``, ``multiprocessing``) is switched off too, so the package cannot be run
in a fresh interpreter from inside the answer. A call is recorded even if the answer catches the
exception, and an answer that puts the original code back during the check is caught when the
window closes. (In the grader's kernel the asked-for code is moreover absent for the whole hidden
check cell: `absent.py`.)

Limits (docs/instructors.md): a copy of the package's source or code object made by the student is
the student's own function as far as Python knows; ctypes can still start a process. Both are
plagiarism of published code, found by reading the submission, not by this module.
"""

from __future__ import annotations

import importlib
import sys
import types
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from trnlab.course.errors import Unavailable

# Modules whose every function is off while an answer runs: the checkers (and what they import of
# the course) must never compute anything for the answer.
ALWAYS_OFF_MODULES = ("trnlab.course.checks", "trnlab.course.oracle", "trnlab_course_extra_checks")
ALWAYS_OFF = ("trnlab.course.exercises.run_check", "trnlab.course.exercises.check",
              "trnlab.course.exercises.judge", "trnlab.course.exercises.nbgrader_test")
# Process creation: builtins are swapped as module attributes, Python functions by their code.
PROCESS_BUILTINS = {"os": ("fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "execv", "execve",
                           "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv", "spawnve"),
                    "_posixsubprocess": ("fork_exec",), "pty": ("fork", "spawn")}
PROCESS_FUNCTIONS = ("subprocess.Popen._execute_child",)

called: list[str] = []  # names of switched-off functions the answer called, in order


def _unavailable(name: str) -> None:
    called.append(name)
    raise Unavailable(name)


_RAISERS: dict[tuple[str, tuple[str, ...]], types.CodeType] = {}


def _raiser_code(name: str, freevars: tuple[str, ...]) -> types.CodeType:
    """Code that raises Unavailable(name), with the same free variables as the code it replaces
    (Python only lets a function's code be swapped for code with as many free variables)."""
    key = (name, freevars)
    if key not in _RAISERS:
        outer = "".join(f"    {v} = None\n" for v in freevars)
        inner = "".join(f"        {v}\n" for v in freevars)
        source = (f"def _make():\n{outer}    def _switched_off(*args, **kwargs):\n{inner}"
                  f"        __import__('trnlab.course.forbid', fromlist=['_']).__dict__['_unavailable']({name!r})\n"
                  "    return _switched_off\n")
        namespace: dict = {}
        exec(compile(source, f"<switched off: {name}>", "exec"), namespace)
        code = namespace["_make"]().__code__
        if code.co_freevars != freevars:  # an unusual closure: leave it (reported as not switched off)
            raise ValueError(f"cannot switch off {name}")
        _RAISERS[key] = code
    return _RAISERS[key]


def _import_longest(dotted: str) -> tuple[Any, list[str]]:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        module = sys.modules.get(name)
        if module is None:
            try:
                module = importlib.import_module(name)
            except Exception:
                continue
        return module, parts[cut:]
    raise ImportError(f"nothing importable in {dotted!r}")


def _functions_of(obj: Any, depth: int = 0) -> list[types.FunctionType]:
    """The Python functions behind `obj`: a function, a method, an nki.Kernel, a class, a module."""
    if depth > 3:
        return []
    if isinstance(obj, types.FunctionType):
        wrapped = getattr(obj, "__wrapped__", None)
        return [obj, *(_functions_of(wrapped, depth + 1) if wrapped is not None else [])]
    if isinstance(obj, (staticmethod, classmethod, types.MethodType)):
        return _functions_of(obj.__func__, depth + 1)
    if isinstance(obj, property):
        return [f for f in (obj.fget, obj.fset, obj.fdel) if isinstance(f, types.FunctionType)]
    if isinstance(obj, types.ModuleType):
        return [f for value in list(vars(obj).values())
                for f in (_functions_of(value, depth + 1) if _defined_in(value, obj.__name__) else [])]
    if isinstance(obj, type):
        return [f for value in list(vars(obj).values()) for f in _functions_of(value, depth + 1)]
    inner = getattr(obj, "func", None)  # an nki.Kernel, a functools.partial
    return _functions_of(inner, depth + 1) if inner is not None else []


def _defined_in(value: Any, module: str) -> bool:
    owner = getattr(value, "__module__", None)
    if isinstance(value, (staticmethod, classmethod)):
        owner = getattr(value.__func__, "__module__", None)
    return owner == module


def resolve_asked_for(names: Iterable[str]) -> tuple[list[tuple[str, types.FunctionType]], list[tuple[Any, str, str]]]:
    """Python functions behind `names`, as (label, function), and other callables (builtins such
    as ``torch.nn.functional.scaled_dot_product_attention``), as (owner, attribute, label). A name
    that does not resolve is skipped."""
    functions: list[tuple[str, types.FunctionType]] = []
    attributes: list[tuple[Any, str, str]] = []
    for dotted in names:
        try:
            owner, rest = _import_longest(dotted)
            obj = owner
            for attr in rest:
                owner, obj = obj, getattr(obj, attr)
        except (ImportError, AttributeError):
            continue
        found = _functions_of(obj)
        if found:
            functions += [(dotted, f) for f in found]
        elif callable(obj) and rest and not isinstance(obj, type):
            attributes.append((owner, rest[-1], dotted))
    return functions, attributes


def resolve(names: Iterable[str]) -> tuple[list[tuple[str, types.FunctionType]], list[tuple[Any, str, str]]]:
    """`resolve_asked_for`, plus every function of the checkers and oracle (`ALWAYS_OFF_MODULES`)
    and the ways to start a process: everything to switch off while an answer runs."""
    functions, attributes = resolve_asked_for(names)
    for name, module in list(sys.modules.items()):
        if isinstance(module, types.ModuleType) and name.startswith(ALWAYS_OFF_MODULES):
            functions += [(f"{f.__module__}.{f.__qualname__}", f) for f in _functions_of(module)]
    for module_name, attrs in PROCESS_BUILTINS.items():
        module = sys.modules.get(module_name)
        for attr in attrs if module is not None else ():
            if hasattr(module, attr):
                attributes.append((module, attr, f"{module_name}.{attr} (starting a process)"))
    return functions, attributes


class _NoCheckImports:
    """A meta-path finder that refuses to import the checkers while an answer runs."""

    def find_spec(self, name, path=None, target=None):
        if name.startswith(ALWAYS_OFF_MODULES):
            called.append(name)
            raise ImportError(f"{name} cannot be imported while your answer is checked")
        return None


@contextmanager
def switched_off(names: Iterable[str]) -> Iterator[None]:
    """Run the body with `names` (and the checkers, the oracle, process creation) unavailable."""
    targets, builtins = resolve([*names, *ALWAYS_OFF, *PROCESS_FUNCTIONS])
    swapped: list[tuple[types.FunctionType, types.CodeType, types.CodeType, str]] = []
    seen: set[int] = set()
    for label, function in targets:
        if id(function) in seen or function.__module__ == __name__:
            continue
        seen.add(id(function))
        try:
            code = _raiser_code(label, function.__code__.co_freevars)
        except (ValueError, SyntaxError):
            continue
        swapped.append((function, function.__code__, code, label))
        function.__code__ = code
    attributes: list[tuple[Any, str, Any]] = []
    for owner, attr, label in builtins:
        try:
            value = getattr(owner, attr)
            setattr(owner, attr, _blocker(label))
        except (AttributeError, TypeError):
            continue
        attributes.append((owner, attr, value))
    finder = _NoCheckImports()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for module, attr, value in attributes:
            setattr(module, attr, value)
        for function, original, code, label in swapped:
            if function.__code__ is not code:  # the answer put the package's code back
                called.append(f"{label} (its code was put back while the answer ran)")
            function.__code__ = original


def _blocker(name: str) -> Callable:
    def blocked(*args: Any, **kwargs: Any) -> None:
        _unavailable(name)

    return blocked


def windowed(answer: Any, names: Iterable[str]) -> Any:
    """The answer, wrapped so that each call runs inside `switched_off(names)`. An nki.Kernel stays
    a kernel (its function is wrapped); a class or other callable is wrapped as a function."""
    names = tuple(names)
    kernel_type = getattr(sys.modules.get("trnlab.nki"), "Kernel", None)
    if kernel_type is not None and type(answer) is kernel_type:
        # the same kernel (its compile config, @nki.compiler directives) around the wrapped function
        return answer.variant(func=_wrap(answer.func, names))
    return _wrap(answer, names)


def _wrap(function: Callable, names: tuple[str, ...]) -> Callable:
    def run_switched_off(*args: Any, **kwargs: Any) -> Any:
        with switched_off(names):
            return function(*args, **kwargs)

    for attr in ("__name__", "__qualname__", "__doc__", "nki_directives"):
        try:
            setattr(run_switched_off, attr, getattr(function, attr))
        except (AttributeError, TypeError):
            pass
    try:
        import inspect

        run_switched_off.__signature__ = inspect.signature(function)  # nki.jit binds arguments by name
    except (TypeError, ValueError):
        pass
    return run_switched_off

