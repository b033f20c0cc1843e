"""`nki.typing`: type names kernels use in annotations (``def kernel(a: nt.tensor, ...)``,
``qk: nt.tensor[seqlen_q, seqlen_kv] = nl.matmul(...)``)."""
from trnlab.nki.tensor import NkiTensor


class _TensorType(type):
    """`nt.tensor` and `nt.tensor[shape...]` both stand for a tile / tensor (isinstance works)."""

    def __getitem__(cls, shape) -> "type":
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
