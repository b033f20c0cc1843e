"""The executed course as a static website that works offline and from a plain file server.

    python -m trnlab.course site --out build/site      # then open build/site/index.html

One HTML page per notebook in ``notebooks/`` (course order: the file names' number prefix), each
with its text, code, stored outputs and figures, and links to the previous and next notebook; an
``index.html`` lists the notebooks with their titles. Nothing is executed: the pages show the outputs
stored in the notebooks (``python -m trnlab.course execute`` refreshes them).

Why nbconvert and not Jupyter Book 2 / MyST: ``myst build --html`` renders through a theme that it
downloads from the web at build time (mystmd issue #1451, "Allow `myst build` without downloading
web assets"), and mystmd is a Node package outside requirements.txt. nbconvert is already installed
(JupyterLab and nbgrader depend on it) and runs offline. Its ``lab`` template loads require.js,
MathJax and the widget manager from CDNs; the template below removes those loads, so a page needs
nothing but itself (CSS inlined, figures as ``data:`` PNGs). Math in the text (``$QK^\\top$``) is drawn
at build time by matplotlib's mathtext into inline SVG images (MathJax would come from a CDN; mathtext
covers the TeX subset the course uses and raises on anything else, so the build fails rather than show
TeX source). A widget shows its state when the notebook was executed — its controls as disabled
form fields with their stored values, and what its Output area displayed — since its JavaScript
(@jupyter-widgets/html-manager) is not installed locally and would come from a CDN.

``check_site`` is the link checker used by the test: every relative ``href``/``src`` resolves to a
file in the site, and no script, stylesheet, font, image or frame is loaded from another host.
"""

from __future__ import annotations

import base64
import copy
import html
import io
import re
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import jinja2
import nbformat
from nbconvert import HTMLExporter

from trnlab import NOTEBOOKS_DIR


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

# nbconvert's JupyterLab template without its network loads, with the course's navigation.
OFFLINE_TEMPLATE = r"""
{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block extra_css -%}<style type="text/css">{{ resources.site_css }}</style>{%- endblock extra_css -%}
{%- block body_header -%}{{ super() }}{{ resources.site_nav }}{%- endblock body_header -%}
{%- block body_footer -%}{{ resources.site_nav }}{{ super() }}{%- endblock body_footer -%}
"""

SITE_CSS = """
nav.course { display: flex; justify-content: space-between; gap: 1em; padding: 0.6em 1em;
  font-family: sans-serif; font-size: 14px; border-bottom: 1px solid #ddd; }
nav.course + * { margin-top: 0.5em; }
.course-widget { border: 1px dashed #bbb; padding: 0.4em; margin: 0.2em 0; font-family: sans-serif; }
.course-widget .note { color: #666; font-size: 12px; }
.course-widget label { margin-right: 1em; }
"""


@dataclass(frozen=True)
class Page:
    """One notebook's page: its source, its file name in the site and its title."""

    notebook: Path
    html_name: str
    title: str


def course_notebooks(notebooks_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    """The course's notebooks in course order (their names start with the notebook's number)."""
    return sorted(Path(notebooks_dir).glob("[0-9]*.ipynb"))


def notebook_title(nb) -> str:
    """The notebook's first level-1 heading (``# 03 · Matmul ...``), else its first heading."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return nb.metadata.get("title", "untitled")


# ---------------------------------------------------------------- widgets, statically

def _model_ref(value) -> str | None:
    if isinstance(value, str) and value.startswith("IPY_MODEL_"):
        return value[len("IPY_MODEL_"):]
    return None


def _control_html(model: dict) -> str:
    """A widget control as a disabled form field showing its stored value."""
    state = model["state"]
    label = html.escape(str(state.get("description", "")))
    name = model["model_name"].removesuffix("Model")
    if name == "Button":
        return f"<button disabled>{label}</button>"
    if name == "Label":  # text, not a field
        return f"<span>{html.escape(str(state.get('value', '')))}</span>"
    if name in ("HTML", "HTMLMath"):  # HTML the notebook itself produced
        return f"<div>{state.get('value', '')}</div>"
    if "value" not in state:
        return ""
    value = state["value"]
    if "index" in state and state.get("_options_labels"):  # Dropdown, RadioButtons, ...: show the label
        index = state["index"]
        labels = state["_options_labels"]
        value = labels[index] if isinstance(index, int) and 0 <= index < len(labels) else value
    shown = html.escape(str(value))
    return f'<label>{label} <input disabled value="{shown}" title="{name}"></label>'


def _widget_outputs(model_id: str, state: dict, outputs: list, controls: list) -> None:
    """Walk a widget's model tree: collect its controls' HTML and its Output areas' outputs."""
    model = state.get(model_id)
    if model is None:
        return
    if model["model_name"] == "OutputModel":
        outputs.extend(model["state"].get("outputs", []))
        return
    children = model["state"].get("children")
    if isinstance(children, list):
        for child in children:
            ref = _model_ref(child)
            if ref:
                _widget_outputs(ref, state, outputs, controls)
        return
    if not model["model_name"].endswith(("LayoutModel", "StyleModel")):
        control = _control_html(model)
        if control:
            controls.append(control)


def static_widgets(nb) -> int:
    """Replace each widget view by its stored state (controls, then Output areas); return how many.

    The notebook's widget state is dropped afterwards so that no page asks for the widget manager.
    """
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    replaced = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        new_outputs = []
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                new_outputs.append(output)
                continue
            replaced += 1
            inner, controls = [], []
            _widget_outputs(view["model_id"], state, inner, controls)
            if controls:
                note = '<div class="note">interactive widget, as last run (open the notebook to use it)</div>'
                box = f'<div class="course-widget">{note}{"".join(controls)}</div>'
                new_outputs.append(nbformat.v4.new_output("display_data", data={"text/html": box}))
            new_outputs.extend(nbformat.from_dict(o) for o in inner)
        cell.outputs = new_outputs
    nb.metadata.pop("widgets", None)
    return replaced


# ---------------------------------------------------------------- math, drawn offline

# Inline math as Pandoc and Jupyter read it: `$` with no space after it, closing `$` with no space
# before it and no digit after it (so "$7.07 against $13.13" stays money), `\$` is a dollar sign.
_INLINE_MATH = re.compile(r"(?<![\\$])\$(?=\S)([^$\n]+?)(?<=\S)(?<!\\)\$(?![\d$])")
_CODE = re.compile(r"(```.*?```|`[^`\n]*`)", re.S)


def math_svg(tex: str) -> str:
    """One inline formula as an ``<img>`` holding matplotlib's SVG of it."""
    from matplotlib import mathtext

    buffer = io.BytesIO()
    mathtext.math_to_image(f"${tex}$", buffer, format="svg", dpi=72)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    alt = html.escape(tex, quote=True)
    return (f'<img class="math" alt="{alt}" title="{alt}" '
            f'src="data:image/svg+xml;base64,{data}" style="vertical-align: middle; height: 1.1em">')


def render_math(nb) -> int:
    """Replace inline ``$...$`` in markdown cells (outside code) by drawn formulas; return how many."""
    drawn = 0
    for cell in nb.cells:
        if cell.cell_type != "markdown" or "$" not in cell.source:
            continue
        parts = _CODE.split(cell.source)
        for i in range(0, len(parts), 2):          # even parts are text, odd parts code
            parts[i], count = _INLINE_MATH.subn(lambda m: math_svg(m.group(1)), parts[i])
            drawn += count
        cell.source = "".join(parts)
    return drawn


# ---------------------------------------------------------------- pages

_IPYNB_LINK = re.compile(r"(\]\(|href=[\"'])((?![a-z]+:)[^)\"'#]*?)\.ipynb(?=[)#\"'])")


def relink_notebooks(nb) -> None:
    """Links between notebooks (``03_x.ipynb``) point at their pages (``03_x.html``)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _IPYNB_LINK.sub(lambda m: f"{m.group(1)}{m.group(2)}.html", cell.source)


def _nav(pages: list[Page], i: int) -> str:
    prev = f'<a href="{pages[i - 1].html_name}">← {html.escape(pages[i - 1].title)}</a>' if i > 0 else "<span></span>"
    nxt = (f'<a href="{pages[i + 1].html_name}">{html.escape(pages[i + 1].title)} →</a>'
           if i + 1 < len(pages) else "<span></span>")
    return f'<nav class="course">{prev}<a href="index.html">course contents</a>{nxt}</nav>'


def _index_html(pages: list[Page]) -> str:
    items = "\n".join(f'  <li><a href="{p.html_name}">{html.escape(p.title)}</a></li>' for p in pages)
    return f"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>trnlab: the course</title>
<style>body {{ font-family: sans-serif; max-width: 46em; margin: 2em auto; line-height: 1.5; }}</style>
</head>
<body>
<h1>trnlab: the course</h1>
<p>The executed notebooks, with the outputs stored when they last ran. To run them and use their
widgets, open <code>notebooks/</code> in JupyterLab.</p>
<ol start="0">
{items}
</ol>
</body>
</html>
"""


def build_site(out: Path, notebooks: list[Path] | None = None) -> list[Page]:
    """Write the site into ``out``: ``index.html`` and one page per notebook; return the pages."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    notebooks = course_notebooks() if notebooks is None else [Path(p) for p in notebooks]
    books = [nbformat.read(p, as_version=4) for p in notebooks]
    pages = [Page(p, p.stem + ".html", notebook_title(nb)) for p, nb in zip(notebooks, books)]
    exporter = HTMLExporter(
        template_name="lab", template_file="offline.html.j2",
        extra_loaders=[jinja2.DictLoader({"offline.html.j2": OFFLINE_TEMPLATE})],
    )
    for i, (page, nb) in enumerate(zip(pages, books)):
        nb = copy.deepcopy(nb)
        static_widgets(nb)
        render_math(nb)
        relink_notebooks(nb)
        nb.metadata["title"] = page.title
        body, _ = exporter.from_notebook_node(
            nb, resources={"site_nav": _nav(pages, i), "site_css": SITE_CSS})
        (out / page.html_name).write_text(body, encoding="utf-8")
    (out / "index.html").write_text(_index_html(pages), encoding="utf-8")
    return pages


# ---------------------------------------------------------------- link checker

class _Refs(HTMLParser):
    """Every (tag, attribute, value) of a URL-bearing attribute, and the text of <style> elements."""

    URL_ATTRS = {"href", "src", "srcset", "data", "poster", "action"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.refs: list[tuple[str, str, str]] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in self.URL_ATTRS and value is not None:
                self.refs.append((tag, name, value))
            if name == "style" and value:
                self.styles.append(value)
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)


_CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)|@import\s+['"]([^'"]+)""")


def _is_remote(url: str) -> bool:
    return url.startswith("//") or urlsplit(url).scheme in ("http", "https", "ftp")


def check_site(site: Path) -> list[str]:
    """Every problem in the site: a relative link to a missing file, or a load from another host.

    Hyperlinks (``<a href>``) to other sites are allowed: following one is the reader's choice;
    anything the browser would fetch by itself (script, stylesheet, font, image, frame) is not.
    """
    site = Path(site)
    problems = []
    for page in sorted(site.rglob("*.html")):
        parser = _Refs()
        parser.feed(page.read_text(encoding="utf-8"))
        where = page.relative_to(site)
        loads = [(tag, attr, v) for tag, attr, v in parser.refs]
        loads += [("style", "url", a or b) for text in parser.styles for a, b in _CSS_URL.findall(text)]
        for tag, attr, url in loads:
            if _is_remote(url):
                if tag != "a":
                    problems.append(f"{where}: <{tag} {attr}> loads {url} from the network")
                continue
            parts = urlsplit(url)
            if parts.scheme or not parts.path:  # data:, mailto:, or a #fragment in this page
                continue
            target = (page.parent / unquote(parts.path)).resolve()
            if not target.is_file() or site.resolve() not in target.parents:
                problems.append(f"{where}: <{tag} {attr}> {url} is not a file in the site")
    return problems


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m trnlab.course site", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="build/site", help="the site's directory (default: build/site)")
    parser.add_argument("notebooks", nargs="*", help="notebooks to include (default: every notebook)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    pages = build_site(Path(args.out), args.notebooks or None)
    problems = check_site(Path(args.out))
    size = sum(f.stat().st_size for f in Path(args.out).rglob("*") if f.is_file())
    print(f"{len(pages)} pages in {args.out} ({size / 2**20:.1f} MiB) in {time.perf_counter() - start:.1f} s;"
          f" open {Path(args.out) / 'index.html'}")
    for problem in problems:
        print(problem)
    return 1 if problems else 0
