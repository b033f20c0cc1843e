"""Take the package's code of what an exercise asks for out of the student's kernel while its check runs.

`forbid.switched_off` swaps a function's code only around each call of the answer and keeps the
original code in the kernel meanwhile, so an answer that saved it (``_saved = f.__code__``) can put
it back, and anything that runs before that window — an IPython ``pre_run_cell`` hook reading the
inputs of the hidden check cell, a wrapper around the grader's hook — can still call the package.

Here the grader's kernel (`grader_kernel.install`) makes the asked-for functions *absent* for the
whole hidden check cell: before any other ``pre_run_cell`` hook runs, every function object that
holds the code of an asked-for function — the package's own, and copies a notebook made with
``types.FunctionType`` — gets code that raises `Unavailable`, and every reference to that code in a
dict, list or closure cell (``_saved = statistics.mean.__code__``, the grader's own snapshot) is
replaced the same way. Nothing the grader can find then holds the original code, and it dies. Code
still alive after that (kept in a tuple, or in a small dict the collector does not track, which
`gc.get_referrers` cannot see) is watched instead: a profile hook notes any call of it until the
cell ends, and the grader scores the answer zero. After the cell
(``post_run_cell``) the code is compiled again *from the package's source files* and put back where
it was, so the notebook's later cells run as written. What stays possible is said in
docs/instructors.md ("What the grader protects against and what it does not").
"""

from __future__ import annotations

import gc
import sys
import types
import weakref
from typing import Any, Iterable

from trnlab.course import forbid

Key = tuple[str, str, int]  # (file, qualified name, first line) of a function's code


def _key(code: types.CodeType) -> Key:
    return code.co_filename, code.co_qualname, code.co_firstlineno


def _compiled(filename: str) -> dict[tuple[str, int], types.CodeType]:
    """Every code object in `filename`'s source, by (qualified name, first line); {} if unreadable."""
    try:
        with open(filename, encoding="utf-8") as f:
            source = f.read()
        module = compile(source, filename, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return {}
    found: dict[tuple[str, int], types.CodeType] = {}
    pending = [module]
    while pending:
        code = pending.pop()
        found.setdefault((code.co_qualname, code.co_firstlineno), code)
        pending += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return found


def _recompilable_codes(names: Iterable[str]) -> dict[int, tuple[types.CodeType, str]]:
    """The code of each function named, by id, with its label: only code we can compile again from
    its file (a dataclass's generated methods, say, are left in place)."""
    codes: dict[int, tuple[types.CodeType, str]] = {}
    sources: dict[str, dict] = {}
    for label, function in forbid.resolve_asked_for(names)[0]:
        code = function.__code__
        if id(code) in codes or code.co_filename.startswith("<switched off"):
            continue
        if code.co_filename not in sources:
            sources[code.co_filename] = _compiled(code.co_filename)
        twin = sources[code.co_filename].get(_key(code)[1:])
        if twin is not None and twin.co_freevars == code.co_freevars:
            codes[id(code)] = (code, label)
    return codes  # the compiled copies die with this frame


class Absence:
    """The asked-for functions' code, taken out (`remove`) and put back from source (`restore`)."""

    def __init__(self) -> None:
        # Where a raiser now stands, to be given the recompiled code back: (holder, slot, key).
        self._places: list[tuple[Any, Any, Key]] = []
        self._kept: dict[Key, str] = {}  # asked-for code still referenced where it cannot be replaced
        self.ran: list[str] = []  # labels of kept code that ran while it should have been absent

    def remove(self, names: Iterable[str]) -> None:
        """Make the functions named (``asks_for``) absent: see the module docstring."""
        self.restore()
        codes = _recompilable_codes(names)
        if not codes:
            return
        originals = [code for code, _ in codes.values()]
        alive = [(weakref.ref(code), label, _key(code)) for code, label in codes.values()]
        own = {id(codes), id(originals), id(alive)}
        for holder in gc.get_referrers(*originals):
            if id(holder) in own or isinstance(holder, types.FrameType):
                continue
            self._replace_in(holder, codes)
        del originals, codes
        gc.collect()
        # Still alive: held where it cannot be replaced (an untracked dict, a tuple, a frame).
        # Its calls are watched instead until the cell ends.
        self._kept = {key: label for ref, label, key in alive if ref() is not None}
        self.watch()

    @property
    def kept(self) -> list[str]:
        return sorted(set(self._kept.values()))

    def watch(self) -> None:
        """Record any call of kept asked-for code (a profile hook: only while something is kept,
        because it slows every call)."""
        if self._kept:
            sys.setprofile(self._watch)

    def _watch(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call":
            label = self._kept.get(_key(frame.f_code))
            if label is not None and label not in self.ran:
                self.ran.append(label)

    def _replace_in(self, holder: Any, codes: dict[int, tuple[types.CodeType, str]]) -> None:
        def raiser(code: types.CodeType) -> types.CodeType:
            return forbid._raiser_code(codes[id(code)][1], code.co_freevars)

        if isinstance(holder, types.FunctionType) and id(holder.__code__) in codes:
            code = holder.__code__
            self._places.append((holder, "__code__", _key(code)))
            holder.__code__ = raiser(code)
        elif isinstance(holder, dict):
            for slot, value in list(holder.items()):
                if id(value) in codes and value is codes[id(value)][0]:
                    self._places.append((holder, slot, _key(value)))
                    holder[slot] = raiser(value)
        elif isinstance(holder, list):
            for slot, value in enumerate(holder):
                if id(value) in codes and value is codes[id(value)][0]:
                    self._places.append((holder, slot, _key(value)))
                    holder[slot] = raiser(value)
        elif isinstance(holder, types.CellType):
            value = holder.cell_contents
            self._places.append((holder, "cell_contents", _key(value)))
            holder.cell_contents = raiser(value)

    def restore(self) -> None:
        """Put the code back, compiled again from the package's source files."""
        self.ran = []
        if self._kept:
            if sys.getprofile() == self._watch:
                sys.setprofile(None)
            self._kept = {}
        if not self._places:
            return
        places, self._places = self._places, []
        sources: dict[str, dict] = {}
        for holder, slot, (filename, qualname, line) in places:
            if filename not in sources:
                sources[filename] = _compiled(filename)
            code = sources[filename].get((qualname, line))
            if code is None:  # the file changed under the kernel: the function stays switched off
                continue
            if isinstance(holder, (types.FunctionType, types.CellType)):
                setattr(holder, slot, code)
            else:
                holder[slot] = code
