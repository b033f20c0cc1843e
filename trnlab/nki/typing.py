"""`nki.typing`: type names kernels use in annotations (``def kernel(a: tensor, ...)``)."""
from trnlab.nki.tensor import NkiTensor

tensor = NkiTensor      # a tensor argument or tile of a kernel
scalar = float          # a compile-time number argument

__all__ = ["tensor", "scalar"]
