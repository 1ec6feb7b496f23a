"""Resource faults for the chaos suite: the world, not a process, fails.

The instance (start()) runs on a PostgreSQL of its own behind a TcpProxy, an
S3-compatible store (tests/s3) behind a StoreProxy (faultproxy.py) and a
small btrfs pool, so that each can fail for real in the middle of an op:

  store   the store answers 500/503, slowly, resets a connection in the
          middle of a part, a whole put or a get body, or is down a while
  pool    the pool is full: a file written into it from the host while the
          op holds at a fault point (ENOSPC from btrfs itself)
  db      PostgreSQL unreachable (its proxy cut) or restarted (by its pid)

A case is (op, point, fault): point is a FAULT_POINT the op holds at while
the fault is put in place ("-": the fault is in place before the op). The
op may fail (an HTTP 4xx/5xx JSON error) or work; either way it must
converge: the sandbox settles (running, paused, suspended, failed with a
reason), the file written before the op is still there (a loss otherwise),
a suspend that failed left nothing restorable, the op tried again once the
fault is gone works, and once everything is deleted nothing leaks: the
host audit (leaks.py), no row of a sandbox that is gone, and no object in
the bucket that no row references."""
import datetime
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import subprocess
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET

import chaos
import faultproxy
import harness
import leaks

POOL_MB = 512
BIG_MB = 36       # a file past two 16 MiB parts: the disk goes up multipart


class World:
    """The servers the instance depends on, each behind a proxy."""

    def __init__(self):
        self.pg = self.s3 = self.store = self.db = None

    def start(self):
        self.pg = harness.Postgres()
        port = int(re.search(r":(\d+)/", self.pg.url).group(1))
        self.db = faultproxy.TcpProxy(port)
        self.db_url = self.pg.url.replace(f":{port}/", f":{self.db.port}/")
        self.s3 = harness.S3Server.start()
        if not self.s3:
            raise RuntimeError("no S3 test server (make npm-deps)")
        self.store = faultproxy.StoreProxy(self.s3.port)

    def args(self):
        return ["--db", self.db_url, "--object-store", self.store.url(),
                "--set", "s3_access_key=S3RVER", "--set", "s3_secret_key=S3RVER",
                "--pool-size-mb", str(POOL_MB), "--set", "default_disk_mb=256"]

    def stop(self):
        for p in (self.store, self.db):
            if p:
                p.close()
        if self.s3:
            self.s3.stop()
        if self.pg:
            self.pg.stop()

    # ---- PostgreSQL --------------------------------------------------------

    def pg_pid(self):
        with open(os.path.join(self.pg.dir, "data", "postmaster.pid")) as f:
            return int(f.readline())

    def pg_restart(self):
        self.pg.restart()

    # ---- the bucket, listed straight from the server (not through the proxy)

    def objects(self, prefix=""):
        keys, token = [], None
        while True:
            q = {"list-type": "2", "prefix": prefix}
            if token:
                q["continuation-token"] = token
            body = _s3_get(self.s3.port, "/airlock", q)
            root = ET.fromstring(body)
            ns = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
            keys += [c.find(ns + "Key").text for c in root.findall(ns + "Contents")]
            if (root.findtext(ns + "IsTruncated") or "false") != "true":
                return keys
            token = root.findtext(ns + "NextContinuationToken")


def _s3_get(port, path, query):
    """A GET signed with Signature V4 (S3RVER's keys), body as bytes."""
    import http.client
    now = datetime.datetime.utcnow()
    amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    host = f"127.0.0.1:{port}"
    cq = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                  for k, v in sorted(query.items()))
    empty = hashlib.sha256(b"").hexdigest()
    hdrs = {"host": host, "x-amz-content-sha256": empty, "x-amz-date": amz}
    signed = ";".join(sorted(hdrs))
    creq = "\n".join(["GET", path, cq] + [f"{k}:{hdrs[k]}" for k in sorted(hdrs)] +
                     ["", signed, empty])
    scope = f"{day}/us-east-1/s3/aws4_request"
    sts = "\n".join(["AWS4-HMAC-SHA256", amz, scope, hashlib.sha256(creq.encode()).hexdigest()])
    k = b"AWS4S3RVER"
    for part in (day, "us-east-1", "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", f"{path}?{cq}", headers={
            "Host": host, "x-amz-content-sha256": empty, "x-amz-date": amz,
            "Authorization": f"AWS4-HMAC-SHA256 Credential=S3RVER/{scope}, "
                             f"SignedHeaders={signed}, Signature={sig}"})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"list {path}: HTTP {r.status} {data[:200]!r}")
        return data
    finally:
        c.close()


def start(backend=None):
    """(world, server, fault_dir), every part up; stop() undoes it all."""
    world = World()
    try:
        world.start()
        server, fault_dir = chaos.start_server(backend, world.args())
    except Exception:
        world.stop()
        raise
    return world, server, fault_dir


def stop(world, server, fault_dir):
    try:
        chaos.sync_pool(server)
        harness.stop_and_check(server)
    finally:
        shutil.rmtree(fault_dir, ignore_errors=True)
        world.stop()


# ---- the matrix -------------------------------------------------------------

# (op, point, fault, a word on what it shows). point "-": the fault is in
# place before the op starts. Faults: store:<mode>[:<kinds>[:<start>[:<count>]]],
# store:down:<seconds>, pool:full, db:cut:<seconds>, db:restart.
SHORT = [
    # suspend: the template publish and artifact upload, the verify, the manifest
    ("suspend", "-", "store:error:put,part,initiate", "upload refused (503) every try"),
    ("suspend", "-", "store:error:part::2", "two parts answered 500, then retried"),
    ("suspend", "-", "store:reset:part:1048576:1", "a part reset after 1 MiB, once"),
    ("suspend", "-", "store:reset:part:1048576", "every part reset after 1 MiB"),
    ("suspend", "-", "store:error:head", "the verify (HEAD) answers 503"),
    ("suspend", "-", "store:error:manifest", "the manifest refused"),
    ("suspend", "-", "store:reset:manifest:100", "the manifest cut after 100 bytes"),
    ("suspend", "-", "store:slow:put,part,manifest:2", "every upload 2 s late"),
    ("suspend", "suspend.after_transition", "pool:full", "no room for the snapshot"),
    ("suspend", "suspend_upload", "db:cut:8", "PostgreSQL gone before the commit"),
    # restore: the download, receive into a full pool, the commit
    ("restore", "-", "store:error:get", "the download refused every try"),
    ("restore", "-", "store:reset:get:4096:1", "a download cut after 4 KiB"),
    ("restore", "restore.after_transition", "pool:full", "btrfs receive into a full pool"),
    ("restore", "restore.before_commit", "db:cut:8", "PostgreSQL gone at the commit"),
    # delete: a suspended sandbox's objects with the store down
    ("delete", "-", "store:down", "the store down for the delete"),
    ("delete", "delete.after_intent", "pool:full", "delete with the pool full"),
    # pause, snapshot, create
    ("pause", "-", "db:cut:5", "PostgreSQL gone for a pause"),
    ("snapshot", "snapshot.before_backend", "pool:full", "a snapshot into a full pool"),
    ("create", "create.after_record", "pool:full", "a create into a full pool"),
    ("create", "create.after_record", "db:restart", "PostgreSQL restarted mid-create"),
    ("create", "create.after_record", "db:cut:30", "PostgreSQL gone 30 s mid-create"),
]

LONG = SHORT + [
    ("suspend", "-", "store:down:60", "the store down for a minute"),
    ("suspend", "suspend_before_commit", "db:cut:30", "PostgreSQL gone 30 s at the commit"),
    ("suspend", "suspend.after_transition", "db:restart", "PostgreSQL restarted mid-suspend"),
    ("restore", "-", "store:slow:get:3", "every download 3 s late"),
    ("restore", "-", "store:down:60", "the store down for a minute"),
    ("snapshot", "-", "db:cut:30", "PostgreSQL gone 30 s for a snapshot"),
    ("pause", "-", "db:restart", "PostgreSQL restarted before a pause"),
]


class Result(chaos.Result):
    def __init__(self, op, point, fault):
        super().__init__(op, point, fault)
        self.fault, self.loss, self.leak, self.answer = fault, False, False, "-"

    def line(self):
        st = ",".join(self.states.values()) or "-"
        verdict = "ok" if self.ok else "FAIL"
        extra = "" if self.ok else ": " + "; ".join(self.problems)
        return (f"{verdict:4} {self.op:8} {self.point:25} {self.fault:34} {self.answer:4} -> "
                f"{st:10} {self.seconds:5.1f}s{extra}")


class ResourceChaos(chaos.Chaos):
    def __init__(self, world, server, fault_dir, backend=None, log=print):
        super().__init__(server, fault_dir, backend, log)
        self.world = world
        self.fill_path = os.path.join(server.dir, "pool", "chaos-fill")

    # ---- faults ------------------------------------------------------------

    def fill_pool(self):
        """Write into the pool from the host until btrfs says ENOSPC."""
        with open(self.fill_path, "wb") as f:
            chunk = b"\xa5" * (1 << 20)
            try:
                while True:
                    f.write(chunk)
                    f.flush()
            except OSError:
                pass
        # the last bytes too (small files in metadata, the log)
        for i in range(64):
            try:
                with open(f"{self.fill_path}.{i}", "wb") as f:
                    f.write(b"\xa5" * 4096)
            except OSError:
                break
        subprocess.run(["sync", "-f", self.fill_path], capture_output=True)

    def unfill_pool(self):
        for p in [self.fill_path] + [f"{self.fill_path}.{i}" for i in range(64)]:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        subprocess.run(["sync", "-f", os.path.dirname(self.fill_path)], capture_output=True)

    def apply(self, fault):
        """Put the fault in place; returns what undoes it (None: nothing
        to undo, e.g. a restart that is over)."""
        w = self.world
        kind, _, rest = fault.partition(":")
        if kind == "store":
            parts = rest.split(":")
            mode = parts[0]
            if mode == "down":
                w.store.go_down()
                secs = float(parts[1]) if len(parts) > 1 else None
                if secs:   # the outage lasts its time, whatever the op answered
                    t = threading.Timer(secs, w.store.come_up)
                    t.start()
                    return lambda: (t.join(), w.store.clear())
                return w.store.clear
            kinds = parts[1].split(",") if len(parts) > 1 and parts[1] else None
            if mode == "slow":
                w.store.rule("slow", kinds, delay=float(parts[2]))
            else:
                start = int(parts[2]) if len(parts) > 2 and parts[2] else 0
                count = int(parts[3]) if len(parts) > 3 and parts[3] else None
                w.store.rule(mode, kinds, start=start, count=count,
                             status=500 if count else 503)
            return w.store.clear
        if kind == "pool":
            self.fill_pool()
            return self.unfill_pool
        if kind == "db" and rest.startswith("cut"):
            w.db.cut()
            t = threading.Timer(float(rest.split(":")[1]), w.db.heal)
            t.start()
            return lambda: (t.join(), w.db.heal())
        if kind == "db" and rest == "restart":
            old = w.pg_pid()
            w.pg_restart()
            if w.pg_pid() == old:
                raise chaos.CaseFailed("PostgreSQL did not restart")
            return None
        raise ValueError(fault)

    # ---- one case ----------------------------------------------------------

    def prepare_r(self, op, fault):
        if op == "create":
            return None, None
        sid = self.create()
        token = secrets.token_hex(8)
        big = "store:" in fault and ("part" in fault or "down" in fault or "get" in fault)
        script = f"mkdir -p /work && echo {token} > /work/keep"
        if big:   # incompressible: the upload is multipart
            script += f" && head -c {BIG_MB << 20} /dev/urandom > /work/big"
        self.sh(sid, script + " && sync")
        if op in ("restore", "delete") and ("store" in fault or op == "restore"):
            self.api.call("POST", f"/v1/sandboxes/{sid}/suspend", {}, expect=(200,))
        return sid, token

    def do_op_r(self, op, sid):
        if op == "pause":
            try:
                return 200, self.api.call("POST", f"/v1/sandboxes/{sid}/pause", {},
                                          expect=(200,))
            except (harness.ApiError, OSError) as e:
                return None, e
        return self.do_op(op, sid)

    def run_case(self, op, point, fault, _why=""):
        res = Result(op, point, fault)
        t0 = time.time()
        undo = None
        try:
            undo = self._run_r(res, op, point, fault)
            res.ok = not res.problems
        except chaos.CaseFailed as e:
            res.problems.append(str(e))
        except Exception as e:
            res.problems.append(f"{type(e).__name__}: {e}")
        finally:
            if point != "-":
                self.disarm(point)
        try:
            if undo:
                undo()
            self.world.store.clear()
            self.world.db.heal()
            self.unfill_pool()
            self.wait_daemons()
            self.delete_all()
            # what the deletes freed, freed now (btrfs cleans deleted
            # subvolumes lazily): the next case starts with the pool's room
            subprocess.run(["btrfs", "filesystem", "sync",
                            os.path.join(self.server.dir, "pool")], capture_output=True)
            chaos.sync_pool(self.server)
            left = leaks.audit(self.server, self.base) + self.audit_store_and_rows()
            if left:
                res.leak = True
                res.problems.append("leaked: " + "; ".join(left[:8]))
                self.base = leaks.snapshot(self.server)
                self.store_base = set(self.world.objects())
        except Exception as e:
            res.problems.append(f"cleanup: {type(e).__name__}: {e}")
        res.ok = not res.problems
        res.seconds = time.time() - t0
        self.log(res.line())
        return res

    def baseline(self):
        super().baseline()
        self.store_base = set(self.world.objects())

    def audit_store_and_rows(self, wait_s=30):
        """Objects in the bucket that no row references (what a live
        sandbox's suspensions row names, or the baseline's templates), and
        rows of sandboxes that are gone. [] when clean."""
        deadline = time.time() + wait_s
        while True:
            live = {r[0]: r[1] for r in self.world.pg.query(
                "SELECT s.sandbox_id, s.snapshot_id FROM suspensions s JOIN sandboxes b "
                "ON b.id=s.sandbox_id WHERE b.observed<>'deleted'")}
            left = []
            for k in sorted(set(self.world.objects()) - self.store_base):
                m = re.match(r"sandboxes/([^/]+)/([^/]+)/", k)
                if m and live.get(m.group(1)) == m.group(2):
                    continue
                left.append(f"object {k}")
            gone = "(SELECT id FROM sandboxes WHERE observed<>'deleted')"
            for table in ("suspensions", "snapshots", "data_keys"):
                n = self.world.pg.query(f"SELECT count(*) FROM {table} WHERE sandbox_id NOT IN "
                                        f"{gone}")[0][0]
                if n:
                    left.append(f"{n} row(s) in {table} of deleted sandboxes")
            if not left or time.time() > deadline:
                return left
            time.sleep(1)

    def _run_r(self, res, op, point, fault):
        self.wait_daemons()
        sid, token = self.prepare_r(op, fault)
        before = self.sandbox_ids()
        key = "chaos-" + secrets.token_hex(6) if op == "create" else None
        undo = None
        if point == "-":
            undo = self.apply(fault)
            res.fired = True
            status, body = (self.do_op("create", None, key) if op == "create"
                            else self.do_op_r(op, sid))
        else:
            self.arm(point, "hold")
            answer = {}
            th = threading.Thread(target=lambda: answer.update(
                r=self.do_op("create", None, key) if op == "create" else self.do_op_r(op, sid)),
                daemon=True)
            th.start()
            held = os.path.join(self.fault_dir, point + ".held")
            end = time.time() + 60
            while time.time() < end and th.is_alive() and not os.path.exists(held):
                time.sleep(0.02)
            res.fired = os.path.exists(held)
            if not res.fired:
                self.disarm(point)
                th.join(120)
                raise chaos.CaseFailed(f"the op did not reach {point}: {answer.get('r')}")
            try:
                undo = self.apply(fault)
            finally:
                self.disarm(point)   # the held point goes on
            th.join(240)
            if th.is_alive():
                raise chaos.CaseFailed(f"{op} did not answer within 240 s")
            status, body = answer["r"]
        res.answer = str(status) if status else str(getattr(body, "status", "err"))
        if status is None:
            self.check_error(res, body)
        # the fault is over (a timed outage once its time is up, whatever
        # the op answered meanwhile): the world is whole again, as a user
        # would retry
        if undo:
            undo()
            undo = None
        self.world.db.heal()
        self.wait_daemons(120)
        self.converge_r(res, op, sid, token, before, key, status)
        return undo

    @staticmethod
    def check_error(res, e):
        """A failed op says so in the API's JSON error shape."""
        if not isinstance(e, harness.ApiError):
            res.problems.append(f"no HTTP answer: {e}")
            return
        try:
            err = json.loads(e.body).get("error")
        except (ValueError, AttributeError):
            err = None
        if e.status < 400 or not isinstance(err, dict) or not err.get("code") or \
                not err.get("message"):
            res.problems.append(f"error answer not {{error:{{code,message}}}}: {e.status} "
                                f"{e.body!r:.200}")

    def settle_r(self, sid, deadline_s=180):
        return self.settle(sid, deadline_s)

    def converge_r(self, res, op, sid, token, before, key, status):
        touched = sorted((self.sandbox_ids() - before) | ({sid} if sid else set()))
        for i in touched:
            sb = self.settle_r(i)
            res.states[i] = sb["state"]
            if sb["state"] == "failed" and not sb.get("error"):
                res.problems.append(f"{i} failed without saying why")
        if not sid:
            self.retry_create(res, key)
            return
        st = res.states.get(sid)
        # a suspend that did not answer 200 left nothing restorable
        if op == "suspend" and status is None:
            rows = self.world.pg.query("SELECT snapshot_id FROM suspensions WHERE sandbox_id=?",
                                       (sid,))
            if st != "suspended" and rows:
                res.problems.append(f"{sid}: a failed suspend left a restorable row {rows}")
            if st != "suspended":
                objs = self.world.objects(f"sandboxes/{sid}/")
                if objs:
                    res.problems.append(f"{sid}: a failed suspend left objects {objs[:4]}")
        if op == "delete":
            if st != "deleted":
                status2, body = self.do_op("delete", sid)
                if status2 is None or self.settle(sid)["state"] != "deleted":
                    res.problems.append(f"{sid}: a second delete: {body}")
            return
        if st == "paused":
            self.api.call("POST", f"/v1/sandboxes/{sid}/resume", {}, expect=(200,))
            st = self.settle(sid)["state"]
        if st == "suspended":
            status2, body = self.do_op("restore", sid)
            if status2 is None:
                res.problems.append(f"restore after the fault: {body}")
                return
            st = self.settle(sid)["state"]
        if st == "failed":
            res.loss = True
            res.problems.append(f"{sid} failed: {self.state(sid).get('error')}")
            return
        if st != "running":
            res.problems.append(f"{sid} is {st}")
            return
        try:
            got = self.sh(sid, "cat /work/keep").strip()
        except chaos.CaseFailed as e:
            got = str(e)
        if got != token:
            res.loss = True
            res.problems.append(f"{sid}: /work/keep lost ({got[:80]!r})")
            return
        # the op again, the world whole: it works
        if op in ("suspend", "restore"):
            for o in ("suspend", "restore"):
                s2, body = self.do_op(o, sid)
                if s2 is None:
                    res.problems.append(f"{o} again: {body}")
                    return
            if self.sh(sid, "cat /work/keep").strip() != token:
                res.loss = True
                res.problems.append(f"{sid}: /work/keep lost after a suspend and restore")
        elif op == "pause":
            for o in ("pause", "resume"):
                self.api.call("POST", f"/v1/sandboxes/{sid}/{o}", {}, expect=(200,))
            self.sh(sid, "true")
        elif op == "snapshot":
            s2, body = self.do_op("snapshot", sid)
            if s2 is None:
                res.problems.append(f"snapshot again: {body}")


def summary(results, log=print):
    """The counts; True when every case converged with no loss and no leak."""
    ok = sum(r.ok for r in results)
    losses = sum(r.loss for r in results)
    leaked = sum(r.leak for r in results)
    log(f"chaos resource: {len(results)} case(s) run, {ok} converged, {losses} loss(es), "
        f"{leaked} leak(s)")
    return ok == len(results) and not losses and not leaked
