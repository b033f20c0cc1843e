"""Run notebooks with ipywidgets under nbclient without the message race that can hang a run.

nbclient (0.11) stands in for a browser's ``Output`` widget (the one inside every
``widgets.interactive``): when the kernel prints into it, nbclient's stand-in sends the new outputs
back to the kernel as a ``comm_msg`` on the *shell* socket — from the task that reads IOPub, while
another task is awaiting the cell's ``execute_reply`` on that same asyncio socket. Now and then
(4 of about 120 autogrades of notebook 04 on two busy cores, all four with two running at once)
nbclient then never reads the reply: the debug log ends with the widget cell's outputs and the
kernel's "idle", the kernel sits idle, and nbclient waits until the cell timeout. (nbclient issue
#312 describes the same hang.)

`QuietOutputWidgets` keeps nbclient's stand-in — a widget's printed outputs are still recorded in
the notebook's widget state — but never sends that ``comm_msg``: nothing a notebook run needs
comes from the kernel's copy of an Output widget's outputs. Mix it into any NotebookClient
subclass (the grader's `kernel_run._Client`, `execute`, nbgrader's Execute in `nbgrader_execute`).
"""

from __future__ import annotations

from typing import Any

from nbclient.output_widget import OutputWidget


class _OutputWidgetWithoutSync(OutputWidget):
    def sync_state(self) -> None:  # the message that races the execute_reply: never sent
        return None


class QuietOutputWidgets:
    """NotebookClient mixin: the Output widget stand-in without the shell message (see module doc)."""

    def on_comm_open_jupyter_widget(self, msg: dict[str, Any]) -> Any:
        state = msg["content"]["data"]["state"]
        if (state.get("_model_module"), state.get("_model_name")) == ("@jupyter-widgets/output", "OutputModel"):
            return _OutputWidgetWithoutSync(msg["content"]["comm_id"], state, self.kc, self)
        return super().on_comm_open_jupyter_widget(msg)
