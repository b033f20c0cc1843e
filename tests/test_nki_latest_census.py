"""The census of AWS's latest NKI pages: every public name of the latest API reference pages that the NKI 0.7
census (tests/data/nki07_api.json) lacks — listed in tests/data/nki_latest_api.json, each with its page,
nki.language.NkiTensor's methods and attributes among them — resolves in trnlab or is in docs/nki_compat.md's
status table as not supported, with the reason. An NkiTensor member must be on the class and on the tensors a
kernel holds (an HBM argument, an SBUF tile, a view of each). The subsection "Names on AWS's latest pages"
counts them per module."""
import importlib
import json
import pathlib
import re
from dataclasses import fields

import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl

from test_nki_07_census import NAMES as NAMES_07, TABLE, TABLE_TITLE, TRNLAB, check_resolves_or_is_listed

ROOT = pathlib.Path(__file__).resolve().parents[1]
CENSUS = json.loads((ROOT / "tests" / "data" / "nki_latest_api.json").read_text())
NAMES = CENSUS["names"]
LATEST_TITLE = "### Names on AWS's latest pages"
TENSOR = "nki.language.NkiTensor"
CONFIG = "nki.compiler.CompileConfig"
LATEST = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/"


def _held_tensors() -> list:
    """The tensors a kernel holds: an HBM argument, an SBUF tile, a slice of each."""
    held = []

    @nki.jit
    def hold(x):
        tile = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        held.extend([x, tile, x[0:64, 0:32], tile[:, 8:40]])
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)
        return out

    nki.run(hold, np.zeros((128, 64), np.float32))
    return held


HELD = _held_tensors()


def _resolves(key: str) -> bool:
    entry = NAMES[key]
    if entry["module"] == TENSOR:
        # (getattr, not hasattr: an attribute is a property evaluated on each tensor)
        def has(obj):
            try:
                getattr(obj, entry["name"])
            except AttributeError:
                return False
            return True
        return has(nl.NkiTensor) and all(has(t) for t in HELD)
    if entry["module"] == CONFIG:           # an option: a field of the class, honoured or refused by name
        import trnlab.nki.compiler as ncc
        return entry["name"] in {f.name for f in fields(ncc.CompileConfig)}
    return hasattr(importlib.import_module(TRNLAB[entry["module"]]), entry["name"])


def test_each_latest_name_has_its_latest_page_and_is_not_in_the_07_census():
    assert {e["module"] for e in NAMES.values()} <= {"nki", "nki.isa", "nki.language", "nki.compiler",
                                                     "nki.collectives", TENSOR, CONFIG}
    for key, entry in NAMES.items():
        assert key == f"{entry['module']}.{entry['name']}"
        assert entry["page"].startswith(LATEST), f"{key}: {entry['page']} is not one of AWS's latest pages"
        assert key not in NAMES_07, f"{key} is in the NKI 0.7 census already"
    members = {e["name"] for e in NAMES.values() if e["module"] == TENSOR}
    assert {"size", "strides", "reinterpret_cast", "view", "ap", "vector_select"} <= members


@pytest.mark.parametrize("key", sorted(NAMES))
def test_each_latest_name_resolves_in_trnlab_or_is_listed_as_not_supported(key):
    check_resolves_or_is_listed(key, _resolves(key))


def test_the_status_table_lists_only_names_of_either_census():
    stray = sorted(set(TABLE) - set(NAMES) - set(NAMES_07))
    assert not stray, f"docs/nki_compat.md lists names neither census has: {stray}"


def test_the_counts_in_the_docs_are_the_latest_census_counts():
    text = (ROOT / "docs" / "nki_compat.md").read_text()
    assert LATEST_TITLE in text.split(TABLE_TITLE, 1)[1], f"the census section has no subsection {LATEST_TITLE!r}"
    section = text.split(LATEST_TITLE, 1)[1].split("\n## ", 1)[0]
    rows = dict((m, (int(a), int(b), int(c))) for m, a, b, c in
                re.findall(r"^\| `?(nki[\w.]*|all)`? \| (\d+) \| (\d+) \| (\d+) \|$", section, flags=re.M))
    modules = sorted({e["module"] for e in NAMES.values()})
    assert set(rows) == set(modules) | {"all"}, f"the subsection counts {sorted(rows)}, the census has {modules}"
    for module in modules + ["all"]:
        keys = [k for k, e in NAMES.items() if module in ("all", e["module"])]
        present = sum(_resolves(k) for k in keys)
        assert rows[module] == (len(keys), present, len(keys) - present), (
            f"docs/nki_compat.md's latest counts for {module}: {rows[module]}, the census: "
            f"{(len(keys), present, len(keys) - present)}")
