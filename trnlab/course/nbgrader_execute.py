"""nbgrader's Execute preprocessor with `quiet_widgets.QuietOutputWidgets`, for `nbgrader autograde`.

`nbgrader-export` writes an ``nbgrader_config.py`` that swaps this class in for nbgrader's Execute
(configuration of ``c.Execute`` still applies: traitlets reads a parent class's section too), so an
autograde of a notebook with widgets does not hang on nbclient's Output-widget message race.
"""

from __future__ import annotations

from nbgrader.preprocessors import Execute

from trnlab.course.quiet_widgets import QuietOutputWidgets


class QuietExecute(QuietOutputWidgets, Execute):
    """nbgrader's Execute; the Output widget stand-in never messages the kernel's shell socket."""
