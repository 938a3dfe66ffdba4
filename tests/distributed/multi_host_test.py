#!/usr/bin/env python3
"""Data-parallel training across "hosts": a real redis-server as the rendezvous store and
two groups of ranks that each act as one host.

Hosts: where this process may create network namespaces (root, `ip netns add` works), each
host is a namespace of its own joined by a veth pair (host A 10.213.0.1, host B 10.213.0.2;
redis-server runs on host A); a rank of one host can reach the other only through that
link, so its Gloo connections must listen on its host's address (--bind-addr). Otherwise the
hosts are the loopback addresses 127.0.0.2 and 127.0.0.3 (redis on 127.0.0.1). Either way the
test reads back from Redis the addresses each rank published for its Gloo pairs (the ones
its pairs listen on) and checks they are its host's.

Each host starts its ranks by hand with torchrun's environment contract (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID) and
`--rdzv redis://HOST:PORT --bind-addr ADDR`.

- Equivalence: SimpleNN, 40 steps on Fashion-MNIST, 2 + 2 ranks x batch 8 end with the
  same weights (checkpoint ONNX, rtol 1e-5) as one host's 4 ranks x batch 8 (the launcher,
  --world-size 4) and as 1 rank x batch 32.
- Bad input: a Redis store nobody serves makes a rank exit non-zero, within its timeout,
  with an error that names Redis and the address.

Fails when redis-server is not installed (scripts/install-deps.sh installs it): a missing store
must not turn the multi-host test green.

Run by CTest (target multi_host_test); by hand (as root for the namespaces):
    /usr/bin/python3 tests/distributed/multi_host_test.py --onnx-train build/tools/onnx-train --workdir /tmp/mh
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import onnx
import onnx.numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from check_tally import Checks  # noqa: E402
from ot_cli import checkpoint_weights, test_args, test_parser  # noqa: E402

REDIS = "/usr/bin/redis-server"
STEPS = "40"
COMMON = ["--epochs", "1", "--max-steps", STEPS, "--lr", "0.05", "--momentum", "0.9", "--seed", "9", "--quiet",
          "--threads", "1"]


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def max_rel_diff(ref, got):
    if set(ref) != set(got):
        return float("inf")
    return max(float(np.max(np.abs(got[k] - v)) / max(float(np.max(np.abs(v))), 1e-12)) for k, v in ref.items())


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


class Hosts:
    """Two hosts: network namespaces joined by a veth pair, or two loopback addresses."""

    def __init__(self, tag, mode):
        self.ns = None
        self.names = (f"ot-mh-{tag}-a", f"ot-mh-{tag}-b")
        self.addrs = ("127.0.0.2", "127.0.0.3")
        self.redis_host = "127.0.0.1"
        self.why_not_netns = ""
        if mode == "loopback":
            self.why_not_netns = "--hosts loopback"
            return
        if os.geteuid() != 0 or shutil.which("ip") is None:
            self.why_not_netns = "not root or no ip(8)"
            return
        # Namespaces left behind by an earlier run that was killed (its pid is gone).
        for line in run(["ip", "netns", "list"]).stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            parts = name.split("-")
            if name.startswith("ot-mh-") and len(parts) == 4 and parts[2].isdigit() and \
                    not os.path.exists(f"/proc/{parts[2]}"):
                run(["ip", "netns", "del", name])
        a, b = self.names
        steps = [["ip", "netns", "add", a], ["ip", "netns", "add", b],
                 ["ip", "-n", a, "link", "add", "veth-a", "type", "veth", "peer", "name", "veth-b", "netns", b],
                 ["ip", "-n", a, "addr", "add", "10.213.0.1/24", "dev", "veth-a"],
                 ["ip", "-n", b, "addr", "add", "10.213.0.2/24", "dev", "veth-b"]]
        for ns, dev in ((a, "veth-a"), (b, "veth-b")):
            steps += [["ip", "-n", ns, "link", "set", "lo", "up"], ["ip", "-n", ns, "link", "set", dev, "up"]]
        for step in steps:
            r = run(step)
            if r.returncode != 0:
                self.why_not_netns = f"`{' '.join(step)}` failed: {r.stderr.strip()}"
                self.close()
                return
        self.ns = self.names
        self.addrs = ("10.213.0.1", "10.213.0.2")
        self.redis_host = self.addrs[0]

    def describe(self):
        if self.ns:
            return f"network namespaces {self.ns[0]} ({self.addrs[0]}) and {self.ns[1]} ({self.addrs[1]}) over veth"
        return f"loopback addresses {self.addrs[0]} and {self.addrs[1]} ({self.why_not_netns})"

    def prefix(self, host):
        """Command prefix that runs a program on host 0 (A) or 1 (B)."""
        return ["ip", "netns", "exec", self.ns[host]] if self.ns else []

    def close(self):
        for n in self.names:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def published_addrs(redis_cmd, world):
    """{(mesh, rank): [IPv4 address of each pair]} as the ranks published them for Gloo in the
    store: key onnx-train.RUN.mesh.MESH.RANK holds one Gloo tcp address per peer (a
    sockaddr_storage and a sequence number, 136 bytes each)."""
    keys = run(redis_cmd + ["--raw", "keys", "onnx-train.*.mesh.*"]).stdout.split()
    out = {}
    for key in keys:
        parts = key.split(".")
        if not parts[-1].isdigit():
            continue
        value = subprocess.run(redis_cmd + ["--raw", "get", key], capture_output=True).stdout
        value = value[:-1] if value.endswith(b"\n") else value
        n = world - 1
        size = len(value) // n if n else 0
        addrs = []
        for i in range(n):
            entry = value[i * size:(i + 1) * size]
            family = int.from_bytes(entry[0:2], "little") if len(entry) >= 8 else -1
            addrs.append(socket.inet_ntoa(entry[4:8]) if family == socket.AF_INET else f"family {family}")
        out[(parts[-2], int(parts[-1]))] = addrs
    return out


def main():
    p = test_parser(__doc__)
    p.add_argument("--hosts", choices=["auto", "loopback"], default="auto",
                   help="auto: network namespaces where possible, else loopback addresses")
    args = test_args(p)
    if not os.path.exists(REDIS):
        print(f"FAIL: {REDIS} is not installed (Debian package redis-server, which scripts/install-deps.sh "
              "installs); the multi-host test needs a real Redis rendezvous store")
        return 1
    args.onnx_train = os.path.abspath(args.onnx_train)
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    check = Checks(width=70)

    model = os.path.join(args.workdir, "simplenn.onnx")
    run([args.onnx_train, "make-model", "simplenn", "-o", model, "--seed", "2"], check=True)

    hosts = Hosts(str(os.getpid()), args.hosts)
    procs = []
    redis = None
    try:
        print(f"hosts: {hosts.describe()}", flush=True)
        port = free_port()
        redis_log = open(os.path.join(args.workdir, "redis.log"), "w")
        redis = subprocess.Popen(hosts.prefix(0) + [REDIS, "--bind", hosts.redis_host, "--port", str(port),
                                 "--save", "", "--appendonly", "no", "--protected-mode", "no"],
                                 stdout=redis_log, stderr=subprocess.STDOUT)
        deadline = time.time() + 15
        up = False
        while time.time() < deadline and not up and redis.poll() is None:
            r = run(hosts.prefix(0) + ["redis-cli", "-h", hosts.redis_host, "-p", str(port), "ping"]) \
                if shutil.which("redis-cli") else None
            up = r is not None and r.stdout.strip() == "PONG"
            if r is None:  # no redis-cli: a TCP connect from the redis host's namespace
                r = run(hosts.prefix(0) + [sys.executable, "-c", "import socket,sys; socket.create_connection("
                                           f"('{hosts.redis_host}', {port}), timeout=1)"])
                up = r.returncode == 0
            if not up:
                time.sleep(0.1)
        if not up:
            check("redis-server starts", False, open(os.path.join(args.workdir, "redis.log")).read()[-300:])
            return 1
        rdzv = f"redis://{hosts.redis_host}:{port}"

        # Reference runs on one host: 1 rank x batch 32 and 4 ranks x batch 8 (the launcher).
        refs = {}
        for tag, world, batch in (("1x32", 1, 32), ("4x8", 4, 8)):
            ckpt = os.path.join(args.workdir, tag)
            t0 = time.time()
            r = run([args.onnx_train, model, "--world-size", str(world), "--batch", str(batch),
                     "--checkpoint-dir", ckpt] + COMMON, timeout=300)
            if r.returncode != 0:
                check(f"one host, {world} rank(s) x batch {batch}", False, (r.stdout + r.stderr)[-400:])
                return 1
            refs[tag] = checkpoint_weights(ckpt)
            print(f"  (one host, {world} rank(s) x batch {batch}: {time.time() - t0:.1f} s)", flush=True)

        # 2 + 2 ranks on two hosts, each started by hand with torchrun's environment.
        world, per_host = 4, 2
        run_id = f"mh-{os.getpid()}"
        logs = []
        t0 = time.time()
        for host in (0, 1):
            for local in range(per_host):
                rank = host * per_host + local
                env = {k: v for k, v in os.environ.items() if not k.startswith("ONNXTRAIN_")}
                env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local),
                           LOCAL_WORLD_SIZE=str(per_host), MASTER_ADDR=hosts.addrs[0], MASTER_PORT="29500",
                           TORCHELASTIC_RUN_ID=run_id, OMP_NUM_THREADS="1")
                ckpt = os.path.join(args.workdir, f"host{'AB'[host]}")
                log = open(os.path.join(args.workdir, f"rank{rank}.log"), "w+")
                cmd = hosts.prefix(host) + [args.onnx_train, model, "--batch", "8", "--checkpoint-dir", ckpt,
                                            "--rdzv", rdzv, "--bind-addr", hosts.addrs[host], "--timeout", "30",
                                            "--metrics", os.path.join(ckpt, "metrics.jsonl")]
                procs.append(subprocess.Popen(cmd + COMMON, stdout=log, stderr=subprocess.STDOUT, env=env))
                logs.append(log)
        while any(pr.poll() is None for pr in procs) and time.time() - t0 < 120:
            time.sleep(0.05)
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
            pr.wait()
        secs = time.time() - t0
        codes = [pr.returncode for pr in procs]
        outputs = []
        for log in logs:
            log.seek(0)
            outputs.append(log.read())
        ok = all(c == 0 for c in codes)
        check("2 + 2 ranks on two hosts over Redis finish", ok,
              f"({secs:.1f} s; exit codes {codes})" + ("" if ok else " " + " | ".join(o[-300:] for o in outputs)))
        if ok:
            got = checkpoint_weights(os.path.join(args.workdir, "hostA"))
            init = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}
            moved = max_rel_diff(init, got)
            check("training moved the weights", 1e-3 < moved < float("inf"), f"(max rel change {moved:.1e})")
            for tag, what in (("4x8", "one host 4 ranks x batch 8"), ("1x32", "1 rank x batch 32")):
                worst = max_rel_diff(refs[tag], got)
                check(f"two hosts 2+2 x batch 8 == {what} ({STEPS} steps)", worst <= 1e-5,
                      f"(max rel diff {worst:.1e})")
            # The reducer's overlap counters reach rank 0's metrics, one line per step.
            with open(os.path.join(args.workdir, "hostA", "metrics.jsonl")) as f:
                steps = [r for r in map(json.loads, f) if r.get("type") == "step"]
            sane = len(steps) == int(STEPS) and all(
                r["allreduce_ms"] > 0 and 0 <= r["allreduce_wait_ms"] <= r["step_ms"] and r["buckets"] >= 1
                for r in steps)
            check("metrics: step_ms, allreduce_ms > 0, 0 <= allreduce_wait_ms <= step_ms per step", sane,
                  f"({len(steps)} steps; first {json.dumps(steps[0]) if steps else None})" if not sane else "")
            check("rank 0 reports 4 ranks over gloo", "data parallel: 4 ranks over gloo" in outputs[0],
                  outputs[0][:200] if "data parallel" not in outputs[0] else "")
        # Each rank published (and listened on) its own host's address for all its Gloo pairs.
        published = {} if shutil.which("redis-cli") is None else published_addrs(hosts.prefix(0) + ["redis-cli", "-h", hosts.redis_host, "-p", str(port)], world)
        for rank in range(world):
            host = rank // per_host
            seen = sorted({a for (mesh, r), addrs in published.items() if r == rank for a in addrs})
            meshes = sorted(mesh for (mesh, r) in published if r == rank)
            check(f"rank {rank}'s Gloo pairs listen on host {'AB'[host]}'s {hosts.addrs[host]}",
                  seen == [hosts.addrs[host]] and len(meshes) == 3, f"(published {seen} for meshes {meshes})")

        # Bad input: nobody serves Redis at the address given.
        dead_port = free_port()
        bad = [(f"redis://127.0.0.1:{dead_port}", f"127.0.0.1:{dead_port}", 0)]
        if hosts.ns:  # an address on the link that no host has: connecting times out or is unreachable
            bad.append((f"redis://10.213.0.9:{port}", f"10.213.0.9:{port}", 1))
        for spec, where, host in bad:
            env = {k: v for k, v in os.environ.items() if not k.startswith("ONNXTRAIN_")}
            env.update(ONNXTRAIN_RANK="1", ONNXTRAIN_WORLD_SIZE="2", ONNXTRAIN_LOCAL_RANK="0",
                       ONNXTRAIN_RUN_ID="nobody-home")
            t0 = time.time()
            try:
                r = run(hosts.prefix(host) + [args.onnx_train, model, "--rdzv", spec, "--timeout", "4",
                                              "--bind-addr", hosts.addrs[host], "--no-checkpoints"] + COMMON,
                        env=env, timeout=60)
                code, err = r.returncode, r.stderr.strip()
            except subprocess.TimeoutExpired:
                code, err = None, "(still running after 60 s)"
            secs = time.time() - t0
            check(f"Redis at {where} unreachable: non-zero exit naming Redis and the address",
                  code not in (0, None) and "Redis" in err and where in err, f"({secs:.1f} s) {err[-200:]}")
            check("  within the timeout", code is not None and secs < 20, f"({secs:.1f} s)")
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
                pr.wait()
        if redis is not None:
            redis.terminate()
            try:
                redis.wait(timeout=10)
            except subprocess.TimeoutExpired:
                redis.kill()
                redis.wait()
        hosts.close()
    print(f"multi_host_test: {check.passed} passed, {check.failed} failed")
    return 0 if check.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
