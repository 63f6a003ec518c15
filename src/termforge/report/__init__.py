"""The run report (HTML with embedded plots, plus CSV tables) built from a results directory."""

from termforge.report.build import build_report

__all__ = ["build_report"]
