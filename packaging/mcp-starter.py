#!/usr/bin/env python3
"""A developer's agent host, reduced to its MCP client: the official Python MCP SDK starts the
`cordon` server named in an MCP host configuration (the snippet in docs/mcp.md) and uses the starter
tools on a git project it makes in the developer's home. Run as the developer (a member of group
cordon, not an admin) against the installed package, with no policy edit (packaging/test-deb.sh).

Usage: mcp-starter.py HOST_CONFIG.json PROJECT_DIR

Prints what it sends and what comes back; exits non-zero on the first unexpected answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

EXPECTED = {"git-changes", "git-diff", "git-history", "list", "make-test", "read-file", "search"}


def make_project(p: Path) -> None:
    (p / "src").mkdir(parents=True)
    (p / "README.md").write_text("hello from the project\nsecond line\n")
    (p / "src" / "main.c").write_text('int main(void) { return puts("hello"); }\n')
    (p / "Makefile").write_text("test:\n\t@echo running tests\n\t@test -f README.md && echo ok\n")
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
    ident = ["-c", "user.name=Dev", "-c", "user.email=dev@example.invalid"]
    for args in (["init", "-q"], [*ident, "add", "."], [*ident, "commit", "-qm", "first commit"]):
        subprocess.run(["git", *args], cwd=p, env=env, check=True)
    (p / "README.md").write_text("hello from the project\nchanged by the agent\n")


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def fail(message: str) -> None:
    print(f"FAIL {message}", flush=True)
    sys.exit(1)


async def main(config_path: Path, project: Path) -> None:
    server = json.loads(config_path.read_text())["mcpServers"]["cordon"]
    make_project(project)
    params = StdioServerParameters(command=server["command"], args=server.get("args", []), env=server.get("env"))
    print(f"starting {server['command']} {' '.join(server.get('args', []))} as uid {os.getuid()}", flush=True)
    async with Client(stdio_client(params), read_timeout_seconds=60) as client:
        listed = sorted(t.name for t in (await client.list_tools()).tools)
        print(f"tools/list -> {', '.join(listed)}", flush=True)
        missing = EXPECTED - set(listed)
        if missing:
            fail(f"starter tools missing for this user: {sorted(missing)}")

        calls = [
            ("git-changes", {"repo": str(project)}, " M README.md"),
            ("git-history", {"repo": str(project), "count": 5}, "first commit"),
            ("git-diff", {"repo": str(project)}, "+changed by the agent"),
            ("search", {"pattern": "hel+o", "path": str(project)}, "src/main.c:1:"),
            ("list", {"path": str(project)}, str(project / "Makefile")),
            ("read-file", {"file": str(project / "README.md"), "lines": 1}, "hello from the project"),
            ("make-test", {"project": str(project)}, "ok"),
        ]
        for name, args, want in calls:
            result = await client.call_tool(name, args)
            text = text_of(result)
            print(f"tools/call {name} {json.dumps(args)}", flush=True)
            for line in text.splitlines():
                print(f"    {line}", flush=True)
            if result.is_error or want not in text:
                fail(f"{name}: expected {want!r} in a successful result")

        # Outside the granted trees the sandbox refuses, even where the file mode would allow it.
        result = await client.call_tool("read-file", {"file": "/etc/hostname"})
        print(f"tools/call read-file {{\"file\": \"/etc/hostname\"}} -> isError={result.is_error}", flush=True)
        for line in text_of(result).splitlines():
            print(f"    {line}", flush=True)
        if not result.is_error:
            fail("read-file read /etc/hostname, outside the starter set's trees")
    print("OK: the starter tools work for this developer through cordon mcp", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    anyio.run(main, Path(sys.argv[1]), Path(sys.argv[2]))
