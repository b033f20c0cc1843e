"""`nki.typing`: type names kernels use in annotations (``def kernel(a: nt.tensor, ...)``,
``qk: nt.tensor[seqlen_q, seqlen_kv] = nl.matmul(...)``), and beta 1's shape-only arguments
(``nki.benchmark(...)(kernel)(nt.tensor[[8192, 4096], nl.bfloat16], ...)``, as AWS's matmul tutorial
benchmarks its kernels)."""
from trnlab.nki.tensor import NkiTensor


class _TensorType(type):
    """`nt.tensor` and `nt.tensor[shape...]` both stand for a tile / tensor (isinstance works);
    `nt.tensor[[shape], dtype]` is an argument with a shape and a dtype and no values."""

    def __getitem__(cls, key):
        if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], (list, tuple)) \
                and all(isinstance(n, int) for n in key[0]):
            from trnlab.nki import ShapeDtype       # here: trnlab.nki imports this module
            return ShapeDtype(tuple(key[0]), key[1])
        return cls

    def __instancecheck__(cls, value) -> bool:
        return isinstance(value, NkiTensor)


class tensor(metaclass=_TensorType):
    """A tensor argument or tile of a kernel; ``tensor[128, 512]`` documents its shape."""


class mutable_tensor(metaclass=_TensorType):
    """A tensor argument the kernel writes in place (NKI 0.7's ``nt.mutable_tensor``, as AWS's NKI
    Library annotates outputs its caller allocates, e.g. router_topk's ``expert_index``): the kernel
    stores into it and may return it; the caller's array is not changed (a kernel's results are its
    return values, here as on AWS's simulator)."""


scalar = float          # a compile-time number argument

__all__ = ["tensor", "mutable_tensor", "scalar"]
