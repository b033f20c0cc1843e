"""How the NKI Library runner hands a kernel's outputs to AWS's harness (benchmarks/nki_library_outputs.py):
in the placeholder's dtype, an MX x4 output declared as another type by its bytes (as the chip's path
reads the output file), any other output by value (as the harness's simulation path converts it)."""
import importlib.util
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from trnlab.hardware import dtypes, mx

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
spec = importlib.util.spec_from_file_location("nki_library_outputs", BENCHMARKS / "nki_library_outputs.py")
outputs = importlib.util.module_from_spec(spec)
sys.modules["nki_library_outputs"] = outputs
spec.loader.exec_module(outputs)


def _words(x4) -> np.ndarray:
    values = np.array([[[1.0, -2.0, 0.5, 448.0], [0.0, 3.0, -0.25, 6.0]]], np.float32)   # [1, 2, 4]
    return mx.pack(values if x4 != dtypes.float4_e2m1fn_x4 else np.clip(values, -6, 6), x4)


@pytest.mark.parametrize("x4", [dtypes.float8_e4m3fn_x4, dtypes.float8_e5m2_x4])
def test_an_x4_output_declared_float32_keeps_its_words_bits(x4):
    words = _words(x4)
    kept = outputs.as_placeholder(words, np.zeros(words.shape, np.float32))
    assert kept.dtype == np.float32 and kept.shape == words.shape
    assert np.array_equal(kept.view(np.uint32), words.view(np.uint32))
    # the reference mxfp_load compares it with: the packed words viewed as float32
    assert np.array_equal(kept.view(np.uint32), words.view(np.float32).view(np.uint32))
    assert not np.array_equal(kept, np.asarray(words, dtype=np.float32))      # not the words' integer values


def test_an_fp4_x4_output_declared_uint16_keeps_its_bits():
    words = _words(dtypes.float4_e2m1fn_x4)
    kept = outputs.as_placeholder(words, np.zeros(words.shape, np.uint16))
    assert kept.dtype == np.uint16 and np.array_equal(kept, words.view(np.uint16))


def test_an_x4_output_declared_x4_stays_as_it_is():
    words = _words(dtypes.float8_e4m3fn_x4)
    kept = outputs.as_placeholder(words, np.zeros(words.shape, dtypes.float8_e4m3fn_x4))
    assert kept.dtype == dtypes.float8_e4m3fn_x4 and np.array_equal(kept.view(np.uint32), words.view(np.uint32))


def test_an_x4_output_declared_with_another_element_size_is_refused_by_name():
    words = _words(dtypes.float4_e2m1fn_x4)
    with pytest.raises(TypeError, match="float4_e2m1fn_x4 output goes to the harness as its bytes"):
        outputs.as_placeholder(words, np.zeros(words.shape, np.float32))


def test_other_outputs_convert_by_value_as_the_harness_converts_them():
    out = np.array([[1.5, -3.0]], ml_dtypes.bfloat16)
    kept = outputs.as_placeholder(out, np.zeros(out.shape, np.float32))
    assert kept.dtype == np.float32 and kept.tolist() == [[1.5, -3.0]]
