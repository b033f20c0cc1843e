"""The notebooks' text agrees with their outputs: a figure quoted in a markdown cell appears in an
output (or a code cell's source) above it, unless the cell marks its figures as cited.

A *figure* is a measured-looking number in prose: one with a decimal point (`55.3`), a thousands
separator (`2,746`), or a unit or ratio right after it (`104 µs`, `97 %`, `2.3×`, `630 TFLOPS`).
Plain counts and sizes (`128 partitions`, `4 layers`) and numbers inside inline code are not figures.
A figure is found above if the same digits occur in an earlier cell's output or source (thousands
separators ignored; a text figure may be an output's figure rounded to fewer decimals).

Marker for figures that come from elsewhere — a published source, a benchmark run, another
notebook, an exercise's check value: start the paragraph with `<!-- cited: WHERE -->`; it covers that
paragraph only (up to the next blank line), and names where its figures come from.

And across notebooks: the peaks and ridges a notebook prints for a core are the simulated core's
(`presets`), a chip's are AWS's published chip figures, and the notebook that prints both says why
they differ (`tests` below).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CITED = re.compile(r"<!--\s*cited:\s*\S[^>]*-->")
UNITS = r"(?:\s?(?:µs|us|ms|ns|s\b|%|×|x\b|TFLOPS|PFLOPS|GFLOPS|FLOP/B|FLOP/byte|GB/s|TB/s|B/ns|MB|GB|KiB|MiB|GiB|TiB|W\b|USD|\$))"
FIGURE = re.compile(r"(?<![\w.\-/#])(\$?)(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+|\d+" + r"(?=" + UNITS + r"))"
                    + r"(?![\w])")


def _text(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _outputs(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if "text" in output:
            parts.append("".join(output["text"]) if isinstance(output["text"], list) else output["text"])
        for key, value in output.get("data", {}).items():
            if key.startswith("text/"):
                parts.append("".join(value) if isinstance(value, list) else value)
    return "\n".join(parts)


def _prose(markdown: str) -> str:
    """The markdown without inline code, code blocks, links' targets, HTML comments and headings' numbers."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"(?m)^(    |\t).*$", " ", text)              # indented code blocks
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"(?m)^#+\s*\d+(\.\d+)*\.?", "#", text)
    text = re.sub(r"\d[\d,]*\s?×\s?\d[\d,]*(\s?×\s?\d[\d,]*)*", " ", text)      # shapes: 128 × 128, 4 × 4
    text = re.sub(r"\b(notebooks?|NKI|Python|version|step|steps)\s+\d+(\.\d+)*", " ", text, flags=re.I)
    text = re.sub(r"\d+\.\d+\.\d+(\.\d+)*", " ", text)                                # 127.0.0.1, versions
    return text


def _numbers(text: str) -> set[str]:
    return {m.replace(",", "") for m in re.findall(r"\d[\d,]*(?:\.\d+)?", text)}


def _found(figure: str, seen: set[str]) -> bool:
    if figure in seen:
        return True
    if "." in figure:                       # a rounded quote of a longer output figure
        whole, decimals = figure.split(".")
        return any(s.startswith(figure) or (s.count(".") and _rounds_to(s, figure)) for s in seen)
    return any(_rounds_to(s, figure) for s in seen if "." in s)


def _rounds_to(value: str, figure: str) -> bool:
    decimals = len(figure.split(".")[1]) if "." in figure else 0
    try:
        return f"{float(value):.{decimals}f}" == figure
    except ValueError:
        return False


def unquoted_figures(path: Path) -> list[str]:
    """'cell N: figure' for every figure of a markdown cell found in no cell above it."""
    cells = json.loads(path.read_text())["cells"]
    seen: set[str] = set()
    missing = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown":
            for paragraph in re.split(r"\n\s*\n", _text(cell)):
                if CITED.match(paragraph.strip()):
                    continue                      # a paragraph that says where its figures come from
                for match in FIGURE.finditer(_prose(paragraph)):
                    figure = match.group(2).replace(",", "")
                    if not _found(figure, seen):
                        missing.append(f"cell {i}: {match.group(0).strip()!r}")
        if cell["cell_type"] == "code":
            seen |= _numbers(_outputs(cell)) | _numbers(_text(cell))
    return missing


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem[:2] for p in NOTEBOOKS])
def test_every_figure_in_the_text_is_in_an_output_above_or_cited(path):
    assert unquoted_figures(path) == []


def test_the_guard_catches_a_stale_figure_and_accepts_a_cited_one(tmp_path):
    def nb(cells):
        p = tmp_path / "nb.ipynb"
        p.write_text(json.dumps({"cells": cells}))
        return p
    code = {"cell_type": "code", "source": "print(x)", "outputs": [{"output_type": "stream", "text": "took 104.1 µs\n"}]}
    stale = {"cell_type": "markdown", "source": "It took 55.3 µs, and 104 µs."}
    assert unquoted_figures(nb([code, stale])) == ["cell 1: '55.3'"]
    cited = {"cell_type": "markdown", "source": "<!-- cited: AWS's page -->\nAWS measured 55.3 µs."}
    assert unquoted_figures(nb([code, cited])) == []
    next_paragraph = {"cell_type": "markdown", "source": "<!-- cited: AWS's page -->\nAWS: 55.3 µs.\n\nOurs: 55.3 µs."}
    assert unquoted_figures(nb([code, next_paragraph])) == ["cell 1: '55.3'"]
    before = {"cell_type": "markdown", "source": "It will take 104.1 µs."}
    assert unquoted_figures(nb([before, code])) == ["cell 0: '104.1'"]


def _all_outputs(path: Path) -> str:
    return "\n".join(_outputs(c) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")


def _all_markdown(path: Path) -> str:
    return "\n".join(_text(c) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown")


def _notebook(prefix: str) -> Path:
    return next(p for p in NOTEBOOKS if p.name.startswith(prefix))


def test_every_printed_ridge_is_a_simulated_cores_or_a_published_chips_and_nb10_shows_both():
    """A core's ridge (the simulated core: peak from its PE array and clock, its share of HBM) and a
    chip's (AWS's published peak and bandwidth) differ; every ridge a notebook prints is one of the two,
    and notebook 10, which prints the chips', also prints the cores' beside them and says why."""
    from trnlab.economics import figures
    from trnlab.hardware import presets
    accelerators = figures.default_accelerators()
    allowed = set()
    for g in ("trn1", "trn2", "trn3"):
        core = presets.CORES[g]
        allowed |= {core.peak_flops(d) / core.hbm_bandwidth for d in ("bfloat16", "float32")}
    allowed |= {a.ridge("bf16") for a in accelerators.values()}
    printed = []
    for path in NOTEBOOKS:
        for line in _all_outputs(path).splitlines():
            if "ridge" in line.lower():
                after = re.split(r"ridge", line, maxsplit=1, flags=re.I)[1]
                printed += [(path.stem[:2], float(x)) for x in re.findall(r"\d+\.\d+", after)]
    assert printed, "no notebook prints a ridge"
    for notebook, value in printed:
        assert any(abs(value - a) < 0.06 for a in allowed), (notebook, value)
    nb10 = _all_outputs(_notebook("10"))
    for g in ("trn1", "trn2", "trn3"):
        chip = presets.CHIPS[g]
        assert f"AWS per chip: {chip.quoted_tflops['bfloat16']:.0f} TFLOPS" in nb10
        assert f"= {chip.cores * presets.CORES[g].peak_flops('bfloat16') / 1e12:.0f} TFLOPS" in nb10
    assert "do not multiply out" in _all_markdown(_notebook("10"))


def test_the_two_training_step_times_say_why_they_differ():
    """Notebook 07 prints the compiled step's time, notebook 10 a per-kernel sum for the same model:
    notebook 10 says how they differ (one program with overlap and AdamW, against kernel after kernel)."""
    assert "per micro-batch step" in _all_outputs(_notebook("07"))
    assert "training step" in _all_outputs(_notebook("10"))
    text = _all_markdown(_notebook("10"))
    assert "sums of kernel latencies" in text and "Notebook 07's compiled training step" in text


MONEY_AS_MATH = re.compile(r"(?<!\\)\$(?=\d)")


def money_read_as_math(path: Path) -> list[str]:
    """Unescaped `$` before a digit in markdown, outside code: JupyterLab pairs every two `$` into inline
    math (its latex splitter has no Pandoc-style digit rule), so "$7.07 against $13.13" would be typeset
    as a formula. Money is written `\\$7.07`."""
    found = []
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        if cell["cell_type"] == "markdown":
            text = re.sub(r"```.*?```|`[^`\n]*`", "", _text(cell), flags=re.S)
            found += [f"cell {i}: {text[m.start():m.start() + 12]!r}" for m in MONEY_AS_MATH.finditer(text)]
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem[:2] for p in NOTEBOOKS])
def test_money_in_the_text_is_escaped_so_jupyterlab_does_not_typeset_it(path):
    assert money_read_as_math(path) == []
