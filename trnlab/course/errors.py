"""The two ways a check says no: `CheckFailed` (the hint a student sees) and `Unavailable` (the
student's code called what the exercise asks them to write)."""


class CheckFailed(Exception):
    """Raised by a checker: the message is the hint the student sees."""


class Unavailable(Exception):
    """Raised when the answer calls a function that is switched off while it is checked (`forbid`)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name
