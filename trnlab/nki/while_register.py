"""``while reg:`` on a register known only at run time: a loop the device runs (NKI 0.7's parser form).

AWS (nki.isa.VirtualRegister, v2.32): "nl.dynamic_range and bare while reg: are supported by the
parser frontend", which reads the kernel's source; the page's example loads the condition into a
register, and the body loads the next condition into the same register:

    reg = nisa.register_alloc(); nisa.register_load(reg, cond_sb)
    while reg:
        ...
        nisa.register_load(reg, cond_sb)

trnlab traces kernels by running them as Python, where ``while reg:`` asks for the register's value
while tracing (`VirtualRegister.__bool__`: `RegisterValueError`). So it does what the parser does,
from the source, only for the functions that need it:

1. a trace fails with that error at a ``while`` statement (the traceback's frame and its
   instruction's source position name the statement);
2. the outermost function running in the trace that encloses that statement is compiled again from
   its source, each ``while X:`` in it (nested functions' too) written
   ``_t = WhileTest(...); while _t(X):``, at the same lines and columns (errors name the kernel
   line as before), and its function objects get that code (`__code__`; the closure's cells are the
   same: its free variables are checked to be the same names in the same order);
3. the kernel is traced again (the source read must compile to a function of the same local names
   and nested functions as the running one: a file edited since it was loaded is refused).

Why this is sound: `WhileTest.__call__` returns ``bool(X)`` for every value but a register known only
at run time, and the ``while`` statement, its ``break`` / ``continue`` / ``else`` are Python's own,
so a rewritten function does what it did for every Python value — a kernel that never reaches a
run-time ``while reg:`` traces to the identical program (tests/nki_api/test_while_register.py). The
rewritten code stays installed (later traces skip the failed attempt). For a run-time register the
first test opens `device_loops._device_loop` (kind "while", as `nl.while_loop` records one: the body
traced once in a region of its own, `program.Loop` with the condition register), returns True, the
body runs once, and the second test — the register the name holds after the body, normally `reg`
itself, updated by register_load — closes it and returns False; the device checks the register
before each iteration (`trnlab/hardware/dynamic_loops.py`). As for every loop the device runs, a body
that used the trace-time value of a register it also writes is refused (device_loops._carried_registers),
and a body that never writes its condition register, entered with it nonzero, is a TripCountError.
The retrace runs the kernel's Python a second time: a kernel keeping state outside itself across
traces (an allocator's offset in a module global) sees the state the failed attempt left.

Refused by name (`RegisterValueError`), with the rule:
- ``break`` / ``continue`` / ``return`` in the body of a device ``while``: the body is traced once, so
  Python cannot take them per iteration; end the loop by loading 0 into the register;
- a condition that is not a bare register (a name or attribute: ``while reg:``, ``while self.reg:``):
  ``while not reg:``, ``while reg and x:``, ``while f():`` would be evaluated once while tracing;
- ``if reg:`` and other Python conditions on a run-time register (AWS's compiled conditional is
  nl.if_else, whose condition is an NkiScalar);
- a function whose source is unavailable (``exec`` of a string, a .pyc alone), or that the kernel
  creates anew on each trace outside the functions running it (a closure returned by a helper that
  has returned): there is no source, or no lasting function, to recompile.
"""
from __future__ import annotations

import __future__ as _future
import ast
import gc
import linecache
import types

from trnlab.nki.errors import _is_internal, locate
from trnlab.nki.isa_registers import RegisterValueError, VirtualRegister

_MODULE = __name__
_REWRITTEN: dict = {}            # original code -> rewritten code (installed on its functions)
_OURS: set = set()               # the rewritten code objects
_RULE = ("only a bare register is a device loop's condition (`while reg:`, AWS's parser frontend form): the "
         "device checks that register before each iteration and the body updates it (register_load / "
         "register_move)")


class WhileTest:
    """The test of one rewritten ``while`` statement, made each time the statement starts."""

    def __init__(self, test: str, bare: bool, jumps: str):
        self.test, self.bare, self.jumps = test, bare, jumps
        self.loop = None

    def __call__(self, value) -> bool:
        if self.loop is not None:                    # the body was traced once: the loop is recorded
            if not isinstance(value, VirtualRegister):
                raise RegisterValueError(
                    f"while {self.test}: the body made {self.test} a {type(value).__name__}; the loop runs on the "
                    f"device, so its condition must stay a register (load the next condition with register_load)")
            loop, self.loop = self.loop, None
            try:
                loop.send(value)
            except StopIteration:
                pass
            return False
        if not (isinstance(value, VirtualRegister) and value.value is None):
            return bool(value)                       # Python's while, unchanged
        if not self.bare or self.jumps:
            rule = _jump_rule(self.test, self.jumps) if self.bare else _bare_rule(self.test)
            raise RegisterValueError(f"while {self.test}: register {value.id} is {value.origin}, so its value is known "
                                     f"only when the program runs; {rule}")
        if hasattr(value, "usable"):                 # an NkiScalar: not a comparison's result
            value.usable("the condition of while")
        from trnlab.nki.device_loops import _device_loop
        self.loop = _device_loop(value, None, 1, "while", kind="while")
        next(self.loop)
        return True


def _bare_rule(test: str) -> str:
    return f"`while {test}:` is not a bare register: {_RULE}; compute the condition into a register first"


def _jump_rule(test: str, jump: str) -> str:
    return (f"a `{jump}` in the body of `while {test}:` on a run-time register: the device runs the body as one "
            f"block, traced once, so Python cannot take it per iteration; end the loop by loading 0 into {test}")


# -- finding the while statement a trace failed at -----------------------------------------------
def _condition_frame(error: BaseException):
    """The traceback entry of the kernel frame whose condition called VirtualRegister.__bool__, or None."""
    tb, user = error.__traceback__, None
    while tb is not None:
        code = tb.tb_frame.f_code
        if _is_internal(code.co_filename):
            if code.co_name == "__bool__" and code.co_filename.endswith(("isa_registers.py", "isa_scalars.py")):
                return user
        else:
            user = tb
        tb = tb.tb_next
    return None


def _start(node) -> int:
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])


def _def_of(tree, code):
    """The function definition node of `code` in `tree`, and the chain of definitions enclosing it."""
    found = []

    def walk(node, chain):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if child.name == code.co_name and _start(child) == code.co_firstlineno:
                    found.append(chain + [child])
                walk(child, chain + [child])
            else:
                walk(child, chain)
    walk(tree, [])
    return found[0] if len(found) == 1 else None


def _own_statements(node):
    """The nodes of a function's body, not of the functions and classes defined in it."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield from _own_statements(child)


def _while_at(definition, position):
    """The while statement of `definition` whose test the instruction at `position` belongs to."""
    line, end_line, col, end_col = position
    for node in _own_statements(definition):
        if not isinstance(node, ast.While) or line is None:
            continue
        span = (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset)
        test = node.test
        in_test = (test.lineno, test.col_offset) <= (line, col or 0) and \
                  (end_line, end_col or 0) <= (test.end_lineno, test.end_col_offset)
        if span == (line, end_line, col, end_col) or in_test:
            return node
    return None


def _bare(test) -> bool:
    while isinstance(test, ast.Attribute):
        test = test.value
    return isinstance(test, ast.Name)


def _jumps(body) -> str:
    """'break' / 'continue' / 'return' if the loop body has one of its own, else ''."""
    def walk(nodes, depth: int) -> str:
        for child in nodes:
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(child, ast.Return):
                return "return"
            if isinstance(child, (ast.Break, ast.Continue)) and depth == 0:
                return "break" if isinstance(child, ast.Break) else "continue"
            if isinstance(child, (ast.For, ast.AsyncFor, ast.While)):   # their break is theirs; not their else's
                inner = walk(child.body, depth + 1) or walk(child.orelse, depth)
            else:
                inner = walk(ast.iter_child_nodes(child), depth)
            if inner:
                return inner
        return ""
    return walk(body, 0)


# -- rewriting ------------------------------------------------------------------------------------
class _Rewrite(ast.NodeTransformer):
    def visit_While(self, node):
        self.generic_visit(node)
        test = node.test
        name = f"_trnlab_while_{node.lineno}_{node.col_offset}"
        helper = ast.Attribute(ast.Call(ast.Name("__import__", ast.Load()), [ast.Constant(_MODULE)],
                                        [ast.keyword("fromlist", ast.Tuple([ast.Constant("WhileTest")], ast.Load()))]),
                               "WhileTest", ast.Load())
        make = ast.Assign([ast.Name(name, ast.Store())],
                          ast.Call(helper, [ast.Constant(ast.unparse(test)), ast.Constant(_bare(test)),
                                            ast.Constant(_jumps(node.body))], []))
        node.test = ast.Call(ast.Name(name, ast.Load()), [test], [])
        own = {id(sub) for sub in ast.walk(test)}
        for new in (make, node.test):            # at the test's place: errors name the while line
            for sub in ast.walk(new):
                if id(sub) not in own and hasattr(sub, "_attributes") and "lineno" in sub._attributes:
                    sub.lineno, sub.col_offset = test.lineno, test.col_offset
                    sub.end_lineno, sub.end_col_offset = test.end_lineno, test.end_col_offset
        return [make, node]


def _future_flags(code) -> int:
    return sum(getattr(_future, f).compiler_flag for f in _future.all_feature_names
               if code.co_flags & getattr(_future, f).compiler_flag)


def _requalify(code, old: str, new: str):
    consts = tuple(_requalify(c, old, new) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    qualname = code.co_qualname
    if qualname.startswith(old):
        qualname = new + qualname[len(old):]
    return code.replace(co_consts=consts, co_qualname=qualname)


def _same_code(a, b) -> bool:
    """Whether two code objects come from the same source: the same local names (pytest's assertion
    rewriting adds "@py_assert" ones) and, in order, the same nested functions. (Their instructions
    may differ: a module compiled through another AST pipeline, as pytest's, picks other opcodes.)"""
    def names(code):
        return {n for n in code.co_varnames if not n.startswith("@")}
    inner_a = [c for c in a.co_consts if isinstance(c, types.CodeType)]
    inner_b = [c for c in b.co_consts if isinstance(c, types.CodeType)]
    return a.co_name == b.co_name and names(a) == names(b) and len(inner_a) == len(inner_b) \
        and all(_same_code(x, y) for x, y in zip(inner_a, inner_b))


def _compile(definition, code, filename: str, rewritten: bool = True):
    """`definition` (the function node of `code`), its whiles rewritten, compiled: the code object;
    None if its closure would differ. Not rewritten, it must compile to a code of the same names as
    `code`: the source read is the one the running function came from (a file edited since may not be)."""
    import copy
    if rewritten:
        original = _compile(definition, code, filename, rewritten=False)
        if original is None or not _same_code(original, code):
            return None
    node = _Rewrite().visit(copy.deepcopy(definition)) if rewritten else definition
    body = [node]
    if code.co_freevars:                         # its free variables: locals of a wrapper, cells alike
        body = [ast.FunctionDef("_trnlab_outer", ast.arguments([], [], None, [], [], None, []),
                                [ast.Assign([ast.Name(v, ast.Store()) for v in code.co_freevars], ast.Constant(None)),
                                 node], [], None)]
    module = ast.fix_missing_locations(ast.Module(body, []))
    compiled = compile(module, filename, "exec", flags=_future_flags(code), dont_inherit=True)
    if code.co_freevars:
        compiled = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    new = next(c for c in compiled.co_consts if isinstance(c, types.CodeType) and c.co_name == code.co_name)
    if new.co_freevars != code.co_freevars:
        return None
    return _requalify(new, new.co_qualname, code.co_qualname)


def _definitions(code, module_globals):
    """The chain of function definitions (outermost first) ending with `code`'s, from its source; or None."""
    lines = linecache.getlines(code.co_filename, module_globals)
    try:
        tree = ast.parse("".join(lines), code.co_filename) if lines else None
    except SyntaxError:
        tree = None
    return None if tree is None else _def_of(tree, code)


def recompiled(function: types.FunctionType) -> types.CodeType:
    """`function`'s code compiled again from its source with each ``while X:`` rewritten (the code
    `rewrite` installs); OSError if its source cannot be read or is not the one it was made from."""
    code = function.__code__
    chain = _definitions(code, function.__globals__)
    new = None if chain is None else _compile(chain[-1], code, code.co_filename)
    if new is None:
        raise OSError(f"{code.co_name}: its source ({code.co_filename!r}) is unavailable or not the one it was made from")
    return new


def _refuse(error: BaseException, why: str, site=None) -> RegisterValueError:
    refusal = RegisterValueError(f"{error.args[0].split(chr(10) + '  in kernel line')[0]}; {why}")
    return locate(refusal, site) if site else refusal


def rewrite(error: RegisterValueError, seen: set) -> bool:
    """If `error` is ``while reg:`` on a run-time register, install the rewritten code of the function
    to trace again (module docstring) and return True; return False if it is not a while
    condition; raise a RegisterValueError naming the rule when it is one that cannot run."""
    entry = _condition_frame(error)
    if entry is None:
        return False
    frame, code = entry.tb_frame, entry.tb_frame.f_code
    position = list(code.co_positions())[entry.tb_lasti // 2]
    site = (code, entry.tb_lineno)
    chain = _definitions(code, frame.f_globals)
    if chain is None:                            # no source: whether it is a while cannot be read either
        raise _refuse(error, f"if this condition is `while reg:`, it runs as a device loop only by compiling the "
                             f"function's source again, and the source of {code.co_name} is unavailable "
                             f"({code.co_filename!r}: exec of a string, or a .pyc alone); use nl.while_loop(reg, "
                             f"body_fun), which needs no source", site) from None
    node = _while_at(chain[-1], position)
    if node is None:
        error.args = (error.args[0] + "\n  (a Python condition — if, and, or, not — on a run-time register runs "
                      "while the kernel is traced; AWS's compiled conditional is nl.if_else, whose condition is an "
                      "NkiScalar (nisa.scalar_load); a loop the device runs: `while reg:`, nl.while_loop, nl.fori_loop, "
                      "nl.dynamic_range)",) + error.args[1:]
        return False
    test = ast.unparse(node.test)
    if not _bare(node.test):
        raise _refuse(error, _bare_rule(test), site) from None
    jump = _jumps(node.body)
    if jump:
        raise _refuse(error, _jump_rule(test, jump), site) from None
    # the outermost enclosing function running in this trace: its source is recompiled with the
    # nested ones inside it, so the functions it defines on each call get the rewritten code too
    running = set()
    tb = error.__traceback__
    while tb is not None:
        running.add(tb.tb_frame.f_code)
        tb = tb.tb_next
    target = next(((d, c) for d in chain for c in running if c.co_filename == code.co_filename
                   and c.co_name == d.name and c.co_firstlineno == _start(d)), None)
    definition, target_code = target
    if target_code in _OURS or target_code in seen:
        raise _refuse(error, f"the function {target_code.co_name} holding `while {test}:` was compiled again for a "
                             f"device loop, and the kernel traced the original again: it is created anew outside the "
                             f"functions running the trace (a closure returned by a helper); define it in the kernel "
                             f"or at module level", site) from None
    seen.add(target_code)
    new = _REWRITTEN.get(target_code)
    if new is None:
        new = _compile(definition, target_code, code.co_filename)
        if new is None:
            raise _refuse(error, f"`while {test}:` runs as a device loop by compiling {target_code.co_name} again from "
                                 f"its source, and the source read ({target_code.co_filename!r}) does not compile to "
                                 f"the running function (edited since it was loaded?) or to its closure (free "
                                 f"variables {target_code.co_freevars}); use nl.while_loop(reg, body_fun)",
                          site) from None
        _REWRITTEN[target_code] = new
        _OURS.add(new)
    functions = [f for f in gc.get_referrers(target_code)
                 if isinstance(f, types.FunctionType) and f.__code__ is target_code]
    if not functions:
        raise _refuse(error, f"the function {target_code.co_name} holding `while {test}:` could not be found to "
                             f"give it the device loop's code; use nl.while_loop(reg, body_fun)", site) from None
    for function in functions:
        function.__code__ = new
    return True
