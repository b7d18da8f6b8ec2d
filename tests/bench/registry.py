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
  notifications/initialized, tools/list) and reports the first (cold: nothing fetched yet)
  and later (warm) listings as a client following `nextCursor` sees them (every page, and the
  slowest page), the listing after a reload, and the front-end's RSS after listing.

With `--baseline DIR` (another build's `cordond` and `cordon`, e.g. a release build of an older commit) both
builds are measured in the same run, in alternating rounds (`--rounds`), and each figure is
printed for both with the ratio this/baseline.

Nothing is asserted: it prints a table. Build first:

    cargo build --release -p cordon-daemon -p cordon-client
    python3 tests/bench/registry.py [--tools 10000] [--files 100] [--reloads 5] [--bin target/release]
        [--baseline DIR] [--rounds 2]

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
    """Every page of tools/list as a client following nextCursor: (total time, pages, slowest
    page's time)."""
    r, elapsed = mcp.rpc("tools/list", {})
    tools = r.get("result", {}).get("tools")
    if tools is None:
        raise RuntimeError(f"tools/list failed: {r}")
    cursor = r["result"].get("nextCursor")
    count, pages, slowest = len(tools), 1, elapsed
    while cursor:
        r, more = mcp.rpc("tools/list", {"cursor": cursor})
        if "result" not in r:
            raise RuntimeError(f"tools/list page failed: {r}")
        elapsed += more
        slowest = max(slowest, more)
        pages += 1
        count += len(r["result"]["tools"])
        cursor = r["result"].get("nextCursor")
    if count < expect:
        raise RuntimeError(f"tools/list listed {count} tools, expected at least {expect}")
    return elapsed, pages, slowest


def ms(seconds):
    return f"{seconds * 1000:.1f} ms"


def measure(cordond, cordon, pol, tmp, args, per_file, total):
    """One build's figures: a list of (figure, number, unit)."""
    for i in range(args.files):
        with open(os.path.join(pol, f"{i:03d}.toml"), "w") as f:
            f.write(policy_file(i, per_file))
    run = tempfile.mkdtemp(prefix="run-", dir=tmp)
    os.chmod(run, 0o755)
    sock = os.path.join(run, "run", "cordon.sock")
    cmd = [cordond, "--policies", pol, "--socket", sock, "--audit", os.path.join(run, "audit", "audit.jsonl")]
    if os.geteuid() == 0:
        cmd += ["--socket-group", "", "--admin-group", ""]
    log = open(os.path.join(run, "cordond.log"), "w")
    rows = []
    t0 = time.monotonic()
    daemon = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                              env=dict(os.environ, CORDON_LOG="warn"))
    mcp = None
    kib = 1 / 1024
    try:
        deadline = time.monotonic() + 120
        while True:
            if daemon.poll() is not None:
                sys.exit(f"cordond exited: see {run}/cordond.log")
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
        rows.append(("cordond start (load + listen)", started * 1000, "ms"))
        rows.append(("cordond RSS after start", status_kib(pid, "VmRSS") * kib, "MB"))

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
            rows.append((f"reload time ({args.reloads}x, median)", statistics.median(times) * 1000, "ms"))
        rows.append((f"cordond RSS after {args.reloads} reloads", status_kib(pid, "VmRSS") * kib, "MB"))

        mcp = Mcp(cordon, sock)
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
        mcp.rpc("initialize", init)
        mcp.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        cold, pages, cold_slowest = timed_list(mcp, total)
        rows.append(("cordon mcp RSS after the first listing", status_kib(mcp.proc.pid, "VmRSS") * kib, "MB"))
        warm = [timed_list(mcp, total) for _ in range(args.lists)]
        rows.append(("tools/list pages (following nextCursor)", pages, ""))
        rows.append(("tools/list largest answer line (last page)", mcp.last_size / 1e6, "MB"))
        rows.append(("tools/list first, cold: all pages", cold * 1000, "ms"))
        rows.append(("tools/list first, cold: slowest page", cold_slowest * 1000, "ms"))
        rows.append((f"tools/list warm, all pages ({args.lists}x median)", statistics.median(w[0] for w in warm) * 1000, "ms"))
        rows.append(("tools/list warm, slowest page (max)", max(w[2] for w in warm) * 1000, "ms"))
        # One changed file, reload, then the first tools/list of the new generation.
        with open(os.path.join(pol, "000.toml"), "w") as f:
            f.write(policy_file(0, per_file, marker=" (edit mcp)"))
        reload()
        mcp.wait_notification("notifications/tools/list_changed")
        after = timed_list(mcp, total)
        rows.append(("tools/list first after a reload: all pages", after[0] * 1000, "ms"))
        rows.append(("tools/list first after a reload: slowest page", after[2] * 1000, "ms"))
        rows.append(("cordon mcp RSS at the end", status_kib(mcp.proc.pid, "VmRSS") * kib, "MB"))
        rows.append(("cordon mcp peak RSS (VmHWM)", status_kib(mcp.proc.pid, "VmHWM") * kib, "MB"))
        rows.append(("cordond RSS at the end", status_kib(pid, "VmRSS") * kib, "MB"))
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
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools", type=int, default=10000)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--reloads", type=int, default=5)
    ap.add_argument("--lists", type=int, default=20, help="warm tools/list samples")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "..", "target", "release"))
    ap.add_argument("--baseline", help="another build's directory (cordond, cordon) measured in the same run")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds of each build")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()

    builds = [("this", os.path.abspath(args.bin))]
    if args.baseline:
        builds.insert(0, ("baseline", os.path.abspath(args.baseline)))
    for _, d in builds:
        for b in ("cordond", "cordon"):
            if not os.access(os.path.join(d, b), os.X_OK):
                sys.exit(f"{d}/{b} is missing: cargo build --release -p cordon-daemon -p cordon-client")
    per_file = max(1, args.tools // args.files)
    total = per_file * args.files

    tmp = tempfile.mkdtemp(prefix="cordon-bench-registry-")
    os.chmod(tmp, 0o755)
    pol = os.path.join(tmp, "policies")
    os.mkdir(pol, 0o755)
    results = {label: [] for label, _ in builds}
    try:
        for r in range(args.rounds):
            order = builds if r % 2 == 0 else list(reversed(builds))
            for label, d in order:
                results[label].append(measure(os.path.join(d, "cordond"), os.path.join(d, "cordon"), pol, tmp,
                                              args, per_file, total))
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    def fmt(values, unit):
        lo, hi = min(values), max(values)
        one = (lambda v: f"{v:.0f}") if unit == "" else (lambda v: f"{v:.1f}")
        text = one(lo) if lo == hi else f"{one(lo)}-{one(hi)}"
        return f"{text} {unit}".strip()

    print(f"registry scale: {total} tools in {args.files} files, {os.cpu_count()} cpus, {args.rounds} round(s)")
    figures = [(name, unit) for name, _, unit in results["this"][0]]
    head = ["figure"] + [label for label, _ in builds] + (["this/baseline"] if args.baseline else [])
    table = []
    for i, (name, unit) in enumerate(figures):
        row = [name]
        for label, _ in builds:
            row.append(fmt([rows[i][1] for rows in results[label]], unit))
        if args.baseline:
            ratios = [t[i][1] / b[i][1] for t, b in zip(results["this"], results["baseline"]) if b[i][1]]
            row.append(fmt(ratios, "x") if ratios else "-")
        table.append(row)
    widths = [max(len(str(r[c])) for r in table + [head]) for c in range(len(head))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in table:
        print("| " + " | ".join(str(v).ljust(w) for v, w in zip(r, widths)) + " |")


if __name__ == "__main__":
    main()
