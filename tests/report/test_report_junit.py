"""JUnit XML: verdict -> failure/error/skipped, metrics in system-out, machine in suite properties."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

from report_results import make_result

from perfgate.records.model import MachineInfo, Verdict
from perfgate.report.junit import render_junit


def _cases(xml: str) -> dict[str, ET.Element]:
    return {c.get("name"): c for c in ET.fromstring(xml.encode("utf-8")).iter("testcase")}


def test_error_and_no_data_map_to_error_and_skipped() -> None:
    cases = _cases(render_junit([make_result("boom", Verdict.ERROR, error="nsys crashed"),
                                 make_result("empty", Verdict.NO_DATA),
                                 make_result("ok", Verdict.PASS)]))
    error = cases["boom"].find("error")
    assert error is not None and "nsys crashed" in error.text and error.get("type") == "perfgate.error"
    assert cases["empty"].find("skipped") is not None and cases["empty"].find("failure") is None
    assert list(cases["ok"]) and all(child.tag == "system-out" for child in cases["ok"])


def test_metrics_are_key_value_lines_in_system_out() -> None:
    cases = _cases(render_junit([make_result("slow", Verdict.REGRESSED, forward_ms=8.0)]))
    lines = cases["slow"].find("system-out").text.splitlines()
    assert "verdict=REGRESSED" in lines
    assert "phase.forward.cpu_ms.baseline=4.0" in lines and "phase.forward.cpu_ms.current=8.0" in lines
    assert "phase.forward.cpu_ms.change=+100.0 %" in lines
    assert "artifacts=/runs/slow" in lines


def test_xml_special_characters_in_names_and_messages_survive() -> None:
    r = make_result("a<b>&c", Verdict.REGRESSED, forward_ms=8.0, message='forward "slower" <by> 4 ms & more')
    r = replace(r, machine=MachineInfo(machine_class="nvidia-h100-x1", gpu_model="H100", gpu_count=1, driver=None,
                                       cuda=None, torch=None, nsys=None))
    root = ET.fromstring(render_junit([r]).encode("utf-8"))
    case = next(root.iter("testcase"))
    assert case.get("name") == "a<b>&c"
    assert 'forward "slower" <by> 4 ms & more' in case.find("failure").text
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props == {"perfgate.machine.machine_class": "nvidia-h100-x1", "perfgate.machine.gpu_model": "H100",
                     "perfgate.machine.gpu_count": "1"}
