"""The course as a static website: built from the stored notebooks, offline, every link resolving."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from trnlab.course import site as site_module
from trnlab.course.__main__ import main as course_main
from trnlab.course.site import (
    WIDGET_STATE, WIDGET_VIEW, build_site, check_site, course_notebooks, notebook_title, relink_notebooks,
    static_widgets,
)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The whole course built once (about 10 s on a busy 2-core machine)."""
    out = tmp_path_factory.mktemp("site")
    assert course_main(["site", "--out", str(out)]) == 0  # the command also runs the link checker
    return out


@pytest.mark.slow
def test_site_has_an_index_and_one_page_per_notebook_in_course_order(site):
    notebooks = course_notebooks()
    assert len(notebooks) >= 11
    index = (site / "index.html").read_text(encoding="utf-8")
    positions = []
    for path in notebooks:
        title = notebook_title(nbformat.read(path, as_version=4))
        page = (site / f"{path.stem}.html").read_text(encoding="utf-8")
        assert title in page.replace("&amp;", "&"), f"{path.name}: title {title!r} missing from its page"
        assert f'href="{path.stem}.html"' in index
        positions.append(index.index(f'href="{path.stem}.html"'))
    assert positions == sorted(positions), "index not in course order"


@pytest.mark.slow
def test_site_links_resolve_and_nothing_loads_from_the_network(site):
    assert check_site(site) == []
    for page in site.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        for cdn in ("cdnjs", "unpkg", "jsdelivr", "require.min.js", "MathJax", "fonts.googleapis"):
            assert cdn not in text, f"{page.name} mentions {cdn}"


@pytest.mark.slow
def test_site_pages_link_to_previous_and_next_notebook(site):
    stems = [p.stem for p in course_notebooks()]
    middle = (site / f"{stems[1]}.html").read_text(encoding="utf-8")
    assert f'href="{stems[0]}.html"' in middle and f'href="{stems[2]}.html"' in middle


@pytest.mark.slow
def test_site_embeds_figures_and_widgets_as_their_stored_state(site):
    page = (site / f"{course_notebooks()[0].stem}.html").read_text(encoding="utf-8")
    assert re.search(r'<img[^>]+src="data:image/png;base64,', page), "no embedded PNG figure"
    assert 'class="course-widget"' in page  # nb00's prompt box, as a disabled field with its value
    assert WIDGET_VIEW not in page  # no widget view left for a widget manager to render


def test_link_checker_finds_a_missing_file_and_a_cdn_script(tmp_path):
    (tmp_path / "a.html").write_text(
        '<html><head><script src="https://cdn.example/x.js"></script>'
        '<style>@font-face { src: url(//fonts.example/f.woff2) }</style></head>'
        '<body><a href="b.html#top">b</a><a href="missing.html">m</a>'
        '<a href="https://example.org/">a hyperlink is fine</a><img src="data:image/png;base64,AA=="></body></html>')
    (tmp_path / "b.html").write_text("<html><body><a href='../outside.html'>up</a></body></html>")
    problems = check_site(tmp_path)
    assert any("missing.html" in p for p in problems)
    assert any("cdn.example" in p for p in problems)
    assert any("fonts.example" in p for p in problems)
    assert any("outside.html" in p for p in problems)  # a file outside the site does not count
    assert not any("example.org" in p or "b.html#top" in p for p in problems)
    assert len(problems) == 4


def test_static_widgets_show_controls_and_output_area():
    nb = nbformat.v4.new_notebook()
    state = {
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_label", "IPY_MODEL_slider", "IPY_MODEL_out"]}},
        "label": {"model_name": "LabelModel", "state": {"value": "pick n"}},
        "slider": {"model_name": "IntSliderModel", "state": {"description": "n", "value": 7}},
        "out": {"model_name": "OutputModel", "state": {"outputs": [
            {"output_type": "stream", "name": "stdout", "text": "n squared is 49\n"}]}},
    }
    nb.metadata["widgets"] = {WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    view = nbformat.v4.new_output("display_data", data={WIDGET_VIEW: {"model_id": "box"}, "text/plain": "..."})
    nb.cells.append(nbformat.v4.new_code_cell("interact(...)", outputs=[view]))
    assert static_widgets(nb) == 1
    outputs = nb.cells[0].outputs
    controls = outputs[0]["data"]["text/html"]
    assert "<span>pick n</span>" in controls and 'value="7"' in controls
    assert outputs[1]["text"] == "n squared is 49\n"
    assert "widgets" not in nb.metadata


def test_build_site_of_one_notebook(tmp_path):
    first = course_notebooks()[0]
    pages = build_site(tmp_path, [first])
    assert [p.html_name for p in pages] == [f"{first.stem}.html"]
    assert check_site(tmp_path) == []


def test_links_between_notebooks_point_at_their_pages():
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell(
        "see [03](03_matmul.ipynb#tiles), <a href='04_core.ipynb'>04</a>"
        " and [upstream](https://github.com/x/y/blob/main/n.ipynb)"))
    relink_notebooks(nb)
    assert nb.cells[0].source == (
        "see [03](03_matmul.html#tiles), <a href='04_core.html'>04</a>"
        " and [upstream](https://github.com/x/y/blob/main/n.ipynb)")


def test_inline_math_is_drawn_offline_and_money_stays_text():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(
        r"tiles of $A^\top$, `$not_math$` in code, $7.07 against $13.13, a \$5 bill, and $V$.")]
    assert site_module.render_math(nb) == 2
    text = nb.cells[0].source
    assert text.count('<img class="math"') == 2 and 'alt="A^\\top"' in text and 'alt="V"' in text
    assert "`$not_math$`" in text and "$7.07 against $13.13" in text and r"\$5" in text


@pytest.mark.slow
def test_every_formula_in_the_course_is_drawn(site):
    pages = {p.name: p.read_text() for p in site.glob("*.html")}
    assert any(re.search(r'<img[^>]+class="math"[^>]+src="data:image/svg', text) for text in pages.values())
    assert not any("$QK^\\top$" in text or "$A^\\top$" in text for text in pages.values())
