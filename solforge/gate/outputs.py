"""What the CI gate writes: JUnit XML (one test case per kernel, for the CI's test view)
and a markdown summary (for a pull request or ``$GITHUB_STEP_SUMMARY``).

Not covered: other report formats (the records themselves are in the JUnit cases'
``system-out`` as JSON lines only for failures, to keep the file small).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from solforge.gate.check import GateReport, Outcome


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def junit_xml(report: GateReport) -> str:
    failures = sum(1 for o in report.outcomes if not o.passed)
    suite = ET.Element("testsuite", name="solforge-ci", tests=str(len(report.outcomes)),
                       failures=str(failures), errors="0", skipped=str(len(report.missing)),
                       time=f"{sum(o.seconds for o in report.outcomes):.3f}")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="device", value=report.device)
    ET.SubElement(props, "property", name="rounds", value=str(report.rounds))
    for o in report.outcomes:
        case = ET.SubElement(suite, "testcase", classname="solforge.ci", name=o.name,
                             time=f"{o.seconds:.3f}")
        if not o.passed:
            kind = "correctness" if not o.record.passed else "slowdown"
            f = ET.SubElement(case, "failure", type=kind, message=o.reason[:500])
            f.text = json.dumps(o.record.to_json())[:20000]
        else:
            ET.SubElement(case, "system-out").text = o.reason
    for name, why in report.missing.items():
        case = ET.SubElement(suite, "testcase", classname="solforge.ci", name=name)
        ET.SubElement(case, "skipped", message=why)
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, "unicode") + "\n"


def _row(o: Outcome) -> str:
    now = o.figures.ratio if o.figures else None
    base = o.base.ratio if o.base else None
    return (f"| {'pass' if o.passed else '**FAIL**'} | `{o.name}` | {o.record.status.value} | "
            f"{'-' if now is None else f'{now:.3f}'} | {'-' if base is None else f'{base:.3f}'}"
            f" | {_pct(o.slowdown)} | {'-' if o.noise is None else f'{o.noise:.1%}'} | "
            f"{o.reason.replace('|', '/')} |")


def markdown(report: GateReport) -> str:
    failed = [o for o in report.outcomes if not o.passed]
    head = (f"## solforge ci: {'passed' if report.passed else 'FAILED'} "
            f"({len(report.outcomes) - len(failed)}/{len(report.outcomes)} kernels)\n\n"
            f"Device `{report.device}`, {report.rounds} interleaved rounds per kernel, fresh "
            "seeds, all workloads. *ratio*: kernel time / the faster of eager and "
            "torch.compile in the same round (median over rounds; lower is faster); a "
            "kernel fails when it is wrong or its ratio grew by more than the noise (the "
            "spread now plus the baseline's: the interleaved rounds' range, or the calls' "
            "spread where larger).\n\n"
            "| gate | kernel | verdict | ratio now | ratio baseline | change | noise | "
            "why |\n|---|---|---|---|---|---|---|---|\n")
    lines = [_row(o) for o in sorted(report.outcomes, key=lambda o: (o.passed, o.name))]
    tail = "".join(f"\nnot gated: `{n}`: {why}" for n, why in report.missing.items())
    return head + "\n".join(lines) + "\n" + tail + ("\n" if tail else "")


def write_outputs(report: GateReport, junit: Path | None, summary: Path | None) -> None:
    for path, text in ((junit, junit_xml(report) if junit else ""),
                       (summary, markdown(report) if summary else "")):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
