"""The travel agent graph: load the request, plan with an LLM node, format the itinerary.

::

    load_request (function) --on_success--> planner (llm) --on_success--> format_itinerary

``planner`` is the judge seed's worked example: it must set ``flight_options``,
``hotel_recommendations`` and ``budget_estimate``, and its success criteria ask for
"specific flight numbers, hotel names with ratings, and itemized budget", so the implicit
judge runs Level 0 (structural) and Level 2 (quality) after every text turn.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Final

from runtime import EdgeSpec, Goal, GraphSpec, NodeSpec

__all__ = [
    "CRITERIA",
    "FUNCTIONS",
    "OUTPUT_KEYS",
    "TRIP_REQUEST",
    "build_graph",
    "format_itinerary",
    "load_request",
]

CRITERIA: Final = "Provide specific flight numbers, hotel names with ratings, and itemized budget."
OUTPUT_KEYS: Final = ["flight_options", "hotel_recommendations", "budget_estimate"]

#: The demo's input: one traveller going from Lisbon to a conference in New York.
TRIP_REQUEST: Final[dict[str, Any]] = {
    "traveller": "Ana",
    "origin": "LIS",
    "destination": "JFK",
    "city": "New York",
    "depart": "2025-05-12",
    "return": "2025-05-16",
    "purpose": "speaking at a conference in Manhattan",
    "budget_usd": 2500,
}


def load_request(inputs: dict[str, Any]) -> dict[str, Any]:
    """Validate the raw request and derive what the planner needs (nights, dates)."""
    request = dict(inputs["request"])
    missing = [k for k in ("origin", "destination", "city", "depart", "return") if k not in request]
    if missing:
        raise ValueError(f"trip request lacks {', '.join(missing)}")
    depart = dt.date.fromisoformat(request["depart"])
    back = dt.date.fromisoformat(request["return"])
    if back <= depart:
        raise ValueError(f"return {back} is not after departure {depart}")
    return {"trip": dict(request, nights=(back - depart).days)}


def _lines(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, dict):
        return [f"{k}: {v}" for k, v in value.items()]
    return [str(value)]


def format_itinerary(inputs: dict[str, Any]) -> dict[str, Any]:
    """Turn the planner's accepted outputs into one printable itinerary."""
    trip = inputs["trip"]
    parts = [
        f"Trip for {trip.get('traveller', 'traveller')}: {trip['origin']} -> "
        f"{trip['destination']}, {trip['depart']} to {trip['return']} ({trip['nights']} nights)",
        "Flights:",
        *(f"  - {line}" for line in _lines(inputs["flight_options"])),
        "Hotels:",
        *(f"  - {line}" for line in _lines(inputs["hotel_recommendations"])),
        "Budget:",
        *(f"  - {line}" for line in _lines(inputs["budget_estimate"])),
    ]
    return {"itinerary": "\n".join(parts)}


#: The callables the graph's function nodes name, for ``Runtime(functions=...)``.
FUNCTIONS: Final = {"load_request": load_request, "format_itinerary": format_itinerary}


def build_graph(*, max_iterations: int = 12) -> GraphSpec:
    """The travel agent graph (validated by ``Runtime.start``)."""
    return GraphSpec(
        id="travel_agent",
        goal=Goal(
            description="Plan a business trip the traveller can book as is.",
            success_criteria=[CRITERIA],
            constraints=["Stay within the traveller's budget."],
        ),
        identity="You are a meticulous travel agent.",
        narrative="A traveller asked for a trip plan; an earlier step parsed the request.",
        nodes=[
            NodeSpec(
                id="load_request",
                kind="function",
                function="load_request",
                description="Parse and check the trip request.",
                input_keys=["request"],
                output_keys=["trip"],
            ),
            NodeSpec(
                id="planner",
                kind="llm",
                description=(
                    "Find flight options, recommend hotels and estimate the budget for the trip."
                ),
                system_prompt=(
                    "Use search_flights and search_hotels, then call set_output once for each "
                    "of flight_options, hotel_recommendations and budget_estimate."
                ),
                input_keys=["trip"],
                output_keys=list(OUTPUT_KEYS),
                success_criteria=[CRITERIA],
                tools=["search_flights", "search_hotels"],
                max_iterations=max_iterations,
            ),
            NodeSpec(
                id="format_itinerary",
                kind="function",
                function="format_itinerary",
                description="Format the accepted plan as an itinerary.",
                input_keys=["trip", *OUTPUT_KEYS],
                output_keys=["itinerary"],
            ),
        ],
        edges=[
            EdgeSpec(source="load_request", target="planner"),
            EdgeSpec(source="planner", target="format_itinerary"),
        ],
        entry_node="load_request",
        terminal_nodes=["format_itinerary"],
        max_steps=10,
    )
