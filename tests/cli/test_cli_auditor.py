"""An auditor's questions, answered with the command line alone: who decided each gate,
when and with what input; why a run failed or ended degraded; what a run's model calls
cost, by node; what the model answered at one turn, whole; and text that reads on an
80-column terminal."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.runtime.llm_servers import OpenAIServer, openai_completion

from .conftest import ALLOW, Workdir, lines, ok

RUN = ["run", "graph.yaml", "--provider", "scripted:script.yaml", "-q"]

ESCALATING = """
id: escalating
entry_node: draft
nodes:
  - {id: draft, kind: llm, output_keys: [summary], max_iterations: 2}
  - {id: fallback, function: "triage_funcs:noted", output_keys: [noted]}
edges:
  - {source: draft, target: fallback, condition: on_failure}
"""

TWO_MODELS = """
id: two_models
entry_node: first
nodes:
  - {id: first, kind: llm, output_keys: [a]}
  - {id: second, kind: llm, input_keys: [a], output_keys: [b], success_criteria: [b is short]}
edges:
  - {source: first, target: second}
"""

LONG_ANSWER = "Line one of the essay.\n\n" + "word " * 120 + "\n  THE END"

LONG = """
id: essay
entry_node: write
nodes:
  - {id: write, kind: llm, output_keys: [essay], success_criteria: [essay is short]}
"""


def _json(workdir: Workdir, code: int, *args: str) -> dict[str, Any]:
    """``magistrate ARGS --output json``, which must exit ``code``: its JSON."""
    data: dict[str, Any] = json.loads(ok(workdir.run(*args, "--output", "json"), code).out)
    return data


def _paused(workdir: Workdir, text: str) -> str:
    return str(_json(workdir, 3, *RUN, "--input", f"text={text}")["run_id"])


def _show(workdir: Workdir, run_id: str) -> dict[str, Any]:
    return _json(workdir, 0, "show", run_id)


def test_show_says_who_approved_or_rejected_each_gate_when_and_with_what_input(
    workdir: Workdir,
) -> None:
    approved = _paused(workdir, "refund please")
    ok(workdir.run("approve", approved, "--by", "alice", "--input", "approved_by=ops", *ALLOW))
    rejected = _paused(workdir, "second")
    ok(workdir.run("approve", rejected, "--by", "bob", "--reject", "not a refund case"))

    timeline = json.loads(ok(workdir.run("timeline", approved, "--output", "json")).out)
    [granted] = [e for e in timeline["events"] if e["type"] == "approval.granted"]
    assert _show(workdir, approved)["decisions"] == [
        {
            "seq": granted["seq"],
            "ts": granted["ts"],
            "decision": "approved",
            "node_id": "act",
            "by": "alice",
            "input": {"approved_by": "ops"},
            "reason": "",
        }
    ]
    [decision] = _show(workdir, rejected)["decisions"]
    assert (decision["decision"], decision["by"], decision["reason"]) == (
        "rejected",
        "bob",
        "not a refund case",
    )
    text = ok(workdir.run("show", approved)).out
    [line] = [line for line in lines(text) if line.startswith("approved:")]
    assert re.fullmatch(
        rf"approved:  act by alice, \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(seq "
        rf"{granted['seq']}\), input \{{\"approved_by\":\"ops\"\}}",
        line,
    ), line
    text = ok(workdir.run("show", rejected)).out
    assert any(
        line.startswith("rejected:  act by bob, ") and line.endswith(": not a refund case")
        for line in lines(text)
    ), text


def test_show_and_state_say_which_nodes_failed_for_good_and_why(workdir: Workdir) -> None:
    workdir.write("escalating.yaml", ESCALATING)
    workdir.write("esc_script.yaml", 'turns: ["thinking", "still thinking"]\n')
    script = ("--provider", "scripted:esc_script.yaml", "-q")
    degraded = _json(workdir, 1, "run", "escalating.yaml", *script)
    assert degraded["quality"] == "degraded"
    [failure] = _show(workdir, degraded["run_id"])["node_failures"]
    assert (failure["node_id"], failure["error_type"], failure["attempt"]) == (
        "draft",
        "Escalated",
        1,
    )
    assert "max_iterations (2)" in failure["error"]
    text = ok(workdir.run("show", degraded["run_id"])).out
    assert any(
        line.startswith(f"failed:    draft (seq {failure['seq']}): Escalated: Reached")
        for line in lines(text)
    ), text

    failed = _json(workdir, 1, "run", "failing.yaml", "--input", "text=x", "-q")["run_id"]
    # The attempt retried is not a failure for good: only the last one is listed.
    [failure] = _show(workdir, failed)["node_failures"]
    assert (failure["node_id"], failure["attempt"], failure["error"]) == (
        "boom",
        2,
        "the ledger is on fire",
    )
    state = lines(ok(workdir.run("state", failed)).out)
    assert "failed: boom" in state
    assert "error: node 'boom' failed: RuntimeError: the ledger is on fire" in state


def test_show_counts_the_tokens_of_each_node(workdir: Workdir) -> None:
    workdir.write("two.yaml", TWO_MODELS)
    server = OpenAIServer()
    server.start()
    try:
        for key, value, tokens in (("a", "x", 30), ("b", "y", 50)):
            arguments = json.dumps({"key": key, "value": value})
            server.respond(
                openai_completion(
                    "",
                    tool_calls=[("c1", "set_output", arguments)],
                    prompt_tokens=tokens,
                    completion_tokens=3,
                )
            )
            server.respond(openai_completion("done", prompt_tokens=tokens + 1, completion_tokens=1))
        server.respond(
            openai_completion('{"verdict": "ACCEPT"}', prompt_tokens=7, completion_tokens=2)
        )
        env = {"OPENAI_API_KEY": server.api_key, "OPENAI_BASE_URL": server.base_url}
        run = ("run", "two.yaml", "--provider", "openai")
        run_id = json.loads(ok(workdir.run(*run, "--output", "json", env=env)).out)["run_id"]
    finally:
        server.close()
    shown = _show(workdir, run_id)
    none_cached = {"input_cached": 0, "input_cache_write": 0}
    # Each node's turns, and its judge's call (the second node's quality check).
    assert shown["tokens_by_node"] == {
        "first": {"input": 61, "output": 4, **none_cached},
        "second": {"input": 108, "output": 6, **none_cached},
    }
    assert shown["tokens"] == {"input": 169, "output": 10, **none_cached}
    assert "by node:   first 61 + 4, second 108 + 6" in lines(ok(workdir.run("show", run_id)).out)


def test_timeline_keeps_one_line_per_event_when_a_text_has_line_breaks(workdir: Workdir) -> None:
    workdir.write(
        "feedback.yaml",
        "turns:\n"
        "  - tool_calls: [{name: lookup, arguments: {customer: ann}}]\n"
        "  - tool_calls: [{name: set_output, arguments: {key: category, value: bill}}]\n"
        '  - "done"\n'
        "  - tool_calls: [{name: set_output, arguments: {key: category, value: billing}}]\n"
        '  - "done now"\n'
        "judge:\n"
        """  - '{"verdict": "RETRY", "feedback": "Not one.\\nUse billing\\nor technical"}'\n"""
        """  - '{"verdict": "ACCEPT"}'\n""",
    )
    run = ("run", "graph.yaml", "--input", "text=hi", "--provider", "scripted:feedback.yaml")
    run_id = _json(workdir, 3, *run, "-q")["run_id"]
    ok(workdir.run("cancel", run_id, "--reason", "withdrawn:\nthe customer called"))
    text = ok(workdir.run("timeline", run_id)).out.splitlines()
    rules = [i for i, line in enumerate(text) if set(line) == {"-"}]
    rows = text[rules[0] + 1 : rules[1]]
    assert all(re.match(r"\s*\d+  ", row) for row in rows), "\n".join(rows)
    assert any("Not one. Use billing or technical" in row for row in rows)
    assert any("withdrawn: the customer called" in row for row in rows)


def test_timeline_seq_shows_one_event_whole(workdir: Workdir) -> None:
    workdir.write("essay.yaml", LONG)
    script = {
        "turns": [
            {"tool_calls": [{"name": "set_output", "arguments": {"key": "essay", "value": "e"}}]},
            LONG_ANSWER,
        ],
        "judge": ['{"verdict": "ACCEPT", "confidence": 0.8, "feedback": "fine\\nas is"}'],
    }
    workdir.write("essay_script.json", json.dumps(script))
    run_id = _json(workdir, 0, "run", "essay.yaml", "--provider", "scripted:essay_script.json")[
        "run_id"
    ]
    exported = [json.loads(line) for line in ok(workdir.run("export", run_id)).out.splitlines()]
    [turn] = [e for e in exported if e["type"] == "llm.turn" and e["body"]["iteration"] == 2]
    [verdict] = [e for e in exported if e["body"].get("level") == "quality"]
    # The timeline clips a long answer; --seq shows the event whole, its texts as written.
    assert "THE END" not in ok(workdir.run("timeline", run_id)).out
    text = ok(workdir.run("timeline", run_id, "--seq", str(turn["seq"]))).out
    first = text.splitlines()[0]
    assert first.startswith(f"seq {turn['seq']}  llm.turn  node write  ") and first.endswith(" UTC")
    block = "\n".join("    " + line if line else "" for line in LONG_ANSWER.splitlines())
    assert f"  text: |\n{block}\n" in text
    assert "  iteration: 2\n" in text
    shown = ok(workdir.run("timeline", run_id, "--seq", str(verdict["seq"]))).out
    assert "  feedback: |\n    fine\n    as is\n" in shown
    assert "  confidence: 0.8\n" in shown and '  level: "quality"\n' in shown
    # JSON: the event as export gives it.
    got = workdir.run("timeline", run_id, "--seq", str(turn["seq"]), "--output", "json")
    assert json.loads(ok(got).out) == turn
    past = ok(workdir.run("timeline", run_id, "--seq", "999"), 2)
    assert "--seq 999" in past.err and "last event" in past.err


def test_show_reads_on_an_80_column_terminal_and_says_what_a_gate_waits_for(
    workdir: Workdir,
) -> None:
    paused = _paused(workdir, "refund please")
    text = ok(workdir.run("show", paused)).out
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "paused:    hitl before act, waiting for approved_by" in lines(text)
    graph_hash = _show(workdir, paused)["graph_hash"]
    assert f"hash:      {graph_hash}" in lines(text)


def test_show_of_a_fork_says_its_counts_are_its_own(workdir: Workdir) -> None:
    source = _paused(workdir, "refund please")
    forked = ("fork", source, "--at", "28", "-q", *ALLOW, "--provider", "scripted:script.yaml")
    fork = _json(workdir, 3, *forked)["run_id"]
    shown = lines(ok(workdir.run("show", fork)).out)
    at = shown.index(f"forked:    from run {source} at seq 28")
    said = "events 1..28 are copies; turns, verdicts and tokens are its own"
    assert shown[at + 1] == f"           {said}"
