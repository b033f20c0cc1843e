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


scalar = float          # a compile-time number argument

__all__ = ["tensor", "scalar"]
