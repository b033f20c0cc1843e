"""The nki-samples driver's bookkeeping (benchmarks/aws_samples.py): its expected figures are the
docs table's, and a simulated figure is compared at the precision the table writes. Nothing here
needs a checkout of AWS's samples or runs a kernel."""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


driver = _load("aws_samples")


def _docs_section() -> str:
    text = (ROOT / "docs" / "nki_compat.md").read_text()
    start = text.index("## AWS's kernels (aws-neuron/nki-samples)")
    return text[start:text.index("\n## ", start + 1)]


def test_every_expected_figure_is_written_in_the_docs_table():
    section = _docs_section()
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    for case in driver.CASES:
        number = case.docs.split()[0]
        assert any(number in row for row in rows), f"{case.name}: {case.docs} is not in docs/nki_compat.md's table"


def test_every_expected_program_order_figure_is_written_in_the_docs_prose():
    start = _docs_section().index("In program order the rows that differ took")
    prose = " ".join(_docs_section()[start:].split())
    prose = prose[:prose.index("Full mode in the list schedule")]
    for name, figure in driver.PROGRAM_ORDER.items():
        assert name in {case.name for case in driver.CASES}, name
        assert figure.split()[0] in prose, f"{name}: {figure} is not in the program-order figures"


def test_a_figure_within_the_last_digit_of_the_docs_is_equal_and_one_beyond_is_a_change():
    assert driver.compare(6254.7, "6.25 ms") == ("6.25 ms", "=")
    assert driver.compare(6441.53, "6,441 µs") == ("6,442 µs", "=")      # the table truncates some figures
    assert driver.compare(6262.0, "6.25 ms")[1] == "+0.2%"
    assert driver.compare(21.2, "20.0 µs")[1] == "+6.0%"


def test_the_docs_figure_is_read_in_microseconds_with_its_unit_and_decimals():
    assert driver.docs_figure("52.36 ms") == (52360.0, "ms", 2)
    assert driver.docs_figure("6,441 µs") == (6441.0, "µs", 0)
