"""The TypeScript SDK (sdk/typescript) against a real `airlockd up` (ns, or
vm with AIRLOCK_E2E_BACKEND=vm): builds the SDK first (sdk/typescript/setup.sh:
npm ci as the lockfile pins it unless node_modules is current, then tsc) and runs
its `node --test` suites (sdk/typescript/test/*.test.mjs) with the instance's
URL and keys in the environment; fails when any node test fails.

The instance runs with a per-key rate limit of 50 requests/s (burst 50) so
that the suites can see a real 429; every other call goes through the SDK's
retries, which honour Retry-After."""
import glob
import os
import shutil
import subprocess
import sys

from harness import AirlockTestCase, SRC, main

SDK = os.path.join(SRC, "sdk", "typescript")


def node_major():
    r = subprocess.run(["node", "--version"], capture_output=True, text=True)
    try:
        return int(r.stdout.strip().lstrip("v").split(".")[0])
    except ValueError:
        return 0


class TypeScriptSdkTest(AirlockTestCase):
    extra_args = ("--set", "rate_per_s=50", "--set", "rate_burst=50")

    @classmethod
    def setUpClass(cls):
        # Build before the server starts: npm and tsc are slow on a busy box.
        # Always: a dist/ older than src/ would test old code (setup.sh skips
        # npm ci when node_modules is up to date; tsc takes seconds).
        r = subprocess.run(["sh", os.path.join(SDK, "setup.sh")], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"sdk/typescript/setup.sh exited {r.returncode}:\n"
                               f"{r.stdout}\n{r.stderr}")
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        # The suites delete some 270 sandboxes; btrfs cleans their subvolumes
        # in the background, and a pool unmounted with that still going is
        # detached lazily, its loop device freed only later (seen here past
        # the harness's 90 s wait on a loaded host). Let the cleaning finish
        # while the pool is still mounted.
        if cls.server:
            subprocess.run(["btrfs", "subvolume", "sync", os.path.join(cls.server.dir, "pool")],
                           capture_output=True, timeout=600)
        super().tearDownClass()

    def test_node_suites(self):
        t = self.api.call("POST", "/v1/tenants", {"name": "tssdk"})
        key = self.api.call("POST", "/v1/keys", {"tenant": t["id"]})["key"]
        files = sorted(glob.glob(os.path.join(SDK, "test", "*.test.mjs")))
        only = os.environ.get("AIRLOCK_TS_TESTS")   # e.g. "files,commands" while working
        if only:
            files = [f for f in files if os.path.basename(f).split(".")[0] in only.split(",")]
        self.assertTrue(files, "no node test files in sdk/typescript/test")
        env = dict(os.environ)
        env.update({
            "AIRLOCK_API_URL": f"http://{self.server.addr}",
            "AIRLOCK_API_KEY": key,
            "AIRLOCK_ADMIN_KEY": self.server.admin_key,
            "AIRLOCK_TEST_TEMPLATE": "busybox",
        })
        from harness import BACKEND
        if BACKEND:
            env["AIRLOCK_TEST_BACKEND"] = BACKEND
        # One file at a time: the machine is small and the 429 test wants
        # its key's bucket to itself.
        cmd = ["node", "--test"]
        if node_major() >= 20:
            cmd.append("--test-concurrency=1")
        r = subprocess.run(cmd + files, cwd=SDK, env=env, capture_output=True, text=True,
                           timeout=1100)  # under ctest's 1200 s, so cleanup runs
        sys.stdout.write(r.stdout[-60000:])
        sys.stderr.write(r.stderr[-20000:])
        self.assertEqual(r.returncode, 0, "node --test failed (output above)")
        self.assertIn("# fail 0", r.stdout)


if __name__ == "__main__":
    if not shutil.which("node") or not shutil.which("npm"):
        print("skip: the TypeScript SDK tests need node and npm (scripts/setup-deps.sh)")
        sys.exit(77)
    if node_major() < 18:
        print("skip: the TypeScript SDK needs Node >= 18")
        sys.exit(77)
    main()
