"""The reference tables of the docs are the code's: each table a user reads a name, a field,
a default, a route or an error code from is compared with what the code defines, so drift
fails here instead of misleading a reader.

Checked elsewhere: docs/metrics.md's metric names, types and labels
(tests/runtime/test_metrics_doc.py), docs/GRAPH_FORMAT.md's field tables
(tests/examples/test_first_hour_reference.py), the code blocks and each CLI option's
mention (tests/test_docs.py).
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [
    path
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    if path.name != "benchmarks.md"
]
FENCE = re.compile(r"^```[^\n]*\n.*?^```\s*$", re.MULTILINE | re.DOTALL)


def _doc(name: str) -> str:
    return (ROOT / "docs" / name).read_text(encoding="utf-8")


def _prose(text: str) -> str:
    """``text`` without its fenced blocks (which tests/test_docs.py runs)."""
    return FENCE.sub("", text)


def _spans(text: str) -> list[str]:
    """The inline code spans of ``text``'s prose."""
    return re.findall(r"`([^`\n]+)`", _prose(text))


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def _table_after(text: str, header: str) -> list[list[str]]:
    """The rows (cells) of the table whose header line starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(_cells(line))
    assert rows, f"no rows under {header!r}"
    return rows


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


# -- docs/events.md ------------------------------------------------------------------------


def test_the_event_table_lists_every_event_with_its_version_and_fields_in_order() -> None:
    import runtime.events  # noqa: F401  registers the runtime's catalogue
    from eventstore import EVENT_TYPES

    documented = {}
    for cells in _table_after(_doc("events.md"), "| tag | version | fields |"):
        tag, version, fields = cells[0].strip("`"), int(cells[1]), cells[2]
        documented[tag] = (version, re.findall(r"`([a-z_]+)`", fields))
    ours = {
        tag: body
        for tag, body in EVENT_TYPES.items()
        if body.__module__.split(".")[0] in ("runtime", "eventstore")
    }
    assert set(documented) == set(ours), sorted(set(documented) ^ set(ours))
    for tag, body in ours.items():
        assert documented[tag] == (body.schema_version, list(body.__struct_fields__)), tag


# -- docs/embedding.md ----------------------------------------------------------------------


def _default(field: msgspec.structs.FieldInfo) -> Any:
    if field.default_factory is not msgspec.NODEFAULT:
        return field.default_factory()
    return field.default


def test_the_configuration_table_lists_every_field_with_its_default() -> None:
    import runtime

    documented: dict[str, dict[str, str]] = {}
    struct = ""
    for cells in _table_after(_doc("embedding.md"), "| struct | field | default |"):
        if cells[0]:
            struct = re.match(r"`(\w+)`", cells[0]).group(1)  # type: ignore[union-attr]
        documented.setdefault(struct, {})[cells[1].strip("`")] = cells[2]
    assert set(documented) == {"TimeoutConfig", "OwnershipConfig", "RecoveryConfig"}
    for name, rows in documented.items():
        fields = msgspec.structs.fields(getattr(runtime, name))
        assert list(rows) == [f.name for f in fields], name
        for field in fields:
            default = _default(field)
            shown = rows[field.name]
            expected = "None" if default is None else repr(default)
            assert shown == expected, f"{name}.{field.name}: doc {shown}, code {expected}"


def test_the_configuration_table_names_each_struct_s_runtime_keyword() -> None:
    from runtime import Runtime

    parameters = inspect.signature(Runtime.__init__).parameters
    for cells in _table_after(_doc("embedding.md"), "| struct | field | default |"):
        for keyword in re.findall(r"`(\w+)=`", cells[0]):
            assert keyword in parameters, keyword


def test_every_runtime_keyword_is_in_the_configuration_section_and_no_other() -> None:
    from runtime import Runtime

    section = _section(_doc("embedding.md"), "## Configuration")
    keywords = {
        name
        for name, parameter in inspect.signature(Runtime.__init__).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }
    lead = section.split("```")[0]  # the paragraph that names the keywords
    named = set(re.findall(r"`(\w+)=`", lead)) | set(re.findall(r"\(`(\w+)=`", section))
    assert keywords == named, sorted(keywords ^ named)


def _resolve(dotted: str) -> Any:
    """The object ``dotted`` names (``runtime.spec.BranchStrategy``), or None."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            if not hasattr(found, part):
                return None
            found = getattr(found, part)
        return found
    return None


def _keywords_missing(target: Any, arguments: str) -> list[str]:
    """The ``name=`` of ``arguments`` that ``target``'s signature does not take."""
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return []
    return [kw for kw in re.findall(r"(\w+)=", arguments) if kw not in parameters]


def test_every_dotted_library_name_the_docs_use_exists_with_those_keywords() -> None:
    """``runtime.spec.read_data(text, format, *, source=...)``, ``eventstore.open_store(url,
    heads_file=...)``: the name resolves, and the keywords shown are parameters."""
    problems = []
    dotted = re.compile(r"\b((?:runtime|eventstore|actors)(?:\.\w+)+)(?:\(([^()]*)\))?")
    for path in DOCS:
        for span in _spans(path.read_text(encoding="utf-8")):
            if span.startswith(("python ", "magistrate ")):
                continue  # a command line (python -m runtime.cli), not a name
            for match in dotted.finditer(span):
                target = _resolve(match.group(1))
                if target is None:
                    problems.append(f"{path.name}: {span}: no such name")
                elif match.group(2):
                    for keyword in _keywords_missing(target, match.group(2)):
                        problems.append(f"{path.name}: {span}: no parameter {keyword}")
    assert not problems, problems


def _instance_api() -> dict[str, Any]:
    from runtime import NodeContext, RunHandle, Runtime
    from runtime.reads import RunReader

    runtime = Runtime(None)  # not entered: its attributes are what a user reaches
    return {
        "rt": runtime,
        "Runtime": Runtime,
        "handle": RunHandle,
        "ctx": NodeContext,
        "RunReader": RunReader,
    }


def test_every_runtime_handle_and_context_member_the_docs_use_exists() -> None:
    """``rt.watch_runs(after=...)``, ``Runtime.approve(run_id, by=..., input=...)``,
    ``handle.events(from_seq=1)``, ``ctx.pause_requested``: each member exists and takes
    the keywords shown."""
    api = _instance_api()
    problems = []
    call = re.compile(r"(?<![\w.])(rt|Runtime|handle|ctx|RunReader)\.(\w+)(?:\(([^()]*)\))?")
    seen = 0
    for path in DOCS:
        for span in _spans(path.read_text(encoding="utf-8")):
            for match in call.finditer(span):
                owner, member, arguments = match.groups()
                seen += 1
                if not hasattr(api[owner], member):
                    problems.append(f"{path.name}: {span}: no {owner}.{member}")
                elif arguments:
                    target = getattr(api[owner], member)
                    for keyword in _keywords_missing(target, arguments):
                        problems.append(f"{path.name}: {span}: no parameter {keyword}")
    assert seen >= 30
    assert not problems, problems


# -- docs/cli.md ----------------------------------------------------------------------------


def _cli_options() -> dict[str, set[str]]:
    from runtime.cli._app import build_parser
    from runtime.cli._commands import COMMANDS

    options = {}
    for name in COMMANDS:
        [commands] = [a for a in build_parser(name)._actions if a.choices and a.dest == "command"]
        parser = commands.choices[name]  # type: ignore[index]
        options[name] = {o for action in parser._actions for o in action.option_strings}
    return options


_OPTION = re.compile(r"(?<![\w-])(--?[a-z][\w-]*)")


def test_the_command_table_has_one_row_per_command_and_only_their_options() -> None:
    options = _cli_options()
    rows = _table_after(_doc("cli.md"), "| command | what it does |")
    named = set()
    problems = []
    for cells in rows:
        usage = cells[0].strip("`")
        command, _, rest = usage.partition(" ")
        named.add(command)
        if command not in options:
            problems.append(f"no command {command}")
            continue
        for option in _OPTION.findall(rest):
            if option not in options[command]:
                problems.append(f"magistrate {command} has no {option}")
    assert named == set(options), sorted(named ^ set(options))
    assert not problems, problems


def test_every_magistrate_command_line_in_the_docs_uses_options_its_command_takes() -> None:
    """``magistrate runs -q --limit 1`` in a code span or a shell or text block of any page:
    ``runs`` takes ``-q`` and ``--limit``."""
    options = _cli_options()
    problems = []
    checked = 0
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        lines = _spans(text)
        for match in re.finditer(r"^```(sh|text)[^\n]*\n(.*?)^```", text, re.M | re.S):
            lines += match.group(2).replace("\\\n", " ").splitlines()
        for line in lines:
            line = re.sub(r"\$\([^)]*\)", "RUN", line)  # a nested command's own options
            for match in re.finditer(r"\bmagistrate (?:--debug )?([a-z]+)([^|;&#]*)", line):
                command, rest = match.groups()
                if command not in options:
                    continue  # prose: "magistrate worker processes", "magistrate command"
                checked += 1
                for option in _OPTION.findall(rest):
                    if option not in options[command] and option != "--debug":
                        problems.append(f"{path.name}: {line.strip()}: {command} has no {option}")
    assert checked >= 50
    assert not problems, problems


# -- docs/server.md -------------------------------------------------------------------------


def _app_routes() -> set[tuple[str, str]]:
    from starlette.routing import Route

    from runtime import Runtime
    from runtime.server import create_app

    app = create_app(Runtime(None), token="t")
    found = set()
    for route in app.routes:
        if isinstance(route, Route) and route.path.startswith("/api/"):
            for method in route.methods or ():
                if method != "HEAD":
                    found.add((method, route.path.replace("{run_id}", "{run}")))
    return found


def _openapi_routes() -> set[tuple[str, str]]:
    from runtime.server._openapi import openapi_document

    return {
        (method.upper(), path.replace("{run_id}", "{run}"))
        for path, operations in openapi_document([])["paths"].items()
        for method in operations
    }


def _documented_endpoints() -> set[tuple[str, str]]:
    """``GET /api/...`` cells of the endpoint table; ``POST /api/runs/{run}/pause``,
    ``resume``, ... names several actions of one path."""
    found = set()
    for cells in _table_after(_doc("server.md"), "| endpoint | what it gives |"):
        spans = re.findall(r"`([^`]+)`", cells[0])
        method, _, path = spans[0].partition(" ")
        found.add((method, path.split("?")[0]))
        for span in spans[1:]:
            if " " in span:
                method, _, path = span.partition(" ")
                found.add((method, path.split("?")[0]))
            else:
                found.add((method, path.rsplit("/", 1)[0] + "/" + span))
    return found


def test_the_endpoint_table_is_the_app_s_routes_and_the_openapi_paths() -> None:
    routes = _app_routes()
    assert len(routes) >= 15
    assert _documented_endpoints() == routes, sorted(_documented_endpoints() ^ routes)
    assert _openapi_routes() == routes, sorted(_openapi_routes() ^ routes)


def _request_bodies() -> dict[str, type[msgspec.Struct] | None]:
    from runtime.server import _schemas

    return {
        "POST /api/runs": _schemas.StartRequest,
        "POST /api/runs/{run}/pause": None,
        "POST /api/runs/{run}/resume": _schemas.ResumeRequest,
        "POST /api/runs/{run}/approve": _schemas.ApproveRequest,
        "POST /api/runs/{run}/reject": _schemas.RejectRequest,
        "POST /api/runs/{run}/cancel": _schemas.CancelRequest,
        "POST /api/runs/{run}/fork": _schemas.ForkRequest,
        "POST /api/runs/{run}/replay": _schemas.ReplayRequest,
    }


def test_the_request_table_lists_each_body_s_fields_and_the_required_ones() -> None:
    from runtime.server._openapi import openapi_document

    bodies = _request_bodies()
    posts = {f"{m} {p}" for m, p in _app_routes() if m == "POST"}
    assert set(bodies) == posts, sorted(set(bodies) ^ posts)
    paths = openapi_document([])["paths"]
    rows = _table_after(_doc("server.md"), "| request | body fields")
    assert {cells[0].strip("`") for cells in rows} == set(bodies)
    for cells in rows:
        request = cells[0].strip("`")
        top = _top_level(cells[1])
        required = set(re.findall(r"\*\*`([a-z_]+)`\*\*", cells[1]))
        struct = bodies[request]
        if struct is None:
            assert cells[1] == "none", request
            continue
        info = msgspec.structs.fields(struct)
        assert top == [f.name for f in info], request
        assert required == {f.name for f in info if f.required}, request
        code = re.match(r"(\d{3})", cells[2]).group(1)  # type: ignore[union-attr]
        method, _, path = request.partition(" ")
        responses = paths[path.replace("{run}", "{run_id}")][method.lower()]["responses"]
        assert [c for c in responses if c.startswith("2")] == [code], request


def _top_level(cell: str) -> list[str]:
    """The field names of a body cell, outside the parentheses that explain them."""
    depth, kept = 0, []
    for char in cell:
        depth += char == "("
        if depth == 0:
            kept.append(char)
        depth -= char == ")"
    return re.findall(r"`([a-z_]+)`", "".join(kept))


def _codes_in_server_source() -> set[tuple[int, str]]:
    """Every (status, error code) pair written in runtime/server, and the two answered
    from variables there: Starlette's own HTTP errors and the head limit's."""
    found = {(404, "http"), (405, "http"), (400, "bad_request")}
    for path in (ROOT / "runtime" / "server").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        for status, code in re.findall(r"\b([1-5]\d\d),\s*\"([a-z_]+)\"", text):
            found.add((int(status), code))
    return found


def test_the_error_table_lists_every_error_code_the_server_answers() -> None:
    documented = set()
    for cells in _table_after(_doc("server.md"), "| status | `error` | when |"):
        for status in cells[0].split(","):
            documented.add((int(status), cells[1].strip("`")))
    in_code = _codes_in_server_source()
    assert len(in_code) >= 20
    assert documented == in_code, sorted(documented ^ in_code)


# -- docs/metrics.md ------------------------------------------------------------------------


def _label_values() -> dict[tuple[str, str], set[str]]:
    """(metric, label) -> the values the doc's table lists for it."""
    values = {}
    for cells in _table_after(_doc("metrics.md"), "| metric | type | labels |"):
        metric = cells[0].strip("`")
        for label, listed in re.findall(r"`([a-z_]+)` \(([^)]*)\)", cells[2]):
            values[(metric, label)] = {v.strip() for v in listed.split(",")}
    return values


def test_the_metric_table_lists_each_label_s_values_as_the_code_makes_them() -> None:
    from runtime.events import Action, Level
    from runtime.events._snapshots import SnapshotOutcome
    from runtime.events._verdicts import JUDGE_FAILURE_KINDS
    from runtime.observe import _labels, _metrics
    from runtime.spec._model import NodeKind

    expected = {
        ("magistrate_runs_finished_total", "status"): set(_metrics._STATUSES) | {"cancelled"},
        ("magistrate_runs_finished_total", "quality"): set(_metrics._QUALITIES) | {"none"},
        ("magistrate_node_duration_seconds", "kind"): set(get_args(NodeKind)),
        ("magistrate_llm_tokens_total", "direction"): set(_metrics._DIRECTIONS),
        ("magistrate_judge_verdicts_total", "verdict"): set(get_args(Action)),
        # A tool turn (level bail_out) is not a verdict: counted as a tool turn instead.
        ("magistrate_judge_verdicts_total", "level"): set(get_args(Level)) - {"bail_out"},
        ("magistrate_run_pauses_total", "reason"): set(_metrics._PAUSE_REASONS),
        ("magistrate_approvals_total", "decision"): {"granted", "rejected"},
        ("magistrate_provider_errors_total", "kind"): {k for _, k in _labels._KINDS} | {"judge"},
        ("magistrate_judge_failures_total", "reason"): set(JUDGE_FAILURE_KINDS),
        ("magistrate_snapshot_reads_total", "outcome"): set(get_args(SnapshotOutcome)),
    }
    assert _label_values() == expected


@pytest.mark.parametrize("page", [p.name for p in DOCS])
def test_no_page_links_to_a_heading_that_does_not_exist(page: str) -> None:
    """``[cli.md](cli.md#the-heads-file)``: the page exists and has that heading."""
    text = (ROOT / ("README.md" if page == "README.md" else f"docs/{page}")).read_text()
    base = ROOT if page == "README.md" else ROOT / "docs"
    problems = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", _prose(text)):
        if target.startswith(("http://", "https://")):
            continue
        linked = base / target if target else base / page
        if not linked.exists():
            problems.append(f"{target}: no such file")
            continue
        if anchor and linked.suffix == ".md":
            if anchor not in _anchors(linked.read_text(encoding="utf-8")):
                problems.append(f"{target}#{anchor}: no such heading")
    assert not problems, problems


def _anchors(text: str) -> set[str]:
    """GitHub's anchors for the headings of ``text``."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", _prose(text), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


# -- docs/replay.md -------------------------------------------------------------------------


def test_the_report_list_names_every_field_of_the_replay_report() -> None:
    from runtime import Divergence, ReplayReport

    text = _doc("replay.md")
    listing = text[text.index("`ReplayReport` (a msgspec Struct") : text.index("Served function")]
    named, divergence = [], []
    for item in re.findall(r"^- (.*?)(?=^- |\Z)", listing, re.MULTILINE | re.DOTALL):
        fields = _top_level(item.replace("\n", " "))  # the names, not the explanations
        if fields[0] == "divergences":
            named.append("divergences")
            divergence = fields[1:]  # each a `Divergence` with these
        else:
            named += _top_level(item.split(": ")[0] if ": " in item else item)
    assert named == list(ReplayReport.__struct_fields__)
    assert divergence == list(Divergence.__struct_fields__)


# -- docs/concepts.md, docs/architecture.md -------------------------------------------------


def test_the_provider_settings_sentence_lists_every_field_in_order() -> None:
    from runtime import ProviderSettings

    text = _doc("concepts.md").replace("\n", " ")
    sentence = text[text.index("`ProviderSettings` (") :].split(". ")[0]
    where = ("runtime", "ProviderSettings")  # where it is imported from, not its fields
    named = [name for name in re.findall(r"`(\w+)`", sentence) if name not in where]
    assert named == [f.name for f in msgspec.structs.fields(ProviderSettings)]


def test_the_floor_plan_lists_every_package_and_nothing_else() -> None:
    rows = _table_after(_doc("architecture.md"), "| folder | what lives there |")
    documented = {cells[0].strip("`").rstrip("/") for cells in rows}
    packages = {
        str(init.parent.relative_to(ROOT))
        for top in ("actors", "eventstore", "runtime")
        for init in (ROOT / top).glob("**/__init__.py")
        if "static" not in init.parts
    }
    others = {"tests", "benchmarks", "examples"}
    assert documented - others == packages, sorted((documented - others) ^ packages)
