"""Errors of the kernel language, and pointing them at the user's kernel line.

A rule broken inside a kernel (a tile with 256 partitions, a PSUM tile copied to HBM, an index past the
end of a tensor) is detected deep inside `trnlab.nki` or `trnlab.hardware`. What the user needs is the
line of *their* kernel that asked for it. `locate` walks the traceback to the innermost frame outside
the front-end and the simulator and appends `file:line` (and the source text) to the message, keeping
the exception's type so that `pytest.raises(SomeHardwareError)` still works.
"""
from __future__ import annotations

import linecache
import os
import sys
import types

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../trnlab
# Frames in these folders are machinery; everything else (tests, notebooks, trnlab/kernels) is a kernel.
_INTERNAL_DIRS = tuple(os.path.join(_PACKAGE_ROOT, name) + os.sep for name in ("nki", "hardware"))


class NKIError(ValueError):
    """A kernel misused the language itself (a mask the hardware cannot express, a wrong call style).

    Broken *hardware* rules raise the hardware's own classes (`trnlab.hardware.errors`), which the
    front-end also uses for the checks it makes itself (out-of-bounds indexing, operand memories).
    """


class MaskError(NKIError):
    """A mask that cannot be turned into an instruction range (it must bound one iterator per clause)."""


class ViewError(NKIError):
    """A tensor view (`NkiTensor.slice`, `permute`, `reshape`, `.ap`, ...) that is not an access pattern
    over the same bytes, or that would change an on-chip tensor's partition dimension."""


class LaunchGridError(NKIError):
    """An SPMD launch grid with an axis of no programs (`kernel[0]`): each axis counts the programs
    along it (nki.language.num_programs), so every axis needs at least one."""


def _is_internal(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_INTERNAL_DIRS)


_internal_files: dict = {}
_notes: dict = {}


def user_site(depth: int = 2):
    """(code, line) of the innermost caller outside the machinery, or None."""
    frame = sys._getframe(depth)
    while frame is not None:
        code = frame.f_code
        internal = _internal_files.get(code.co_filename)
        if internal is None:
            internal = _internal_files[code.co_filename] = _is_internal(code.co_filename)
        if not internal:
            return code, frame.f_lineno
        frame = frame.f_back
    return None


def site_note(site) -> str:
    """'file.py:42 (kernel)', recorded with each instruction in the timeline."""
    if site is None:
        return ""
    note = _notes.get(site)
    if note is None:
        code, line = site
        note = _notes[site] = f"{os.path.basename(code.co_filename)}:{line} ({code.co_name})"
    return note


def user_frame(tb: types.TracebackType | None) -> tuple[str, int, str] | None:
    """(file, line, function) of the innermost traceback frame outside trnlab.nki / trnlab.hardware."""
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if not _is_internal(code.co_filename):
            found = (code.co_filename, tb.tb_lineno, code.co_name)
        tb = tb.tb_next
    return found


def locate(error: BaseException, site=None) -> BaseException:
    """Append the user's kernel line to `error`'s message (once) and return it.

    `site` (code, line) names the line explicitly: a functional call such as `t = nl.load(x)` is
    issued later (see tensor.py), and its errors belong to the line that made it.
    """
    if getattr(error, "_nki_located", False):
        return error
    if site is not None:
        code, line = site
        where = (code.co_filename, line, code.co_name)
    else:
        where = user_frame(error.__traceback__)
    error._nki_located = True  # type: ignore[attr-defined]
    if where is None:
        return error
    filename, lineno, function = where
    source = linecache.getline(filename, lineno).strip()
    error.kernel_location = (filename, lineno)  # type: ignore[attr-defined]
    suffix = f"\n  in kernel line {filename}:{lineno} ({function}): {source}"
    if error.args and isinstance(error.args[0], str):
        error.args = (error.args[0] + suffix,) + tuple(error.args[1:])
    elif not error.args:
        error.args = (suffix.strip(),)
    return error
