"""Tools a graph names by import path (tests/runtime/test_tool_imports.py)."""

from __future__ import annotations

from runtime import tool


def lookup(customer: str) -> dict[str, str]:
    """Look a customer up.

    Args:
        customer: the customer's name
    """
    return {"customer": customer, "tier": "gold"}


@tool
def refund(amount: int) -> str:
    """Refund an amount.

    Args:
        amount: how much
    """
    return f"refunded {amount}"
