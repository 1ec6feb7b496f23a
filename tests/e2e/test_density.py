"""Density, short form of bench/density: a node filled to its max_sandboxes
with idle sandboxes answers every create and exec, refuses one more with
422 over_capacity, and counts right as sandboxes leave the live states
(deleted, or failed when their jail dies) - the node keeps per-state counts
in O(1) rather than visiting every sandbox on each create. Deleting them all
leaves nothing listed and no sandbox cgroup; repeated Idempotency-Keys among
many sandboxes find theirs, per tenant. Asserts behaviour, not timing."""
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import harness
from harness import AirlockTestCase, ApiError, main

CAP = 40


class DensityTest(AirlockTestCase):
    extra_args = ("--set", f"max_sandboxes={CAP}")

    def create_ok(self):
        s = self.api.create(template="busybox")
        code, out, _, _ = self.api.exec(s["id"], ["echo", "hi"])
        self.assertEqual((code, out), (0, b"hi\n"))
        return s["id"]

    def assert_full(self):
        with self.assertRaises(ApiError) as cm:
            self.api.create(template="busybox")
        self.assertEqual((cm.exception.status, cm.exception.code), (422, "over_capacity"))

    def sandbox_cgroups(self, ids):
        return [os.path.join(p, sid) for p in harness.cgroup_dirs(self.server.dir)
                for sid in ids if os.path.isdir(os.path.join(p, sid))]

    def kill_jail(self, sid):
        for cg in self.sandbox_cgroups([sid]):
            with open(os.path.join(cg, "cgroup.procs")) as f:
                for pid in f.read().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass

    def wait_state(self, sid, state, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.api.call("GET", f"/v1/sandboxes/{sid}")["state"] == state:
                return
            time.sleep(0.1)
        self.fail(f"{sid} did not become {state}")

    def test_fill_to_capacity_and_empty(self):
        with ThreadPoolExecutor(max_workers=4) as ex:
            ids = list(ex.map(lambda _: self.create_ok(), range(CAP)))
        all_ids = set(ids)
        try:
            self.assertEqual(len(set(ids)), CAP)
            self.assert_full()
            # every one still answers
            for sid in ids[::8]:
                self.assertEqual(self.api.exec(sid, ["true"])[0], 0)
            # deleted ones free their places, and only those
            for sid in ids[:5]:
                self.api.delete(sid)
            ids = ids[5:]
            for _ in range(5):
                sid = self.create_ok()
                ids.append(sid)
                all_ids.add(sid)
            self.assert_full()
            # a failed one (its jail killed) is not live: its place frees
            # by the state change alone, while it stays listed
            victim = ids[0]
            self.kill_jail(victim)
            self.wait_state(victim, "failed")
            sid = self.create_ok()
            ids.append(sid)
            all_ids.add(sid)
            self.assert_full()
            # deleting the failed one changes nothing: it was not counted
            self.api.delete(victim)
            ids.remove(victim)
            self.assert_full()
        finally:
            with ThreadPoolExecutor(max_workers=4) as ex:
                list(ex.map(self.api.delete, ids))
        left = [s["id"] for s in self.api.call("GET", "/v1/sandboxes")["sandboxes"]
                if s["state"] != "deleted"]
        self.assertEqual(left, [])
        self.assertEqual(self.sandbox_cgroups(all_ids), [])
        # and the node is empty again: CAP more fit
        with ThreadPoolExecutor(max_workers=4) as ex:
            ids = list(ex.map(lambda _: self.create_ok(), range(CAP)))
        try:
            self.assert_full()
        finally:
            with ThreadPoolExecutor(max_workers=4) as ex:
                list(ex.map(self.api.delete, ids))

    def test_idempotency_keys_among_many(self):
        """The node finds a repeated key by (tenant, key) in its index."""
        keys = [f"k-{i}" for i in range(20)]
        with ThreadPoolExecutor(max_workers=4) as ex:
            first = list(ex.map(lambda k: self.api.create(template="busybox",
                                                          idempotency_key=k)["id"], keys))
        other, api2 = None, None
        try:
            self.assertEqual(len(set(first)), len(keys))
            again = [self.api.create(template="busybox", idempotency_key=k)["id"]
                     for k in reversed(keys)]
            self.assertEqual(again, list(reversed(first)))
            # the same key from another tenant is another sandbox
            _, api2 = self.new_tenant("density-other")
            other = api2.create(template="busybox", idempotency_key="k-0")["id"]
            self.assertNotIn(other, first)
            self.assertEqual(api2.create(template="busybox", idempotency_key="k-0")["id"], other)
        finally:
            for sid in first:
                self.api.delete(sid)
            if other:
                api2.delete(other)


if __name__ == "__main__":
    main()
