"""The judge seed's travel agent, end to end: ``make run`` or ``python -m examples.travel_agent``.

The graph (``graph.py``) loads a trip request, lets an LLM node plan it with two canned
tools (``search_flights``, ``search_hotels`` in ``tools.py``), and formats the accepted
plan. The planner must set ``flight_options``, ``hotel_recommendations`` and
``budget_estimate`` and meet the success criterion "Provide specific flight numbers,
hotel names with ratings, and itemized budget."

Offline (the default, and what ``make run`` does) the model is scripted (``script.py``):
its run shows a Level 0 RETRY (``budget_estimate`` missing), then a Level 2 RETRY (vague
outputs), then ACCEPT, in a second or two. The run is written to a SQLite file in a
temporary directory (``--db PATH`` keeps it), and the timeline printed afterwards (turns,
tool calls, verdicts with level and feedback, memory writes, final status and quality,
hash-chain verification) is read back from that file after the runtime closed.

With ``--real`` the planner and its quality judge are a real model: ``OPENAI_API_KEY``
selects :class:`OpenAIProvider` (``OPENAI_MODEL``, else the provider's default model),
else ``ANTHROPIC_API_KEY`` selects :class:`AnthropicProvider` (``ANTHROPIC_MODEL``). A real
model decides its own turns, so the verdicts then vary from run to run. Keys are only
used with ``--real``: an offline run stays offline and deterministic.

Exit status: 0 when the run completed and its log verified, 1 otherwise, 2 for
``--real`` without a key.
"""

from .demo import DemoResult, run_demo
from .graph import build_graph
from .script import scripted_provider

__all__ = ["DemoResult", "build_graph", "run_demo", "scripted_provider"]
