"""The chaos engine (issue 20, "Prove it: Chaos"): kill -9 one process at one
fault point of one operation, then check that everything converged.

A case is (op, point, target):
  op      create | snapshot | rollback | fork | delete | suspend | restore
  point   a FAULT_POINT name (src/lib/fault.h) the op passes through, in the
          node (create.*, snapshot.*, ...) or the nodemgr (nm.*)
  target  the process killed there: api, node, nodemgr, gateway, or the
          sandbox's own jail: agent (ns: the jail's init is the guest agent)
          or qemu (vm)
When the target is the point's own daemon, the point kills itself (the
fault file says "kill"); otherwise the point holds its thread ("hold"), the
engine kills the target with SIGKILL and lets the point go on.

After the kill: every daemon back (airlockd up restarts them), the API
answers, each sandbox the op touched settles in a state that is not a
transition (running, paused, suspended, failed, deleted) within a deadline;
a running one answers exec and still has the file written before the op;
a failed one says why; the op tried again works; and once every sandbox is
deleted, the leak audit (leaks.py) finds nothing new against the baseline.

The server needs AIRLOCK_FAULT_DIR in its environment: start_server() does it."""
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time

import harness
import leaks

STABLE = {"running", "paused", "suspended", "failed", "deleted"}
DAEMONS = ("api", "node", "nodemgr", "gateway")

# Each op's points: the node's own, then the nodemgr's it goes through (ns;
# vm adds the ones only a vm reaches). In the order the op passes them.
POINTS = {
    "create": ["create.after_record", "create.after_jail", "create.after_network",
               "create.before_answer", "nm.create.after_subvol", "nm.spawn.after_cgroup",
               "nm.spawn.after_jail"],
    "snapshot": ["snapshot.before_backend", "snapshot.after_backend", "snapshot.after_row",
                 "nm.snapshot.after_subvol"],
    "rollback": ["rollback.after_transition", "rollback.after_backend",
                 "rollback.after_guest_up", "nm.rollback.after_clone", "nm.rollback.after_swap",
                 "nm.spawn.after_jail"],
    "fork": ["fork.after_snapshot", "fork.after_child_jail", "fork.before_answer",
             "nm.fork.after_subvol", "nm.spawn.after_jail"],
    "delete": ["delete.after_intent", "delete.after_destroy", "nm.destroy.after_net",
               "nm.destroy.after_subvol"],
    "suspend": ["suspend.after_transition", "suspend_upload", "suspend_before_commit",
                "suspend.after_commit"],
    "restore": ["restore.after_transition", "restore.after_jail", "restore.before_commit"],
}
# The ns jail's points of the nodemgr (a vm create, fork or rollback starts
# a QEMU instead: nm.vm.*).
NS_ONLY = {"nm.create.after_subvol", "nm.spawn.after_cgroup", "nm.spawn.after_jail"}
VM_POINTS = {"create": ["nm.vm.after_subvol", "nm.vm.after_qemu"],
             "snapshot": ["nm.snapshot.after_hold"],
             "rollback": ["nm.vm.after_qemu"], "fork": ["nm.vm.after_qemu"],
             "restore": ["nm.vm.after_qemu"]}


# Points where the op's sandbox has no jail (not yet, or no longer): no
# agent or QEMU to kill there.
NO_JAIL = {("create", "create.after_record"), ("create", "nm.create.after_subvol"),
           ("create", "nm.spawn.after_cgroup"), ("rollback", "nm.rollback.after_swap"),
           ("delete", "delete.after_destroy"), ("delete", "nm.destroy.after_subvol"),
           ("restore", "restore.after_transition"), ("create", "nm.vm.after_subvol")}


def owner(point):
    return "nodemgr" if point.startswith("nm.") else "node"


def targets(backend):
    return DAEMONS + (("qemu",) if backend == "vm" else ("agent",))


def start_server(backend=None, extra_args=(), templates="busybox"):
    """An `airlockd up` with fault points armed from a directory of its own
    (no warm pool and no vm fork standbys: the nodemgr's create and fork
    then always take the path whose points the matrix names, and a pool's
    refill is not mistaken for a leak). Returns (server, fault_dir)."""
    fault_dir = tempfile.mkdtemp(prefix="airlock-chaos-")
    os.chmod(fault_dir, 0o777)  # not sticky: a daemon removes the files root puts there
    args = ["--set", "ns_warm_pool=0", "--set", "vm_warm_pool=0", "--set", "vm_fork_pool=0",
            "--set", "suspend_after_idle=0", "--set", "rate_per_s=100000",
            "--set", "rate_burst=100000"] + list(extra_args)
    if backend == "vm":
        # a cold boot (a recovery, a rollback to a disk snapshot) on TCG
        # with a loaded machine can take longer than the default 30 s
        args += ["--set", "ready_timeout_ms=120000"]
    server = harness.Server(templates, args, env={"AIRLOCK_FAULT_DIR": fault_dir})
    try:
        server.start()
    except Exception:
        print(server.log())
        server.cleanup()
        shutil.rmtree(fault_dir, ignore_errors=True)
        raise
    return server, fault_dir


def sync_pool(server):
    """Wait until btrfs has cleaned every subvolume the run deleted, while
    the pool is still mounted: hundreds of them (a chaos run) can otherwise
    keep a lazily detached pool, and its loop device, alive for minutes
    after shutdown on a loaded machine."""
    import subprocess
    subprocess.run(["btrfs", "subvolume", "sync", os.path.join(server.dir, "pool")],
                   capture_output=True, timeout=600)


class CaseFailed(Exception):
    pass


class Result:
    def __init__(self, op, point, target):
        self.op, self.point, self.target = op, point, target
        self.ok, self.fired, self.states, self.problems, self.seconds = False, False, {}, [], 0.0

    def line(self):
        st = ",".join(f"{v}" for v in self.states.values()) or "-"
        verdict = "ok" if self.ok else "FAIL"
        fired = "" if self.fired else " (point not reached)"
        extra = "" if self.ok else ": " + "; ".join(self.problems)
        return (f"{verdict:4} {self.op:8} {self.point:27} kill {self.target:8} -> {st:20} "
                f"{self.seconds:5.1f}s{fired}{extra}")


class Chaos:
    def __init__(self, server, fault_dir, backend=None, log=print):
        self.server, self.fault_dir = server, fault_dir
        self.backend = backend or "ns"
        self.api = server.client()
        self.log = log
        self.base = None

    # ---- processes ---------------------------------------------------------

    def pid(self, role):
        try:
            return self.server.pid_of(role)
        except (OSError, ValueError):
            return None

    @staticmethod
    def alive(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split()[2] != "Z"
        except OSError:
            return False

    def jail_pids(self, sid):
        """The pids in the sandbox's cgroup (ns: its init, the guest agent,
        first; vm: QEMU)."""
        pids = set()
        for parent in harness.cgroup_dirs(self.server.dir):
            try:
                with open(os.path.join(parent, sid, "cgroup.procs")) as f:
                    pids |= {int(p) for p in f.read().split()}
            except OSError:
                pass
        return sorted(pids)

    def jail_target(self, sid, target):
        for pid in self.jail_pids(sid):
            try:
                with open(f"/proc/{pid}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if (target == "agent" and comm.startswith("airlock-guest")) or \
                    (target == "qemu" and comm.startswith("qemu")):
                return pid
        if target == "qemu":   # not in a cgroup of its id: by its command line
            for pid in harness.procs_for(self.server.dir):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read()
                except OSError:
                    continue
                if b"qemu-system" in cmd and sid.encode() in cmd:
                    return pid
        return None

    def wait_daemons(self, deadline_s=90):
        """Every daemon alive (a restarted one has written its pid file) and
        the API answering through the node."""
        end = time.time() + deadline_s
        while time.time() < end:
            if all(self.alive(self.pid(r) or -1) for r in DAEMONS):
                try:
                    if self.api.raw("GET", "/v1/sandboxes?limit=1")[0] == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.1)
        raise CaseFailed("daemons not back within %ds" % deadline_s)

    # ---- sandboxes ---------------------------------------------------------

    def sandbox_ids(self):
        sbs = self.api.call("GET", "/v1/sandboxes?limit=1000")["sandboxes"]
        return {s["id"] for s in sbs if s["state"] != "deleted"}

    def state(self, sid):
        st, data, _ = self.api.raw("GET", f"/v1/sandboxes/{sid}")
        if st == 404:
            return {"state": "deleted"}
        if st != 200:
            raise CaseFailed(f"GET {sid}: HTTP {st} {data[:200]!r}")
        import json
        return json.loads(data)

    def settle(self, sid, deadline_s=120):
        """The sandbox's state once it is stable (seen twice, 0.5 s apart)."""
        end, last = time.time() + deadline_s, None
        while time.time() < end:
            try:
                sb = self.state(sid)
            except OSError:
                sb = {"state": "?"}
            if sb["state"] in STABLE and last == sb["state"]:
                return sb
            last = sb["state"]
            time.sleep(0.5)
        raise CaseFailed(f"{sid} stuck in {last} for {deadline_s}s")

    def sh(self, sid, script):
        code, out, err, _ = self.api.exec(sid, ["sh", "-c", script])
        if code != 0:
            raise CaseFailed(f"exec in {sid}: {script!r} exited {code}: {err[:200]!r}")
        return out.decode()

    def create(self, **kw):
        sb = self.api.create(**kw)
        if sb["state"] != "running":
            raise CaseFailed(f"create: {sb['state']}")
        return sb["id"]

    def delete_all(self):
        for sid in self.sandbox_ids():
            for _ in range(3):
                try:
                    self.api.delete(sid)
                    break
                except harness.ApiError as e:
                    if e.status == 404:
                        break
                    time.sleep(1)
        left = self.sandbox_ids()
        if left:
            raise CaseFailed(f"sandboxes not deleted: {sorted(left)}")

    def baseline(self):
        # One create first: what the first sandbox of a backend makes for
        # all later ones (vm: the template's memory image, templates/T/V.vm)
        # is in the baseline, not taken for a leak.
        self.wait_daemons()
        self.create()
        self.delete_all()
        self.base = leaks.snapshot(self.server)

    # ---- one case ----------------------------------------------------------

    def prepare(self, op):
        """The sandbox the op works on (none for create), with a file that
        must survive, and what else the op needs."""
        if op == "create":
            return None, None
        sid = self.create()
        token = secrets.token_hex(8)
        self.sh(sid, f"mkdir -p /work && echo {token} > /work/keep && sync")
        if op == "rollback":
            self.api.call("POST", f"/v1/sandboxes/{sid}/snapshots",
                          {"kind": "disk", "name": "base"}, expect=(201,))
            self.sh(sid, "echo later > /work/later && sync")
        if op == "restore":
            self.api.call("POST", f"/v1/sandboxes/{sid}/suspend", {}, expect=(200,))
        return sid, token

    def do_op(self, op, sid, key=None):
        """Run the op; (status, body) of its answer, or (None, error)."""
        try:
            if op == "create":
                kw = {"idempotency_key": key} if key else {}
                return 201, self.api.create(**kw)
            if op == "snapshot":
                return 201, self.api.call("POST", f"/v1/sandboxes/{sid}/snapshots",
                                          {"kind": "disk", "name": "s-" + secrets.token_hex(3)},
                                          expect=(201,))
            if op == "rollback":
                return 200, self.api.call("POST", f"/v1/sandboxes/{sid}/rollback",
                                          {"snapshot": "base"}, expect=(200,))
            if op == "fork":
                return 201, self.api.call("POST", f"/v1/sandboxes/{sid}/fork", {},
                                          expect=(200, 201))
            if op == "delete":
                return 204, self.api.call("DELETE", f"/v1/sandboxes/{sid}", expect=(204, 404))
            if op in ("suspend", "restore"):
                return 200, self.api.call("POST", f"/v1/sandboxes/{sid}/{op}", {}, expect=(200,))
        except (harness.ApiError, OSError) as e:
            return None, e
        raise ValueError(op)

    def arm(self, point, mode):
        path = os.path.join(self.fault_dir, point)
        with open(path + ".tmp", "w") as f:
            f.write(mode)
        os.chmod(path + ".tmp", 0o666)
        os.rename(path + ".tmp", path)

    def disarm(self, point):
        for p in (point, point + ".held"):
            try:
                os.unlink(os.path.join(self.fault_dir, p))
            except FileNotFoundError:
                pass

    def run_case(self, op, point, target):
        res = Result(op, point, target)
        t0 = time.time()
        try:
            self._run(res, op, point, target)
            res.ok = not res.problems
        except CaseFailed as e:
            res.problems.append(str(e))
        except Exception as e:  # a bug of ours or a daemon's: say which
            res.problems.append(f"{type(e).__name__}: {e}")
        finally:
            self.disarm(point)
        # Whatever happened, leave no sandbox behind for the next case.
        try:
            self.wait_daemons()
            self.delete_all()
            left = leaks.audit(self.server, self.base)
            if left:
                res.problems.append("leaked: " + "; ".join(left[:8]))
                res.ok = False
                # the next case compares against what is there now
                self.base = leaks.snapshot(self.server)
        except Exception as e:
            res.problems.append(f"cleanup: {e}")
            res.ok = False
        res.seconds = time.time() - t0
        self.log(res.line())
        return res

    def _run(self, res, op, point, target):
        self.wait_daemons()
        sid, token = self.prepare(op)
        before = self.sandbox_ids()
        own = target == owner(point)
        old_pids = {r: self.pid(r) for r in DAEMONS}
        self.arm(point, "kill" if own else "hold")
        key = "chaos-" + secrets.token_hex(6) if op == "create" else None
        answer = {}
        th = threading.Thread(target=lambda: answer.update(r=self.do_op(op, sid, key)),
                              daemon=True)
        th.start()
        held = os.path.join(self.fault_dir, point + ".held")
        end = time.time() + 60
        while time.time() < end and not res.fired:
            done = not th.is_alive()
            if done:
                time.sleep(0.3)  # a kill may be a moment behind the answer
            res.fired = (not self.alive(old_pids[target] or -1)) if own else os.path.exists(held)
            if done:
                break
            time.sleep(0.02)
        if not res.fired:
            self.disarm(point)
            th.join(120)
            raise CaseFailed(f"the op did not reach {point}: {answer.get('r')}")
        if not own:
            if target in DAEMONS:
                victim = old_pids[target]
            else:
                # the op's new sandbox when it has a jail already, else its own
                ids = sorted(self.sandbox_ids() - before) + ([sid] if sid else [])
                victims = [self.jail_target(i, target) for i in ids]
                victims = [v for v in victims if v]
                if not victims:
                    self.disarm(point)
                    raise CaseFailed(f"no {target} process for {sorted(ids)} at {point}")
                victim = victims[0]
            os.kill(victim, signal.SIGKILL)
            for _ in range(200):
                if not self.alive(victim):
                    break
                time.sleep(0.01)
            self.disarm(point)  # the held point goes on
        th.join(180)
        if th.is_alive():
            raise CaseFailed(f"{op} did not answer within 180 s after the kill")
        self.wait_daemons()
        self.converge(res, op, sid, token, before, key)

    def converge(self, res, op, sid, token, before, key):
        touched = sorted((self.sandbox_ids() - before) | ({sid} if sid else set()))
        for i in touched:
            sb = self.settle(i)
            res.states[i] = sb["state"]
            if sb["state"] == "failed" and not sb.get("error"):
                res.problems.append(f"{i} failed without saying why")
            if sb["state"] in ("failed", "suspended", "deleted"):
                # nothing of it runs any more (a failed sandbox keeps only
                # its disk until it is deleted)
                end = time.time() + 15
                while self.jail_pids(i) and time.time() < end:
                    time.sleep(0.2)
                if self.jail_pids(i):
                    res.problems.append(f"{i} is {sb['state']} but its jail still runs: "
                                        f"pids {self.jail_pids(i)}")
            if sb["state"] == "running":
                self.sh(i, "true")
        self.check_survivors(res, op, sid, target_of(res))
        # The sandbox the op worked on: its file is intact if it runs.
        if sid and res.states.get(sid) == "running":
            if self.sh(sid, "cat /work/keep").strip() != token:
                res.problems.append(f"{sid}: /work/keep lost or changed")
        if sid and res.states.get(sid) == "suspended" and op in ("suspend", "restore"):
            pass   # restored below
        # And the op again: it works (or is moot: a deleted sandbox).
        self.retry(res, op, sid, token, key)

    def check_survivors(self, res, op, sid, target):
        """What a crash must not cost. Neither the api nor the gateway
        holds a sandbox: killing them fails nothing. A restarted node
        adopts every jail it had: the sandbox the op worked on is not lost
        (a sandbox the op was making may be failed). Only the nodemgr (it
        holds every jail's channel: DESIGN.md) or the sandbox's own jail
        may take a sandbox that existed down with it."""
        allowed = {"create": {"running"}, "snapshot": {"running"}, "rollback": {"running"},
                   "fork": {"running"}, "delete": {"deleted"},
                   "suspend": {"running", "suspended"}, "restore": {"running", "suspended"}}[op]
        if target in ("api", "gateway"):
            for i, st in res.states.items():
                want = allowed if i == sid or op == "create" else {"running"}
                if st not in want:
                    res.problems.append(f"{i} is {st} after a {target} crash (want "
                                        f"{'/'.join(sorted(want))})")
        elif target == "node" and sid and res.states.get(sid) not in allowed:
            res.problems.append(f"{sid} is {res.states.get(sid)} after a node crash (want "
                                f"{'/'.join(sorted(allowed))})")

    def retry_create(self, res, key):
        """The create tried again with its idempotency key answers its
        sandbox (running, or failed saying why); a new create runs."""
        status, body = self.do_op("create", None, key)
        if status is None:
            res.problems.append(f"create retried with its key: {body}")
        elif body["state"] not in ("running", "failed"):
            res.problems.append(f"create retried with its key: {body['state']}")
        elif body["state"] == "failed" and not body.get("error"):
            res.problems.append("create retried: failed without saying why")
        status, body = self.do_op("create", None)
        if status is None or body["state"] != "running":
            res.problems.append(f"a new create after the fault: {body}")

    def retry(self, res, op, sid, token, key):
        st = res.states.get(sid) if sid else None
        if op == "create":
            self.retry_create(res, key)
            return
        if op == "delete":
            status, body = self.do_op("delete", sid)
            if status is None:
                res.problems.append(f"delete again: {body}")
            elif self.settle(sid)["state"] != "deleted":
                res.problems.append(f"{sid} not deleted by a second delete")
            return
        if st == "failed":
            return  # a clear state; the cleanup's delete must still work
        if op == "restore" or (op == "suspend" and st == "suspended"):
            status, body = self.do_op("restore", sid)
            if status is None and not (isinstance(body, harness.ApiError) and
                                       body.status == 409 and self.state(sid)["state"] == "running"):
                res.problems.append(f"restore: {body}")
            if self.sh(sid, "cat /work/keep").strip() != token:
                res.problems.append(f"{sid}: /work/keep lost after the restore")
            return
        status, body = self.do_op(op, sid)
        if status is None:
            res.problems.append(f"{op} again: {body}")
        elif op == "rollback":
            if self.sh(sid, "ls /work/later 2>/dev/null || echo gone").strip() != "gone" or \
                    self.sh(sid, "cat /work/keep").strip() != token:
                res.problems.append(f"{sid}: not the snapshot's files after a rollback")


def target_of(res):
    return res.target


def matrix(backend, ops=None, targets_=None, points=None):
    """Every (op, point, target) of the backend."""
    out = []
    for op, pts in POINTS.items():
        if ops and op not in ops:
            continue
        if backend == "vm":
            pts = [p for p in pts if p not in NS_ONLY] + VM_POINTS.get(op, [])
        for p in pts:
            if points and p not in points:
                continue
            for t in targets_ or targets(backend):
                if t in ("agent", "qemu") and (op, p) in NO_JAIL:
                    continue
                out.append((op, p, t))
    return out


def summary(results, log=print):
    """One line of counts; True when everything converged. A "shutdown"
    result (bench/chaos: the instance's own clean stop) is no fault but
    must be ok too."""
    stops = [r for r in results if r.op == "shutdown"]
    if any(not r.ok for r in stops):
        log("chaos: the shutdown left something: " + "; ".join(p for r in stops for p in r.problems))
    results = [r for r in results if r.op != "shutdown"]
    ok = sum(r.ok for r in results)
    fired = sum(r.fired for r in results)
    states = {}
    for r in results:
        for s in r.states.values():
            states[s] = states.get(s, 0) + 1
    log(f"chaos: {len(results)} fault(s) run, {fired} reached their point, {ok} converged "
        f"cleanly, {len(results) - ok} failed; settled states: "
        + ", ".join(f"{k} {v}" for k, v in sorted(states.items())))
    return ok == len(results) and all(r.ok for r in stops)
