"""A self-correcting loop gated by verifiers: ``python -m examples.self_correcting``.

::

    draft (function) --> check_length (verifier: expression)
        check_length_verification_passed --> check_quality (verifier: llm_judge)
        otherwise                        --> draft
    check_quality
        quality_passed --> publish (function, terminal)
        otherwise      --> draft

``draft`` writes a product note and revises it from the last verification's reasoning.
``check_length`` is a free, deterministic pre-check; ``check_quality`` asks an evaluator
model (the ``critic`` provider) to score the note from 0 to 1 and passes at 0.8. Offline
the critic is a scripted model that gives a low score until the note cites its source.
The loop is bounded by the graph's ``max_steps``. Run it: round 1 is too short, round 2
scores 0.5, round 3 scores 0.92 and is published.
"""

from .loop import CRITERIA, FUNCTIONS, build_graph, run_loop, scripted_critic

__all__ = ["CRITERIA", "FUNCTIONS", "build_graph", "run_loop", "scripted_critic"]
