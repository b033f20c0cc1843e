"""The NKI 0.7 census: every public name of AWS's API reference index pages (tests/data/nki07_api.json)
either resolves in trnlab's namespace or is listed in docs/nki_compat.md's table "NKI 0.7 names and their
status" as not supported, with the reason. The table and the data file cannot drift apart."""
import importlib
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CENSUS = json.loads((ROOT / "tests" / "data" / "nki07_api.json").read_text())
NAMES = CENSUS["names"]
# the names of AWS's latest pages the 0.7 census lacks share the status table (tests/test_nki_latest_census.py)
LATEST_NAMES = json.loads((ROOT / "tests" / "data" / "nki_latest_api.json").read_text())["names"]
LATEST_TITLE = "### Names on AWS's latest pages"
TRNLAB = {"nki": "trnlab.nki", "nki.isa": "trnlab.nki.isa", "nki.language": "trnlab.nki.language",
          "nki.compiler": "trnlab.nki.compiler", "nki.collectives": "trnlab.nki.collectives",
          "nki.typing": "trnlab.nki.typing"}
TABLE_TITLE = "## NKI 0.7 names and their status"
NOT_SUPPORTED = "not supported"
REFUSED = "present, refused by name"
STATUS_HEADER = "| name | status | reason |"
ROW = re.compile(r"^\| `(nki(?:\.[A-Za-z_][\w]*)*)` \| ([^|]+?) \| (.*?) \|$")


def _status_table() -> dict:
    """name -> (status, reason), read from the table section of docs/nki_compat.md."""
    text = (ROOT / "docs" / "nki_compat.md").read_text()
    assert TABLE_TITLE in text, f"docs/nki_compat.md has no section {TABLE_TITLE!r}"
    section = text.split(TABLE_TITLE, 1)[1].split("\n## ", 1)[0]
    assert STATUS_HEADER in section, f"the section has no table headed {STATUS_HEADER!r}"
    table = section.split(STATUS_HEADER, 1)[1].strip().split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[1:]:          # (after the |---| line)
        assert ROW.match(line.strip()), f"not a row of the status table: {line!r}"
        match = ROW.match(line.strip())
        if match:
            name, status, reason = match.groups()
            assert name not in rows, f"{name} is listed twice in the status table"
            rows[name] = (status.strip(), reason.strip())
    return rows


def _resolves(key: str) -> bool:
    entry = NAMES[key]
    module = importlib.import_module(TRNLAB[entry["module"]])
    return hasattr(module, entry["name"])


TABLE = _status_table()


def test_the_census_has_every_module_and_each_name_has_its_page():
    assert {e["module"] for e in NAMES.values()} == {"nki", "nki.isa", "nki.language", "nki.compiler",
                                                     "nki.collectives"}
    for key, entry in NAMES.items():
        assert key == f"{entry['module']}.{entry['name']}"
        assert entry["page"].startswith("https://awsdocs-neuron.readthedocs-hosted.com/")


def check_resolves_or_is_listed(key: str, resolves: bool) -> None:
    """A census name resolves in trnlab (then the table lists it at most as refused by name), or the table
    lists it as not supported with the reason."""
    listed = TABLE.get(key)
    if resolves:
        assert listed is None or listed[0] == REFUSED, (
            f"{key} resolves in trnlab but docs/nki_compat.md lists it as {listed[0]!r}: update the table")
    else:
        assert listed is not None, (f"{key} is not in trnlab and not in docs/nki_compat.md's table "
                                    f"{TABLE_TITLE!r}: add it with the reason")
        assert listed[0] == NOT_SUPPORTED and listed[1], f"{key}: status must be {NOT_SUPPORTED!r} with a reason"


@pytest.mark.parametrize("key", sorted(NAMES))
def test_each_nki_07_name_resolves_in_trnlab_or_is_listed_as_not_supported(key):
    check_resolves_or_is_listed(key, _resolves(key))


def test_the_status_table_lists_only_names_of_the_census():
    stray = sorted(set(TABLE) - set(NAMES) - set(LATEST_NAMES))
    assert not stray, f"docs/nki_compat.md lists names neither census has: {stray}"
    assert all(status in (NOT_SUPPORTED, REFUSED) and reason for status, reason in TABLE.values())


def test_names_refused_by_name_are_present():
    for key, (status, _) in TABLE.items():
        if status == REFUSED:
            assert _resolves(key), f"{key} is listed as {REFUSED!r} but does not resolve in trnlab"


def test_the_counts_in_the_docs_are_the_census_counts():
    # (up to the subsection of the latest pages' names, which has counts of its own: test_nki_latest_census.py)
    text = (ROOT / "docs" / "nki_compat.md").read_text().split(TABLE_TITLE, 1)[1].split(LATEST_TITLE, 1)[0]
    rows = dict((m, (int(a), int(b), int(c))) for m, a, b, c in
                re.findall(r"^\| `?(nki[\w.]*|all)`? \| (\d+) \| (\d+) \| (\d+) \|$", text, flags=re.M))
    modules = sorted({e["module"] for e in NAMES.values()})
    for module in modules + ["all"]:
        keys = [k for k, e in NAMES.items() if module in ("all", e["module"])]
        present = sum(_resolves(k) for k in keys)
        assert rows.get(module) == (len(keys), present, len(keys) - present), (
            f"docs/nki_compat.md's census counts for {module}: {rows.get(module)}, the census: "
            f"{(len(keys), present, len(keys) - present)}")


SEMANTICS = sorted(k for k, e in NAMES.items() if "semantics_test" in e)


@pytest.mark.parametrize("key", SEMANTICS)
def test_a_name_counted_as_present_through_its_semantics_test_has_that_test(key):
    """The names NKI 0.7 added that trnlab first lacked count as present only with a test of what they
    do (not just that they resolve): the census names the test, which must exist."""
    path, function = NAMES[key]["semantics_test"].split("::")
    source = (ROOT / path).read_text()
    assert re.search(rf"^def {re.escape(function)}\(", source, flags=re.M), f"{key}: {path} has no test {function}"
    assert _resolves(key), f"{key} has a semantics test but does not resolve in trnlab"
    assert key not in TABLE, f"{key} is tested as supported but docs/nki_compat.md lists it as {TABLE[key][0]!r}"


def test_every_name_the_census_once_listed_as_missing_has_its_semantics_test():
    assert SEMANTICS == ["nki.collectives.collective_permute_implicit_current_processing_rank_id",
                         "nki.compiler.AddressRotation", "nki.compiler.CompileConfig",
                         "nki.compiler.SpecializationConfig", "nki.isa.NkiInstruction"]
