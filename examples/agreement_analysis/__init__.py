"""Agreement analysis: a judged extraction, a human approval pause, a report.

``python -m examples.agreement_analysis`` runs it offline::

    extract (llm) --> review (function, pause node) --> report (function, terminal)

``extract`` must set ``parties``, ``term_months`` and ``obligations``. The scripted model
first forgets ``obligations``: the judge's Level 0 check answers RETRY with feedback
naming the missing key, and the model completes the extraction (judge RETRY, inside the
step). The run then pauses before ``review`` (a ``pause_nodes`` gate): a person reads the
extraction and approves it with ``Runtime.approve`` (the ``approve`` command of the CLI,
or the dashboard), which records who approved, and the run goes on. The goal's scorecard
is measured at the end.
"""

from .graph import AGREEMENT, FUNCTIONS, build_graph, run_until_review, scripted_model

__all__ = ["AGREEMENT", "FUNCTIONS", "build_graph", "run_until_review", "scripted_model"]
