"""Run control: launching runs, the runs live in a process, claims and leases, approvals
and gates, control of runs live elsewhere, watching runs, and the threads of plain nodes.

Internal: embedders use :class:`runtime.Runtime`, which holds these collaborators.
"""

__all__: list[str] = []
