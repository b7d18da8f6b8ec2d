#!/usr/bin/env python3
"""Runs each real MCP server (installed by tests/run under /opt/cordon-mcp-servers) DIRECTLY,
without cordon, with the official Python MCP SDK as the client, and prints what it offers:
its tools (name, inputSchema properties) and the results of a few calls. This is how the
expectations of tests/tests/suite/mcp_servers_real.rs were learned, and a quick way to see what
a new server version changed.

Usage: direct.py [SERVER ...]   (filesystem, everything, git, fetch; default all)
Run with the SDK's venv: python3 -m venv /tmp/f-mcp-venv &&
/tmp/f-mcp-venv/bin/pip install -r tests/mcp-python/requirements.txt
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path("/opt/cordon-mcp-servers")
NODE_BIN = ROOT / "node/node_modules/.bin"
PY_BIN = ROOT / "python/bin"


def upstream() -> int:
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<html><body><h1>Hello</h1><p>hello from upstream</p></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    s = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    return s.server_address[1]


def text(result) -> str:
    return json.dumps(result.model_dump(mode="json", exclude_none=True, by_alias=True))[:600]


async def session(argv: list[str], calls: list[tuple[str, dict]]) -> None:
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    async with Client(stdio_client(params), mode="legacy", read_timeout_seconds=30) as client:
        tools = (await client.list_tools()).tools
        for t in tools:
            props = sorted((t.input_schema or {}).get("properties", {}))
            print(f"  tool {t.name}: {props}")
        for name, args in calls:
            try:
                r = await client.call_tool(name, args)
                print(f"  call {name} {json.dumps(args)} -> {text(r)}")
            except Exception as e:  # noqa: BLE001 - printing what the server said
                print(f"  call {name} {json.dumps(args)} -> EXCEPTION {e!r}")


def main() -> None:
    which = sys.argv[1:] or ["filesystem", "everything", "git", "fetch"]
    work = Path(tempfile.mkdtemp(prefix="cordon-direct-"))
    (work / "a.txt").write_text("hello\n")
    repo = work / "repo"
    repo.mkdir()
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "first", "--allow-empty"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    port = upstream()
    servers = {
        "filesystem": (
            [str(NODE_BIN / "mcp-server-filesystem"), str(work)],
            [("read_text_file", {"path": str(work / "a.txt")}), ("read_text_file", {"path": "/etc/hostname"}),
             ("list_directory", {"path": str(work)})],
        ),
        "everything": (
            [str(NODE_BIN / "mcp-server-everything")],
            [("echo", {"message": "hi"}), ("get-sum", {"a": 1, "b": 2})],
        ),
        "git": (
            [str(PY_BIN / "mcp-server-git"), "--repository", str(repo)],
            [("git_status", {"repo_path": str(repo)}), ("git_log", {"repo_path": str(repo)}),
             ("git_status", {"repo_path": "/tmp"})],
        ),
        "fetch": (
            [str(PY_BIN / "mcp-server-fetch"), "--ignore-robots-txt", "--allow-private-ips"],
            [("fetch", {"url": f"http://127.0.0.1:{port}/"}), ("fetch", {"url": f"http://127.0.0.1:{port}/", "raw": True})],
        ),
    }
    for name in which:
        argv, calls = servers[name]
        print(f"{name}: {' '.join(argv)}")
        anyio.run(session, argv, calls)


if __name__ == "__main__":
    main()
