"""The matmul optimization ladder (trnlab.kernels.matmul_ladder): every step computes lhsT.T @ rhs,
and the simulator reproduces the profile facts of AWS's kernel-optimization guide that notebook 05
states (tiled is DMA-bound, fully blocked is compute-bound, each step is faster)."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

import trnlab.nki as nki  # noqa: E402
from trnlab.hardware import dtypes, presets  # noqa: E402
from trnlab.hardware.errors import SBUFOverflowError  # noqa: E402
from trnlab.kernels import matmul_ladder as ladder  # noqa: E402
from trnlab.viz import ladder as ladder_viz  # noqa: E402

SMALL_CASES = [
    (ladder.matmul_basic, (128, 128, 512), {}),
    (ladder.matmul_basic, (64, 32, 200), {}),                 # a partial tile is still one matmul
    (ladder.matmul_tiled, (384, 256, 1024), {}),
    (ladder.matmul_hoisted, (384, 256, 1024), {}),
    (ladder.matmul_block_free, (256, 512, 2048), {}),
    (ladder.matmul_block_free, (256, 384, 1536), dict(TILES_IN_BLOCK_M=3, TILES_IN_BLOCK_N=3)),
    (ladder.matmul_fully_blocked, (512, 512, 2048), dict(TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=2)),
]
# mid-size shape of notebook 05: AWS's 4096 x 8192 @ 8192 x 8192 with K and N cut down
MID = dict(M=4096, N=2048, K=4096)
ROOMY_BLOCKS = dict(TILES_IN_BLOCK_M=8, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8)   # 192 of 224 KiB at MID


def _inputs(K, M, N, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((K, M)).astype(dtype), rng.standard_normal((K, N)).astype(dtype)


@pytest.mark.parametrize("kernel,shape,options", SMALL_CASES,
                         ids=[f"{c[0].__name__}-{'x'.join(map(str, c[1]))}" for c in SMALL_CASES])
def test_each_ladder_step_computes_lhsT_transposed_times_rhs(kernel, shape, options):
    K, M, N = shape
    lhsT, rhs = _inputs(K, M, N, seed=K + M + N)
    np.testing.assert_allclose(kernel(lhsT, rhs, **options), lhsT.T @ rhs, rtol=1e-4, atol=1e-3)


@settings(max_examples=5, deadline=None)
@given(tiles_m=st.integers(1, 3), tiles_n=st.integers(1, 2), tiles_k=st.integers(1, 3),
       blocks=st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 2)))
def test_fully_blocked_any_block_sizes_matches_numpy(tiles_m, tiles_n, tiles_k, blocks):
    M, N, K = 128 * tiles_m * blocks[0], 512 * tiles_n * blocks[1], 128 * tiles_k * blocks[2]
    lhsT, rhs = _inputs(K, M, N, seed=M + N + K)
    out = ladder.matmul_fully_blocked(lhsT, rhs, TILES_IN_BLOCK_M=tiles_m, TILES_IN_BLOCK_N=tiles_n,
                                      TILES_IN_BLOCK_K=tiles_k)
    np.testing.assert_allclose(out, lhsT.T @ rhs, rtol=1e-4, atol=1e-3)


def test_bfloat16_inputs_accumulate_in_fp32_and_round_once():
    lhsT, rhs = _inputs(512, 256, 1024, seed=4, dtype=dtypes.bfloat16)
    exact = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    for kernel, options in [(ladder.matmul_tiled, {}),
                            (ladder.matmul_fully_blocked, dict(TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=1,
                                                               TILES_IN_BLOCK_K=2))]:
        out = kernel(lhsT, rhs, **options)
        assert out.dtype == dtypes.bfloat16
        np.testing.assert_allclose(out.astype(np.float32), exact, rtol=2 ** -8, atol=1e-2)


def test_torch_tensors_in_torch_tensor_out():
    torch = pytest.importorskip("torch")
    lhsT, rhs = torch.randn(256, 128), torch.randn(256, 512)
    out = ladder.matmul_hoisted(lhsT, rhs)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, lhsT.T @ rhs, rtol=1e-4, atol=1e-3)


def test_sbuf_formulas_are_exactly_what_the_simulator_allocates():
    """fits with exactly the predicted bytes per partition, overflows with 4 bytes fewer"""
    cases = [(ladder.matmul_fully_blocked, (1024, 1024, 1024), dict(TILES_IN_BLOCK_M=4, TILES_IN_BLOCK_N=1, TILES_IN_BLOCK_K=2),
              ladder.fully_blocked_sbuf_bytes(1024, 1024, 1024, TILES_IN_BLOCK_M=4, TILES_IN_BLOCK_N=1, TILES_IN_BLOCK_K=2)),
             (ladder.matmul_block_free, (512, 2048, 2048), dict(TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2),
              ladder.block_free_sbuf_bytes(2048, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2))]
    for kernel, (M, N, K), options, need in cases:
        ladder.run_step(kernel, M, N, K, target=ladder.roomy_trn2(need), **options)
        with pytest.raises(SBUFOverflowError):
            ladder.run_step(kernel, M, N, K, target=ladder.roomy_trn2(need - 4), **options)


def test_aws_step4_at_aws_K_in_fp32_overflows_trn2_sbuf_and_step5_fits():
    """A full K column of 2 x 64 rhs tiles in fp32 is 256 KiB per partition; Trn2 has 224 KiB."""
    assert ladder.block_free_sbuf_bytes(8192) > presets.TRN2.core.sbuf_partition_bytes
    with pytest.raises(SBUFOverflowError, match="SBUF overflow"):
        ladder.run_step(ladder.matmul_block_free, 256, 1024, 8192)
    assert ladder.fully_blocked_sbuf_bytes(4096, 8192, 8192) <= presets.TRN2.core.sbuf_partition_bytes


@pytest.fixture(scope="module")
def mid_ladder():
    return ladder.run_ladder(**MID)


def test_tiled_is_dma_bound(mid_ladder):
    tiled = mid_ladder[0]
    assert tiled.name == "matmul_tiled"
    assert tiled.active["dma"] > 99.0 and tiled.active["pe"] < 95.0     # AWS's profile: 99.93 %, 87.28 %
    assert tiled.bound == "DMA-bound"


def test_fully_blocked_is_compute_bound_and_with_room_to_prefetch_keeps_tensor_engine_above_95_percent(mid_ladder):
    blocked = mid_ladder[-1]
    assert blocked.name == "matmul_fully_blocked"
    assert blocked.bound == "compute-bound"
    assert blocked.active["pe"] > 85.0 and blocked.active["dma"] < 30.0
    # only the K-blocked kernel adds partial sums on the Vector engine
    assert blocked.active["dve"] > 10.0 and all(r.active["dve"] < 5.0 for r in mid_ladder[:-1])
    # AWS's blocks fill SBUF to the last byte, so the next K block's tiles can only be loaded into
    # the bytes of this block's tiles once their last matmul is done (trnlab tracks hazards per byte):
    # the loads are exposed. Blocks that leave room for a second K block of inputs hide them.
    assert ladder.fully_blocked_sbuf_bytes(**MID) == presets.TRN2.core.sbuf_partition_bytes
    roomy = ladder.run_step(ladder.matmul_fully_blocked, **MID, **ROOMY_BLOCKS)
    assert roomy.active["pe"] >= 95.0 and roomy.latency_us < blocked.latency_us


def test_steps_2_to_4_get_faster_and_every_step_moves_fewer_hbm_bytes(mid_ladder):
    latency = [r.latency_us for r in mid_ladder]
    traffic = [r.hbm_bytes for r in mid_ladder]
    # hoisting beats tiling; blocking the free dimensions then moves fewer bytes but, with both
    # steps already near compute-bound at this shape (as in AWS's profile: 99.85 % and 99.52 %
    # tensor engine active), it is no slower than hoisting
    assert latency[0] > latency[1] and latency[2] <= latency[1] * 1.01
    assert traffic == sorted(traffic, reverse=True)
    # the roofline x-axis: FLOPs per HBM byte grows step by step
    intensity = [r.profile.arithmetic_intensity for r in mid_ladder]
    assert intensity == sorted(intensity)


def test_mfu_is_achieved_over_the_fp32_peak(mid_ladder):
    for r in mid_ladder:
        flops = 2.0 * MID["M"] * MID["N"] * MID["K"]
        expected = flops / (r.latency_us * 1e-6) / presets.TRN2.core.peak_flops("float32")
        assert r.mfu == pytest.approx(expected, rel=1e-6)


def test_comparison_with_aws_has_every_published_figure(mid_ladder):
    rows = ladder.comparison_rows(mid_ladder)
    published = [row for row in rows if row["aws"] is not None]
    assert len(published) == sum(len(v) for v in ladder.AWS_TRN2_ACTIVE.values())
    for row in published:
        assert row["gap"] == pytest.approx(row["ours"] - row["aws"])
    text = ladder.format_comparison(mid_ladder)
    assert all(r.step in text for r in mid_ladder) and "99.50" in text


def test_ladder_pictures(mid_ladder):
    fig = ladder_viz.plot_ladder_progress(mid_ladder)
    assert len(fig.axes[0].patches) == len(mid_ladder)
    fig = ladder_viz.plot_active_comparison(mid_ladder, ladder.AWS_TRN2_ACTIVE)
    dma_ax = fig.axes[0]
    # ours for every step + AWS's published DMA figure for every step
    assert len(dma_ax.patches) == 2 * len(mid_ladder)
    heights = sorted(p.get_height() for p in dma_ax.patches)
    assert heights[-1] == pytest.approx(max(max(r.active["dma"] for r in mid_ladder), 99.93))
    fig = ladder_viz.plot_ladder_roofline(mid_ladder)
    assert len(fig.axes[0].lines) >= len(mid_ladder)
    parts = ladder.fully_blocked_sbuf_parts(4096, 8192, 8192)
    fig = ladder_viz.plot_sbuf_budget(parts, presets.TRN2.core.sbuf_partition_bytes)
    assert "224 KiB needed" in fig.axes[0].get_title() and "100% used" in fig.axes[0].get_title()
    fig = ladder_viz.plot_sbuf_budget(ladder.block_free_sbuf_parts(8192), presets.TRN2.core.sbuf_partition_bytes)
    assert "overflow by 98 KiB" in fig.axes[0].get_title()
    plt.close("all")


# -- notebook 05's block-size exercise (solutions, mistakes and stubs: tests/test_exercises.py) ---------
def test_nb05_blocks_that_fit_but_are_too_small_leave_the_tensor_engine_waiting():
    from trnlab.course.exercises import run_check

    result = run_check("nb05_sbuf_blocks", lambda M, N, K: dict(TILES_IN_BLOCK_M=1, TILES_IN_BLOCK_N=1,
                                                                  TILES_IN_BLOCK_K=1))
    assert not result.passed and "tensor engine" in result.message
