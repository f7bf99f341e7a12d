"""``magistrate run --provider openai`` against a loopback server speaking the OpenAI API."""

from __future__ import annotations

import json

from tests.runtime.llm_servers import OpenAIServer, openai_completion

from .conftest import Workdir, ok


def test_run_on_an_openai_compatible_server(workdir: Workdir) -> None:
    server = OpenAIServer()
    server.start()
    try:
        server.respond(
            openai_completion(
                "",
                tool_calls=[("c1", "set_output", '{"key": "category", "value": "billing"}')],
                prompt_tokens=30,
                completion_tokens=7,
            )
        )
        server.respond(openai_completion("done", prompt_tokens=40, completion_tokens=2))
        server.respond(openai_completion('{"verdict": "ACCEPT", "confidence": 0.9}'))
        env = {"OPENAI_API_KEY": server.api_key, "OPENAI_BASE_URL": server.base_url}
        done = ok(
            workdir.run(
                "run",
                "graph.yaml",
                "--input",
                "text=hi",
                "--provider",
                "openai",
                "--output",
                "json",
                env=env,
            ),
            3,
        )
    finally:
        server.close()
    result = json.loads(done.out)
    assert result["memory"]["category"] == "billing"
    assert len(server.requests) == 3  # two turns and one quality judgement
    assert server.requests[0].body["messages"][-1]["role"] == "user"
    shown = json.loads(ok(workdir.run("show", result["run_id"], "--output", "json")).out)
    # Every call the run paid for: the two turns and the quality judgement (10 + 5).
    none_cached = {"input_cached": 0, "input_cache_write": 0}
    assert shown["tokens"] == {"input": 80, "output": 14, **none_cached}
    assert shown["tokens_by_purpose"] == {
        "turn": {"input": 70, "output": 9, **none_cached},
        "judge": {"input": 10, "output": 5, **none_cached},
    }
    assert shown["verdicts"] == {"accept": 1}
    # Without --provider, the API key in the environment picks OpenAI.
    unset = ok(workdir.run("run", "graph.yaml", "--input", "text=hi", env={}), 2)
    assert "give --provider" in unset.err
