"""Zero-edit runs: unmodified NKI scripts and tests (AWS's module names) run on trnlab.

The scripts are kernels of our own in AWS's style; each runs through `python -m trnlab.nki` in a
subprocess, exactly as a user would, and prints what the test checks.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from trnlab.nki import platform, zero_edit

ROOT = Path(__file__).resolve().parents[1]

BETA2_SCRIPT = '''
import sys
import numpy as np
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def add_rows(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    a_tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    b_tile = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a_tile, src=a)
    nisa.dma_copy(dst=b_tile, src=b)
    total = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=a_tile, data2=b_tile, op=nl.add)
    nisa.dma_copy(dst=out, src=total)
    print("nc_version", nisa.get_nc_version().name)
    return out


if __name__ == "__main__":
    a = np.arange(128 * 32, dtype=np.float32).reshape(128, 32)
    b = np.full((128, 32), 0.5, np.float32)
    c = add_rows(a, b)
    assert np.array_equal(c, a + b)
    print("main", __name__, sys.argv[1:], float(c.sum()))
'''

BETA1_SCRIPT = '''
import numpy as np
from neuronxcc import nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def exp_rows(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    nl.store(out, value=nl.exp(tile))
    return out


x = np.linspace(-1, 1, 128 * 16, dtype=np.float32).reshape(128, 16)
y = exp_rows(x)
print("beta1", bool(np.allclose(y, np.exp(x), rtol=1e-5)), nisa.nc_version.gen3.name)
'''

PYTEST_FILE = '''
import numpy as np
import nki
import nki.language as nl
import nki.isa as nisa
from nki.isa.constants import oob_mode


@nki.jit
def double(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=tile)
    return out


def test_double_on_the_simulator():
    x = np.random.default_rng(0).standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_allclose(nki.simulate(double)(x), 2 * x)


def test_cpu_simulate_as_the_library_harness_calls_it():
    x = np.ones((128, 8), np.float32)
    np.testing.assert_allclose(nki.cpu_simulate(double)[1](x=x), 2 * x)


def test_constants_module():
    assert oob_mode.error is nisa.oob_mode.error
'''


def _run(args, cwd, env=None, pythonpath=()):
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("NEURON_PLATFORM_TARGET_OVERRIDE", "NKI_NC_VERSION", "TRNLAB_NKI_FORCE")}
    environment["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), str(ROOT)])
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "trnlab.nki", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=120)


def _script(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_run_a_beta2_script_unmodified_as_main_with_its_arguments(tmp_path):
    _script(tmp_path, "add.py", BETA2_SCRIPT)
    done = _run(["run", "add.py", "--size", "7"], tmp_path)
    assert done.returncode == 0, done.stderr
    a = np.arange(128 * 32, dtype=np.float32)
    assert f"main __main__ ['--size', '7'] {float((a + 0.5).sum())}" in done.stdout
    assert "nc_version gen3" in done.stdout            # trnlab's default target: Trn2


def test_run_a_beta1_script_unmodified(tmp_path):
    _script(tmp_path, "exp.py", BETA1_SCRIPT)
    done = _run(["run", "exp.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "beta1 True gen3" in done.stdout


def test_a_course_harness_that_turns_logging_off_after_importing_neuronxcc_runs(tmp_path):
    """Stanford CS149's Trainium harness calls `logging.disable(logging.OFF)` after `import neuronxcc.nki`
    (the standard library has no OFF; AWS's images do once neuronxcc is imported)."""
    _script(tmp_path, "harness.py", """
        import logging
        import neuronxcc.nki as nki
        logging.disable(logging.OFF)
        logging.getLogger("x").critical("hidden")
        print("off", logging.OFF > logging.CRITICAL)
    """)
    done = _run(["run", "harness.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "off True" in done.stdout and "hidden" not in done.stderr


def test_a_script_exit_code_is_the_commands(tmp_path):
    _script(tmp_path, "fail.py", "import nki\nimport sys\nsys.exit(4)\n")
    assert _run(["run", "fail.py"], tmp_path).returncode == 4


@pytest.mark.parametrize("value, generation", [("trn1", "gen2"), ("gen4", "gen4")])   # the rest: in-process below
def test_neuron_platform_target_override_picks_the_preset(tmp_path, value, generation):
    _script(tmp_path, "add.py", BETA2_SCRIPT)
    done = _run(["run", "add.py"], tmp_path, env={"NEURON_PLATFORM_TARGET_OVERRIDE": value})
    assert done.returncode == 0, done.stderr
    assert f"nc_version {generation}" in done.stdout


def test_nki_simulator_1_runs_the_kernels_values(tmp_path):
    _script(tmp_path, "add.py", BETA2_SCRIPT)
    done = _run(["run", "add.py"], tmp_path, env={"NKI_SIMULATOR": "1"})
    assert done.returncode == 0, done.stderr            # the script asserts the kernel's values
    assert "main __main__" in done.stdout


def test_pytest_subcommand_collects_an_unmodified_test_file(tmp_path):
    _script(tmp_path, "test_double.py", PYTEST_FILE)
    done = _run(["pytest", "-q", "-p", "no:cacheprovider", "test_double.py"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


def test_refuses_to_shadow_a_real_installation_unless_forced(tmp_path):
    fake = tmp_path / "site" / "nki"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("REAL = True\n")
    _script(tmp_path, "which.py", "import nki\nprint('real' if getattr(nki, 'REAL', False) else 'trnlab')\n")
    refused = _run(["run", "which.py"], tmp_path, pythonpath=[tmp_path / "site"])
    assert refused.returncode == 3
    assert "would shadow a real AWS installation" in refused.stderr and str(fake) in refused.stderr
    forced = _run(["--force", "run", "which.py"], tmp_path, pythonpath=[tmp_path / "site"])
    assert forced.returncode == 0 and forced.stdout.strip() == "trnlab", forced.stderr
    by_switch = _run(["run", "which.py"], tmp_path, env={"TRNLAB_NKI_FORCE": "1"},
                     pythonpath=[tmp_path / "site"])
    assert by_switch.stdout.strip() == "trnlab", by_switch.stderr


# -- in-process: the module map, the aliases, the platform variables -----------------------------------
@pytest.fixture
def hook():
    zero_edit.install(force=True)
    yield
    zero_edit.uninstall()


def test_every_aws_root_maps_onto_the_same_trnlab_module(hook):
    import trnlab.nki as trn
    import trnlab.nki.language as trn_language
    import nki.language as nl
    import neuronxcc.nki.language as nl_beta1
    import nki_cpu_simulator.nki.language as nl_harness
    assert nl.add is nl_beta1.add is nl_harness.add is trn_language.add
    import nki
    assert nki.jit is trn.jit and nki.cpu_simulate is trn.cpu_simulate


@pytest.mark.parametrize("aws, trnlab_module", [
    ("nki.isa.constants", "trnlab.nki.isa_constants"), ("nki.language.dtypes", "trnlab.nki.language_dtypes"),
    ("nki.dtype", "trnlab.nki.language_dtypes"), ("nki.compiler", "trnlab.nki.compiler"),
    ("nki.collectives", "trnlab.nki.collectives"), ("nki.typing", "trnlab.nki.typing"),
    ("nki.tensor", "trnlab.nki.tensor"), ("nki_cpu_simulator.nki.builtin", "trnlab.nki.builtin"),
    ("neuronxcc.nki.typing", "trnlab.nki.typing"), ("neuron_dtypes", "trnlab.nki.neuron_dtypes")])
def test_module_names_map_as_documented(aws, trnlab_module):
    assert zero_edit.trnlab_name(aws) == trnlab_module


def test_importing_nki_tensor_leaves_trnlabs_tile_type_alone(hook):
    import trnlab.nki as trn
    from trnlab.nki.tensor import NkiTensor
    import nki.tensor  # noqa: F401
    assert trn.tensor is NkiTensor


def test_assignments_through_an_alias_reach_trnlab(hook):
    import nki.language as nl
    import trnlab.nki.language as trn_language
    nl._zero_edit_probe = 1
    try:
        assert trn_language._zero_edit_probe == 1
    finally:
        del trn_language._zero_edit_probe


def test_a_name_trnlab_lacks_is_an_import_error_naming_the_module(hook):
    with pytest.raises(ModuleNotFoundError, match="trnlab.nki.no_such_part"):
        import nki.no_such_part  # noqa: F401


def test_uninstall_removes_the_names(hook):
    import nki  # noqa: F401
    zero_edit.uninstall()
    assert "nki" not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        import nki  # noqa: F401,F811


def test_nki_dtype_annotation_works_before_its_import(hook):
    import nki
    import trnlab.nki.language as trn_language
    assert nki.dtype.bfloat16 is trn_language.bfloat16


@pytest.mark.parametrize("env, expected", [({}, "trn2"), ({"NEURON_PLATFORM_TARGET_OVERRIDE": "trn1"}, "trn1"),
                                           ({"NEURON_PLATFORM_TARGET_OVERRIDE": "gen4"}, "trn3"),
                                           ({"NEURON_PLATFORM_TARGET_OVERRIDE": "trn1", "NKI_NC_VERSION": "gen3"},
                                            "trn2")])
def test_default_target_reads_aws_variables(monkeypatch, env, expected):
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    monkeypatch.delenv("NKI_NC_VERSION", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert platform.default_target() == expected


def test_an_unknown_platform_target_is_refused_by_name(monkeypatch):
    monkeypatch.delenv("NKI_NC_VERSION", raising=False)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn9")
    with pytest.raises(platform.PlatformTargetError, match="NEURON_PLATFORM_TARGET_OVERRIDE='trn9'"):
        platform.default_target()


def test_cpu_simulate_lnc2_runs_one_program_per_core():
    import trnlab.nki as nki
    import trnlab.nki.language as nl

    @nki.jit
    def halves(x):                          # each core writes its half of the rows
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        rows = x.shape[0] // nl.num_programs(0)
        start = nl.program_id(0) * rows
        tile = nl.load(x[start:start + rows, :])
        nl.store(out[start:start + rows, :], value=nl.add(tile, float(nl.program_id(0))))
        return out

    x = np.zeros((256, 4), np.float32)
    y = nki.cpu_simulate(halves)[2](x=x)
    assert np.array_equal(y[:128], np.zeros((128, 4))) and np.array_equal(y[128:], np.ones((128, 4)))


def test_run_dash_m_runs_a_module_as_main(tmp_path):
    package = tmp_path / "labs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    _script(package, "add.py", BETA2_SCRIPT)
    done = _run(["run", "-m", "labs.add", "x"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "main __main__ ['x']" in done.stdout


def test_plain_pytest_with_the_plugin_installs_the_hook_before_collection(tmp_path):
    _script(tmp_path, "test_double.py", PYTEST_FILE)
    environment = {k: v for k, v in os.environ.items() if k != "TRNLAB_NKI_FORCE"}
    environment["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                           "trnlab.nki.zero_edit", "test_double.py"], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


def test_nki_simulator_module_runs_a_kernel_as_vllm_calls_it(hook):
    import nki.simulator
    import trnlab.nki as trn
    import trnlab.nki.language as nl

    @trn.jit
    def negate(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.negative(nl.load(x)))
        return out

    x = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    np.testing.assert_array_equal(nki.simulator.simulate_kernel(negate, (x,), {}, 1), -x)


def test_keyword_inputs_in_any_order_reach_their_parameters():
    """The NKI Library harness calls cpu_simulate(kernel)[lnc](**inputs) in its own dict order."""
    import trnlab.nki as trn
    import trnlab.nki.language as nl

    @trn.jit
    def difference(zeta, alpha):
        out = nl.ndarray(zeta.shape, dtype=zeta.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.subtract(nl.load(zeta), nl.load(alpha)))
        return out

    zeta = np.full((128, 4), 10.0, np.float32)
    alpha = np.ones((128, 4), np.float32)
    assert trn.cpu_simulate(difference)[1](zeta=zeta, alpha=alpha)[0, 0] == 9.0
    assert trn.cpu_simulate(difference)[1](alpha=alpha, zeta=zeta)[0, 0] == 9.0
    assert trn.cpu_simulate(difference)[2](alpha=alpha, zeta=zeta)[0, 0] == 9.0


def test_simulate_updates_numpy_inputs_the_kernel_wrote_in_place():
    """AWS's simulator: "Input arrays are updated in-place if the kernel modified the corresponding
    HBM tensors" (a cache update written into its input)."""
    import trnlab.nki as trn
    import trnlab.nki.language as nl

    @trn.jit
    def append_row(cache, row):
        nl.store(cache[0:1, :], value=nl.load(row))       # writes its input
        out = nl.ndarray(row.shape, dtype=row.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(row))
        return out

    cache = np.zeros((4, 8), np.float32)
    row = np.full((1, 8), 3.0, np.float32)
    out = trn.simulate(append_row)(cache, row)
    np.testing.assert_array_equal(out, row)
    np.testing.assert_array_equal(cache[0], row[0])
    np.testing.assert_array_equal(cache[1:], 0)
    np.testing.assert_array_equal(row, 3.0)                  # a read-only input is left as it was


def test_pytest_subcommand_reaches_xdist_workers(tmp_path):
    pytest.importorskip("xdist")
    _script(tmp_path, "test_double.py", PYTEST_FILE)
    done = _run(["pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "test_double.py"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


def test_a_zero_edit_run_spills_as_awss_compiler_places_and_gives_the_switch_back(monkeypatch):
    from trnlab import config
    monkeypatch.delenv("TRNLAB_SPILL", raising=False)
    assert config.get("spill") is False                  # trnlab's course refuses an SBUF overflow
    zero_edit.install(force=True)
    try:
        assert config.get("spill") is True               # an unmodified AWS script: the compiler spills
    finally:
        zero_edit.uninstall()
    assert config.get("spill") is False


def test_a_zero_edit_run_keeps_a_spill_setting_the_user_gave(monkeypatch):
    from trnlab import config
    monkeypatch.setenv("TRNLAB_SPILL", "0")
    zero_edit.install(force=True)
    try:
        assert config.get("spill") is False
    finally:
        zero_edit.uninstall()
    assert config.get("spill") is False
def test_a_plain_folder_named_nki_is_not_taken_for_an_installation(tmp_path):
    (tmp_path / "nki").mkdir()                       # e.g. a course's folder of kernels, no __init__.py
    _script(tmp_path, "add.py", BETA2_SCRIPT)
    done = _run(["run", "add.py"], tmp_path, pythonpath=[tmp_path])
    assert done.returncode == 0, done.stderr


def test_neuron_dtypes_host_helpers():
    import ml_dtypes
    from trnlab.nki import neuron_dtypes as dt
    values = np.array([1.0 + 2 ** -9, -3.14159, 1e-3])                       # float64
    bf16 = dt.static_cast(values, dt.bfloat16)
    assert bf16.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(bf16, values.astype(np.float32).astype(ml_dtypes.bfloat16))
    assert dt.static_cast(bf16, np.float32).dtype == np.float32
    words = np.arange(4, dtype=np.uint32).reshape(1, 4)
    packed = dt.static_cast(words, dt.float8_e4m3fn_x4)                       # the same bits, reinterpreted
    assert packed.dtype == np.dtype(dt.float8_e4m3fn_x4) and packed.view(np.uint32).tolist() == words.tolist()
    assert dt.is_float_type(dt.bfloat16) and dt.is_float_type(dt.float8_e4m3) and not dt.is_float_type(np.int32)
    assert dt.sizeinbytes(dt.bfloat16) == 2 and dt.sizeinbytes(dt.float8_e4m3fn_x4) == 4
    assert dt.finfo(dt.bfloat16).bits == 16


def test_thin_modules_read_other_names_from_their_namespace(hook):
    import nki.isa as nisa
    import nki.isa.constants as constants
    import nki.language as nl
    import nki.language.dtypes as dtypes
    import nki_cpu_simulator.nki.builtin as builtin
    assert constants.matmul_perf_mode is nisa.matmul_perf_mode and constants.dge_mode is nisa.dge_mode
    assert constants.tensor_copy is nisa.tensor_copy                     # any other name: from nki.isa
    assert dtypes.float8_e5m2 is nl.float8_e5m2 and dtypes.static_cast is nl.static_cast
    assert builtin.language.exp is nl.exp and builtin.isa.iota is nisa.iota and builtin.exp is nl.exp
    with pytest.raises(AttributeError, match="no_such_name"):
        constants.no_such_name
