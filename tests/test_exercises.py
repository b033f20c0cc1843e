"""Every exercise's checker, without a kernel: the reference solution earns full marks, the common
mistake earns zero with a hint, the untouched stub earns zero as "not attempted" — and none of the
ways of buying a grade that instructors found earns anything (sys._getframe, objects that equal
everything, the package's own implementation, the checkers' helpers, a fixed answer).

(tests/test_course_notebooks.py proves the same through the real grading command, in notebooks.)
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import REPO_ROOT
from trnlab.course.exercises import load_all, run_check
from trnlab.data import CharTokenizer
from trnlab.hardware import presets

SOLUTIONS = REPO_ROOT / "tests" / "solutions"
IDS = sorted(load_all())
SEEDS = (0, 1)  # cases are drawn from the seed: the solutions must pass whatever is drawn


def answer_from(grade_id: str, suffix: str = ""):
    """The answer a solution file defines, run among the names the notebooks define before it."""
    namespace = {"np": np, "math": math, "torch": torch, "presets": presets, "stoi": CharTokenizer().stoi,
                 "nki": nki, "nl": nl, "nisa": nisa}
    source = (SOLUTIONS / f"{grade_id}{suffix}.py").read_text()
    exec(compile(source, f"{grade_id}{suffix}.py", "exec"), namespace)
    return namespace[load_all()[grade_id].answer]


def test_every_exercise_has_a_solution_and_a_common_mistake():
    assert len(IDS) >= 2 * len(list((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))
    for grade_id in IDS:
        assert (SOLUTIONS / f"{grade_id}.py").is_file() and (SOLUTIONS / f"{grade_id}.wrong.py").is_file()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("grade_id", IDS)
def test_reference_solution_earns_full_marks(grade_id, seed):
    result = run_check(grade_id, answer_from(grade_id), seed=seed, local=True)
    assert result.passed and result.points == load_all()[grade_id].points, result.message


@pytest.mark.parametrize("grade_id", IDS)
def test_common_mistake_earns_zero_with_a_hint(grade_id):
    result = run_check(grade_id, answer_from(grade_id, ".wrong"), seed=0, local=True)
    assert result.status == "failed" and result.points == 0
    assert "expected" in result.message or "difference" in result.message


@pytest.mark.parametrize("grade_id", IDS)
def test_stub_earns_zero(grade_id):
    def stub(*args, **kwargs):
        raise NotImplementedError

    result = run_check(grade_id, stub, local=True)
    assert result.points == 0 and "not attempted" in result.message


# ----------------------------------------------------------------------------- grades that cannot be bought


def _zero_because_switched_off(grade_id: str, answer) -> None:
    result = run_check(grade_id, answer, seed=3, local=True)
    assert result.points == 0 and result.status == "failed", result
    assert "switched off" in result.message, result.message


def test_reading_the_checkers_frames_finds_no_expected_value():
    import sys

    def block_params(n_embd):  # walks every frame above it for anything that looks like the answer
        frame = sys._getframe(1)
        while frame is not None:
            for name, value in frame.f_locals.items():
                if name in ("expected", "want") and type(value) is int:
                    return value
            frame = frame.f_back
        return 0

    result = run_check("nb02_block_params", block_params, seed=3, local=True)
    assert result.points == 0 and result.status == "failed"


def test_an_int_that_equals_everything_disguised_as_builtins_earns_nothing():
    class Whole(int):
        __module__ = "builtins"
        __qualname__ = __name__ = "int"

        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

        __hash__ = int.__hash__

    for grade_id, answer in [("nb02_block_params", lambda n_embd: Whole(0)),
                             ("nb04_psum_tiles", lambda tile_n: Whole(0)),
                             ("nb03_pe_cycles", lambda M, N, K: Whole(0))]:
        result = run_check(grade_id, answer, seed=3, local=True)
        assert result.points == 0 and "subclass of int" in result.message, result.message


def test_a_tensor_subclass_that_makes_allclose_say_yes_earns_nothing():
    class Agreeable(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func in (torch.allclose, torch.equal):
                return True
            return super().__torch_function__(func, types, args, kwargs or {})

    def causal_attention(q, k, v):
        return torch.zeros_like(q).as_subclass(Agreeable)

    result = run_check("nb02_causal_mask", causal_attention, seed=3, local=True)
    assert result.points == 0 and "plain torch.Tensor" in result.message, result.message


def test_calling_the_package_problem_key_earns_nothing():
    from trnlab.data.tasks import problem_key  # a reference taken before the check: still switched off

    def leaked_problems(train, test):
        keys = {problem_key(p) for p in train}
        return {p for p in test if problem_key(p) in keys}

    _zero_because_switched_off("nb01_leak", leaked_problems)


def test_calling_the_package_matmul_tiled_kernel_earns_nothing():
    from trnlab.kernels import matmul_ladder

    @nki.jit
    def tiled_matmul(lhsT, rhs):
        return matmul_ladder.matmul_tiled.func(lhsT, rhs)

    _zero_because_switched_off("nb05_tiled_matmul", tiled_matmul)


def test_gemm_plan_and_tensor_engine_work_one_liners_earn_nothing():
    from trnlab.hardware import gemm
    from trnlab.viz.tiles import tensor_engine_work

    _zero_because_switched_off("nb03_pe_cycles", lambda M, N, K: tensor_engine_work(presets.TRN2.core, M, N, K).busy_cycles)
    _zero_because_switched_off("nb03_matmul_count", lambda M, N, K: {(128, 128, 512): gemm.plan(M, N, K).matmuls})


def test_other_package_shortcuts_earn_nothing():
    from torch.utils.flop_counter import FlopCounterMode

    from trnlab.data.tokenizer import CharTokenizer as Tokenizer
    from trnlab.hardware import NeuronCore, dtypes
    from trnlab.model.gpt import Block, GPTConfig

    def block_flops(T, n_embd, n_head):
        with FlopCounterMode(display=False) as counter:
            Block(GPTConfig(n_embd=n_embd, n_head=n_head, block_size=T))(torch.zeros(1, T, n_embd))
        return counter.get_total_flops()

    def encode_example(prompt, answer):
        return Tokenizer().encode_example(prompt, answer)

    def psum_tiles_that_fit(tile_n):
        core = NeuronCore(presets.TRN2.core, mode="timing")
        core.psum.allocate((128, tile_n), dtypes.float32, name="probe")
        return 8

    _zero_because_switched_off("nb02_block_flops", block_flops)
    _zero_because_switched_off("nb01_encode", encode_example)
    _zero_because_switched_off("nb04_psum_tiles", psum_tiles_that_fit)


def test_importing_helpers_from_the_checkers_earns_nothing():
    from trnlab.course.checks import nb04_neuroncore

    _zero_because_switched_off("nb04_psum_tiles", lambda tile_n: nb04_neuroncore.psum_tiles_of(tile_n))

    def dma_time_ns(rows, cols, dtype_bytes):
        from trnlab.course.checks.nb04_neuroncore import dma_time_of  # imported inside the answer

        return dma_time_of(rows, cols, dtype_bytes)

    _zero_because_switched_off("nb04_dma_time", dma_time_ns)


def test_putting_the_package_code_back_during_the_check_is_caught():
    from trnlab.data import tasks

    original = tasks.problem_key.__code__  # saved before the check, as a cheat would

    def leaked_problems(train, test):
        tasks.problem_key.__code__ = original
        keys = {tasks.problem_key(p) for p in train}
        return {p for p in test if tasks.problem_key(p) in keys}

    _zero_because_switched_off("nb01_leak", leaked_problems)
    assert tasks.problem_key.__code__ is original  # and the package is left as it was


def test_running_the_package_in_another_process_is_switched_off():
    import subprocess
    import sys

    def block_params(n_embd):
        code = (f"from trnlab.model.gpt import Block, GPTConfig; "
                f"print(sum(p.numel() for p in Block(GPTConfig(n_embd={n_embd}, n_head=4)).parameters()))")
        return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)

    _zero_because_switched_off("nb02_block_params", block_params)


@pytest.mark.parametrize("blocks", [
    (1, 1, 1),
    (2, 1, 2), (3, 1, 3), (4, 1, 4), (16, 2, 8), (2, 1, 16)])
def test_no_fixed_answer_passes_sbuf_blocks(blocks):
    answer = dict(zip(("TILES_IN_BLOCK_M", "TILES_IN_BLOCK_N", "TILES_IN_BLOCK_K"), blocks))
    for seed in range(2):
        result = run_check("nb05_sbuf_blocks", lambda M, N, K: dict(answer), seed=seed, local=True)
        assert result.points == 0 and result.status == "failed", (blocks, seed)
