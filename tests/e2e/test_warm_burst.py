"""Warm pools under bursts (issue 21, item 1): a pool sizes itself from its
recent creates between ns_warm_pool/vm_warm_pool and ..._max, and shrinks
back when creates stop.

On a fresh instance (least 2, most 16 for ns, 4 for vm; demand half-life
10 s): once the busybox pool holds its least, a burst of 16 concurrent
creates all succeed and each sandbox works (an exec answers, its hostname is
its id, a file written in it reads back); right after it GET /metrics shows
the pool's target above its least and the pool then holds more than its
least (it grew); with no creates it comes back to its least, target and
jails. Timings are printed, not asserted. Runs on AIRLOCK_E2E_BACKEND (ns by
default; vm: the QEMU warm pool)."""
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from harness import BACKEND, AirlockTestCase, main
from test_ops import parse_metrics

KIND = BACKEND or "ns"
LEAST = 2
MOST = 16 if KIND == "ns" else 4
BURST = 16


class WarmBurstTest(AirlockTestCase):
    extra_args = ("--set", f"ns_warm_pool={LEAST}", "--set", "ns_warm_pool_max=16",
                  "--set", f"vm_warm_pool={LEAST}", "--set", "vm_warm_pool_max=4",
                  "--set", "warm_pool_half_life_s=10",
                  # What is asserted is counts, not speed: on a loaded 2-core
                  # host 14 vm clones past the pool restoring at once under
                  # TCG took more than the default 30 s to say HELLO.
                  "--set", "ready_timeout_ms=180000")

    def pool(self):
        """(ready, target) of the busybox pool of this backend, from /metrics
        (target None when the series is missing)."""
        status, body, _ = self.api.raw("GET", "/metrics")
        self.assertEqual(status, 200, body)
        ready, target = 0, None
        for (name, labels), v in parse_metrics(body.decode()).items():
            lab = dict(labels)
            if lab.get("kind") != KIND or not lab.get("template", "").startswith("busybox/"):
                continue
            if name == "airlock_warm_pool_ready":
                ready += int(v)
            elif name == "airlock_warm_pool_target":
                target = max(target or 0, int(v))
        return ready, target

    def wait_pool(self, pred, what, timeout=300):
        t0 = time.time()
        while time.time() - t0 < timeout:
            ready, target = self.pool()
            if pred(ready, target):
                return time.time() - t0
            time.sleep(0.2)
        self.fail(f"{what}: pool (ready, target) = {self.pool()} after {timeout} s\n"
                  + self.server.log())

    def check_works(self, sid):
        code, out, err = self.api.exec(sid, ["hostname"])[:3]
        self.assertEqual(code, 0, err)
        self.assertEqual(out.decode().strip(), sid)
        code, out, err = self.api.exec(sid, ["sh", "-c", f"echo {sid} > /tmp/who; cat /tmp/who"])[:3]
        self.assertEqual(code, 0, err)
        self.assertEqual(out.decode().strip(), sid)

    def test_burst_grows_pool_then_it_shrinks(self):
        # The pool appears with the template's first create, and fills to
        # its least.
        self.api.delete(self.api.create()["id"])
        t = self.wait_pool(lambda r, tg: r >= LEAST and tg == LEAST, "fill to the least")
        print(f"pool at its least ({LEAST}) {t:.1f} s after the first create", flush=True)

        # A burst of BURST creates at once: every one succeeds and works.
        t0 = time.time()
        with ThreadPoolExecutor(max_workers=BURST) as ex:
            made = list(ex.map(lambda _: self.api.create(), range(BURST)))
        burst_s = time.time() - t0
        ready, target = self.pool()
        print(f"burst of {BURST}: {burst_s:.2f} s; then pool ready={ready} target={target}",
              flush=True)
        ids = [s["id"] for s in made]
        self.assertEqual(len(set(ids)), BURST)
        try:
            for s in made:
                self.assertEqual(s["state"], "running", s)
            with ThreadPoolExecutor(max_workers=4) as ex:
                list(ex.map(self.check_works, ids))
        finally:
            with ThreadPoolExecutor(max_workers=4) as ex:
                list(ex.map(self.api.delete, ids))

        # It grew: the target rose above the least and the pool holds more
        # than its least (refilled off the create path).
        self.assertIsNotNone(target, "no airlock_warm_pool_target series")
        self.assertGreater(target, LEAST, "the burst did not raise the pool's target")
        self.assertLessEqual(target, MOST)
        peak = [0]

        def grown(r, tg):
            peak[0] = max(peak[0], r)
            return r > LEAST
        t = self.wait_pool(grown, "grow past the least")
        print(f"pool grew past its least {t:.1f} s after the burst (ready {peak[0]})",
              flush=True)

        # No creates: back to the least, target and jails.
        t = self.wait_pool(lambda r, tg: tg == LEAST and r == LEAST, "shrink to the least")
        print(f"pool back at its least {t:.1f} s later", flush=True)
        # And it still serves: a create after the shrink works.
        s = self.api.create()
        try:
            self.check_works(s["id"])
        finally:
            self.api.delete(s["id"])


if __name__ == "__main__":
    main()
