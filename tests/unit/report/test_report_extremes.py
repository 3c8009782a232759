"""Numbers at the edge: the report schema states the range of every
number it holds; the loader clamps what is outside (rackready.report.loader._bounded).
The run whose node reports them through the real controller:
test_report_extremes_controller.py; its PDF, and the real 2x H200 result with every GEMM
rate at 1.7e308 judged by the real judge: tests/browser/test_report_extremes_pdf.py."""

from __future__ import annotations

from rackready.report.schema import NUMBER_BOUND, load_schema


def test_the_schema_states_the_range_of_every_number() -> None:
    def walk(s: object) -> list[dict]:
        if isinstance(s, dict):
            kinds = s.get("type") if isinstance(s.get("type"), list) else [s.get("type")]
            own = [s] if {"number", "integer"} & set(kinds) else []
            return own + [x for v in s.values() for x in walk(v)]
        return [x for v in s for x in walk(v)] if isinstance(s, list) else []

    numbers = walk(load_schema())
    assert numbers and all(s.get("maximum") == NUMBER_BOUND and "minimum" in s
                           for s in numbers), [s for s in numbers if "maximum" not in s][:2]
