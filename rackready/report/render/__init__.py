"""Renderers: HTML, PDF, JUnit, plots, the terminal summary; they only read a report."""
