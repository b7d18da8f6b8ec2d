#!/usr/bin/env python3
"""A developer's agent host, reduced to its MCP client: reads the host configuration file that
`cordon mcp config HOST --write` wrote (Claude Code's `.mcp.json`: `mcpServers.NAME` with `type`,
`command`, `args`, `env`), starts that server with the official Python MCP SDK as the developer,
lists the tools and calls the project's test tool the way an agent would. Run by
tests/onboarding/run.sh.

Usage: agent.py HOST_CONFIG.json SERVER_NAME TOOL [KEY=VALUE...]

Prints what it sends and what comes back; exits 0 only when the tool ran and its tests passed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def main(config_path: Path, name: str, tool: str, arguments: dict[str, str]) -> int:
    servers = json.loads(config_path.read_text())["mcpServers"]
    server = servers.get(name)
    if server is None:
        print(f"FAIL {config_path} has no server {name!r} (it has {sorted(servers)})", flush=True)
        return 1
    if server.get("type", "stdio") != "stdio":
        print(f"FAIL server {name!r} is not a stdio server: {server}", flush=True)
        return 1
    params = StdioServerParameters(command=server["command"], args=server.get("args", []), env=server.get("env"))
    print(f"starting {server['command']} {' '.join(server.get('args', []))} as uid {os.getuid()}", flush=True)
    async with Client(stdio_client(params), read_timeout_seconds=600) as client:
        listed = sorted(t.name for t in (await client.list_tools()).tools)
        print(f"tools/list -> {', '.join(listed)}", flush=True)
        if tool not in listed:
            print(f"FAIL the project's test tool {tool!r} is not offered", flush=True)
            return 1
        print(f"tools/call {tool} {json.dumps(arguments)}", flush=True)
        result = await client.call_tool(tool, arguments)
        text = text_of(result)
        print(text, flush=True)
        if result.is_error:
            print(f"FAIL {tool} reported an error", flush=True)
            return 1
        structured = result.structured_content or {}
        code = structured.get("exit_code", structured.get("exitCode"))
        if code not in (0, None):
            print(f"FAIL {tool} exited {code}", flush=True)
            return 1
        print(f"PASS {tool}: the project's tests ran green through {name}", flush=True)
        return 0


if __name__ == "__main__":
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    args = dict(a.split("=", 1) for a in sys.argv[4:])
    sys.exit(anyio.run(main, Path(sys.argv[1]), sys.argv[2], sys.argv[3], args))
