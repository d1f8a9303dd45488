"""How a result's note states its target and where the run stands against it."""

from __future__ import annotations


def ratio_note(value: float, base: float, what: str, target: str) -> str:
    return f"{value / base:.2f}x {what} (target {target})" if base else f"target {target}"
