"""The oracle corpus (docs/oracle.md): known-bad NKI kernels that AWS's CPU simulator runs, each stopped
by trnlab with the error class of the rule it breaks, a message naming the rule (and the value and the
limit where there is one), at the kernel line that breaks it. Each bad kernel has a good twin that
differs in the marked line(s) only and runs: the error is about that line.

Kernels of our own in AWS's NKI 0.7 style: tests/nki_kernels/known_bad.py."""
import ast
import inspect
import textwrap

import ml_dtypes
import numpy as np
import pytest

from trnlab import config
from trnlab.hardware import errors as hw
from trnlab.hardware.mx import MXError
from trnlab.nki.argument_dtypes import ArgumentDtypeError
from trnlab.nki.errors import LaunchGridError, ViewError, user_frame
from trnlab.nki.runaway import TraceBudgetExceeded
from tests.nki_kernels import known_bad as K

RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def bf16(*shape):
    return RNG.standard_normal(shape).astype(ml_dtypes.bfloat16)


# (kernel, error class, words of the message: the rule, the value, the limit, inputs)
CASES = [
    ("accumulate_into_uninitialised_psum", hw.UninitializedReadError,
     ["uninitialized read", "nc_matmul accumulated onto never-written"], lambda: (f32(128, 128), f32(128, 512))),
    ("overlapping_psum_accumulation_groups", hw.DirectAllocationOverlapError,
     ["direct allocation overlap", "PSUM bytes 0-1024", "share bytes 0-1024"], lambda: (f32(128, 256), f32(128, 512))),
    ("overlapping_psum_groups_same_shape", hw.DirectAllocationOverlapError,
     ["direct allocation overlap", "declaration 0", "declaration 1"], lambda: (f32(128, 256), f32(128, 512))),
    ("matmul_result_across_psum_banks", hw.PSUMBankError, ["PSUM bank", "bytes 1024-3072", "2048 bytes"],
     lambda: (f32(128, 128), f32(128, 1024))),
    ("matmul_into_sbuf", hw.MemoryPlacementError, ["operand memory", "SBUF", "PSUM only"],
     lambda: (f32(128, 128), f32(128, 512))),
    ("matmul_into_int32_psum", hw.DtypeError, ["data type", "int32", "fp32"], lambda: (f32(128, 128), f32(128, 512))),
    ("matmul_moving_over_512", hw.MatmulShapeError, ["matmul tile shape", "N=1024", "limit is 512"],
     lambda: (f32(128, 128), f32(128, 1024))),
    ("sliced_mx_scales", MXError, ["mx format", "(16, 128)", "needs [100, 128]"], lambda: (bf16(128, 512), bf16(128, 512))),
    ("pe_tile_size_not_a_tile", hw.PETilingError, ["PE array tiling", "row_size 48", "32, 64, 128"],
     lambda: (f32(32, 32), f32(32, 128))),
    ("sbuf_overflow", hw.SBUFOverflowError, ["SBUF overflow", "8.0 KiB per partition requested", "per partition"],
     lambda: (f32(128, 2048),)),
    ("psum_overflow", hw.PSUMOverflowError, ["PSUM overflow", "2.0 KiB per partition requested", "16.0 KiB"],
     lambda: (f32(128, 128), f32(128, 512))),
    ("aliasing_sbuf_allocations", hw.DirectAllocationOverlapError,
     ["direct allocation overlap", "SBUF bytes 1024-3072", "share bytes 1024-2048"], lambda: (f32(128, 512), f32(128, 512))),
    ("partitions_over_128", hw.PartitionLimitError, ["partition limit", "256 partitions", "has 128"], lambda: (f32(128, 64),)),
    ("free_size_over_engine_limit", hw.FreeSizeError, ["free size", "66000 elements", "limit is 65536"],
     lambda: (bf16(128, 66000),)),
    ("start_partition_16", hw.StartPartitionError, ["start partition", "partition 16", "0/32/64/96"], lambda: (f32(128, 512),)),
    ("partition_stride", hw.PartitionStrideError, ["partition stride", "step 2", "(step 1)"], lambda: (f32(128, 512),)),
    ("vector_transpose_over_32", hw.MatmulShapeError, ["Vector engine", "[64, 64]", "<= 32"], lambda: (f32(64, 64),)),
    ("psum_to_hbm_dma", hw.PSUMToHBMError, ["PSUM to HBM", "PSUM -> HBM"], lambda: (f32(128, 128), f32(128, 512))),
    ("indirect_dma_out_of_bounds", hw.OutOfBoundsError, ["out-of-bounds index", "element 3200", "1600 elements"],
     lambda: (f32(100, 16),)),
    ("store_of_never_written_tile", hw.UninitializedReadError, ["uninitialized read", "never written"],
     lambda: (f32(128, 512),)),
    ("read_outside_tile", hw.OutOfBoundsError, ["out-of-bounds slice", "[256:768]", "extent 512"], lambda: (f32(128, 512),)),
    ("view_changes_partitions", ViewError, ["reshape", "(64, 1024)", "partition dimension"], lambda: (f32(128, 512),)),
    ("launch_zero_programs", LaunchGridError, ["SPMD launch grid", "axis of 0 programs", "at least 1"],
     lambda: (f32(128, 64),)),
    ("runaway_loop", TraceBudgetExceeded, ["trace instruction budget", "10,001 instructions", "budget is 10,000"],
     lambda: (f32(128, 512),)),
    ("float64_argument", ArgumentDtypeError, ["kernel argument data type", "float64", "float32"], lambda: (f32(128, 64),)),
]
IDS = [case[0] for case in CASES]


def _marked(function, mark: str) -> set:
    """The file lines of `function`'s source that carry `# BAD` / `# GOOD`."""
    lines, first = inspect.getsourcelines(inspect.unwrap(getattr(function, "func", function)))
    return {first + i for i, text in enumerate(lines) if f"# {mark}" in text}


def _body(function) -> tuple:
    """(file line of the first statement after the docstring, the lines from there without comments)."""
    raw = inspect.unwrap(getattr(function, "func", function))
    lines, first = inspect.getsourcelines(raw)
    tree = ast.parse(textwrap.dedent("".join(lines))).body[0]
    statements = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
    start = statements[0].lineno - 1                     # index into `lines`
    code = [line.split("  #")[0].rstrip() for line in lines[start:]]        # comments (and markers) off
    return first + start, code


def _kernel(name):
    return getattr(K, name)


def _run(function, args):
    with config.override(trace_instructions=10_000):     # the runaway loop's budget (config.py)
        return function(*args)


def test_the_corpus_has_at_least_twenty_rules():
    assert len(CASES) >= 20 and len({error for _, error, _, _ in CASES}) >= 18


@pytest.mark.parametrize("name, error, words, inputs", CASES, ids=IDS)
def test_known_bad_kernel_is_stopped_by_name_at_its_line(name, error, words, inputs):
    bad = _kernel(name)
    with pytest.raises(error) as caught:
        _run(bad, inputs())
    message = str(caught.value)
    for word in words:
        assert word in message, (word, message)
    # the line: the one the error names (kernel_location), or for an error raised at the call
    # before any kernel line runs (a launch grid, an argument's dtype), the call in the traceback
    location = getattr(caught.value, "kernel_location", None) or user_frame(caught.value.__traceback__)[:2]
    filename, line = location
    assert filename == K.__file__
    assert line in _marked(bad, "BAD"), (line, sorted(_marked(bad, "BAD")), message)


@pytest.mark.parametrize("name, error, words, inputs", CASES, ids=IDS)
def test_good_twin_differs_in_the_marked_lines_only_and_runs(name, error, words, inputs):
    bad, good = _kernel(name), _kernel(name + "_good")
    (start, bad_lines), (_, good_lines) = _body(bad), _body(good)
    assert len(bad_lines) == len(good_lines)
    differing = {start + i for i, (b, g) in enumerate(zip(bad_lines, good_lines)) if b != g}
    assert differing and differing <= _marked(bad, "BAD")
    _run(good, inputs())                                                  # runs to the end


def test_same_shape_psum_groups_in_sequence_each_start_fresh():
    # the legal use of two same-shape tiles on one bank: one group after the other, each its own
    a, b = f32(128, 256), f32(128, 512)
    expected = 2 * (a[:, :128].T @ b + a[:, 128:].T @ b)
    np.testing.assert_allclose(K.same_shape_psum_groups_in_sequence(a, b), expected, rtol=1e-4, atol=1e-3)


def test_two_matmuls_into_one_psum_tensor_of_two_banks_read_back_whole():
    # the good twin of matmul_result_across_psum_banks, AWS's core/topk rotate pattern: the values
    a, b = f32(128, 128), f32(128, 1024)
    np.testing.assert_allclose(K.matmul_result_across_psum_banks_good(a, b), a.T @ b, rtol=1e-4, atol=1e-3)


def test_memset_after_matmul_on_the_same_tile_is_ordered_not_raced():
    # not an error (docs/oracle.md): the Vector engine's memset waits for the Tensor engine's write of
    # the same PSUM bytes, so the zeros are what is read, whatever the engines' speeds
    import trnlab.nki as nki
    run = nki.run(K.memset_after_matmul, np.ones((128, 128), np.float32), np.ones((128, 512), np.float32))
    assert np.all(run.outputs == 0.0)
    records = list(run.timeline)
    matmul = next(r for r in records if r.opcode == "nc_matmul")
    memset = next(r for r in records if r.opcode == "memset")
    assert matmul.engine != memset.engine
    assert memset.waited_for == matmul.index and memset.start_ns >= matmul.ready_ns


def test_docs_oracle_table_lists_each_corpus_kernel_with_its_error_class():
    import pathlib
    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "oracle.md").read_text()
    rows = {line.split("|")[1].strip().strip("`").split("`")[0]: line.split("|")[4]
            for line in text.splitlines() if line.startswith("| `")}
    assert set(rows) == set(IDS)
    public = {value: name for name, value in vars(hw).items() if isinstance(value, type)}   # aliases' names
    public.update({MXError: "MXError", ArgumentDtypeError: "ArgumentDtypeError", LaunchGridError: "LaunchGridError",
                   ViewError: "ViewError", TraceBudgetExceeded: "TraceBudgetExceeded"})
    for name, error, _, _ in CASES:
        assert f"`{public[error]}`" in rows[name], (name, public[error])
