#!/usr/bin/env python3
"""make cluster: a two-node Airlock cluster on this machine, for trying it.

Starts, in one temporary directory:
  - PostgreSQL 15 (Debian's), as an unprivileged user, on 127.0.0.1
    (tests/pg/pg-start.sh);
  - an S3-compatible server (s3rver from tests/s3, behind its Signature V4
    check) on 127.0.0.1;
  - two `airlockd up` nodes, n1 and n2, each with its own data dir and API
    port, on that database and that bucket. n2 gets n1's vault and CA keys,
    so a credential stored through either api opens on either gateway.
Prints the CLI settings to use, then waits. Ctrl-C (or SIGTERM) stops all of
it, in reverse order, and removes the directory: nothing is left behind.

Usage: scripts/cluster.py [--bin build/bin] [--templates busybox]
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_up(proc, log, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"airlockd up exited {proc.returncode}; see {log}")
        with open(log, "rb") as f:
            if b"airlock is up" in f.read():
                return
        time.sleep(0.1)
    raise RuntimeError(f"airlockd up did not come up in {timeout} s; see {log}")


class Cluster:
    def __init__(self, args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="airlock-cluster-")
        os.chmod(self.dir, 0o755)
        self.procs = []     # (name, Popen), stopped in reverse order
        self.pg_dir = os.path.join(self.dir, "pg")

    def start_pg(self):
        r = subprocess.run(["sh", os.path.join(SRC, "tests/pg/pg-start.sh"), self.pg_dir,
                            str(os.getpid())], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("PostgreSQL did not start: " + r.stderr.strip())
        return r.stdout.strip()

    def start_s3(self):
        s3 = os.path.join(SRC, "tests/s3")
        if not os.path.isdir(os.path.join(s3, "node_modules", "s3rver")):
            subprocess.run(["sh", os.path.join(s3, "setup.sh")], check=True)
        p = subprocess.Popen(["node", "--openssl-legacy-provider", os.path.join(s3, "s3server.js"),
                              "airlock"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             start_new_session=True)
        self.procs.append(("s3", p))
        port = int(p.stdout.readline().strip())
        # s3rver copies every part again to complete a multipart upload:
        # objects up to 1 GiB go as one PUT here (bench/suspend --part-mib)
        return (f"s3://airlock?endpoint=http://127.0.0.1:{port}&region=us-east-1&path_style=1"
                "&part_mib=1024")

    def start_node(self, name, db, store, keys_from=None):
        data = os.path.join(self.dir, name)
        os.makedirs(data)
        os.chmod(data, 0o755)
        if keys_from:
            # The cluster's nodes share the vault's and the CA's keys.
            os.makedirs(os.path.join(data, "keys"), mode=0o700)
            for f in ("keys/vault.key", "keys/ca.key", "vault.pub", "ca.crt"):
                shutil.copy2(os.path.join(keys_from, f), os.path.join(data, f))
        port = free_port()
        log = os.path.join(self.dir, name + ".log")
        env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER")
        with open(log, "ab") as lf:
            p = subprocess.Popen([os.path.join(self.args.bin, "airlockd"), "up",
                                  "--data-dir", data, "--listen", f"127.0.0.1:{port}",
                                  "--node-name", name, "--db", db, "--object-store", store,
                                  "--templates", self.args.templates,
                                  # BYOK's local provider: one key directory for
                                  # both, or a node cannot open the data keys of
                                  # a sandbox suspended on the other
                                  "--set", "tenant_key_dir=" + os.path.join(self.dir, "tenant-keys")],
                                 stdout=lf, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
        self.procs.append((name, p))
        print(f"[cluster] {name}: starting (log {log})", flush=True)
        wait_up(p, log, 900)
        return data, port

    def stop(self):
        for name, p in reversed(self.procs):
            if p.poll() is not None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            print(f"[cluster] {name}: stopped", flush=True)
        if os.path.isdir(self.pg_dir):
            subprocess.run(["sh", os.path.join(SRC, "tests/pg/pg-stop.sh"), self.pg_dir],
                           capture_output=True)
            print("[cluster] postgresql: stopped", flush=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(SRC, "build", "bin"))
    ap.add_argument("--templates", default="busybox")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("make cluster: run as root (airlockd up needs it)")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    cl = Cluster(args)
    try:
        db = cl.start_pg()
        print(f"[cluster] postgresql: {db}", flush=True)
        store = cl.start_s3()
        print(f"[cluster] object store: {store}", flush=True)
        d1, p1 = cl.start_node("n1", db, store)
        d2, p2 = cl.start_node("n2", db, store, keys_from=d1)
        with open(os.path.join(d1, "cli.json")) as f:
            key = json.load(f)["api_key"]
        print(f"""
Airlock cluster is up: nodes n1 (http://127.0.0.1:{p1}) and n2 (http://127.0.0.1:{p2}),
one PostgreSQL, one S3 bucket. Either API serves every sandbox. In another shell:

  export AIRLOCK_CONFIG={d1}/cli.json     # or: AIRLOCK_URL=http://127.0.0.1:{p2} AIRLOCK_API_KEY={key}
  airlock node ls
  airlock create --template busybox --node n2
  airlock suspend SBX ; airlock restore SBX --node n1

Ctrl-C stops the cluster and removes {cl.dir}.""", flush=True)
        while not stop:
            for name, p in cl.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited {p.returncode}")
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    except RuntimeError as e:
        print(f"[cluster] {e}", file=sys.stderr)
    finally:
        print("\n[cluster] stopping", flush=True)
        cl.stop()


if __name__ == "__main__":
    main()
