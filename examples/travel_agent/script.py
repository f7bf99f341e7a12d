"""The offline model: a scripted planner and quality judge that replay the seed's example.

Turn by turn (the verdicts are the implicit judge's, not scripted, except Level 2):

1. the planner searches flights and hotels (tool-call bail-out: RETRY);
2. it sets two outputs, vaguely (bail-out: RETRY);
3. it says it is done: Level 0 finds ``budget_estimate`` missing: RETRY;
4. it sets all three, still vague (bail-out: RETRY);
5. it says it is done: the Level 2 quality call (scripted) answers RETRY;
6. it sets specific flights, rated hotels and an itemized budget (bail-out: RETRY);
7. it says it is done: Level 2 answers ACCEPT.

The specific values are computed from the same canned data the tools return.
"""

from __future__ import annotations

from typing import Any, Final

from runtime.testing import ScriptedProvider, reply, tool_call

from .graph import TRIP_REQUEST
from .tools import FLIGHTS, HOTELS

__all__ = ["QUALITY_FEEDBACK", "scripted_provider", "specific_outputs"]

QUALITY_FEEDBACK: Final = (
    "Outputs lack specificity. Flight options should include carrier and flight numbers. "
    "Hotels need names and ratings. Budget should be itemized by category."
)


def specific_outputs(nights: int) -> dict[str, Any]:
    """The accepted outputs: the canned flights and hotels, and a budget built from them."""
    trip = TRIP_REQUEST
    flights = sorted(FLIGHTS[(trip["origin"], trip["destination"])], key=lambda f: f["fare_usd"])
    hotels = sorted(HOTELS[trip["city"]], key=lambda h: -h["rating"])
    flight_options = [
        f"{f['flight']} {trip['origin']} {f['depart']} -> {trip['destination']} {f['arrive']}, "
        f"nonstop, ${f['fare_usd']} round trip"
        for f in flights
    ]
    hotel_recommendations = [
        f"{h['name']} ({h['rating']}/5), ${h['nightly_usd']}/night, "
        f"{h['to_venue_km']} km from the venue"
        for h in hotels[:2]
    ]
    flight_usd = flights[0]["fare_usd"]
    hotel_usd = hotels[0]["nightly_usd"] * nights
    meals_usd = 60 * (nights + 1)
    transport_usd = 120
    budget = {
        "flights": f"${flight_usd} ({flights[0]['flight']})",
        "hotel": f"${hotel_usd} ({nights} nights at {hotels[0]['name']})",
        "meals": f"${meals_usd}",
        "local_transport": f"${transport_usd}",
        "total": f"${flight_usd + hotel_usd + meals_usd + transport_usd}",
    }
    return {
        "flight_options": flight_options,
        "hotel_recommendations": hotel_recommendations,
        "budget_estimate": budget,
    }


def scripted_provider() -> ScriptedProvider:
    """A fresh provider scripted for one run of the demo graph."""
    trip = TRIP_REQUEST
    nights = 4  # the request's dates, as load_request computes them
    good = specific_outputs(nights)
    return ScriptedProvider(
        [
            reply(
                "I'll look up flights and hotels first.",
                tool_call(
                    "search_flights",
                    origin=trip["origin"],
                    destination=trip["destination"],
                    date=trip["depart"],
                ),
                tool_call("search_hotels", city=trip["city"], nights=nights),
            ),
            reply(
                "",
                tool_call("set_output", key="flight_options", value="3 direct flights found"),
                tool_call("set_output", key="hotel_recommendations", value="3 hotels near venue"),
            ),
            reply("I found flights and hotels for the trip."),
            reply(
                "",
                tool_call("set_output", key="flight_options", value="some flights exist"),
                tool_call("set_output", key="hotel_recommendations", value="hotels available"),
                tool_call("set_output", key="budget_estimate", value="around $1000"),
            ),
            reply("All three outputs are set."),
            reply(
                "",
                *(tool_call("set_output", key=key, value=value) for key, value in good.items()),
            ),
            reply("Updated: flight numbers, rated hotels and an itemized budget."),
        ],
        judge=[
            (f'{{"verdict": "RETRY", "confidence": 0.86, "feedback": "{QUALITY_FEEDBACK}"}}'),
            '{"verdict": "ACCEPT", "confidence": 0.93, "feedback": ""}',
        ],
    )
