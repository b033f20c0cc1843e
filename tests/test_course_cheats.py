"""Every way of buying a grade that issue 13 lists, tried on every registered exercise (every kind of
answer: numbers, lists, dicts, tensors, arrays, NKI kernels), through the real check path (the
cases, `run` beside the answer, the window of switched-off functions, the plain-data trip, `judge`).

Each cheat starts from the reference solution (tests/solutions/) and changes only what the cheat
changes, so a cheat that "works" would earn the full points; each must earn zero:

- walking the call stack (``sys._getframe``) for the checker's expected value;
- wrong values dressed as types that agree with everything (an ``int``/``float``/``str`` subclass
  claiming ``__module__ = "builtins"`` with ``__eq__`` always true, an ``ndarray`` subclass, a
  ``torch.Tensor`` subclass whose ``__torch_function__`` makes ``allclose``/``equal`` say yes);
- calling each package function the exercise names in ``asks_for`` (then returning the reference's
  correct answer, so only the call can cost the points);
- importing and calling the exercise's own checker module from ``trnlab.course.checks``;
- a fixed answer: whatever the reference gives for the first case, returned for every case.

(tests/test_exercises.py tries hand-written versions of the same cheats on chosen exercises;
tests/test_course_grading.py tries them through the `grade` command in a kernel.)
"""

from __future__ import annotations

import functools
import importlib
import sys
import types

import numpy as np
import pytest
import torch

import trnlab.nki as nki
from trnlab.course import exercises, forbid
from trnlab.course.exercises import load_all, run_check
from test_exercises import answer_from  # the reference answers, as the notebooks define them

IDS = sorted(load_all())
SEED = 0  # one of the seeds on which tests/test_exercises.py proves every reference answer passes


def _is_kernel(answer) -> bool:
    return isinstance(answer, nki.Kernel)


def _same_signature(reference, body):
    """`body` with the reference's signature (nki.jit binds a kernel's arguments by name); a kernel
    stays a kernel."""
    inner = reference.func if _is_kernel(reference) else reference
    wrapped = functools.wraps(inner)(body)
    return nki.jit(wrapped) if _is_kernel(reference) else wrapped


MAX_CALLS = 500  # a rewrite rule is called until it says "done": a cheat that never says so is stopped


def _limited(cheat):
    calls = []

    def limited(*args, **kwargs):
        calls.append(1)
        if len(calls) > MAX_CALLS:
            raise RuntimeError("the cheat was called too often (the pass calling it never finishes)")
        return cheat(*args, **kwargs)

    return functools.wraps(cheat)(limited)


def _zero(grade_id: str, answer, why: str = "") -> exercises.CheckResult:
    result = run_check(grade_id, answer, seed=SEED, local=True)
    assert result.points == 0 and not result.passed, f"{grade_id}: {result}"
    assert why in result.message, result.message
    return result


# ----------------------------------------------------------------------------- the call stack


@pytest.mark.parametrize("grade_id", IDS)
def test_walking_the_call_stack_finds_no_expected_value(grade_id):
    reference = answer_from(grade_id)
    stack: list[types.FrameType] = []

    def cheat(*args, **kwargs):
        frame = sys._getframe(1)
        while frame is not None:
            stack.append(frame)
            for name, value in frame.f_locals.items():
                if any(word in name.lower() for word in ("expect", "want", "correct", "truth", "reference")):
                    return value
            frame = frame.f_back
        return None

    _zero(grade_id, _same_signature(reference, cheat))
    assert stack, "the cheat ran"
    # nothing above the answer is judging: the expected values are computed in another process
    assert not any(f.f_code.co_name == "judge" for f in stack), [f.f_code.co_name for f in stack]


# ----------------------------------------------------------------------------- objects that agree


class AgreeingInt(int):
    __module__ = "builtins"
    __qualname__ = __name__ = "int"
    __eq__ = lambda self, other: True  # noqa: E731
    __ne__ = lambda self, other: False  # noqa: E731
    __hash__ = int.__hash__


class AgreeingFloat(float):
    __module__ = "builtins"
    __qualname__ = __name__ = "float"
    __eq__ = lambda self, other: True  # noqa: E731
    __ne__ = lambda self, other: False  # noqa: E731
    __hash__ = float.__hash__


class AgreeingStr(str):
    __module__ = "builtins"
    __qualname__ = __name__ = "str"
    __eq__ = lambda self, other: True  # noqa: E731
    __ne__ = lambda self, other: False  # noqa: E731
    __hash__ = str.__hash__


class AgreeingArray(np.ndarray):
    __module__ = "numpy"
    __qualname__ = __name__ = "ndarray"

    def __eq__(self, other):
        return np.ones(self.shape, dtype=bool)


class AgreeingTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal, torch.isclose, torch.Tensor.__eq__):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def disguised(value):
    """A wrong value of the same shape as `value`, in types whose comparisons always agree."""
    if type(value) is bool:
        return AgreeingInt(not value)  # bool cannot be subclassed
    if type(value) is int:
        return AgreeingInt(value + 1)
    if type(value) is float:
        return AgreeingFloat(value + 1.5)
    if type(value) is str:
        return AgreeingStr(value + "?")
    if type(value) is np.ndarray:
        return (np.asarray(value, dtype=np.float64) + 1).view(AgreeingArray)
    if isinstance(value, torch.Tensor):
        return (value.detach() + 1).as_subclass(AgreeingTensor)
    if isinstance(value, dict):
        return {key: disguised(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return type(value)(disguised(item) for item in value)
    return value


@pytest.mark.parametrize("grade_id", [i for i in IDS if not _is_kernel(answer_from(i))])
def test_wrong_values_that_agree_with_everything_earn_nothing(grade_id):
    reference = answer_from(grade_id)
    kept: list = []  # results with nothing plain in them to disguise (a rewrite rule's graph nodes)

    def cheat(*args, **kwargs):
        value = reference(*args, **kwargs)
        changed = disguised(value)
        if changed is value:
            kept.append(value)
        return changed

    result = run_check(grade_id, _same_signature(reference, _limited(cheat)), seed=SEED, local=True)
    if kept and result.passed:
        pytest.skip(f"{grade_id}'s answer returns {type(kept[0]).__name__} objects, not plain values to disguise")
    assert result.points == 0 and not result.passed, f"{grade_id}: {result}"


# ----------------------------------------------------------------------------- the package's own version


def _call_anything(obj, *args, **kwargs) -> None:
    """Call `obj` as a cheat would: a function with the answer's arguments, a property's getter, a
    class (its constructor), a module (each of its functions); whatever it raises is caught."""
    targets = [obj]
    if isinstance(obj, property):
        targets = [obj.fget]
    elif isinstance(obj, types.ModuleType):
        targets = [v for v in vars(obj).values() if isinstance(v, types.FunctionType) and v.__module__ == obj.__name__]
    elif isinstance(obj, type):
        targets = [obj, *[getattr(obj, name) for name, v in vars(obj).items()
                          if isinstance(v, (types.FunctionType, staticmethod, classmethod))]]
    for target in targets:
        try:
            target(*args, **kwargs)
        except BaseException:  # noqa: BLE001 - a cheat hides the failure and carries on
            pass


def _resolve(dotted: str):
    owner, rest = forbid._import_longest(dotted)
    obj = owner
    for attr in rest:
        obj = vars(obj)[attr] if isinstance(obj, type) and attr in vars(obj) else getattr(obj, attr)
    return obj


ASKED = [(grade_id, name) for grade_id in IDS for name in load_all()[grade_id].asks_for]


@pytest.mark.parametrize("grade_id,name", ASKED, ids=[f"{g}-{n}" for g, n in ASKED])
def test_calling_a_package_function_the_exercise_asks_for_earns_nothing(grade_id, name):
    _resolve(name)  # every name in asks_for exists (a misspelt one would switch nothing off)
    reference = answer_from(grade_id)

    def cheat(*args, **kwargs):
        _call_anything(_resolve(name), *args, **kwargs)  # looked up now, as the student's code would
        return (reference.func if _is_kernel(reference) else reference)(*args, **kwargs)

    _zero(grade_id, _same_signature(reference, cheat), "switched off")


def test_every_exercise_but_the_searches_names_what_it_asks_for():
    # an exercise with no asks_for says why in its checker (the package has no function for it)
    for grade_id, ex in load_all().items():
        if not ex.asks_for:
            source = importlib.import_module(ex.module).__file__
            text = open(source).read()
            assert "No asks_for" in text, f"{grade_id} names no package function to switch off and does not say why"


@pytest.mark.parametrize("grade_id", IDS)
def test_calling_the_exercises_own_checker_module_earns_nothing(grade_id):
    ex = load_all()[grade_id]
    reference = answer_from(grade_id)

    def cheat(*args, **kwargs):
        checker = importlib.import_module(ex.module)  # trnlab.course.checks.nbNN_…
        _call_anything(checker, *args, **kwargs)
        try:
            checker_spec = getattr(checker, ex.spec.__name__)
            for case in checker_spec.cases(np.random.default_rng(0)):
                checker_spec.judge(case, None)
        except BaseException:  # noqa: BLE001
            pass
        return (reference.func if _is_kernel(reference) else reference)(*args, **kwargs)

    _zero(grade_id, _same_signature(reference, cheat), "switched off")


def test_importing_a_checker_module_for_the_first_time_is_refused():
    ex = load_all()["nb04_dma_time"]
    reference = answer_from("nb04_dma_time")
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if name == ex.module}

    def cheat(*args, **kwargs):
        importlib.import_module(ex.module)
        return reference(*args, **kwargs)

    try:
        _zero("nb04_dma_time", _same_signature(reference, cheat), "switched off")
    finally:
        sys.modules.update(saved)


# ----------------------------------------------------------------------------- a fixed answer


@pytest.mark.parametrize("grade_id", [i for i in IDS if not _is_kernel(answer_from(i))])
def test_one_fixed_answer_for_every_case_earns_nothing(grade_id):
    reference = answer_from(grade_id)
    first: list = []

    def cheat(*args, **kwargs):
        if not first:
            first.append(reference(*args, **kwargs))  # the right answer to the first case, kept
        return first[0]

    _zero(grade_id, _same_signature(reference, _limited(cheat)))


def test_the_grader_runs_a_kernel_with_the_directives_and_compile_config_the_student_gave_it():
    # the window that switches off the functions an exercise asks for wraps the kernel's function; what
    # the student asked of the compiler (nki.jit(compile_config=...), @nki.compiler directives) stays
    import trnlab.nki as nki
    from trnlab.course import forbid

    def add(x):
        return x

    configured = nki.jit(add, compile_config=nki.compiler.CompileConfig(allocation=nki.compiler.Allocation.LINEAR))
    kept = nki.compiler.skip_middle_end_transformations(nki.jit(add))
    for kernel in (configured, kept):
        wrapped = forbid.windowed(kernel, ("nki_matmul",))
        assert wrapped.nki_directives == kernel.nki_directives and wrapped.func is not kernel.func
    plain = nki.compiler.skip_middle_end_transformations(add)
    assert forbid.windowed(plain, ("nki_matmul",)).nki_directives == plain.nki_directives
