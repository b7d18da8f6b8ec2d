#!/usr/bin/env python3
"""Registry scale: memory and latency of cordond and `cordon mcp` with many tools.

Generates N tools (default 10,000) across F policy files (default 100), each file with a
`[defaults]` table (timeout, allow, read = ["/home", "/srv"], env) and tools with typed params
(path, integer with a range, string with a pattern, enum), then:

- starts the release `cordond` on a temporary socket and reads its VmRSS/VmHWM
  (/proc/PID/status) after start;
- reloads R times (`cordon reload`): the odd ones with nothing changed, the even ones after one
  file's descriptions were edited; reports each reload's wall time and the RSS after it;
- starts `cordon mcp`, drives it over stdio with JSON-RPC lines (initialize,
  notifications/initialized, tools/list) and reports the first (cold) and later (warm)
  `tools/list` latency, the latency after a reload, and the front-end's RSS.

Nothing is asserted: it prints a table. Build first:

    cargo build --release -p cordon-daemon -p cordon-client
    python3 tests/bench/registry.py [--tools 10000] [--files 100] [--reloads 5] [--bin target/release]

As root it passes `--socket-group "" --admin-group ""` (hermetic, as the test harness does).
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

PROGRAMS = ["/bin/echo", "/usr/bin/git", "/bin/ls", "/usr/bin/grep", "/bin/cat"]


def policy_file(index, per_file, marker=""):
    """One policy file: shared defaults, `per_file` tools with four params each."""
    lines = [
        "version = 1",
        "",
        "[defaults]",
        'timeout = "1m"',
        'max_output = "512KiB"',
        'danger = "safe"',
        'allow = { groups = ["cordon"] }',
        'read = ["/home", "/srv"]',
        'env = { GIT_PAGER = "cat", LC_ALL = "C" }',
        "",
    ]
    for j in range(per_file):
        n = index * per_file + j
        name = f"tool-{n:05d}"
        program = PROGRAMS[n % len(PROGRAMS)]
        lines += [
            f"[tools.{name}]",
            f'description = "Tool number {n} of file {index}: shows things about a repository{marker}"',
            'reason = "benchmark: a realistic registry at scale"',
            f'command = ["{program}", "-C", "{{{{repo}}}}", "log", "-n", "{{{{count}}}}", "--grep", "{{{{pattern}}}}", "{{{{mode}}}}"]',
            f'annotations = {{ title = "Tool {n}", read_only = true, idempotent = true }}',
        ]
        if n % 4 == 0:
            lines.append('working_dir = "/srv"')
        if n % 10 == 0:
            lines.append('read = ["/home", "/srv", "/usr/share"]')
        lines += [
            "",
            f"[tools.{name}.params.repo]",
            'type = "path"',
            'description = "the repository\'s directory"',
            "required = true",
            "",
            f"[tools.{name}.params.count]",
            'type = "integer"',
            'description = "how many commits"',
            "min = 1",
            "max = 500",
            "default = 20",
            "",
            f"[tools.{name}.params.pattern]",
            'type = "string"',
            'description = "what to look for in commit messages"',
            'pattern = "[A-Za-z0-9_ -]{1,64}"',
            "required = true",
            "",
            f"[tools.{name}.params.mode]",
            'type = "enum"',
            'description = "which commits"',
            'values = ["--all", "--no-merges", "--first-parent"]',
            "",
        ]
    return "\n".join(lines)


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def mib(kib):
    return f"{kib / 1024:.1f} MB"


class Mcp:
    """`cordon mcp` driven over stdio with JSON-RPC lines, blocking reads."""

    def __init__(self, cordon, sock):
        self.proc = subprocess.Popen(
            [cordon, "--socket", sock, "mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.next_id = 0
        self.last_size = 0
        self.notifications = []

    def send(self, msg):
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def rpc(self, method, params):
        """The answer, and the time from sending the request to having read the whole answer
        (parsing it here is not counted: that is this script's cost, not cordon's)."""
        self.next_id += 1
        rid = self.next_id
        t = time.monotonic()
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            elapsed = time.monotonic() - t
            if not line:
                raise RuntimeError(f"cordon mcp closed stdout during {method}")
            self.last_size = len(line)
            msg = json.loads(line)
            if msg.get("id") == rid:
                return msg, elapsed
            self.notifications.append(msg)

    def wait_notification(self, method, limit=30.0):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if any(m.get("method") == method for m in self.notifications):
                self.notifications = [m for m in self.notifications if m.get("method") != method]
                return True
            os.set_blocking(self.proc.stdout.fileno(), False)
            try:
                line = self.proc.stdout.readline()
            finally:
                os.set_blocking(self.proc.stdout.fileno(), True)
            if line:
                self.notifications.append(json.loads(line))
            else:
                time.sleep(0.01)
        return False

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def timed_list(mcp, expect):
    r, elapsed = mcp.rpc("tools/list", {})
    tools = r.get("result", {}).get("tools")
    if tools is None:
        raise RuntimeError(f"tools/list failed: {r}")
    # Paginated answers: follow the cursor (the time includes every page).
    cursor = r["result"].get("nextCursor")
    count = len(tools)
    while cursor:
        r, more = mcp.rpc("tools/list", {"cursor": cursor})
        elapsed += more
        count += len(r["result"]["tools"])
        cursor = r["result"].get("nextCursor")
    if count < expect:
        raise RuntimeError(f"tools/list listed {count} tools, expected at least {expect}")
    return elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools", type=int, default=10000)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--reloads", type=int, default=5)
    ap.add_argument("--lists", type=int, default=20, help="warm tools/list samples")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "..", "target", "release"))
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()

    cordond = os.path.abspath(os.path.join(args.bin, "cordond"))
    cordon = os.path.abspath(os.path.join(args.bin, "cordon"))
    for b in (cordond, cordon):
        if not os.access(b, os.X_OK):
            sys.exit(f"{b} is missing: cargo build --release -p cordon-daemon -p cordon-client")
    per_file = max(1, args.tools // args.files)
    total = per_file * args.files

    tmp = tempfile.mkdtemp(prefix="cordon-bench-registry-")
    os.chmod(tmp, 0o755)
    pol = os.path.join(tmp, "policies")
    os.mkdir(pol, 0o755)
    for i in range(args.files):
        with open(os.path.join(pol, f"{i:03d}.toml"), "w") as f:
            f.write(policy_file(i, per_file))
    sock = os.path.join(tmp, "run", "cordon.sock")
    cmd = [cordond, "--policies", pol, "--socket", sock, "--audit", os.path.join(tmp, "audit", "audit.jsonl")]
    if os.geteuid() == 0:
        cmd += ["--socket-group", "", "--admin-group", ""]
    log = open(os.path.join(tmp, "cordond.log"), "w")
    rows = []
    t0 = time.monotonic()
    daemon = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                              env=dict(os.environ, CORDON_LOG="warn"))
    mcp = None
    try:
        deadline = time.monotonic() + 120
        while True:
            if daemon.poll() is not None:
                sys.exit(f"cordond exited: see {tmp}/cordond.log")
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(sock)
                s.close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("cordond did not listen in time")
                time.sleep(0.02)
        started = time.monotonic() - t0
        pid = daemon.pid
        rows.append(("cordond start (load + listen)", f"{started * 1000:.0f} ms"))
        rows.append(("cordond RSS after start", mib(status_kib(pid, "VmRSS"))))
        rows.append(("cordond open fds after start", str(fds(pid))))

        def reload():
            t = time.monotonic()
            r = subprocess.run([cordon, "--socket", sock, "--json", "reload"], capture_output=True)
            e = time.monotonic() - t
            if r.returncode != 0:
                raise RuntimeError(f"reload failed: {r.stdout!r} {r.stderr!r}")
            return e

        times = []
        for k in range(args.reloads):
            if k % 2 == 1:
                # Edit one file: its tools change, the other 99 files' do not.
                with open(os.path.join(pol, f"{k % args.files:03d}.toml"), "w") as f:
                    f.write(policy_file(k % args.files, per_file, marker=f" (edit {k})"))
            times.append(reload())
        if times:
            rows.append((f"reload time ({args.reloads}x: median / max)",
                         f"{statistics.median(times) * 1000:.0f} / {max(times) * 1000:.0f} ms"))
        rows.append((f"cordond RSS after {args.reloads} reloads", mib(status_kib(pid, "VmRSS"))))
        rows.append(("cordond peak RSS (VmHWM)", mib(status_kib(pid, "VmHWM"))))
        rows.append(("cordond open fds after reloads", str(fds(pid))))

        mcp = Mcp(cordon, sock)
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
        mcp.rpc("initialize", init)
        mcp.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        cold = timed_list(mcp, total)
        warm = [timed_list(mcp, total) for _ in range(args.lists)]
        rows.append(("cordon mcp tools/list answer size", f"{mcp.last_size / 1e6:.1f} MB"))
        rows.append(("cordon mcp tools/list, first (fetch)", f"{cold * 1000:.0f} ms"))
        rows.append((f"cordon mcp tools/list, warm ({args.lists}x: median / max)",
                     f"{statistics.median(warm) * 1000:.1f} / {max(warm) * 1000:.1f} ms"))
        # One changed file, reload, then the first tools/list of the new generation.
        with open(os.path.join(pol, "000.toml"), "w") as f:
            f.write(policy_file(0, per_file, marker=" (edit mcp)"))
        reload()
        mcp.wait_notification("notifications/tools/list_changed")
        after = timed_list(mcp, total)
        again = [timed_list(mcp, total) for _ in range(5)]
        rows.append(("cordon mcp tools/list, first after a reload", f"{after * 1000:.0f} ms"))
        rows.append(("cordon mcp tools/list, warm after a reload",
                     f"{statistics.median(again) * 1000:.1f} ms"))
        rows.append(("cordon mcp RSS", mib(status_kib(mcp.proc.pid, "VmRSS"))))
        rows.append(("cordon mcp peak RSS (VmHWM)", mib(status_kib(mcp.proc.pid, "VmHWM"))))
        rows.append(("cordond RSS at the end", mib(status_kib(pid, "VmRSS"))))
    finally:
        if mcp is not None:
            mcp.close()
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    print(f"registry scale: {total} tools in {args.files} files, {os.cpu_count()} cpus")
    width = max(len(r[0]) for r in rows)
    print(f"| {'figure'.ljust(width)} | value |")
    print(f"|{'-' * (width + 2)}|-------|")
    for k, v in rows:
        print(f"| {k.ljust(width)} | {v} |")


if __name__ == "__main__":
    main()
