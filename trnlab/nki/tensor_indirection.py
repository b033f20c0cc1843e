"""`NkiTensor.indirect(index, num_elem)`: Tensor Indirection (NeuronCore-v4, Trn3) in the kernel language.

``data.indirect(idx)`` is a view of the columns of the on-chip tile `data` whose positions along the free
dimension an SBUF ``uint16`` tile `idx` holds (``(P, K)``, P = data's partitions; each group of 16
partitions — 32 on the Tensor engine — reads its own rows of `idx`, in AWS's snake order). It has shape
``(P, num_elem)``; as the input of ``tensor_copy``, ``tensor_tensor`` (data1), ``tensor_scalar``,
``activation`` (``activation_reduce``), ``activate2``, ``tensor_reduce``, ``tensor_scalar_reduce``,
``tensor_scalar_cumulative``, ``exponential`` or ``tensor_copy_predicated`` (predicate)
(`hardware.indirection.ACCEPTS`), or as the stationary / moving of ``nc_matmul`` and ``nc_matmul_mx``
(with its scale, `emit_matmul`), it is a gather, as their ``dst`` a scatter [nki.language.NkiTensor.indirect,
v2.33.0; "NKI Tensor Indirection"]:

    idx = nl.ndarray((128, 1), dtype=nl.uint16, buffer=nl.sbuf)     # column numbers, per 16 partitions
    nisa.dma_copy(dst=idx, src=columns)
    nisa.tensor_copy(dst=dense, src=table.indirect(idx, num_elem=8))  # dense[p, i] = table[p, offset i]

The offsets are data: the instruction reads them when it runs (hardware `tensor_indirect`, in
`hardware/indirection.py`, with the rules and the costs; `matmul_indirect` on the Tensor engine). The same
instructions take, as any of their tile operands, an SBUF / PSUM access pattern at a register / NkiScalar
``scalar_offset`` (`at_register`; hardware `tensor_register_offset`, `hardware/register_offsets.py`). The view
itself is held in the tile's ``_dynamic`` field (an `Indirection`), so every other view operation and every
other instruction refuses it, as AWS's "indirect views cannot be re-indirected" says.
"""
from __future__ import annotations

from dataclasses import dataclass

from trnlab.hardware import dtypes as hw_dtypes
from trnlab.hardware.errors import DtypeError, GenerationError, ShapeMismatchError
from trnlab.hardware.indirection import (ACCEPTS, INDEX_DTYPE, PE_ACCEPTS, PE_GROUP, IndirectionOperandError,
                                         group_capacity)
from trnlab.nki.errors import NKIError, ViewError

ON_CHIP = ("sbuf", "psum")


class IndirectionMaskError(NKIError):
    """``mask=`` on an instruction given an ``.indirect()`` view: the instructions that take one are NKI 0.7's
    (``nki.isa.tensor_copy(dst, src, engine, name)``, ``nc_matmul(dst, stationary, moving, ..., perf_mode,
    name)``, v2.33.0: no ``mask``), and the NKI releases whose instructions take ``mask=`` (beta 1, beta 2)
    have no ``.indirect()``: there is no AWS semantics to follow. Slice the dense operands instead."""


@dataclass(frozen=True)
class Indirection:
    """What a view made by `.indirect()` holds: the tile it indexes, the index tile, its column count."""
    data: object                  # the NkiTensor .indirect() was called on
    index: object                 # the SBUF uint16 NkiTensor of offsets
    count: int                    # num_elem

    @property
    def refusal(self) -> str:
        return (f"{getattr(self.data, 'name', '')!r}.indirect(...) is a Tensor Indirection view: only the dst and "
                f"the gathered input of {', '.join(ACCEPTS)}, and the dst, stationary and moving of "
                f"{', '.join(PE_ACCEPTS)} take it (nki.isa's \"Tensor indirection\" paragraphs)")


def indirect(t, index, num_elem: int | None = None):
    """`t`'s columns at the offsets in `index` (see the module docstring)."""
    from trnlab.nki import launches
    from trnlab.nki.tensor import NkiTensor      # (tensor.py imports tensor_views, which calls this)
    t._ready()
    if t._dynamic is not None or t._gather is not None:
        raise ViewError(f".indirect() of {t.name!r}, already an indirect view: \"indirect views cannot be "
                        f"re-indirected\" [NkiTensor.is_indirect]")
    if t.buffer not in ON_CHIP:
        raise ViewError(f".indirect() of {t.name!r} in {t.buffer}: Tensor Indirection reads SBUF or PSUM tiles "
                        f"(HBM: an indirect DMA, .ap(vector_offset=))")
    spec = launches.current().core.spec
    if spec.generation < "v4":
        raise GenerationError(f"generation: tensor indirection (.indirect()) needs NeuronCore-v4 or newer (Trn3); "
                              f"{spec.name} is NeuronCore-{spec.generation} [nki.language.NkiTensor.indirect]",
                              value=spec.generation, limit="v4")
    if not isinstance(index, NkiTensor) or index.buffer != "sbuf":
        raise ViewError(f".indirect(index) of {t.name!r}: the index is an SBUF tile of uint16 offsets, got "
                        f"{getattr(index, 'buffer', type(index).__name__)}")
    if hw_dtypes.name(hw_dtypes.as_dtype(index.dtype)) != INDEX_DTYPE:
        raise DtypeError(f"data type: .indirect(index) of {t.name!r}: the index is "
                         f"{hw_dtypes.name(hw_dtypes.as_dtype(index.dtype))}; it holds uint16 offsets "
                         f"[NKI Tensor Indirection]", value=hw_dtypes.name(hw_dtypes.as_dtype(index.dtype)),
                         limit=INDEX_DTYPE)
    P = t.shape[0]
    if len(index.shape) != 2 or index.shape[0] != P:
        raise ShapeMismatchError(f"shape mismatch: .indirect(index) of {t.name!r} {t.shape}: the index "
                                 f"{tuple(index.shape)} must be (P, K) with P = {P} [NkiTensor.indirect]",
                                 value=tuple(index.shape), limit=(P, "K"))
    # AWS: "Defaults to index.size" — the offsets of a view of up to 16 partitions; with more partitions each
    # group of 16 has its own rows, so (ASSUMED reading) the default is the offsets one group of 16 holds,
    # on the Tensor engine too. The view does not know its engine yet: num_elem is checked here against the
    # largest group (the Tensor engine's 32) and by the instruction against its engine's group
    capacity = group_capacity(P, index.shape[1], PE_GROUP)
    count = group_capacity(P, index.shape[1]) if num_elem is None else int(num_elem)
    if not 1 <= count <= capacity:
        raise ShapeMismatchError(f"shape mismatch: .indirect(num_elem={count}) of {t.name!r}: each group of "
                                 f"{min(PE_GROUP, P)} partitions holds {capacity} offsets in an index of "
                                 f"{index.shape[1]} columns [NkiTensor.indirect]", value=count, limit=capacity)
    view = type(t)((P, count), t.dtype, t.buffer, t.name)
    view._owner, view._hw, view._launch = t._base(), t._hw, t._launch
    # never "a whole tensor" (index None), so that indexing it meets the indirect-view refusal (tensor.py)
    view._index = t._index if t._index is not None else tuple(slice(0, n, 1) for n in t._base().shape)
    view._dynamic = Indirection(t, index, count)
    return view


def of(t):
    """The `Indirection` of tile `t`, or None."""
    dynamic = getattr(t, "_dynamic", None)
    return dynamic if isinstance(dynamic, Indirection) else None


def at_register(t):
    """(register, stride) of a view at a run-time offset (``.ap(scalar_offset=register or NkiScalar)``), or None."""
    dynamic = getattr(t, "_dynamic", None)
    if type(dynamic) is not tuple:           # (every plain tile: this is on each instruction's path)
        return None
    from trnlab.nki.tensor import _is_register   # (tensor.py imports tensor_views, which imports this module)
    return (dynamic[0], dynamic[1]) if _is_register(dynamic[0]) else None


def uses(*tiles) -> bool:
    """Is any of `tiles` a Tensor Indirection view, or a view at a run-time register offset?"""
    return any(of(t) is not None or at_register(t) is not None for t in tiles)


def emit(launch, opcode: str, dst, data, ranges, attrs: dict, **operands) -> None:
    """Issue `opcode` with `dst` and / or `data` indirect: hardware ``tensor_indirect`` on the views
    `.indirect()` was called on and their index tiles; or with any of its SBUF / PSUM tile operands at a
    run-time register offset (``.ap(scalar_offset=register)``): hardware ``tensor_register_offset`` on their
    patterns at offset 0. `operands`: the instruction's other operands, as its hardware method takes them
    (views or numbers); none of them may be an ``.indirect()`` view."""
    what = ACCEPTS[opcode][0]
    if ranges:
        if of(dst) is not None or of(data) is not None:
            refuse_mask(opcode)
        raise NKIError(f"{opcode} with a view at a run-time offset and mask= is not simulated")
    registers = {}                                   # the other operands at a run-time offset
    for name, value in operands.items():
        shifted = at_register(value)
        if shifted is not None:
            registers[name] = [shifted[0].id, int(shifted[1])]
            operands[name] = value._hw[value._index] if value._index is not None else value._hw.full
            continue
        if uses(value):
            raise IndirectionOperandError(f"tensor indirection operand: {opcode} {name} does not take an "
                                          f".indirect() view; only dst and {what} do "
                                          f"[nki.isa.{opcode}]", value=name, limit=("dst", what))
        if hasattr(value, "hw_view"):
            operands[name] = value.hw_view()
        elif isinstance(value, (bool, int)) and name == "src":
            operands[name] = int(value)              # tensor_copy_predicated's int src: an int dst's kind
        elif value is not None and not isinstance(value, str):
            operands[name] = float(value)            # a number operand (operand0, scale, ...)
    shifted = {"dst": at_register(dst), "data": at_register(data)}
    if any(shifted.values()) or registers:
        if of(dst) is not None or of(data) is not None:
            raise NKIError(f"{opcode} with an .indirect() view and a view at a run-time offset is not simulated")
        kwargs = {}
        for name, t in (("dst", dst), ("data", data)):
            kwargs[name] = (t._hw[t._index] if t._index is not None else t._hw.full) if shifted[name] else t.hw_view()
            if shifted[name]:
                register, stride = shifted[name]
                kwargs[name + "_register"], kwargs[name + "_stride"] = register.id, int(stride)
        launch.core.tensor_register_offset(opcode=opcode, **kwargs, attrs=attrs, **operands,
                                           **({"registers": registers} if registers else {}))
        return
    into, source = of(dst), of(data)
    launch.core.tensor_indirect(
        opcode=opcode, dst=(into.data if into else dst).hw_view(), data=(source.data if source else data).hw_view(),
        dst_index=into.index.hw_view() if into else None, data_index=source.index.hw_view() if source else None,
        dst_count=into.count if into else 0, data_count=source.count if source else 0, attrs=attrs, **operands)


def refuse_mask(opcode: str) -> None:
    """Refuse ``mask=`` with an ``.indirect()`` view (`IndirectionMaskError`)."""
    raise IndirectionMaskError(
        f"{opcode} with an .indirect() view and mask=: AWS's instructions that take .indirect() views are "
        f"NKI 0.7's, which have no mask= (nki.isa.{opcode}, v2.33.0), and no NKI release with mask= has "
        f".indirect(); slice the dense operands instead")


def emit_matmul(launch, opcode: str, dst, stationary, moving, attrs: dict, stationary_scale=None,
                moving_scale=None) -> None:
    """Issue Tensor-engine `opcode` (nc_matmul, nc_matmul_mx) with any of dst, stationary, moving indirect:
    hardware ``matmul_indirect``. nc_matmul_mx's (data, scale) pairs "must agree on tensor indirection:
    either both members of a pair use .indirect() with the same index, or neither does" [nki.isa.nc_matmul_mx]."""
    for data, scale, name in ((stationary, stationary_scale, "stationary"), (moving, moving_scale, "moving")):
        if scale is None:
            continue
        a, b = of(data), of(scale)
        same = (a is None) == (b is None) and (a is None or (a.index.hw_view().tensor is b.index.hw_view().tensor
                                                             and a.index.hw_view().box == b.index.hw_view().box
                                                             and a.count == b.count))
        if not same:
            raise IndirectionOperandError(
                f"tensor indirection operand: {opcode} {name} and {name}_scale must agree on tensor indirection: "
                f"both .indirect() with the same index (and num_elem), or neither (\"the data bytes and scale "
                f"exponents form a single logical tensor\") [nki.isa.nc_matmul_mx]", value=name,
                limit="both or neither, one index")
    views = {"dst": dst, "stationary": stationary, "moving": moving}
    kwargs = {}
    for name, t in views.items():
        view = of(t)
        kwargs[name] = (view.data if view else t).hw_view()
        kwargs[name + "_index"] = view.index.hw_view() if view else None
        kwargs[name + "_count"] = view.count if view else 0
    for name, t in (("stationary_scale", stationary_scale), ("moving_scale", moving_scale)):
        if t is not None:
            view = of(t)
            kwargs[name] = (view.data if view else t).hw_view()
    launch.core.matmul_indirect(opcode=opcode, **kwargs, **attrs)
