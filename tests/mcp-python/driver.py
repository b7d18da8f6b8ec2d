#!/usr/bin/env python3
"""An independent MCP client for `cordon mcp`, built on the official Python MCP SDK.

It starts its own `cordond` on a temporary socket with a policy written to a temporary
directory, spawns `cordon --socket SOCK mcp` through the SDK's stdio client and checks, in each
protocol style the SDK speaks:

- `2025-11-25`: the `initialize` handshake (`mode="legacy"`);
- `2026-07-28`: no handshake, every request carries its own `_meta` envelope (version pinned);
- `2026-07-28` reached through the `server/discover` probe (`mode="auto"`);

and, over streamable HTTP (`cordon mcp --http`, the SDK's streamable HTTP client with a bearer
token an admin issued): a request without the token is refused with 401, and a session in
each style lists only the tools the token's account may use and runs them as that account;

that tools/list shows the daemon's tools with the daemon's inputSchema, a call returns the
tool's output, invalid calls come back as `isError` results with the daemon's codes, a cancelled
call kills the tool's process, and a policy reload reaches the client as
`notifications/tools/list_changed` (2025-11-25) or as an event on a `subscriptions/listen`
stream (2026-07-28); and the result contract: a JSON tool's structuredContent, a wrapped array,
the confirmation answer of a tool with an output schema, a cached result, a failed workflow step and
polled jobs (a tool's and a workflow's) are all accepted by
the SDK's own output-schema validation.

Usage: driver.py [CORDOND [CORDON]]  (or $CORDOND / $CORDON; default target/debug/ of this repo)

Prints one line per check and ends with `N passed, M failed` (plus `, K skipped` when a check
hit a known, reported issue: see KNOWN_ISSUES). Exits non-zero on any failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

REPO = Path(__file__).resolve().parents[2]
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
MODERN = "2026-07-28"

# Checks that fail because of a reported product issue. Such a failure is printed as KNOWN and
# counted as skipped, not failed; once the issue is fixed the check passes and says so, and its
# entry here should go.
KNOWN_ISSUES: dict[str, str] = {}

POLICY = r"""
version = 1

[defaults]
timeout = "60s"

[tools.echo]
description = "print one argument between brackets"
reason = "the MCP driver's call checks"
command = ["/usr/bin/printf", "[%s]", "{{text}}"]

[tools.echo.params.text]
type = "string"
required = true

[tools.slow]
description = "record its pid in a file, then sleep"
reason = "the MCP driver's cancellation check"
command = ["/bin/sh", "-c", "echo $$ > \"$1\"; exec /bin/sleep 30", "sh", "{{pidfile}}"]
write = ["/tmp"]

[tools.slow.params.pidfile]
type = "path"
required = true

[tools.counted]
description = "a JSON object that matches its output schema"
reason = "the MCP driver's result contract checks"
command = ["/usr/bin/printf", "{\"n\": 3}"]
output = { type = "json", schema = { type = "object", properties = { n = { type = "integer" } }, required = ["n"] } }

[tools.listing]
description = "a JSON array, sent wrapped as {result: [...]}"
reason = "the MCP driver's result contract checks"
command = ["/usr/bin/printf", "[\"a\", \"b\"]"]
output = { type = "json", schema = { type = "array", items = { type = "string" } } }

[tools.gated]
description = "asks for an agent's confirmation; has an output schema"
reason = "the MCP driver's result contract checks"
command = ["/usr/bin/printf", "{\"n\": 1}"]
confirm = "agent"
output = { type = "json", schema = { type = "object", properties = { n = { type = "integer" } }, required = ["n"] } }

# The counter is named by a string, not a path: cordond keys a cached answer on the state of its
# path arguments, and a tool that writes its own path argument changes that state every call.
[tools.cached]
description = "counts its runs in a file; results cached"
reason = "the MCP driver's result cache check"
command = ["/bin/sh", "-c", "echo run >> \"/tmp/$1\"; printf '{\"n\": 1}'", "sh", "{{name}}"]
write = ["/tmp"]
annotations = { read_only = true, idempotent = true }
cache = { ttl = "10m" }
accept_warnings = ["cache-inputs"]
output = { type = "json", schema = { type = "object", properties = { n = { type = "integer" } }, required = ["n"] } }

[tools.cached.params.name]
type = "string"
required = true
pattern = "^[A-Za-z0-9_.-]+$"

[tools.fails]
description = "fails with exit code 3"
reason = "the MCP driver's workflow check"
command = ["/bin/sh", "-c", "echo it broke >&2; exit 3"]

[workflows.pipeline]
description = "echo, fails, echo"
reason = "the MCP driver's workflow and job checks"

[workflows.pipeline.params.text]
type = "string"
required = true

[[workflows.pipeline.steps]]
tool = "echo"
args = { text = "{{text}}" }

[[workflows.pipeline.steps]]
tool = "fails"

[[workflows.pipeline.steps]]
tool = "echo"
args = { text = "never" }
"""

ADDED_POLICY = """
version = 1

[tools.{name}]
description = "a tool added by a reload"
reason = "the MCP driver's list_changed check"
command = ["/usr/bin/printf", "added"]
"""


class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.skipped = 0

    def check(self, style: str, name: str, ok: bool, detail: str = "") -> bool:
        if ok:
            self.passed += 1
            print(f"PASS [{style}] {name}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL [{style}] {name}: {detail}", flush=True)
        return ok

    def known(self, style: str, name: str, issue: str, ok: bool, detail: str = "") -> None:
        """A check that fails because of a reported issue: KNOWN (skipped) while it does."""
        if ok:
            self.passed += 1
            print(f"PASS [{style}] {name} (known issue {issue!r} no longer reproduces: drop it)", flush=True)
        else:
            self.skipped += 1
            print(f"KNOWN [{style}] {name}: {detail} -- {KNOWN_ISSUES[issue]}", flush=True)

    def summary(self) -> str:
        line = f"{self.passed} passed, {self.failed} failed"
        if self.skipped:
            line += f", {self.skipped} skipped"
        return line


class Daemon:
    """A `cordond` on a temporary socket with its own policy directory."""

    def __init__(self, cordond: Path, cordon: Path) -> None:
        self.cordon_bin = cordon
        # Beneath /tmp: the slow tool may write only there, and the socket path stays short.
        self.dir = Path(tempfile.mkdtemp(prefix="cordon-mcp-py-", dir="/tmp"))
        self.policies = self.dir / "policies"
        self.policies.mkdir()
        (self.policies / "tools.toml").write_text(POLICY)
        self.socket = self.dir / "run" / "cordon.sock"
        self.log = self.dir / "cordond.log"
        self.mcp_log = self.dir / "cordon-mcp.log"
        self.proc = subprocess.Popen(
            [
                str(cordond), "--policies", str(self.policies), "--socket", str(self.socket),
                "--audit", str(self.dir / "audit.jsonl"), "--shutdown-grace", "1s",
                # The driver approves human confirmations through elicitation, which cordond
                # honours only when its admin opted in.
                "--human-approval-via-elicitation",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("w"),
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cordond exited early with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(str(self.socket))
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"cordond did not listen on {self.socket} in time:\n{self.log.read_text()}")

    def cordon(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.cordon_bin), "--socket", str(self.socket), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )

    async def acordon(self, *args: str) -> subprocess.CompletedProcess[str]:
        return await anyio.to_thread.run_sync(lambda: self.cordon(*args))

    def transport(self, *mcp_args: str) -> Any:
        """`cordon --socket SOCK mcp` over the SDK's stdio transport, its stderr to a log file."""
        params = StdioServerParameters(
            command=str(self.cordon_bin),
            args=["--socket", str(self.socket), "mcp", *mcp_args],
            env={"CORDON_LOG": "warn"},
        )
        return stdio_client(params, errlog=self.mcp_log.open("a"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def is_list_changed(message: Any) -> bool:
    message = getattr(message, "root", message)
    return getattr(message, "method", None) == "notifications/tools/list_changed"


def subscription_of(message: Any) -> Any:
    message = getattr(message, "root", message)
    params = getattr(message, "params", None)
    meta = getattr(params, "meta", None) or {}
    return meta.get(SUBSCRIPTION_ID)


def process_gone(pid: int) -> bool:
    """No such process, or only a zombie left of it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


async def read_pid(path: Path, limit: float) -> int | None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            await anyio.sleep(0.05)
    return None


async def run_style(daemon: Daemon, report: Report, style: str, mode: str, index: int) -> None:
    notifications: list[Any] = []
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            print(f"  note [{style}]: transport exception {message!r}", flush=True)
            return
        if is_list_changed(message):
            notifications.append(message)
            changed.set()

    modern = mode != "legacy"
    client = Client(daemon.transport(), mode=mode, message_handler=on_message, read_timeout_seconds=20)
    async with client:
        # The protocol style actually spoken.
        expected = MODERN if modern else "2025-11-25"
        report.check(style, "protocol version", client.protocol_version == expected, f"got {client.protocol_version}")
        if mode == "auto":
            discovered = client.session.discover_result
            report.check(
                style,
                "server/discover answered with 2026-07-28 among its versions",
                discovered is not None and MODERN in discovered.supported_versions,
                f"discover result {discovered!r}, initialize result {client.session.initialize_result!r}",
            )
        elif not modern:
            init = client.session.initialize_result
            caps = init.capabilities.tools if init else None
            report.check(
                style,
                "initialize: server advertises tools.listChanged",
                caps is not None and caps.list_changed is True,
                f"initialize result {init!r}",
            )

        # tools/list: the daemon's tools with the daemon's inputSchema.
        listed = {t.name: t for t in (await client.list_tools()).tools}
        daemon_tool = json.loads(daemon.cordon("tool", "echo", "--json").stdout)
        echo = listed.get("echo")
        report.check(style, "tools/list lists echo and slow", {"echo", "slow"} <= set(listed), f"listed {sorted(listed)}")
        report.check(
            style,
            "tools/list: echo's inputSchema is the daemon's",
            echo is not None and echo.input_schema == daemon_tool["input_schema"],
            f"mcp {echo.input_schema if echo else None!r} vs daemon {daemon_tool['input_schema']!r}",
        )

        # A call.
        result = await client.call_tool("echo", {"text": "hi"})
        report.check(
            style,
            "tools/call echo {text: hi} returns [hi]",
            not result.is_error and "[hi]" in text_of(result),
            f"isError={result.is_error} text={text_of(result)!r}",
        )

        await result_contract(daemon, report, style, client, index)

        # Invalid calls: isError results with the daemon's codes.
        result = await client.call_tool("echo", {})
        report.check(
            style,
            "tools/call echo {} is MISSING_REQUIRED_FIELD",
            result.is_error is True and text_of(result).startswith("MISSING_REQUIRED_FIELD"),
            f"isError={result.is_error} text={text_of(result)!r}",
        )
        result = await client.call_tool("echo", {"text": 5})
        report.check(
            style,
            "tools/call echo {text: 5} is INVALID_FIELD_TYPE",
            result.is_error is True and text_of(result).startswith("INVALID_FIELD_TYPE"),
            f"isError={result.is_error} text={text_of(result)[:90]!r}",
        )

        # Cancellation: the SDK abandons the cancelled request with notifications/cancelled.
        pidfile = daemon.dir / f"slow-{index}.pid"
        scope = anyio.CancelScope()
        outcome: dict[str, Any] = {}

        async def slow_call() -> None:
            with scope:
                outcome["result"] = await client.call_tool("slow", {"pidfile": str(pidfile)})

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_call)
            pid = await read_pid(pidfile, 15)
            running = pid is not None and "sleep" in cmdline(pid)
            report.check(
                style,
                "slow tool started (pidfile names a running sleep)",
                running,
                f"pid {pid}, cmdline {cmdline(pid) if pid else ''!r}, call outcome {outcome!r}",
            )
            scope.cancel()
        if pid is not None and running:
            deadline = time.monotonic() + 5
            while not process_gone(pid) and time.monotonic() < deadline:
                await anyio.sleep(0.05)
            report.check(style, "cancelled call: the tool's process is gone within 5 s", process_gone(pid), f"pid {pid} still alive")
            deadline = time.monotonic() + 5
            running_now = None
            while time.monotonic() < deadline:
                running_now = json.loads((await daemon.acordon("status", "--json")).stdout)["running_invocations"]
                if running_now == 0:
                    break
                await anyio.sleep(0.1)
            report.check(style, "cancelled call: cordond has no running invocation", running_now == 0, f"running_invocations={running_now}")
        result = await client.call_tool("echo", {"text": "after"})
        report.check(
            style,
            "the session still serves calls after the cancellation",
            not result.is_error and "[after]" in text_of(result),
            f"isError={result.is_error} text={text_of(result)!r}",
        )

        # list_changed after a reload.
        added = f"added-{index}"

        async def reload() -> bool:
            (daemon.policies / f"{added}.toml").write_text(ADDED_POLICY.format(name=added))
            out = await daemon.acordon("reload")
            return report.check(style, "cordon reload succeeds", out.returncode == 0, f"{out.returncode}: {out.stderr}")

        if not modern:
            if await reload():
                with anyio.move_on_after(10):
                    await changed.wait()
                report.check(
                    style,
                    "notifications/tools/list_changed arrives after the reload",
                    changed.is_set(),
                    "nothing within 10 s",
                )
        else:
            async with client.listen(tools_list_changed=True) as sub:
                report.check(
                    style,
                    "subscriptions/listen acknowledged with toolsListChanged",
                    sub.honored.tools_list_changed is True,
                    f"honored {sub.honored!r}",
                )
                if await reload():
                    event = None
                    with anyio.move_on_after(10):
                        async for event in sub:
                            break
                    # The SDK routes a frame to this stream only by its subscriptionId `_meta`.
                    report.check(
                        style,
                        "subscriptions/listen delivers ToolsListChanged (with its subscription id) after the reload",
                        type(event).__name__ == "ToolsListChanged",
                        f"event {event!r}, notifications seen {notifications!r}",
                    )
            await anyio.sleep(0.5)  # let the message handler see every frame sent so far
            bare = [n for n in notifications if subscription_of(n) is None]
            report.check(
                style,
                "no list_changed outside a subscriptions/listen stream",
                not bare,
                f"{len(bare)} bare notifications/tools/list_changed",
            )
        listed = {t.name for t in (await client.list_tools()).tools}
        report.check(style, f"tools/list shows {added} after the reload", added in listed, f"listed {sorted(listed)}")


async def search_and_pages(daemon: Daemon, report: Report) -> None:
    """The built-in search_tools, and tools/list in pages (`cordon mcp --page-size 2`) walked
    with the SDK's cursor: the same set as one unpaginated listing."""
    style = "search and pages"
    async with Client(daemon.transport(), mode="legacy", read_timeout_seconds=20) as whole:
        everything = {t.name for t in (await whole.list_tools()).tools}
        found = await whole.call_tool("search_tools", {"query": "echo"})
        hits = (found.structured_content or {}).get("tools", [])
        report.check(
            style,
            "search_tools ranks the exact name first",
            not found.is_error and bool(hits) and hits[0]["name"] == "echo",
            f"{found!r}",
        )
        refused = await whole.call_tool("search_tools", {"query": "echo", "nope": 1})
        report.check(
            style, "search_tools refuses unknown keys", refused.is_error and "UNKNOWN_FIELDS" in text_of(refused)
        )
    async with Client(daemon.transport("--page-size", "2"), mode="legacy", read_timeout_seconds=20) as paged:
        walked: list[str] = []
        cursor = None
        pages = 0
        while True:
            page = await paged.list_tools(cursor=cursor)
            walked.extend(t.name for t in page.tools)
            pages += 1
            cursor = page.next_cursor
            if cursor is None or pages > 100:
                break
        report.check(
            style,
            "paginated tools/list walks to the unpaginated set",
            pages > 1 and len(walked) == len(everything) and set(walked) == everything,
            f"{pages} pages: {walked} vs {sorted(everything)}",
        )


def result_meta(result: types.CallToolResult) -> dict[str, Any]:
    """`_meta["cordon/result"]` of a result (the figures of the result contract)."""
    meta = getattr(result, "meta", None) or {}
    return dict(meta.get("cordon/result") or {})


async def result_contract(daemon: Daemon, report: Report, style: str, client: Any, index: int) -> None:
    """The SDK accepts what cordon sends for tools with output schemas (it validates
    structuredContent against the outputSchema and raises when they disagree)."""
    result = await client.call_tool("counted", {})
    report.check(
        style,
        "JSON tool with a schema: structuredContent accepted by the SDK",
        not result.is_error and result.structured_content == {"n": 3} and result_meta(result).get("ok") is True,
        f"isError={result.is_error} structured={result.structured_content!r} meta={result_meta(result)!r}",
    )
    result = await client.call_tool("listing", {})
    report.check(
        style,
        "JSON array: wrapped as {result: [...]} and accepted by the SDK",
        not result.is_error and result.structured_content == {"result": ["a", "b"]},
        f"isError={result.is_error} structured={result.structured_content!r}",
    )
    result = await client.call_tool("gated", {})
    token = ((result.structured_content or {}).get("confirmation_required") or {}).get("token")
    report.check(
        style,
        "confirmation answer of a schema tool accepted by the SDK, token in structuredContent",
        not result.is_error and isinstance(token, str) and token in text_of(result),
        f"isError={result.is_error} structured={result.structured_content!r}",
    )
    if isinstance(token, str):
        result = await client.call_tool("confirm", {"token": token})
        report.check(
            style,
            "confirm runs the schema tool; its answer accepted by the SDK",
            not result.is_error and result.structured_content == {"n": 1},
            f"isError={result.is_error} structured={result.structured_content!r} text={text_of(result)!r}",
        )
    name = f"{daemon.dir.name}-cached-{index}"
    counter = Path("/tmp") / name
    first = await client.call_tool("cached", {"name": name})
    second = await client.call_tool("cached", {"name": name})
    meta = result_meta(second)
    runs = counter.read_text().count("run") if counter.exists() else 0
    counter.unlink(missing_ok=True)
    report.check(
        style,
        "cached result accepted by the SDK: _meta says cached, its age and the invocation that ran",
        not second.is_error
        and second.structured_content == {"n": 1}
        and meta.get("cached") is True
        and isinstance(meta.get("cache_age_ms"), int)
        and meta.get("cached_from") == result_meta(first).get("invocation_id")
        and runs == 1,
        f"first={result_meta(first)!r} second={meta!r} runs={runs}",
    )
    # A workflow whose step 2 fails: the SDK validates structuredContent against the workflow's
    # advertised outputSchema (it raises when they disagree).
    result = await client.call_tool("pipeline", {"text": "hi"})
    structured = result.structured_content or {}
    failed = structured.get("failed_step") or {}
    report.check(
        style,
        "failed workflow step: isError, structuredContent (accepted by the SDK) names step 2",
        result.is_error
        and failed.get("index") == 2
        and failed.get("tool") == "fails"
        and len(structured.get("steps") or []) == 2
        and "failed at step 2 (fails)" in text_of(result),
        f"isError={result.is_error} structured={structured!r}",
    )
    # Jobs: a tool and a workflow started detached, then polled to their end.
    for name, args in (("echo", {"text": "job"}), ("pipeline", {"text": "job"})):
        started = await client.call_tool("start_job", {"tool": name, "arguments": args})
        job = started.structured_content or {}
        job_id = job.get("job_id")
        polled = await client.call_tool("job_status", {"job_id": job_id, "wait_seconds": 30})
        state = polled.structured_content or {}
        if name == "echo":
            ok = not polled.is_error and (state.get("result") or {}).get("stdout") == "[job]"
        else:
            ok = polled.is_error and ((state.get("workflow") or {}).get("failed_step") or {}).get("index") == 2
        report.check(
            style,
            f"start_job {name} ({job.get('kind')}) then job_status: finished with its result",
            not started.is_error and isinstance(job_id, str) and state.get("state") == "finished" and ok,
            f"started={job!r} polled isError={polled.is_error} {state!r}",
        )


HTTP_POLICY = r"""
version = 1

[tools.whoami]
description = "print the uid it runs as"
reason = "the MCP driver's streamable HTTP checks"
command = ["/usr/bin/id", "-u"]
allow = { users = ["nobody"] }
"""


async def streamable_http(daemon: Daemon, report: Report) -> None:
    """`cordon mcp --http` through the SDK's streamable HTTP client, with a token for `nobody`."""
    import httpx2
    import pwd

    style = "streamable HTTP"
    (daemon.policies / "http.toml").write_text(HTTP_POLICY)
    reload = await daemon.acordon("reload")
    report.check(style, "policy with a tool for nobody loaded", reload.returncode == 0, reload.stderr)
    issued = await daemon.acordon("token", "issue", "nobody", "--label", "mcp python driver")
    report.check(style, "cordon token issue", issued.returncode == 0, issued.stderr)
    token = issued.stdout.strip()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    proc = subprocess.Popen(
        [str(daemon.cordon_bin), "--socket", str(daemon.socket), "mcp", "--http", f"127.0.0.1:{port}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=daemon.mcp_log.open("a"),
    )
    try:
        for _ in range(200):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                await anyio.sleep(0.05)
        async with httpx2.AsyncClient() as raw:
            r = await raw.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                               headers={"Accept": "application/json, text/event-stream"})
        report.check(style, "no token: 401 with a Bearer challenge",
                     r.status_code == 401 and r.headers.get("www-authenticate", "").startswith("Bearer"),
                     f"{r.status_code} {dict(r.headers)} {r.text}")
        uid = pwd.getpwnam("nobody").pw_uid
        for mode, expected in (("legacy", "2025-11-25"), ("auto", MODERN)):
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
            async with http:
                client = Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=20)
                async with client:
                    tag = f"{style} {expected}"
                    report.check(tag, "protocol version", client.protocol_version == expected,
                                 f"got {client.protocol_version}")
                    listed = {t.name for t in (await client.list_tools()).tools}
                    report.check(tag, "tools/list: the token account's tool, not the admin's",
                                 "whoami" in listed and "echo" not in listed, f"listed {sorted(listed)}")
                    if os.geteuid() == 0:
                        result = await client.call_tool("whoami", {})
                        report.check(tag, "a call runs as the token's account",
                                     not result.is_error and text_of(result).split()[0] == str(uid),
                                     f"{result!r}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        (daemon.policies / "http.toml").unlink(missing_ok=True)


async def main_async(daemon: Daemon, report: Report) -> None:
    styles = [
        ("2025-11-25 initialize", "legacy"),
        ("2026-07-28 inline _meta", MODERN),
        ("2026-07-28 via server/discover", "auto"),
    ]
    for index, (style, mode) in enumerate(styles):
        try:
            with anyio.fail_after(120):
                await run_style(daemon, report, style, mode, index)
        except Exception as e:  # one style's failure must not hide the others
            report.check(style, "session ran to the end", False, f"{type(e).__name__}: {e}")
            traceback.print_exc()
    try:
        with anyio.fail_after(60):
            await search_and_pages(daemon, report)
    except Exception as e:
        report.check("search and pages", "session ran to the end", False, f"{type(e).__name__}: {e}")
        traceback.print_exc()
    try:
        with anyio.fail_after(60):
            await streamable_http(daemon, report)
    except Exception as e:
        report.check("streamable HTTP", "session ran to the end", False, f"{type(e).__name__}: {e}")
        traceback.print_exc()


def main() -> int:
    cordond = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CORDOND", REPO / "target/debug/cordond"))
    cordon = Path(sys.argv[2] if len(sys.argv) > 2 else os.environ.get("CORDON", cordond.parent / "cordon"))
    for b in (cordond, cordon):
        if not os.access(b, os.X_OK):
            print(f"FAIL [setup] {b} is not an executable: build with `cargo build --workspace`")
            print("0 passed, 1 failed")
            return 1
    # SIGTERM (e.g. a CI timeout) unwinds through the finally below, so cleanup still runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report = Report()
    daemon = None
    try:
        daemon = Daemon(cordond.resolve(), cordon.resolve())
        anyio.run(main_async, daemon, report)
    except BaseException as e:  # also SIGTERM's SystemExit and ^C: still clean up and say so
        report.check("setup", "driver ran to the end", False, f"{type(e).__name__}: {e}")
        if isinstance(e, Exception):
            traceback.print_exc()
    finally:
        if daemon is not None:
            if report.failed:
                for name, path in (("cordond", daemon.log), ("cordon mcp", daemon.mcp_log)):
                    if path.exists():
                        print(f"--- {name} stderr (last 40 lines)")
                        print("\n".join(path.read_text(errors="replace").splitlines()[-40:]))
            daemon.stop()
    print(report.summary(), flush=True)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
