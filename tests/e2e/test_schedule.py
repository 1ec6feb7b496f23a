"""The snapshot scheduler, tiered retention, idle auto-pause and the TTL's
active time, through the real daemons (ns backend; the vm backend has no
disk snapshots yet, so the scheduler tests skip there).

Time is injected: the node runs with debug_clock=true, and
POST /v1/debug/clock {"advance_s"} on the node's own socket moves the
scheduler's clock and runs one scheduler pass before answering. No test
sleeps for an interval. The idle and TTL tests use real seconds-long
timeouts and poll the state with generous deadlines."""
import http.client
import json
import os
import socket
import subprocess
import time
import unittest

from harness import BACKEND, AirlockTestCase, ApiError, main

NS_ONLY = unittest.skipIf(BACKEND == "vm", "disk snapshots are ns only for now")

HOUR = 3600 * 1000
DAY = 24 * HOUR


class UnixConn(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=300)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(300)
        self.sock.connect(self.path)


def model_prune(times, now, keep_all=3600, keep_hourly=86400, keep_daily=7 * 86400):
    """The README's retention rule, written out independently: the set of
    times kept at `now` (ms)."""
    def tier(t):
        age = now - t
        if age < keep_all * 1000:
            return 0
        if age < keep_hourly * 1000:
            return 1
        if age < keep_daily * 1000:
            return 2
        return 3
    kept = set()
    for t in times:
        k = tier(t)
        if k == 0:
            kept.add(t)
        elif k in (1, 2):
            width = HOUR if k == 1 else DAY
            # kept if it is the newest of its hour/day among this tier's
            if not any(u > t and tier(u) == k and u // width == t // width for u in times):
                kept.add(t)
    if times:
        kept.add(max(times))
    return kept


class ScheduleTest(AirlockTestCase):
    extra_args = ("--set", "debug_clock=true")

    def setUp(self):
        self.sids = []

    def tearDown(self):
        for sid in self.sids:
            try:
                self.api.delete(sid)
            except ApiError:
                pass

    def new(self, **kw):
        sb = self.api.create(**kw)
        self.sids.append(sb["id"])
        return sb

    def sh(self, sid, script):
        code, out, err, _ = self.api.exec(sid, ["sh", "-c", script])
        self.assertEqual(code, 0, f"{script}: {err!r}")
        return out.decode()

    def node_call(self, method, path, body=None, admin=True):
        c = UnixConn(os.path.join(self.server.dir, "run", "node.sock"))
        h = {"X-Airlock-Tenant": "t-test"}
        if admin:
            h["X-Airlock-Admin"] = "1"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = r.read()
        c.close()
        return r.status, (json.loads(out) if out else None)

    def advance(self, seconds):
        status, body = self.node_call("POST", "/v1/debug/clock", {"advance_s": seconds})
        self.assertEqual(status, 200, body)
        return body

    def snaps(self, sid):
        return self.api.call("GET", f"/v1/sandboxes/{sid}/snapshots")["snapshots"]

    def snap_subvols(self, sid):
        pool = os.path.join(self.server.dir, "pool")
        r = subprocess.run(["btrfs", "subvolume", "list", pool], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return sorted(l.split()[-1].rsplit("/", 1)[-1] for l in r.stdout.splitlines()
                      if f"snapshots/{sid}/" in l)

    def state(self, sid):
        return self.api.call("GET", f"/v1/sandboxes/{sid}")["state"]

    def wait_state(self, sid, want, deadline_s=90):
        end = time.time() + deadline_s
        while time.time() < end:
            st = self.state(sid)
            if st == want:
                return
            time.sleep(0.2)
        self.fail(f"{sid} never became {want} (still {self.state(sid)})")

    def events(self, sid):
        return [e[1:] for e in self.timed_events(sid)]

    def timed_events(self, sid):
        """(at ms, from, to, reason) of every event of sid, oldest first."""
        return self.db_rows("SELECT at, from_state, to_state, reason FROM events"
                            " WHERE sandbox_id=? ORDER BY id", sid)

    # ---- the clock endpoint ----------------------------------------------------

    def test_clock_endpoint_guards(self):
        status, _ = self.node_call("POST", "/v1/debug/clock", {"advance_s": 1}, admin=False)
        self.assertEqual(status, 403)
        for bad in ({"advance_s": -1}, {"advance_s": "x"}, {}, {"advance_s": 1, "x": 1}):
            status, body = self.node_call("POST", "/v1/debug/clock", bad)
            self.assertEqual(status, 400, (bad, body))
            self.assertIn("error", body)
        # Not forwarded by the public API.
        status, _, _ = self.api.raw("POST", "/v1/debug/clock", {"advance_s": 1})
        self.assertEqual(status, 404)

    def test_policy_fields(self):
        sb = self.new(snapshots={"disk_interval_s": 0, "retention": {"keep_all_s": 60}},
                      idle_timeout_s=0, on_timeout="pause")
        self.assertEqual(sb["snapshots"]["disk_interval_s"], 0)
        self.assertEqual(sb["snapshots"]["full_interval_s"], 900)
        self.assertEqual(sb["snapshots"]["retention"],
                         {"keep_all_s": 60, "keep_hourly_s": 86400, "keep_daily_s": 604800})
        self.assertEqual(sb["on_timeout"], "pause")
        d = self.new()
        self.assertEqual(d["snapshots"]["disk_interval_s"], 60)
        self.assertEqual(d["idle_timeout_s"], 0)
        self.assertEqual(d["on_timeout"], "delete")
        for bad in ({"snapshots": 5}, {"snapshots": {"disk_interval_s": -1}},
                    {"snapshots": {"nope": 1}}, {"snapshots": {"retention": {"keep_x": 1}}},
                    {"idle_timeout_s": "1"}, {"on_timeout": "stop"}):
            status, data, _ = self.api.raw("POST", "/v1/sandboxes",
                                           dict(bad, template="busybox"))
            self.assertEqual(status, 400, (bad, data))
            self.assertIn("error", json.loads(data))

    # ---- scheduler and retention -------------------------------------------------

    @NS_ONLY
    def test_unchanged_sandbox_is_skipped(self):
        sid = self.new(snapshots={"disk_interval_s": 60})["id"]
        self.sh(sid, "echo one > /f")
        self.advance(61)
        first = [s for s in self.snaps(sid) if s["scheduled"]]
        self.assertEqual(len(first), 1, first)
        # Nothing ran since: two more intervals take nothing.
        self.advance(61)
        self.advance(61)
        self.assertEqual([s["id"] for s in self.snaps(sid)], [first[0]["id"]])
        self.assertEqual(self.snap_subvols(sid), [first[0]["id"]])
        # A change is picked up at the next interval.
        self.sh(sid, "echo two >> /f")
        self.advance(61)
        self.assertEqual(len(self.snaps(sid)), 2)
        # Before the interval is up nothing is taken.
        self.sh(sid, "echo three >> /f")
        self.advance(10)
        self.assertEqual(len(self.snaps(sid)), 2)
        # A paused sandbox is not snapshotted, changed or not.
        self.api.call("POST", f"/v1/sandboxes/{sid}/pause")
        self.advance(120)
        self.assertEqual(len(self.snaps(sid)), 2)
        self.api.call("POST", f"/v1/sandboxes/{sid}/resume")
        # The scheduled snapshot holds the data of its time.
        snaps = self.snaps(sid)
        self.api.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": snaps[0]["id"]})
        self.assertEqual(self.sh(sid, "cat /f"), "one\n")

    @NS_ONLY
    def test_tiered_retention(self):
        # 20-minute interval; a change before every step so each step that
        # crosses an interval takes a snapshot.
        sid = self.new(snapshots={"disk_interval_s": 1200})["id"]
        self.api.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"name": "mine"})
        mine = self.snaps(sid)[0]
        self.assertFalse(mine["scheduled"])
        steps = [6 * 3600] * 32 + [1200] * 10 + [3600] * 3
        taken = {}          # created_at ms -> id, every scheduled snapshot ever
        model = set()
        for i, step in enumerate(steps):
            self.sh(sid, f"echo {i} >> /log")
            now_iso = self.advance(step + 1)["now"]
            current = self.snaps(sid)
            sched = [s for s in current if s["scheduled"]]
            new = [s for s in sched if s["id"] not in taken.values()]
            self.assertEqual(len(new), 1, (i, new))
            t = iso_ms(new[0]["created_at"])
            taken[t] = new[0]["id"]
            model.add(t)
            model = model_prune(model, iso_ms(now_iso))
            # After every pass the kept set is the model's.
            self.assertEqual(sorted(s["id"] for s in sched),
                             sorted(taken[t] for t in model), f"step {i}")
        # The final state, spelled out: the last 3 h in 1 h steps after ten
        # 20-minute ones; 8 days of 6-hour steps before. The client's own
        # snapshot is never pruned.
        final = self.snaps(sid)
        self.assertIn("mine", [s["name"] for s in final])
        self.assertLess(len(final), len(steps))
        self.assertGreater(len(final), 5)
        ages = sorted((iso_ms(now_iso) - iso_ms(s["created_at"])) // 1000
                      for s in final if s["scheduled"])
        self.assertTrue(all(a < 7 * 86400 for a in ages), ages)
        # The btrfs subvolumes are exactly the rows.
        self.assertEqual(self.snap_subvols(sid), sorted(s["id"] for s in final))
        # Every pruned one is in the event log.
        pruned = {r.split()[2] for _, _, r in self.events(sid)
                  if r and r.endswith("pruned (retention)")}
        self.assertEqual(pruned, set(taken.values()) - {s["id"] for s in final})

    @NS_ONLY
    def test_policy_survives_node_restart(self):
        sb = self.new(on_timeout="pause", timeout_s=36000, idle_timeout_s=0,
                      snapshots={"disk_interval_s": 120, "retention": {"keep_all_s": 10}})
        sid = sb["id"]
        self.kill_and_wait_restarted("node")
        got = self.api.call("GET", f"/v1/sandboxes/{sid}")
        self.assertEqual(got["state"], "running")
        for k in ("snapshots", "on_timeout", "timeout_s", "idle_timeout_s"):
            self.assertEqual(got[k], sb[k], k)
        # The re-adopted sandbox is scheduled by its own policy: not before
        # its 120 s, and then once.
        self.sh(sid, "echo after-restart > /f")
        self.advance(60)
        self.assertEqual(self.snaps(sid), [])
        self.advance(61)
        self.assertEqual([s["scheduled"] for s in self.snaps(sid)], [True])

    # ---- idle and TTL ---------------------------------------------------------------

    def test_idle_pause_then_exec_resumes(self):
        sid = self.new(idle_timeout_s=2, snapshots={"disk_interval_s": 0})["id"]
        self.wait_state(sid, "paused")
        self.assertIn(("running", "paused", "idle"), self.events(sid))
        code, out, _, _ = self.api.exec(sid, ["echo", "back"])
        self.assertEqual((code, out), (0, b"back\n"))
        # (Not the state now: 2 s later it may be idle again.)
        self.assertIn(("paused", "running", "resumed for exec"), self.events(sid))
        # An open exec stream is activity: a quiet 5 s process with a
        # client attached finishes without the sandbox being paused (a
        # paused sandbox would freeze it mid-sleep and the pause would be
        # in the events).
        before = len(self.events(sid))
        code, _, _, _ = self.api.exec(sid, ["sleep", "5"])
        self.assertEqual(code, 0)
        during = self.events(sid)[before:]
        self.assertNotIn("idle", [e[2] for e in during], during)
        # And after it, idle again.
        self.wait_state(sid, "paused")

    def test_ttl_counts_active_time_only(self):
        sid = self.new(timeout_s=6, snapshots={"disk_interval_s": 0})["id"]
        self.api.call("POST", f"/v1/sandboxes/{sid}/pause")
        # Paused for longer than the whole TTL, and the node restarted
        # meanwhile (the paused time must survive it): still there.
        time.sleep(8)
        self.kill_and_wait_restarted("node")
        self.assertEqual(self.state(sid), "paused")
        self.api.call("POST", f"/v1/sandboxes/{sid}/resume")
        # Active again: the rest of the budget runs out and it is deleted.
        end = time.time() + 90
        while time.time() < end:
            status, _, _ = self.api.raw("GET", f"/v1/sandboxes/{sid}")
            if status == 404:
                break
            time.sleep(0.2)
        self.assertEqual(status, 404)
        self.assertIn(("stopped", "deleted", "timeout"), self.events(sid))
        # The event log shows it had its 6 s of active time (counted from
        # the create, as the TTL is), paused time and the restart not
        # counted: create until the pause, plus the client's resume until
        # the timeout stop (the node's own thaw to re-adopt it is not a
        # resume).
        ev = self.timed_events(sid)
        ran = first(ev, lambda e: e[2] == "paused") - first(ev, lambda e: e[1] == "pending")
        ran += first(ev, lambda e: e[3] == "timeout") - \
            first(ev, lambda e: e[1:3] == ("paused", "running") and e[3] == "resumed by client")
        self.assertGreaterEqual(ran, 6000 - 250, ev)

    def test_ttl_on_timeout_pause(self):
        sid = self.new(timeout_s=2, on_timeout="pause", snapshots={"disk_interval_s": 0})["id"]
        self.wait_state(sid, "paused")
        self.assertIn(("running", "paused", "timeout"), self.events(sid))
        # Still there, and an exec brings it back with a fresh budget.
        code, out, _, _ = self.api.exec(sid, ["echo", "ok"])
        self.assertEqual((code, out), (0, b"ok\n"))
        self.wait_state(sid, "paused")
        self.assertEqual([e for e in self.events(sid) if e[2] == "timeout"],
                         [("running", "paused", "timeout")] * 2)


def first(events, pred):
    """When (ms) the first of the (at, from, to, reason) events matching
    pred happened."""
    return next(e[0] for e in events if pred(e))


def iso_ms(s):
    import datetime
    s = s.replace("Z", "+00:00")
    return round(datetime.datetime.fromisoformat(s).timestamp() * 1000)



class ScheduleCapTest(AirlockTestCase):
    """max_snapshots (3 here) with the scheduler: it keeps its newest 3,
    dropping its oldest to take the next, and a client's snapshots are
    counted apart (3 of their own, then 422)."""
    extra_args = ("--set", "debug_clock=true", "--set", "max_snapshots=3")
    node_call = ScheduleTest.node_call
    advance = ScheduleTest.advance
    sh = ScheduleTest.sh
    snaps = ScheduleTest.snaps
    snap_subvols = ScheduleTest.snap_subvols
    events = ScheduleTest.events
    timed_events = ScheduleTest.timed_events

    @NS_ONLY
    def test_scheduler_keeps_its_newest(self):
        sid = self.api.create(template="busybox", snapshots={
            "disk_interval_s": 60, "retention": {"keep_all_s": 86400}})["id"]
        try:
            taken = []
            for i in range(6):
                self.sh(sid, f"echo {i} >> /f")
                self.advance(61)
                new = [x["id"] for x in self.snaps(sid)
                       if x["scheduled"] and x["id"] not in taken]
                self.assertEqual(len(new), 1, (i, new))
                taken += new
                sched = [x["id"] for x in self.snaps(sid) if x["scheduled"]]
                self.assertEqual(sched, taken[-3:])
            self.assertEqual(self.snap_subvols(sid), sorted(taken[-3:]))
            dropped = [e for e in self.events(sid) if e[2] and "dropped (max_snapshots 3)" in e[2]]
            self.assertEqual(len(dropped), 3, dropped)
            # a client's own: 3 more, whatever the scheduler holds; then 422
            for _ in range(3):
                self.api.call("POST", f"/v1/sandboxes/{sid}/snapshots", {}, expect=(201,))
            status, data, _ = self.api.raw("POST", f"/v1/sandboxes/{sid}/snapshots", {})
            self.assertEqual(status, 422, data)
            self.assertIn("max_snapshots", json.loads(data)["error"]["message"])
            # and they do not stop the schedule
            self.sh(sid, "echo more >> /f")
            self.advance(61)
            sched = [x["id"] for x in self.snaps(sid) if x["scheduled"]]
            self.assertEqual(len(sched), 3)
            self.assertNotIn(sched[-1], taken)
        finally:
            self.api.delete(sid)

if __name__ == "__main__":
    main()
