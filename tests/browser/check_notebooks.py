"""Open the course notebooks in JupyterLab in a real (headless) browser, as a student would.

    python tests/browser/check_notebooks.py                       # notebooks 00..05 (all in notebooks/)
    python tests/browser/check_notebooks.py 03 05 --shots /tmp/nb # some, screenshots to /tmp/nb

For each notebook, on a copy in a temporary directory (JupyterLab saves what it runs):
1. open it and wait: it must not be marked modified (stored metadata = what JupyterLab writes);
2. Run → Run All Cells, and wait until every code cell has run;
3. fail on a widget that does not render (raw ``interactive(children=...`` text, "Error displaying
   widget", a widget output without a widget view), an error output, a JavaScript error on the page,
   or a request to any host but the local JupyterLab (the course must work offline);
4. save screenshots of the top of the notebook and of every widget and animation to ``--shots``.

Needs Chromium from the system packages (``apt-get install chromium``, used at /usr/bin/chromium)
and the Python ``playwright`` package; it never downloads a browser. JupyterLab runs on 127.0.0.1
on a free port with a random token, with its own settings and runtime directories, and is stopped
(kernels first) at the end. Exit status 0 when every notebook passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# User settings for the test's JupyterLab: one DOM per cell (without it, JupyterLab 4 renders only
# the cells near the viewport), and no "get notified about Jupyter news?" popup over the notebook.
SETTINGS = {
    "notebook-extension/tracker": {"windowingMode": "none"},
    "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}
# What JupyterLab shows for a widget it cannot render: the widget's text/plain repr.
RAW_WIDGET_TEXT = ("interactive(children=", "HBox(children=", "VBox(children=", "Output()")
# Top-level widget views in the open notebook (not the outputs nested inside a widget).
COUNT_WIDGET_VIEWS = """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output')]
    .filter(o => o.firstElementChild && o.firstElementChild.classList.contains('jupyter-widgets')
                 && !o.parentElement.closest('.jupyter-widgets')).length"""


OUTPUT_TEXT = """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea')]
    .map(o => o.innerText).join('\\n')"""  # outputs only: the code itself may say `widgets.Output()`


def offline(context, base: str) -> list[str]:
    """Refuse every request of the browser `context` not served from `base` (the local JupyterLab); the list
    it returns fills with the refused addresses."""
    outside: list[str] = []

    def only_loopback(route):
        if route.request.url.startswith(base) or route.request.url.startswith("data:"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()
    context.route("**/*", only_loopback)
    return outside


def pytest_marks() -> list:
    """The marks of a browser test: slow, opt-in (TRNLAB_BROWSER_TESTS=1), Chromium and playwright present."""
    import importlib.util
    import pytest
    return [pytest.mark.slow,
            pytest.mark.skipif(os.environ.get("TRNLAB_BROWSER_TESTS") != "1",
                               reason="the browser check is opt-in: TRNLAB_BROWSER_TESTS=1"),
            pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM}"),
            pytest.mark.skipif(importlib.util.find_spec("playwright") is None, reason="playwright is not installed")]


def stored_widget_outputs(nb: dict) -> int:
    return sum("application/vnd.jupyter.widget-view+json" in o.get("data", {})
               for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"])


@dataclass
class Report:
    notebook: str
    problems: list[str] = field(default_factory=list)
    screenshots: list[str] = field(default_factory=list)
    seconds: float = 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterLab:
    """A JupyterLab server on loopback over `root`, isolated from the user's settings."""

    def __init__(self, root: Path, scratch: Path):
        self.root, self.port, self.token = root, free_port(), secrets.token_hex(16)
        for plugin, values in SETTINGS.items():
            path = scratch / "settings" / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = dict(os.environ, PYTHONPATH=str(REPO), JUPYTER_RUNTIME_DIR=str(scratch / "runtime"),
                   JUPYTER_CONFIG_DIR=str(scratch / "config"), MPLBACKEND="module://matplotlib_inline.backend_inline")
        command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                   f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                   f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={root}",
                   f"--LabApp.user_settings_dir={scratch / 'settings'}",
                   f"--LabApp.workspaces_dir={scratch / 'workspaces'}",
                   "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers and CI runners often run as root
            command.append("--ServerApp.allow_root=True")
        self.log = open(scratch / "jupyterlab.log", "w")
        self.process = subprocess.Popen(command, cwd=root, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        self._wait_ready()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"{self.base}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with status {self.process.returncode}; see {self.log.name}")
            try:
                self.api("/api/status")
                return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"JupyterLab did not answer on port {self.port} within {timeout:.0f} s")

    def shutdown_kernels(self) -> None:
        for kernel in self.api("/api/kernels") or []:
            self.api(f"/api/kernels/{kernel['id']}", method="DELETE")

    def stop(self) -> None:
        try:
            self.shutdown_kernels()
        except OSError:
            pass
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # the server and nothing else: its own session
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


def wait_kernel_idle(page, timeout_s: float) -> None:
    page.wait_for_function(
        """() => {
            const s = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');
            return s && s.getAttribute('data-status') === 'idle';
        }""", timeout=timeout_s * 1000)


def run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


def wait_all_ran(page, code_cells: int, timeout_s: float) -> None:
    """Every code cell shows an execution count ([n], not [*] or [ ])."""
    page.wait_for_function(
        """(expected) => {
            const prompts = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')];
            const done = prompts.filter(p => /\\[\\d+\\]/.test(p.textContent));
            return prompts.length === expected && done.length === expected;
        }""", arg=code_cells, timeout=timeout_s * 1000, polling=1000)


def check_notebook(context, lab: JupyterLab, name: str, shots: Path, timeout_s: float) -> Report:
    report = Report(name)
    nb = json.loads((lab.root / name).read_text())
    code_cells = sum(c["cell_type"] == "code" for c in nb["cells"])
    stem = name[:2]
    page = context.new_page()
    page.set_viewport_size({"width": 1400, "height": 1000})
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console_errors.append(f"uncaught: {e}"))
    start = time.monotonic()
    page.goto(f"{lab.base}/lab/tree/{name}?token={lab.token}&reset")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
    wait_kernel_idle(page, 120)
    page.wait_for_timeout(5000)  # JupyterLab rewrites stale metadata within a few seconds
    if page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").count():
        report.problems.append("marked modified right after opening (stored metadata differs from what JupyterLab writes)")
    before = shots / f"{stem}_before_run.png"
    page.screenshot(path=str(before))
    report.screenshots.append(str(before))
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    text = page.evaluate(OUTPUT_TEXT)  # untrusted stored outputs: widgets show their text/plain
    placeholder = panel.locator(".jp-OutputArea-output", has_text="an interactive widget")
    if placeholder.count():
        path = shots / f"{stem}_widget_before_run.png"
        placeholder.first.locator("xpath=ancestor::div[contains(@class, 'jp-CodeCell')]").screenshot(path=str(path))
        report.screenshots.append(str(path))
    for raw in RAW_WIDGET_TEXT:
        if raw in text:
            report.problems.append(f"before Run All, a widget shows its raw repr {raw!r} (execute the notebook "
                                   "with `python -m trnlab.course execute`, which stores a placeholder)")

    run_all(page)
    try:
        wait_all_ran(page, code_cells, timeout_s)
        wait_kernel_idle(page, 60)
    except Exception as error:  # playwright's TimeoutError: say which cells did not run
        report.problems.append(f"Run All did not finish within {timeout_s:.0f} s ({type(error).__name__})")
    page.wait_for_timeout(2000)  # widget views render asynchronously
    report.seconds = time.monotonic() - start

    text = page.evaluate(OUTPUT_TEXT)
    for raw in RAW_WIDGET_TEXT:
        if raw in text:
            report.problems.append(f"a widget shows as raw text: {raw!r}")
    if "Error displaying widget" in text:
        report.problems.append("'Error displaying widget' on the page")
    expected, rendered = stored_widget_outputs(nb), page.evaluate(COUNT_WIDGET_VIEWS)
    if rendered < expected:
        report.problems.append(f"{rendered} widget views rendered, the notebook displays {expected}")
    widget_outputs = panel.locator(".jp-OutputArea-output:has(> .jupyter-widgets)")
    errors = panel.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    for i in range(errors.count()):
        message = errors.nth(i).inner_text()
        if "Traceback" in message or "Error" in message:
            report.problems.append(f"error output: {message.strip().splitlines()[-1][:200]}")
    report.problems += [f"JavaScript console error: {m[:300]}" for m in console_errors]

    for i in range(widget_outputs.count()):
        path = shots / f"{stem}_widget{i}.png"
        widget_outputs.nth(i).screenshot(path=str(path))
        report.screenshots.append(str(path))
    animations = panel.locator(".animation")
    for i in range(animations.count()):
        animation = animations.nth(i)
        if not animation.locator("img").first.get_attribute("src"):
            report.problems.append(f"animation {i} shows no frame (its script did not run)")
        animation.locator('button[title="Play"]').click()
        page.wait_for_timeout(1500)
        path = shots / f"{stem}_animation{i}.png"
        animation.screenshot(path=str(path))
        report.screenshots.append(str(path))
    page.close()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebook numbers or names (default: all in notebooks/)")
    parser.add_argument("--shots", type=Path, default=Path(tempfile.gettempdir()) / "trnlab_browser_check",
                        help="directory for the screenshots")
    parser.add_argument("--timeout", type=float, default=300, help="seconds allowed for Run All, per notebook")
    args = parser.parse_args(argv)
    if not CHROMIUM.exists():
        print(f"no Chromium at {CHROMIUM}: apt-get install chromium", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    names = sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if args.notebooks:
        names = [n for n in names if any(n.startswith(a) or n == a for a in args.notebooks)]
    args.shots.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="trnlab_browser_"))
    root = scratch / "notebooks"
    shutil.copytree(NOTEBOOKS, root)
    lab = JupyterLab(root, scratch)
    outside: list[str] = []
    reports: list[Report] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            context = browser.new_context()
            outside = offline(context, lab.base)  # anything not served by our JupyterLab is refused
            for name in names:
                report = check_notebook(context, lab, name, args.shots, args.timeout)
                lab.shutdown_kernels()
                reports.append(report)
                status = "ok" if not report.problems else "FAIL"
                print(f"{name}: {status} in {report.seconds:.0f} s, {len(report.screenshots)} screenshots")
                for problem in report.problems:
                    print(f"  - {problem}")
            browser.close()
    finally:
        lab.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    for url in sorted(set(outside)):
        print(f"request to a host other than the local JupyterLab (refused): {url}")
    print(f"screenshots in {args.shots}")
    return 0 if reports and not outside and all(not r.problems for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
