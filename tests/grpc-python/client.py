#!/usr/bin/env python3
"""A stock gRPC client (python grpcio, i.e. grpc-core) against the real cordond.

It starts its own `cordond` on a temporary socket with a policy written to a temporary
directory, generates the Python stubs from proto/cordon/v1/cordon.proto with grpcio-tools, and
calls over `unix:PATH` with grpcio's defaults (no `grpc.default_authority` override: grpcio then
sends the %-encoded socket path as `:authority`, which cordond must accept):

- cordon.v1.Cordon/Status, ListTools and Invoke (a server stream: accepted, then finished with
  the tool's output);
- an unknown tool, answered NOT_FOUND with the cordon error code in the trailing metadata;
- grpc.health.v1.Health/Check, SERVING for the server and for cordon.v1.Cordon.

Usage: client.py [CORDOND]  (or $CORDOND; default target/debug/cordond of this repo)
Prints one line per check and ends with `N passed, M failed`; exits non-zero on any failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_tools import protoc

REPO = Path(__file__).resolve().parents[2]

POLICY = r"""
version = 1

[tools.echo]
description = "print one argument between brackets"
reason = "grpcio interop test"
command = ["/usr/bin/printf", "[%s]", "{{text}}"]

[tools.echo.params.text]
type = "string"
pattern = "[a-z ]*"
required = true
"""

results: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    results.append((name, ok, detail))
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail and not ok else ''}", flush=True)


def stubs(out: Path):
    """Generates cordon_pb2 / cordon_pb2_grpc into `out` and imports them."""
    proto_root = REPO / "proto"
    out.mkdir(parents=True, exist_ok=True)
    rc = protoc.main(
        ["protoc", f"-I{proto_root}", f"--python_out={out}", f"--grpc_python_out={out}", "cordon/v1/cordon.proto"]
    )
    if rc != 0:
        raise SystemExit(f"protoc failed ({rc})")
    sys.path.insert(0, str(out))
    from cordon.v1 import cordon_pb2, cordon_pb2_grpc  # noqa: PLC0415

    return cordon_pb2, cordon_pb2_grpc


def main() -> int:
    cordond = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CORDOND", REPO / "target/debug/cordond"))
    with tempfile.TemporaryDirectory(prefix="cordon-grpcio-") as tmp:
        tmp = Path(tmp)
        pb, pb_grpc = stubs(tmp / "gen")
        (tmp / "policies").mkdir()
        (tmp / "policies" / "t.toml").write_text(POLICY)
        socket = tmp / "run" / "cordon.sock"
        log = open(tmp / "cordond.log", "w")
        daemon = subprocess.Popen(
            [str(cordond), "--policies", str(tmp / "policies"), "--socket", str(socket), "--audit", str(tmp / "audit" / "a.jsonl")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            deadline = time.monotonic() + 20
            while not socket.exists():
                if daemon.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"cordond did not start:\n{(tmp / 'cordond.log').read_text()}")
                time.sleep(0.05)
            run(pb, pb_grpc, socket)
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
        if any(not ok for _, ok, _ in results):
            print((tmp / "cordond.log").read_text(), file=sys.stderr)
    failed = sum(1 for _, ok, _ in results if not ok)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def run(pb, pb_grpc, socket: Path) -> None:
    # grpcio's defaults, on purpose: no grpc.default_authority option.
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        cordon = pb_grpc.CordonStub(channel)

        try:
            status = cordon.Status(pb.StatusRequest(), timeout=10)
            check("Status", status.tools_available == 1 and status.socket_path == str(socket), str(status))
        except grpc.RpcError as e:
            check("Status", False, f"{e.code()} {e.details()}")

        try:
            tools = cordon.ListTools(pb.ListToolsRequest(), timeout=10)
            check("ListTools", [t.name for t in tools.tools] == ["echo"], str(tools))
        except grpc.RpcError as e:
            check("ListTools", False, f"{e.code()} {e.details()}")

        try:
            events = list(cordon.Invoke(pb.InvokeRequest(tool="echo", arguments_json='{"text": "hello grpc"}'), timeout=30))
            kinds = [e.WhichOneof("event") for e in events]
            finished = events[-1].finished if events else None
            ok = kinds == ["accepted", "finished"] and finished.exit_code == 0 and finished.stdout == b"[hello grpc]"
            check("Invoke", ok, f"{kinds} {finished}")
        except grpc.RpcError as e:
            check("Invoke", False, f"{e.code()} {e.details()}")

        try:
            list(cordon.Invoke(pb.InvokeRequest(tool="ecko", arguments_json="{}"), timeout=10))
            check("Invoke of an unknown tool is NOT_FOUND", False, "it succeeded")
        except grpc.RpcError as e:
            code = dict(e.trailing_metadata() or ()).get("cordon-error-code")
            check(
                "Invoke of an unknown tool is NOT_FOUND",
                e.code() == grpc.StatusCode.NOT_FOUND and code == "UNKNOWN_TOOL" and "echo" in e.details(),
                f"{e.code()} {code} {e.details()}",
            )

        health = health_pb2_grpc.HealthStub(channel)
        for service in ["", "cordon.v1.Cordon"]:
            try:
                r = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
                check(f"Health/Check {service!r}", r.status == health_pb2.HealthCheckResponse.SERVING, str(r))
            except grpc.RpcError as e:
                check(f"Health/Check {service!r}", False, f"{e.code()} {e.details()}")


if __name__ == "__main__":
    sys.exit(main())
