"""A first-order linear recurrence h[t] = a[t] * h[t-1] + b[t] along the free axis, per partition.

The pattern of state-space models (Mamba's selective scan): one Vector-engine tensor_tensor_scan per
chunk of the sequence, the last column of a chunk carried into the next as a [P, 1] initial value.
Written twice, in the two call styles of NKI's releases.
"""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
def linear_scan_functional(a_tensor, b_tensor):
    """beta-1 style (neuronxcc.nki): functional calls, nl.ds slices, chunks of 512 columns."""
    P, T = a_tensor.shape
    out = nl.ndarray((P, T), dtype=nl.float32, buffer=nl.shared_hbm)
    chunk = 512
    carry = nl.zeros((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    for c in nl.sequential_range(T // chunk):
        a = nl.load(a_tensor[:, nl.ds(c * chunk, chunk)])
        b = nl.load(b_tensor[:, nl.ds(c * chunk, chunk)])
        h = nisa.tensor_tensor_scan(a, b, initial=carry, op0=nl.multiply, op1=nl.add)
        carry[...] = nl.copy(h[:, chunk - 1:chunk])
        nl.store(out[:, nl.ds(c * chunk, chunk)], value=h)
    return out


@nki.jit
def linear_scan_destination(a_tensor, b_tensor):
    """beta-2 style (nki 0.3+): every instruction writes a dst the kernel allocated."""
    P, T = a_tensor.shape
    out = nl.ndarray((P, T), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((P, T), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.ndarray((P, T), dtype=nl.float32, buffer=nl.sbuf)
    h = nl.ndarray((P, T), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=a_tensor)
    nisa.dma_copy(dst=b, src=b_tensor)
    nisa.tensor_tensor_scan(dst=h, data0=a, data1=b, initial=0.0, op0=nl.multiply, op1=nl.add)
    nisa.dma_copy(dst=out, src=h)
    return out
