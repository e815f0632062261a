"""Per-file test durations, and the order they give the suite under pytest-xdist.

``--dist loadfile`` hands each worker one test file at a time, in the order the files
reach its scheduler; pytest-xdist's own order is by number of tests, so a file of 48
long evaluations (``tests/search/test_families.py``, about 220 s) could start last and
leave the other core idle for minutes at the end. ``tests/conftest.py`` turns that
reordering off and puts the files in the order of :data:`DURATIONS_FILE` instead, longest
first (a longest-processing-time-first schedule), each file's own tests in their order.
A file missing from the table (a new one) counts :data:`UNKNOWN_S`.

Refresh the table after adding slow tests (it only orders the suite; a stale one costs
balance, never a result)::

    python -m pytest -q -n 2 --dist loadfile --junitxml=/tmp/suite.xml
    python tests/durations.py /tmp/suite.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATIONS_FILE = Path(__file__).with_name("durations.json")
UNKNOWN_S = 10.0


def load() -> dict[str, float]:
    """Seconds per test file (paths relative to the repository), {} without a table."""
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS_FILE.read_text()).items()}
    except (OSError, ValueError):
        return {}


def from_junit(path: Path) -> dict[str, float]:
    """Seconds per test file from a JUnit XML report (pytest's ``--junitxml``)."""
    out: dict[str, float] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "")
        if not module:
            continue
        parts = module.split(".")  # a test class adds its name after the module's
        while len(parts) > 1 and not (ROOT / Path(*parts).with_suffix(".py")).is_file():
            parts.pop()
        f = "/".join(parts) + ".py"
        out[f] = out.get(f, 0.0) + float(case.get("time") or 0.0)
    return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/durations.py JUNIT_XML")
    table = from_junit(Path(sys.argv[1]))
    DURATIONS_FILE.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{DURATIONS_FILE}: {len(table)} files, {sum(table.values()):.0f} s in all")
