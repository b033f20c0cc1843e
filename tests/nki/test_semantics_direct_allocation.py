"""`ncc.psum.alloc(func)`: the func places every logical tile of *its* tensor ("allows programmers to
specify the physical location of each logical tile in the tensor", nki.compiler.psum.alloc page).
Two tensors whose funcs agree on block 0 but not on block 1 are two tensors: block 1 of each sits
where its own func says."""
import functools

import numpy as np

import trnlab.nki as nki
import trnlab.nki.compiler as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


def bank_of(idx, pdim_size, fdim_size, banks):
    return (banks[idx[0]], 0, 0)


@nki.jit
def two_custom_psum_tensors(a_tensor, b_tensor):
    out = nl.ndarray((2, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    first = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32,
                       buffer=ncc.psum.alloc(functools.partial(bank_of, banks=(0, 1))))
    second = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32,
                        buffer=ncc.psum.alloc(functools.partial(bank_of, banks=(0, 2))))
    a, b = nl.load(a_tensor), nl.load(b_tensor)        # [K=128, M=128], [K=128, N=512]
    first[0] = nisa.nc_matmul(a, b)                    # bank 0, dead before second[0] would use it
    nl.store(out[0], value=nl.copy(first[0]))
    first[1] = nisa.nc_matmul(a, b)                    # bank 1
    second[1] = nisa.nc_matmul(a, nl.multiply(b, 2.0))  # bank 2: live together with first[1]
    nl.store(out[1], value=nl.add(nl.copy(first[1]), second[1]))
    return out


def test_two_custom_psum_allocations_keep_their_own_tiles():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(128, 128)).astype(np.float32)
    b = rng.normal(size=(128, 512)).astype(np.float32)
    run = nki.run(two_custom_psum_tensors, a, b)
    np.testing.assert_allclose(run.outputs[0], a.T @ b, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(run.outputs[1], 3 * (a.T @ b), rtol=1e-4, atol=1e-3)
    banks = {buf.name: buf.offset // 2048 for buf in run.program.buffers
             if buf.memory == "psum" and buf.first >= 0 and "[" in buf.name}
    assert sorted(banks.values()) == [0, 1, 2]
