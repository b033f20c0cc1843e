"""The grader's side inside a student's kernel: pristine references, the answer run on the grader's inputs.

The grader (`grade.py`) runs a submission in a fresh kernel. Its first cell, before any student
code, calls `install`. That sets the kernel's memory limit, caps how much printed text may wait to
be sent, imports the public checkers, snapshots the libraries they rely on, and defines one hook
function under a random name. After each solution cell the grader runs a hidden cell
``<hook>("nb01_encode", "<inputs>")`` which

1. puts the snapshot back for the duration of the check: every attribute of numpy, torch,
   trnlab, builtins, math, ... that the notebook rebound (``np.allclose = lambda *a: True``),
   every function whose code it swapped, every class attribute it patched, ``sys.modules``
   entries, ``sys.stdout``, trace and profile hooks;
2. runs the answer on the inputs the grader drew in its own process and sent as plain data
   (`check_request`): no seed, no expected value, no judge and no private checker ever reaches the
   kernel. A private checker's ``run`` (the few lines that call the answer) travels as source with
   its inputs; its ``cases`` and ``judge`` stay in the grader. While the answer runs the package
   functions the exercise asks for are switched off (`forbid`), and only plain data is kept;
3. puts the notebook's own state back, so later cells run as the student wrote them;
4. publishes that data as ``application/vnd.trnlab.grade+json`` with a nonce that only the setup
   cell's source contains (the grader's cells are kept out of IPython's history).

The grader judges the data in its own process (``exercises.judge``). Printing "✓", redefining
``check``, reading the checker's frames or returning objects that equal everything earns nothing.

For the whole hidden cell — before any ``pre_run_cell`` hook of the notebook runs — the code of
the functions the exercise asks for is absent from the kernel (`absent.py`), so a saved reference,
a hook that reads the inputs or a wrapper around the grader's hook finds nothing to run.

Limits (docs/instructors.md, "What the grader protects against and what it does not"): everything
above runs in the student's process, so code the student wrote can take it apart there (a copy of
the package's code made before the check, the grader's hooks reordered); the grader's process, the
other submissions and the results are out of its reach (`sandbox.py`).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import sys
import types
import warnings
from typing import Any, Callable

from trnlab.course.absent import Absence

GRADE_MIME = "application/vnd.trnlab.grade+json"
EXTRA_CHECKS_MODULE = "trnlab_course_extra_checks"  # the module name of --extra-checks FILE

# Libraries a checker (or the answer) may lean on; anything the notebook rebinds in them is undone
# while a check runs. IPython/ipykernel are left alone: the kernel itself runs on them.
WATCHED_PACKAGES = (
    "builtins", "numpy", "torch", "ml_dtypes", "scipy", "trnlab", "math", "cmath", "operator",
    "functools", "itertools", "collections", "random", "statistics", "copy", "types", "inspect",
    "traceback", "json", "re", "string", "decimal", "fractions", "numbers", "abc", "typing", "dataclasses",
)
# Rebound by ipykernel itself for every cell (stdin forwarding): neither restored nor reported.
KERNEL_OWNED = {("builtins", "input"), ("builtins", "raw_input"), ("builtins", "_"), ("builtins", "__"), ("builtins", "___")}
# Feedback names patches only in the libraries a checker compares with; other libraries patch each
# other on import (torch.package rebinds inspect.getfile), which is restored but not worth a word.
REPORTED_PACKAGES = ("builtins", "numpy", "torch", "trnlab", "math", EXTRA_CHECKS_MODULE)
_MISSING = object()
_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: builtin types cannot be patched anyway


def written_by_notebook(value: Any) -> bool:
    """Whether `value` is code the notebook wrote (a function, lambda or class defined in a cell).
    Feedback names a patch only then: libraries rebind each other's attributes themselves (torch
    does, lazily), and a student must never be told they replaced what a library changed."""
    for attr in ("__func__", "func"):  # methods, functools.partial
        value = getattr(value, attr, value) if not isinstance(value, type) else value
    code = getattr(value, "__code__", None) if not isinstance(value, types.CodeType) else value
    if isinstance(value, type):
        return any(written_by_notebook(v) for v in vars(value).values() if isinstance(v, types.FunctionType))
    if not isinstance(code, types.CodeType):
        return False
    filename = code.co_filename.replace("\\", "/")
    return filename.startswith("<") or "/ipykernel_" in filename


def _watched(name: str) -> bool:
    return name.split(".")[0] in WATCHED_PACKAGES or name == EXTRA_CHECKS_MODULE


class _Snapshot:
    """References to the watched libraries as they were before any student code ran."""

    def __init__(self) -> None:
        with warnings.catch_warnings():  # touching deprecated attributes (torch) warns
            warnings.simplefilter("ignore")
            self._take()

    def _take(self) -> None:
        self.modules = {name: m for name, m in list(sys.modules.items()) if _watched(name) and isinstance(m, types.ModuleType)}
        self.module_dicts = [(m, dict(vars(m))) for m in self.modules.values()]
        # Lists, not tuples: `absent.Absence` replaces an asked-for function's code in them too.
        self.functions: list[list] = []
        self.classes: list[tuple[type, dict]] = []
        seen: set[int] = set()
        for module, names in self.module_dicts:
            for value in names.values():
                if id(value) in seen:
                    continue
                seen.add(id(value))
                if isinstance(value, types.FunctionType):
                    self.functions.append([value, value.__code__, value.__defaults__, value.__kwdefaults__])
                elif isinstance(value, type) and not value.__flags__ & _IMMUTABLE_TYPE:
                    self.classes.append((value, dict(vars(value))))
                    for attr in vars(value).values():
                        if isinstance(attr, (staticmethod, classmethod)):
                            attr = attr.__func__
                        if isinstance(attr, types.FunctionType) and id(attr) not in seen:
                            seen.add(id(attr))
                            self.functions.append([attr, attr.__code__, attr.__defaults__, attr.__kwdefaults__])
        self.stdout, self.stderr, self.displayhook = sys.stdout, sys.stderr, sys.displayhook

    def enter(self) -> tuple[list[Callable[[], None]], list[str]]:
        """Make the pristine state current. Returns (undo actions, names the notebook had changed)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self._enter()

    def _enter(self) -> tuple[list[Callable[[], None]], list[str]]:
        undo: list[Callable[[], None]] = []
        changed: list[str] = []

        def restore_item(mapping: dict, key: str, value: Any, label: str, package: str) -> None:
            current = mapping.get(key, _MISSING)
            if current is value:
                return
            # Report patched code, not private state the libraries rebind themselves (builtins._).
            if (package.split(".")[0] in REPORTED_PACKAGES and (callable(value) or isinstance(value, types.ModuleType))
                    and (written_by_notebook(current) or isinstance(current, types.ModuleType)
                         and getattr(current, "__file__", None) is None and current is not _MISSING)):
                changed.append(label)
            mapping[key] = value
            undo.append(lambda: mapping.__setitem__(key, current) if current is not _MISSING else mapping.pop(key, None))

        for name, module in self.modules.items():
            restore_item(sys.modules, name, module, f"sys.modules[{name!r}]", name)
        for module, names in self.module_dicts:
            current = vars(module)
            for key, value in names.items():
                if (module.__name__, key) in KERNEL_OWNED:
                    continue
                restore_item(current, key, value, f"{module.__name__}.{key}", module.__name__)
        for function, code, defaults, kwdefaults in self.functions:
            if function.__code__ is not code or function.__defaults__ is not defaults or function.__kwdefaults__ is not kwdefaults:
                if (str(function.__module__).split(".")[0] in REPORTED_PACKAGES
                        and written_by_notebook(function.__code__)):
                    changed.append(f"{function.__module__}.{function.__qualname__} (its code)")
                state = (function.__code__, function.__defaults__, function.__kwdefaults__)
                function.__code__, function.__defaults__, function.__kwdefaults__ = code, defaults, kwdefaults
                undo.append(lambda f=function, s=state: _set_function_state(f, s))
        for cls, pristine in self.classes:
            current = dict(vars(cls))
            for key in [k for k in current if k not in pristine] + [k for k, v in pristine.items() if current.get(k, _MISSING) is not v]:
                if key in ("__dict__", "__weakref__", "__doc__"):
                    continue
                try:
                    if key in pristine:
                        setattr(cls, key, pristine[key])
                    else:
                        delattr(cls, key)
                except (AttributeError, TypeError):
                    continue
                if str(cls.__module__).split(".")[0] in REPORTED_PACKAGES and written_by_notebook(current.get(key)):
                    changed.append(f"{cls.__module__}.{cls.__qualname__}.{key}")
                old = current.get(key, _MISSING)
                undo.append(lambda c=cls, k=key, v=old: delattr(c, k) if v is _MISSING else setattr(c, k, v))
        streams = (sys.stdout, sys.stderr, sys.displayhook)
        if streams != (self.stdout, self.stderr, self.displayhook) and any(
                written_by_notebook(type(stream)) or written_by_notebook(stream) for stream in streams):
            changed.append("sys.stdout/stderr/displayhook")
        sys.stdout, sys.stderr, sys.displayhook = self.stdout, self.stderr, self.displayhook
        undo.append(lambda: _set_streams(streams))
        trace, profile = sys.gettrace(), sys.getprofile()
        if written_by_notebook(trace) or written_by_notebook(profile):
            changed.append("sys.settrace/setprofile hook")
        sys.settrace(None)
        sys.setprofile(None)
        undo.append(lambda: (sys.settrace(trace), sys.setprofile(profile)))
        return undo, changed


def _set_function_state(function: types.FunctionType, state: tuple) -> None:
    function.__code__, function.__defaults__, function.__kwdefaults__ = state


def _set_streams(streams: tuple) -> None:
    sys.stdout, sys.stderr, sys.displayhook = streams


def _set_memory_limit(limit_mb: int) -> None:
    try:
        import resource
    except ImportError:  # not on Windows
        return
    limit = limit_mb * 2**20
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ValueError, OSError):  # a limit above the current hard limit: keep the hard one
        pass


def _set_process_limit(count: int) -> None:
    """At most `count` processes for this kernel's user (a fork bomb stops there); only meaningful
    when the kernel has a user of its own (`sandbox.py`), and never raised again by the notebook."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_NPROC, (count, count))
    except (ImportError, ValueError, OSError):
        pass


def _cap_output(pending_limit: int = 2**20) -> None:
    """Drop text printed while more than `pending_limit` characters wait to be sent. A cell that
    prints without end would otherwise make ipykernel send messages of hundreds of MB, which the
    grader would have to receive and parse."""
    try:
        from ipykernel.iostream import OutStream
    except ImportError:
        return
    write = OutStream.write

    def capped_write(self, string):
        try:
            with self._buffer_lock:  # the IO thread swaps and closes buffers under this lock
                pending = sum(buffer.tell() for buffer in self._buffers.values())
        except (AttributeError, ValueError):  # another ipykernel version: no cap
            pending = 0
        if pending > pending_limit:
            return len(string)
        return write(self, string)

    OutStream.write = capped_write


def load_extra_checks(path: str) -> None:
    """Run an instructor's checks file once per process (it registers with @exercise/@extra_check)."""
    if EXTRA_CHECKS_MODULE in sys.modules:
        if getattr(sys.modules[EXTRA_CHECKS_MODULE], "__file__", None) != path:
            raise RuntimeError(f"extra checks already loaded from {sys.modules[EXTRA_CHECKS_MODULE].__file__}")
        return
    spec = importlib.util.spec_from_file_location(EXTRA_CHECKS_MODULE, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[EXTRA_CHECKS_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[EXTRA_CHECKS_MODULE]
        raise


# What a checker's `run` sent as source may use (besides builtins): it runs in the student's kernel,
# away from the rest of the instructor's file.
RUN_NAMES = ("plain", "CheckFailed", "np", "math")


def run_source(spec: Any) -> str:
    """The source of a private checker's `run`, to be defined in the kernel with only `RUN_NAMES`;
    raises ValueError (when the grader loads the checks) if it uses anything else."""
    import inspect
    import textwrap

    function = spec.run
    if not isinstance(function, types.FunctionType):
        raise ValueError(f"{spec.__qualname__}.run must be a plain function")
    names = inspect.getclosurevars(function)
    used = set(names.globals) | set(names.nonlocals)
    foreign = sorted(used - set(RUN_NAMES))
    if foreign:
        raise ValueError(f"{spec.__qualname__}.run uses {', '.join(foreign)}: a private checker's run is sent "
                         f"alone to the student's kernel and may use only {', '.join(RUN_NAMES)} and builtins")
    return textwrap.dedent(inspect.getsource(function))


def kernel_has_checker(spec: Any) -> bool:
    """Whether the kernel imports this checker itself (the public ones in trnlab.course.checks)."""
    return str(getattr(spec, "__module__", "")).startswith("trnlab.course.checks.")


def check_request(ex: Any, seed: int, extras: tuple = ()) -> str:
    """What the grader sends a kernel for one check: per part, the inputs (drawn here from `seed`)
    and, for a checker the kernel does not have, the source of its `run`. JSON text."""
    from trnlab.course import exercises, plain

    parts = []
    for index, spec in enumerate((ex.spec, *extras)):
        cases = exercises.draw_cases(spec, exercises.part_seed(seed, index))
        parts.append({"cases": cases, "run": None if kernel_has_checker(spec) else run_source(spec)})
    return plain.encode({"parts": parts})


def _define_run(source: str) -> Any:
    import math

    import numpy as np

    from trnlab.course import plain
    from trnlab.course.errors import CheckFailed

    namespace = {"plain": plain, "CheckFailed": CheckFailed, "np": np, "math": math}
    given = set(namespace) | {"__builtins__"}
    exec(compile(source, "<private checker>", "exec"), namespace)
    function = next(v for k, v in namespace.items() if k not in given and callable(v))  # a @staticmethod too
    return types.SimpleNamespace(run=function)


def _checked_exercise(source: str, hook: str) -> str | None:
    """The exercise id of a hidden check cell ``<hook>("nb01_encode", "<inputs>")``, else None."""
    if not source.startswith(hook + "("):
        return None
    try:
        call = ast.parse(source).body[0].value
        return call.args[0].value if isinstance(call.args[0].value, str) else None
    except (SyntaxError, AttributeError, IndexError, ValueError):
        return None


def install(*, nonce: str, hook: str, exercise_ids: list[tuple[str, str, list[str]]], checker_modules: list[str],
            memory_limit_mb: int | None, max_processes: int | None = None) -> None:
    """Prepare this kernel for grading; define the hook `hook` in the notebook's namespace.
    `exercise_ids` holds (exercise id, answer name, asks_for) of each exercise graded."""
    from trnlab.course.sandbox import drop_capabilities

    drop_capabilities()  # a kernel running as root keeps no power over the grader's process
    if memory_limit_mb:
        _set_memory_limit(memory_limit_mb)
    if max_processes:
        _set_process_limit(max_processes)
    _cap_output()
    from IPython import get_ipython
    from IPython.display import publish_display_data

    from trnlab.course import exercises, plain

    exercises.GRADING = True  # the notebook's own check() cells only say that the grader checks
    for name in checker_modules:  # the public checkers only: the instructor's file stays in the grader
        if name.startswith("trnlab.course.checks."):
            importlib.import_module(name)
    # Captured now, before the notebook can reach REGISTRY. An exercise registered only by the
    # instructor's file is known here by its id and answer name; its `run` comes with its inputs.
    captured = {i: exercises.REGISTRY.get(i) or exercises.Exercise(i, "", 0, answer, "", None, tuple(asks_for))
                for i, answer, asks_for in exercise_ids}
    collect, unset, decode, encode = exercises.collect_cases, exercises._UNSET, plain.decode, plain.encode
    shell = get_ipython()
    namespace = shell.user_ns
    snapshot = _Snapshot()
    absence = Absence()

    def before_cell(info: Any) -> None:
        # Registered before any notebook code runs, so it runs before any hook the notebook adds:
        # the hidden check cell starts with the asked-for code already gone (absent.py).
        absence.restore()  # a check cell that was interrupted
        exercise_id = _checked_exercise(info.raw_cell or "", hook)
        if exercise_id in captured and captured[exercise_id].asks_for:
            absence.remove(captured[exercise_id].asks_for)

    shell.events.register("pre_run_cell", before_cell)
    shell.events.register("post_run_cell", lambda result: absence.restore())

    def grade(exercise_id: str, request: str) -> None:
        result: dict[str, Any] = {"nonce": nonce, "exercise": exercise_id}
        undo, changed = snapshot.enter()
        absence.watch()  # the snapshot turned profile hooks off
        try:
            if exercise_id not in captured:
                result["unknown"] = True
            else:
                ex = captured[exercise_id]
                answer = namespace.get(ex.answer, unset)
                if answer is unset:
                    result["missing"] = f"`{ex.answer}` is not defined after the solution cell"
                else:  # only the answers' plain data leaves: the grader judges them in its own process
                    parts = [(_define_run(part["run"]) if part["run"] is not None else
                              (ex.spec if index == 0 else None), part["cases"])
                             for index, part in enumerate(decode(request)["parts"])]
                    result["payload"] = collect(ex, answer, parts)
                    if absence.ran:  # the package's code, kept by the notebook, ran during the check
                        result["payload"] = encode({"parts": [[{"unavailable": f"{absence.ran[0]} (a reference "
                                                                "the notebook kept to its code)"}]]})
            result["tampered"] = changed[:20]
            publish_display_data({GRADE_MIME: json.dumps(result)})
        finally:
            for action in reversed(undo):
                action()

    namespace[hook] = grade
