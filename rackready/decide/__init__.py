"""The controller decides: node, fleet and rack judgements, integrity findings,
calibration; decide.outcome is the one writer of outcomes, reasons and failing-part
wording."""
