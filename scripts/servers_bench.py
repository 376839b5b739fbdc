#!/usr/bin/env python3
"""The servers' benchmarks, all in one run; prints the BENCHMARKS.md section.

    GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000 python3 scripts/servers_bench.py

What it does, in order:
1. builds the release examples (resp_server, resp_server_tokio_util, echo_load; features tokio and
   io-uring) and the release test binaries resp_alloc and resp_idle_memory;
2. RESP: starts the packetpipe server (on the epoll transport, and again with `--transport uring`,
   on the io_uring driver), the tokio-util server and redis-server (each on a free
   loopback port; redis-server with --save "" --appendonly no), pinned to CPU 1 with taskset, and
   runs redis-benchmark pinned to CPU 0:
       redis-benchmark -t set,get -n 500000 -P 16 --csv
       redis-benchmark -t set,get -n 20000 -d 100000 -P 4 --csv
   after a warm-up pass (a fifth of the requests, not counted), 3 times each (the servers
   alternate within each repeat), reading each server's CPU time from /proc/<pid>/stat and the
   client's from getrusage around each run; then the 100 KB command once more against servers
   and client started without GLIBC_TUNABLES (what the tunable changes);
3. allocations per request in steady state (tests/resp_alloc.rs, in-process) and heap per idle
   connection with 10,000 connections (tests/resp_idle_memory.rs);
4. echo: examples/echo_load (c = 1, 16, 256 x K = 1, 16; 2 s each, 3 repeats), whose servers
   include echo_server's on the io_uring driver (what `echo_server --transport uring` runs);
5. lines: examples/lines_load (4 connections x 20,000 pipelined lines, packetpipe's `Framed` +
   `Lines` against tokio-util's `Framed` + `LinesCodec`, in-process; at least 7 repeats) and
   examples/rpc_blocking (100,000 sequential length-prefixed round trips over std `TcpStream`,
   packetpipe's blocking connection against `BufReader`/`BufWriter`; at least 5 repeats);
6. prints the markdown section: machine, load averages, commands, tables with medians and ratios.

The raw output of every client goes to stderr as it runs. Options: --repeats N (default 3),
--quick (fewer requests and shorter echo runs, to try the script out; not for BENCHMARKS.md),
--no-uring (leave the io_uring servers out: where io_uring is unavailable the script stops with a
message without it, rather than label an epoll fallback io_uring).
"""

import argparse
import csv
import io
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import textwrap
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# Where cargo puts the binaries (CARGO_TARGET_DIR when set, as cargo itself does).
TARGET = os.path.abspath(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"))
TUNABLE = "glibc.cpu.x86_rep_movsb_threshold=2000000"
SERVERS = ["packetpipe", "packetpipe-uring", "tokio-util", "redis-server"]
# The packetpipe servers, each compared with the others.
OURS = ["packetpipe", "packetpipe-uring"]
# The names in the tables.
LABEL = {"packetpipe": "packetpipe", "packetpipe-uring": "packetpipe io_uring",
         "tokio-util": "tokio-util", "redis-server": "redis-server"}


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, cwd=ROOT, **kw).stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinned(cpu, cmd):
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(cpu)] + cmd
    return cmd


def env_with(tunable):
    env = dict(os.environ)
    if tunable:
        env["GLIBC_TUNABLES"] = TUNABLE
    else:
        env.pop("GLIBC_TUNABLES", None)
    return env


class Server:
    """One server process, pinned to CPU 1."""

    def __init__(self, name, tunable):
        self.name = name
        self.port = free_port()
        env = env_with(tunable)
        addr = f"127.0.0.1:{self.port}"
        if name == "packetpipe":
            cmd = [os.path.join(TARGET, "release/examples/resp_server"), addr]
        elif name == "packetpipe-uring":
            cmd = [os.path.join(TARGET, "release/examples/resp_server"), addr,
                   "--transport", "uring"]
        elif name == "tokio-util":
            cmd = [os.path.join(TARGET, "release/examples/resp_server_tokio_util"), addr]
        else:
            cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--daemonize", "no",
                   "--dir", "/tmp", "--logfile", ""]
        # The server's stderr: where resp_server says it fell back from io_uring to epoll.
        self.stderr = open(os.devnull if name != "packetpipe-uring" else
                           os.path.join("/tmp", f"servers_bench-{os.getpid()}-{self.port}.err"), "w+")
        self.proc = subprocess.Popen(pinned(1, cmd), env=env, stdout=subprocess.DEVNULL,
                                     stderr=self.stderr)
        deadline = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"{name} did not start on port {self.port}")
                time.sleep(0.05)
        if name == "packetpipe-uring":
            self.stderr.seek(0)
            said = self.stderr.read()
            if "epoll transport" in said:
                self.stop()
                raise RuntimeError(f"resp_server --transport uring is not on io_uring here ({said.strip()}); "
                                   f"run with --no-uring to leave it out")

    def cpu_seconds(self):
        """User + system CPU time of the server process so far."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)
        name = self.stderr.name
        self.stderr.close()
        if name != os.devnull:
            os.unlink(name)


def redis_benchmark(server, args, tunable):
    """One redis-benchmark run: {test: requests per second}, the server's CPU seconds and the
    client's (user + system, and system alone)."""
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(server.port)] + args + ["--csv"]
    cpu = server.cpu_seconds()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(pinned(0, cmd), env=env_with(tunable), text=True, capture_output=True,
                         timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = server.cpu_seconds() - cpu
    client_sys = after.ru_stime - before.ru_stime
    client = after.ru_utime - before.ru_utime + client_sys
    rows = list(csv.reader(io.StringIO(out.stdout)))
    summary = " ".join(f"{row[0]} {row[1]}/s p50 {row[4]} ms" for row in rows[1:] if len(row) > 4)
    log(f"  {server.name}: {' '.join(args)}: {summary}; server CPU {cpu:.2f} s, "
        f"client CPU {client:.2f} s ({client_sys:.2f} s system)")
    if out.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed against {server.name}: {out.stderr}")
    rps = {row[0]: float(row[1]) for row in rows[1:] if len(row) > 1}
    return rps, cpu, client, client_sys


def median(values):
    return statistics.median(values)


def fmt_rate(x):
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.1f} k"


def run_resp(commands, repeats, tunable):
    """results[command][server] = list of ({test: rps}, cpu seconds), one per repeat."""
    servers = [Server(name, tunable) for name in SERVERS]
    results = {c: {s.name: [] for s in servers} for c, _ in commands}
    try:
        # A warm-up pass (a fifth of the requests, not counted): pools, allocators, caches.
        for _, args in commands:
            n = args.index("-n") + 1
            short = args[:n] + [str(max(1, int(args[n]) // 5))] + args[n + 1:]
            for server in servers:
                redis_benchmark(server, short, tunable)
        for repeat in range(repeats):
            for label, args in commands:
                for server in servers:
                    results[label][server.name].append(redis_benchmark(server, args, tunable))
    finally:
        for server in servers:
            server.stop()
    return results


def resp_table(results, commands, requests_of):
    ours = [s for s in OURS if s in SERVERS]
    others = [s for s in SERVERS if s not in OURS]
    ratio_names = [f"{LABEL[p]} / {o}" for p in ours for o in others]
    lines = [
        "| command | test | " + " | ".join(LABEL[s] for s in SERVERS) + " | " + " | ".join(ratio_names) + " |",
        "|---|---|" + "---:|" * (len(SERVERS) + len(ratio_names)),
    ]
    cpu_lines = [
        "| command | server CPU " + " | ".join(LABEL[s] for s in SERVERS) + " | " + " | ".join(ratio_names)
        + " | client CPU (system) against " + " | ".join(LABEL[s] for s in SERVERS) + " |",
        "|---|" + "---:|" * (2 * len(SERVERS) + len(ratio_names)),
    ]
    for label, _ in commands:
        runs = results[label]
        for test in ["SET", "GET"]:
            rate = {s: median([r[0][test] for r in runs[s]]) for s in SERVERS}
            ratio = lambda ours, other: median([p[0][test] / o[0][test]
                                                for p, o in zip(runs[ours], runs[other])])
            lines.append(
                f"| `{label}` | {test} | " + " | ".join(fmt_rate(rate[s]) for s in SERVERS) + " | "
                + " | ".join(f"**{ratio(p, o):.2f}x**" for p in ours for o in others) + " |")
        n = requests_of[label]
        cpu = {s: median([r[1] for r in runs[s]]) / n * 1e6 for s in SERVERS}
        cpu_ratio = lambda ours, other: median([p[1] / o[1] for p, o in zip(runs[ours], runs[other])])
        client = {s: median([r[2] for r in runs[s]]) / n * 1e6 for s in SERVERS}
        client_sys = {s: median([r[3] for r in runs[s]]) / n * 1e6 for s in SERVERS}
        cpu_lines.append(
            f"| `{label}` | " + " | ".join(f"{cpu[s]:.2f}" for s in SERVERS) + " | "
            + " | ".join(f"{cpu_ratio(p, o):.2f}x" for p in ours for o in others) + " "
            + " ".join(f"| {client[s]:.2f} ({client_sys[s]:.2f})" for s in SERVERS) + " |")
    return "\n".join(lines), "\n".join(cpu_lines)


def cargo_test_output(test):
    out = subprocess.run(["cargo", "test", "--release", "-p", "packetpipe-tests", "--features", "tokio", "--test", test,
                          "--", "--nocapture", "--test-threads", "1"],
                         cwd=ROOT, text=True, capture_output=True, env=env_with(True), timeout=900)
    log(out.stdout)
    if out.returncode != 0:
        raise RuntimeError(f"cargo test --test {test} failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout


def uptime():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def machine():
    lscpu = sh(["lscpu"])
    pick = lambda key: next((l.split(":", 1)[1].strip() for l in lscpu.splitlines()
                             if l.startswith(key + ":")), "?")
    glibc = platform.libc_ver()[1]
    rustc = sh(["rustc", "--version"]).strip()
    redis = sh(["redis-server", "--version"]).split()[2].replace("v=", "")
    bench = subprocess.run(["redis-benchmark", "--version"], text=True, capture_output=True).stdout.strip()
    commit = sh(["git", "rev-parse", "--short", "HEAD"]).strip()
    dirty = " plus uncommitted changes" if sh(["git", "status", "--porcelain", "--untracked-files=no"]).strip() else ""
    return (f"{pick('Model name')} (family {pick('CPU family')}, model {pick('Model')}; "
            f"{pick('CPU(s)')} CPUs, {pick('Thread(s) per core')} thread(s) per core, "
            f"L2 {pick('L2 cache')}, L3 {pick('L3 cache')}), {pick('Hypervisor vendor')} VM; "
            f"Linux {platform.release()}, glibc {glibc}; {rustc}; redis-server {redis}, {bench}; "
            f"code: commit `{commit}`{dirty}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-uring", action="store_true")
    opts = parser.parse_args()
    if opts.no_uring:
        SERVERS.remove("packetpipe-uring")

    for binary in ["redis-benchmark", "redis-server", "redis-cli"]:
        if not shutil.which(binary):
            sys.exit(f"{binary} is missing: apt-get install -y redis-tools redis-server")
    tunable_set = os.environ.get("GLIBC_TUNABLES") == TUNABLE
    log("=== building")
    features = "tokio" if opts.no_uring else "tokio,io-uring"
    subprocess.run(["cargo", "build", "--release", "--features", features, "--example", "resp_server"],
                   cwd=ROOT, check=True)
    perf_features = [] if opts.no_uring else ["--features", "io-uring"]
    subprocess.run(["cargo", "build", "--release", "-p", "packetpipe-perf", *perf_features,
                    "--example", "resp_server_tokio_util", "--example", "echo_load", "--example", "lines_load",
                    "--example", "rpc_blocking"], cwd=ROOT, check=True)
    subprocess.run(["cargo", "test", "--release", "-p", "packetpipe-tests", "--features", "tokio", "--no-run",
                    "--test", "resp_alloc", "--test", "resp_idle_memory"], cwd=ROOT, check=True)

    small_n, large_n = (100000, 4000) if opts.quick else (500000, 20000)
    commands = [
        (f"-t set,get -n {small_n} -P 16", ["-t", "set,get", "-n", str(small_n), "-P", "16"]),
        (f"-t set,get -n {large_n} -d 100000 -P 4",
         ["-t", "set,get", "-n", str(large_n), "-d", "100000", "-P", "4"]),
    ]
    requests_of = {commands[0][0]: 2 * small_n, commands[1][0]: 2 * large_n}

    load = {"start": uptime()}
    log(f"=== RESP, tunable {'on' if tunable_set else 'off'} (load {load['start']})")
    resp = run_resp(commands, opts.repeats, tunable_set)
    load["resp"] = uptime()
    log(f"=== RESP 100 KB, tunable off (load {load['resp']})")
    resp_off = run_resp(commands[1:], 1, False)
    load["resp_off"] = uptime()

    log("=== allocations per request, idle memory")
    allocs = cargo_test_output("resp_alloc")
    idle = cargo_test_output("resp_idle_memory")
    load["tests"] = uptime()

    log("=== echo")
    echo_args = ["--seconds", "0.5", "--warmup", "0.2", "--repeats", "1"] if opts.quick else \
        ["--repeats", str(opts.repeats)]
    echo = subprocess.run([os.path.join(TARGET, "release/examples/echo_load")] + echo_args,
                          text=True, capture_output=True, env=env_with(tunable_set), timeout=3600)
    log(echo.stdout)
    if echo.returncode != 0:
        raise RuntimeError(f"echo_load failed: {echo.stderr}")
    load["echo"] = uptime()

    def example(name, args):
        log(f"=== {name}")
        run = subprocess.run([os.path.join(TARGET, "release/examples", name)] + args, text=True,
                             capture_output=True, env=env_with(tunable_set), timeout=3600)
        log(run.stdout)
        if run.returncode != 0:
            raise RuntimeError(f"{name} failed: {run.stderr}")
        return run.stdout[run.stdout.index("Medians over"):].strip()

    lines_args = ["--repeats", "3" if opts.quick else str(max(7, opts.repeats))]
    if opts.quick:
        lines_args += ["--requests", "5000"]
    lines_table = example("lines_load", lines_args)
    load["lines"] = uptime()
    rpc_args = ["--repeats", "3" if opts.quick else str(max(5, opts.repeats))]
    if opts.quick:
        rpc_args += ["--round-trips", "10000"]
    rpc_table = example("rpc_blocking", rpc_args)
    load["end"] = uptime()

    # ---------------------------------------------------------------------------------------------
    rate_table, cpu_table = resp_table(resp, commands, requests_of)
    off_rate, off_cpu = resp_table(resp_off, commands[1:], requests_of)
    alloc_rows = re.findall(r"(Pipe|TokioUtil) server, ([^:\n]*): ([0-9.]+) allocations per request",
                            allocs)
    alloc_by = {}
    for flavor, workload, n in alloc_rows:
        alloc_by.setdefault(workload, {})[flavor] = n
    idle_line = re.search(r"(\d+) idle RESP connections: packetpipe server (\d+) heap bytes each, "
                          r"tokio-util server (\d+) each \(([0-9.]+)x\); pooled blocks outstanding (\d+)",
                          idle)
    echo_table = echo.stdout[echo.stdout.index("Medians over"):].strip()

    out = []
    out.append(f"**Machine and conditions.** {machine()}. Load average (1, 5, 15 min; the benchmark's "
               f"own clients and servers count about 1) at the start "
               f"{load['start']}; after the RESP runs {load['resp']}; after the run without the tunable "
               f"{load['resp_off']}; after the in-process tests {load['tests']}; after echo {load['echo']}; "
               f"after lines_load {load['lines']}; at the end {load['end']}. "
               f"`GLIBC_TUNABLES={TUNABLE}` {'set' if tunable_set else 'NOT set'} for the servers and "
               f"clients (except the run without it). The RESP servers run pinned to CPU 1 "
               f"(`taskset -c 1`), redis-benchmark to CPU 0 (`taskset -c 0`); all the servers are "
               f"single-threaded (the examples on a current-thread tokio runtime or, with `--transport "
               f"uring`, on one io_uring driver thread). echo_load is one process (servers on their own "
               f"threads, clients on the main thread), not pinned.")
    out[-1] = textwrap.fill(out[-1], width=100, break_on_hyphens=False, break_long_words=False)
    out.append("")
    out.append("```text")
    out.append(f"GLIBC_TUNABLES={TUNABLE} python3 scripts/servers_bench.py"
               + (f" --repeats {opts.repeats}" if opts.repeats != 3 else "") + (" --quick" if opts.quick else ""))
    for label, _ in commands:
        out.append(f"redis-benchmark -h 127.0.0.1 -p PORT {label} --csv   # 50 clients (the default)")
    out.append("target/release/examples/echo_load " + " ".join(echo_args))
    out.append("target/release/examples/lines_load " + " ".join(lines_args))
    out.append("target/release/examples/rpc_blocking " + " ".join(rpc_args))
    out.append("```")
    out.append("")
    out.append(f"### RESP: requests per second (median of {opts.repeats} runs)")
    out.append("")
    out.append("Ratios are medians of the per-repeat ratios (the servers measured back to back). "
               "packetpipe io_uring: `resp_server --transport uring`.")
    out.append("")
    out.append(rate_table)
    out.append("")
    out.append("### RESP: CPU time per request (µs, median; user + system)")
    out.append("")
    out.append("The server's from `/proc/PID/stat` around each run, the client's (redis-benchmark) from "
               "`getrusage(RUSAGE_CHILDREN)`, with its system time in parentheses.")
    out.append("")
    out.append(cpu_table)
    out.append("")
    out.append("### RESP, 100 KB values without the tunable (one run)")
    out.append("")
    out.append(off_rate)
    out.append("")
    out.append(off_cpu)
    out.append("")
    out.append("### RESP: allocations per request in steady state (in-process, `tests/resp_alloc.rs`)")
    out.append("")
    out.append("| workload | packetpipe | tokio-util |")
    out.append("|---|---:|---:|")
    for workload, by in alloc_by.items():
        out.append(f"| {workload} | **{by.get('Pipe', '?')}** | {by.get('TokioUtil', '?')} |")
    out.append("")
    out.append("### RESP: heap per idle connection (`tests/resp_idle_memory.rs`)")
    out.append("")
    if idle_line:
        n, pipe, tu, ratio, outstanding = idle_line.groups()
        out.append("| connections | packetpipe | tokio-util | ratio | pooled blocks held (packetpipe) |")
        out.append("|---:|---:|---:|---:|---:|")
        out.append(f"| {int(n):,} | {int(pipe):,} B | {int(tu):,} B | **{ratio}x** | {outstanding} |")
    out.append("")
    out.append("### Echo (`examples/echo_load`, 64-byte messages)")
    out.append("")
    out.append(echo_table)
    out.append("")
    lines_each = "5,000" if opts.quick else "20,000"
    out.append(f"### Lines (`examples/lines_load`, 4 connections x {lines_each} pipelined 32-byte lines)")
    out.append("")
    out.append(lines_table)
    out.append("")
    round_trips = "10,000" if opts.quick else "100,000"
    out.append(f"### Blocking RPC (`examples/rpc_blocking`, {round_trips} sequential round trips, 32-byte payloads)")
    out.append("")
    out.append(rpc_table)
    print("\n".join(out))


if __name__ == "__main__":
    main()
