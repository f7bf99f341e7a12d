"""The travel agent's tools: canned, deterministic flight and hotel searches (no network).

Both are async so the node runs them in its own task (a sync tool would take a worker
thread for nothing). The data is fixed so the offline demo, its test and a real model
all see the same world.
"""

from __future__ import annotations

from typing import Any, Final

from runtime import Tool, tool

__all__ = ["FLIGHTS", "HOTELS", "TOOLS", "search_flights", "search_hotels"]

#: Flights by (origin, destination): carrier, number, departure, arrival, fare per person.
FLIGHTS: Final[dict[tuple[str, str], list[dict[str, Any]]]] = {
    ("LIS", "JFK"): [
        {"flight": "TP 209", "depart": "10:35", "arrive": "13:05", "stops": 0, "fare_usd": 612},
        {"flight": "DL 263", "depart": "12:10", "arrive": "14:55", "stops": 0, "fare_usd": 689},
        {"flight": "UA 65", "depart": "16:20", "arrive": "19:10", "stops": 0, "fare_usd": 655},
    ],
}

#: Hotels by city: name, rating out of 5, nightly rate, distance to the venue.
HOTELS: Final[dict[str, list[dict[str, Any]]]] = {
    "New York": [
        {"name": "The Marlton", "rating": 4.6, "nightly_usd": 289, "to_venue_km": 0.8},
        {"name": "Arlo SoHo", "rating": 4.4, "nightly_usd": 239, "to_venue_km": 1.2},
        {"name": "Pod 51", "rating": 4.1, "nightly_usd": 169, "to_venue_km": 2.5},
    ],
}


@tool
async def search_flights(origin: str, destination: str, date: str) -> dict[str, Any]:
    """Direct flights between two airports on a date, cheapest first.

    Args:
        origin: IATA code of the departure airport, e.g. "LIS".
        destination: IATA code of the arrival airport, e.g. "JFK".
        date: Departure date, YYYY-MM-DD.
    """
    options = FLIGHTS.get((origin.upper(), destination.upper()), [])
    ranked = sorted(options, key=lambda f: f["fare_usd"])
    return {"date": date, "origin": origin, "destination": destination, "flights": ranked}


@tool
async def search_hotels(city: str, nights: int) -> dict[str, Any]:
    """Hotels in a city, best rated first, with the total for the stay.

    Args:
        city: City name, e.g. "New York".
        nights: Number of nights.
    """
    options = HOTELS.get(city, [])
    ranked = sorted(options, key=lambda h: -h["rating"])
    return {
        "city": city,
        "nights": nights,
        "hotels": [dict(h, stay_usd=h["nightly_usd"] * nights) for h in ranked],
    }


TOOLS: Final[list[Tool]] = [search_flights, search_hotels]
