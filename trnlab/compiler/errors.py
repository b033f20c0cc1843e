"""The compiler's and the artifact's errors: each names the op or part, what was seen and the rule."""
from __future__ import annotations


class CompileError(Exception):
    """An op the compiler cannot lower: names the op, the user's source line and the supported ops."""

    def __init__(self, message: str, op: str = "", source: str = "", supported: tuple = ()):
        super().__init__(message)
        self.op, self.source, self.supported = op, source, tuple(supported)


class DynamicShapeError(CompileError):
    """A graph whose shapes are not all known numbers: Neuron compiles one graph per input shape."""


class ArtifactError(Exception):
    """An artifact that cannot be loaded; `part` names the part that failed."""

    def __init__(self, message: str, part: str = ""):
        super().__init__(message)
        self.part = part


class ArtifactCorruptError(ArtifactError):
    """A part's bytes do not hash to the SHA-256 recorded in the manifest (corrupted or tampered)."""


class ArtifactTruncatedError(ArtifactError):
    """The file ends early or a part is missing."""


class ArtifactVersionError(ArtifactError):
    """The artifact's format version is not one this runtime reads."""


class ArtifactTargetError(ArtifactError):
    """The artifact was compiled for another target than the device it is loaded on."""
