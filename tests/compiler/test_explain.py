"""explain / dump_dir / stop_after: every pass visible, with its time."""
import pytest

import trnlab.compiler as tc
from trnlab.compiler.passes import NAMES


def test_stop_after_fuse_keeps_the_graph_and_makes_no_program(tiny_gpt):
    model, idx = tiny_gpt
    compiled = tc.compile(model, (idx,), stop_after="fuse")
    assert [r.name for r in compiled.passes] == NAMES[:NAMES.index("fuse") + 1]
    assert compiled.program is None and compiled.graph.ops()["attention"] == 2
    with pytest.raises(RuntimeError, match="stop_after"):
        compiled(idx)


def test_dump_dir_has_the_graph_after_every_pass_and_the_times(tiny_gpt, tmp_path):
    from trnlab.viz.graph import dump_pictures
    model, idx = tiny_gpt
    compiled = tc.compile(model, (idx,), dump_dir=str(tmp_path))
    pictures = dump_pictures(compiled, str(tmp_path))         # viz draws; the compiler writes text only
    names = {p.name for p in tmp_path.iterdir()}
    assert not any(name.endswith(".png") for name in tc.dump(compiled, str(tmp_path)))
    for i, name in enumerate(NAMES, start=1):
        assert f"{i:02d}_{name}.txt" in names and f"{i:02d}_{name}.png" in names
    assert pictures == [f"{i:02d}_{name}.png" for i, name in enumerate(NAMES, start=1)]
    assert {"00_captured.txt", "passes.txt", "program.txt"} <= names
    assert (tmp_path / f"{NAMES.index('fuse') + 1:02d}_fuse.txt").read_text().count("attention(") == 2
    text = compiled.explain()
    assert all(name in text for name in NAMES) and " ms" in text and "program for trn2" in text


def test_explain_function_compiles_and_explains(mlp):
    model, x = mlp
    text = tc.explain(model, (x,))
    assert "linear" in text and "weights resident in HBM" in text
