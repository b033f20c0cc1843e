"""Convolution and pooling as the Neuron compiler does them: windows gathered by DMA, then a matmul.

The Tensor engine only multiplies matrices, so a convolution becomes one: `im2col` lays every output
pixel's receptive field out as a row (the "shifted windows" of the input side by side), and the
convolution is `cols [N*Ho*Wo, kh*kw*C] @ W [kh*kw*C, O]` — a `linear` with the bias fused on PSUM exit.
Activations are channels-last (NHWC) here, so that a pixel's C channels are contiguous: each window
position (i, j) of one output row is ONE strided DMA of a [Wo, C] block (stride*C elements between
rows). The compiler's `convolution` pass chooses this layout and shows it in the graph.

    im2col(x [N, H, W, C], kernel_size, stride, padding, dilation) -> [N*Ho*Wo, kh*kw*C]  columns in (i, j, c) order
    pool2d(x [N, H, W, C], kernel_size, stride, padding, op)       -> [N, Ho, Wo, C]   op: "max" or "avg"
                                                                  (avg counts the padding, as PyTorch's default)

Padding is never stored: the windows that fall outside the image are zeros (a memset of the tile) for
im2col and are skipped for pooling. Ho = (H + 2p - d(k - 1) - 1) // s + 1, as torch.nn.Conv2d.
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.common import row_tiles


def out_size(size: int, kernel: int, stride: int, padding: int, dilation: int = 1) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _valid(o0: int, count: int, offset: int, stride: int, size: int) -> tuple[int, int]:
    """(first, last+1) of the outputs o in [o0, o0+count) whose input index o*stride + offset is in [0, size)."""
    first = o0
    while first < o0 + count and first * stride + offset < 0:
        first += 1
    last = o0 + count
    while last > first and (last - 1) * stride + offset >= size:
        last -= 1
    return first, last


def _pairs(v) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, (list, tuple)) else (int(v), int(v))


@nki.jit
def im2col(x, kernel_size=(3, 3), stride=(1, 1), padding=(0, 0), dilation=(1, 1)):
    """x [N, H, W, C] -> the windows [N*Ho*Wo, kh*kw*C]: row (n, oh, ow), column (i*kw + j)*C + c."""
    N, H, W, C = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = map(_pairs, (kernel_size, stride, padding, dilation))
    Ho, Wo = out_size(H, kh, sh, ph, dh), out_size(W, kw, sw, pw, dw)
    K = kh * kw * C
    out = nl.ndarray((N * Ho * Wo, K), dtype=x.dtype, buffer=nl.shared_hbm)
    for n in range(N):
        for oh in range(Ho):
            for w0, cols in row_tiles(Wo):                            # output pixels of one row, on partitions
                tile = nl.ndarray((cols, K), dtype=x.dtype, buffer=nl.sbuf)       # [pixels, kh*kw*C]
                padded = ph or pw
                if padded:
                    nisa.memset(dst=tile, value=0.0)
                for i in range(kh):
                    h = oh * sh + i * dh - ph
                    if not 0 <= h < H:
                        continue
                    for j in range(kw):
                        first, last = _valid(w0, cols, j * dw - pw, sw, W)
                        if first >= last:
                            continue
                        src0 = first * sw + j * dw - pw
                        src = x[n, h, src0:src0 + (last - first - 1) * sw + 1:sw, :]    # [pixels, C], strided
                        c0 = (i * kw + j) * C
                        nisa.dma_copy(dst=tile[first - w0:last - w0, c0:c0 + C], src=src)
                row0 = (n * Ho + oh) * Wo + w0
                nl.store(out[row0:row0 + cols, :], value=tile)
    return out


@nki.jit
def pool2d(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), op="max"):
    """x [N, H, W, C] -> [N, Ho, Wo, C]: the max or the mean of each window, channel by channel."""
    if op not in ("max", "avg"):
        raise ValueError(f"pool2d: op {op!r} is not 'max' or 'avg'")
    N, H, W, C = x.shape
    (kh, kw), (sh, sw), (ph, pw) = map(_pairs, (kernel_size, stride, padding))
    Ho, Wo = out_size(H, kh, sh, ph), out_size(W, kw, sw, pw)
    out = nl.ndarray((N, Ho, Wo, C), dtype=x.dtype, buffer=nl.shared_hbm)
    combine = nl.maximum if op == "max" else nl.add
    fill = float("-inf") if op == "max" else 0.0
    for n in range(N):
        for oh in range(Ho):
            for w0, cols in row_tiles(Wo):
                acc = nl.ndarray((cols, C), dtype=nl.float32, buffer=nl.sbuf)
                nisa.memset(dst=acc, value=fill)
                for i in range(kh):
                    h = oh * sh + i - ph
                    if not 0 <= h < H:
                        continue
                    for j in range(kw):
                        first, last = _valid(w0, cols, j - pw, sw, W)
                        if first >= last:
                            continue
                        src0 = first * sw + j - pw
                        src = x[n, h, src0:src0 + (last - first - 1) * sw + 1:sw, :]       # [pixels, C], strided
                        if last - first == cols:
                            window = nl.load(src)
                        else:                  # an edge: the pixels outside read the identity of `combine`
                            window = nl.ndarray((cols, C), dtype=x.dtype, buffer=nl.sbuf)
                            nisa.memset(dst=window, value=fill)
                            nisa.dma_copy(dst=window[first - w0:last - w0, :], src=src)
                        nisa.tensor_tensor(dst=acc, data1=acc, data2=window, op=combine)
                y = nl.ndarray((cols, C), dtype=x.dtype, buffer=nl.sbuf)
                nisa.activation(dst=y, op=nl.copy, data=acc, scale=1.0 if op == "max" else 1.0 / (kh * kw))
                nl.store(out[n, oh, w0:w0 + cols, :], value=y)
    return out


__all__ = ["im2col", "pool2d", "out_size"]


# -- backward ------------------------------------------------------------------------------------------
def _scatter_row(acc, block, first: int, last: int, w0: int, stride: int, offset: int, W: int, cols: int, C: int):
    """acc [W, C] += block rows first..last (output pixels) placed at input columns ow*stride + offset:
    the block is DMAed into a zeroed staging tile at those partitions, then added whole (engines read
    from partition 0; a DMA may write any partition)."""
    staging = nl.ndarray((W, C), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=staging, value=0.0)
    start = first * stride + offset
    if stride == 1:
        nisa.dma_copy(dst=staging[start:start + last - first, :], src=block[first - w0:last - w0, :])
    else:                                   # SBUF partitions are read with step 1: one DMA per pixel
        for ow in range(first, last):
            w = ow * stride + offset
            nisa.dma_copy(dst=staging[w:w + 1, :], src=block[ow - w0:ow - w0 + 1, :])
    nisa.tensor_tensor(dst=acc, data1=acc, data2=staging, op=nl.add)


@nki.jit
def col2im(cols, image_shape=(1, 1, 1, 1), kernel_size=(3, 3), stride=(1, 1), padding=(0, 0), dilation=(1, 1)):
    """The adjoint of im2col: cols [N*Ho*Wo, kh*kw*C] -> [N, H, W, C], each window's values added back
    where they were read (a convolution's input gradient). One input row at a time, accumulated in SBUF."""
    N, H, W, C = (int(s) for s in image_shape)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = map(_pairs, (kernel_size, stride, padding, dilation))
    Ho, Wo = out_size(H, kh, sh, ph, dh), out_size(W, kw, sw, pw, dw)
    if W > nl.tile_size.pmax or Wo > nl.tile_size.pmax:
        raise ValueError(f"col2im: image width {W} (output {Wo}) over {nl.tile_size.pmax} partitions")
    out = nl.ndarray((N, H, W, C), dtype=cols.dtype, buffer=nl.shared_hbm)
    for n in range(N):
        for h in range(H):
            acc = nl.ndarray((W, C), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=acc, value=0.0)
            for i in range(kh):
                top = h + ph - i * dh                        # = oh * sh for the output row that read row h
                if top % sh or not 0 <= top // sh < Ho:
                    continue
                oh = top // sh
                row0 = (n * Ho + oh) * Wo
                block = nl.load(cols[row0:row0 + Wo, :])                                 # [Wo, kh*kw*C]
                for j in range(kw):
                    first, last = _valid(0, Wo, j * dw - pw, sw, W)
                    if first < last:
                        c0 = (i * kw + j) * C
                        _scatter_row(acc, block[:, c0:c0 + C], first, last, 0, sw, j * dw - pw, W, Wo, C)
            nl.store(out[n, h, :, :], value=nl.copy(acc, dtype=cols.dtype))
    return out


@nki.jit
def pool2d_backward(x, grad, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), op="max"):
    """Gradient of pool2d: x [N, H, W, C], grad [N, Ho, Wo, C] -> [N, H, W, C]. max: each window's
    gradient goes to its first maximum in scan order (PyTorch's index), found again from x; avg: spread
    evenly (divided by kh*kw, padding counted)."""
    N, H, W, C = x.shape
    (kh, kw), (sh, sw), (ph, pw) = map(_pairs, (kernel_size, stride, padding))
    Ho, Wo = out_size(H, kh, sh, ph), out_size(W, kw, sw, pw)
    if W > nl.tile_size.pmax or Wo > nl.tile_size.pmax:
        raise ValueError(f"pool2d_backward: image width {W} (output {Wo}) over {nl.tile_size.pmax} partitions")
    out = nl.ndarray((N, H, W, C), dtype=grad.dtype, buffer=nl.shared_hbm)
    rows = [[nl.ndarray((W, C), dtype=nl.float32, buffer=nl.sbuf) for _ in range(H)] for _ in range(N)]
    for n in range(N):
        for h in range(H):
            nisa.memset(dst=rows[n][h], value=0.0)
        for oh in range(Ho):
            g = nl.load(grad[n, oh, :, :])                                                   # [Wo, C]
            windows = []
            for i in range(kh):
                h = oh * sh + i - ph
                for j in range(kw):
                    first, last = _valid(0, Wo, j - pw, sw, W)
                    if 0 <= h < H and first < last:
                        windows.append((h, j, first, last))
            if op == "avg":
                share = nl.multiply(g, 1.0 / (kh * kw), dtype=nl.float32)
                for h, j, first, last in windows:
                    _scatter_row(rows[n][h], share, first, last, 0, sw, j - pw, W, Wo, C)
                continue
            values = []                                        # each window position's x, [Wo, C], -inf outside
            for h, j, first, last in windows:
                v = nl.ndarray((Wo, C), dtype=nl.float32, buffer=nl.sbuf)
                nisa.memset(dst=v, value=float("-inf"))
                src0 = first * sw + j - pw
                nisa.dma_copy(dst=v[first:last, :], src=x[n, h, src0:src0 + (last - first - 1) * sw + 1:sw, :])
                values.append(v)
            best = values[0]
            for v in values[1:]:
                best = nl.maximum(best, v, dtype=nl.float32)
            taken = nl.ndarray((Wo, C), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=taken, value=0.0)
            for (h, j, first, last), v in zip(windows, values):
                hit = nl.multiply(nl.equal(v, best, dtype=nl.float32),
                                  nl.subtract(1.0, taken, dtype=nl.float32), dtype=nl.float32)   # first max only
                taken = nl.add(taken, hit, dtype=nl.float32)
                _scatter_row(rows[n][h], nl.multiply(hit, g, dtype=nl.float32), first, last, 0, sw, j - pw, W, Wo, C)
    for n in range(N):
        for h in range(H):
            nl.store(out[n, h, :, :], value=nl.copy(rows[n][h], dtype=grad.dtype))
    return out
