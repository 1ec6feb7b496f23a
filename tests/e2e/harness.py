"""End-to-end harness: start a real `airlockd up` on a temporary data directory
and a free loopback port, talk to it through the real HTTP API, and tear it all
down afterwards — processes we started (by pid), the pool mount, the loop
device and the directory — even when a test fails.

Tests are unittest classes that subclass AirlockTestCase. Exit code 77 (skip)
when not root, since the node manager needs root."""
import base64
import http.client
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

BIN = os.environ.get("AIRLOCK_BIN", os.path.join(os.path.dirname(__file__), "../../build/bin"))
# The backend every create uses unless a test names one: run a suite against
# the vm backend with AIRLOCK_E2E_BACKEND=vm (default: the node's default).
BACKEND = os.environ.get("AIRLOCK_E2E_BACKEND")
AIRLOCKD = os.path.join(BIN, "airlockd")
CLI = os.path.join(BIN, "airlock")
# The database a suite's instance uses: AIRLOCK_E2E_DB=postgres runs it on a
# PostgreSQL 15 that the harness starts for the class (tests/pg/pg-start.sh)
# and removes after it (default: the SQLite file in the data dir).
DB = os.environ.get("AIRLOCK_E2E_DB", "sqlite")
SRC = os.environ.get("AIRLOCK_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))


class Postgres:
    """A throwaway PostgreSQL for one test class; stop() removes it. A
    watcher started by pg-start.sh removes it too if this process dies."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="airlock-pg-")
        r = subprocess.run(["sh", os.path.join(SRC, "tests/pg/pg-start.sh"), self.dir,
                            str(os.getpid())], capture_output=True, text=True)
        if r.returncode != 0:
            self.stop()
            raise RuntimeError(f"pg-start exited {r.returncode}: {r.stderr}")
        self.url = r.stdout.strip()

    def sql(self, query):
        """Rows of a query, each a list of text fields."""
        r = subprocess.run(["/usr/lib/postgresql/15/bin/psql", self.url, "-qAtX", "-F", "|",
                            "-c", query], capture_output=True, text=True, check=True)
        return [line.split("|") for line in r.stdout.splitlines()]

    def query(self, query, args=()):
        """Like sqlite3's execute(query, args).fetchall(): "?" bound to args
        (quoted here: test values only), integers back as int, NULL as None."""
        parts = query.split("?")
        assert len(parts) == len(args) + 1, query
        text = parts[0]
        for a, rest in zip(args, parts[1:]):
            text += (str(a) if isinstance(a, int) else "'" + str(a).replace("'", "''") + "'") + rest
        r = subprocess.run(["/usr/lib/postgresql/15/bin/psql", self.url, "-qAtX", "-F", "\x1f",
                            "-P", "null=\x1e", "-c", text], capture_output=True, text=True,
                           check=True)
        conv = lambda f: None if f == "\x1e" else int(f) if f.lstrip("-").isdigit() else f
        return [tuple(conv(f) for f in line.split("\x1f")) for line in r.stdout.splitlines()]

    def restart(self):
        """Restart the server (same port, same data): every client connection drops."""
        cmd = ["/usr/lib/postgresql/15/bin/pg_ctl", "-D", os.path.join(self.dir, "data"),
               "-l", os.path.join(self.dir, "server.log"), "-m", "fast", "-w", "restart"]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "nobody", "--"] + cmd
        # not piped: the server it starts would hold the pipe open
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       stdin=subprocess.DEVNULL, cwd=self.dir)

    def stop(self):
        subprocess.run(["sh", os.path.join(SRC, "tests/pg/pg-stop.sh"), self.dir])


def until(pred, timeout=10.0, step=0.05):
    """Poll pred until it is true (True) or timeout seconds pass (False)."""
    deadline = time.time() + timeout
    while True:
        if pred():
            return True
        if time.time() >= deadline:
            return False
        time.sleep(step)


def thread_states(pid):
    """The state letter of each of pid's threads (/proc/PID/task/*/stat)."""
    states = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        except OSError:
            pass   # the thread ended meanwhile
    return states


def sigstop(pid, timeout=10.0):
    """SIGSTOP pid and wait until every thread of it is stopped. kill()
    wakes one thread, which stops the others when it next runs: on a busy
    machine the rest can go on serving for a while after kill() returned."""
    os.kill(pid, signal.SIGSTOP)
    if not until(lambda: all(s in "tT" for s in thread_states(pid)), timeout, 0.01):
        raise AssertionError(f"pid {pid} not stopped after {timeout} s: {thread_states(pid)}")


def node_user():
    """The node daemon's user (pwd entry), made as `airlockd up` makes it
    (useradd --system) when no instance has run on this machine yet: a test
    or bench that hands the node a directory before its first start."""
    import pwd
    try:
        return pwd.getpwnam("airlock")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--user-group",
                        "--shell", "/usr/sbin/nologin", "airlock"], check=True)
        return pwd.getpwnam("airlock")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def mounts_under(path):
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4]
            if mp == path or mp.startswith(path + "/"):
                out.append(mp)
    return out


def procs_for(data_dir):
    """Pids of processes whose command line names data_dir (ours, by construction)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if data_dir.encode() in f.read():
                    found.append(int(d))
        except OSError:
            pass
    return found


def cgroup_parent(data_dir):
    """The instance's cgroup parent name, as airlockd derives it (FNV-1a)."""
    h = 2166136261
    for c in data_dir.encode():
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return "airlock-%08x" % h


def cgroup_dirs(data_dir):
    import glob
    name = cgroup_parent(data_dir)
    return glob.glob(f"/sys/fs/cgroup/*/{name}") + glob.glob(f"/sys/fs/cgroup/{name}")


def instance_hash(data_dir):
    """FNV-1a of the data dir, as airlockd names this instance's host objects."""
    h = 2166136261
    for c in data_dir.encode():
        h = ((h ^ c) * 16777619) & 0xffffffff
    return h


def net_leftovers(data_dir):
    """This instance's nftables table and sandbox links, if any are left."""
    h = instance_hash(data_dir)
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    left = [l for l in tables.splitlines() if l.strip().endswith(f"airlock-{h:08x}")]
    names = [l.split(":")[1].strip() for l in links.splitlines() if l.count(":") >= 2]
    left += [n for n in names if n.startswith(f"al{h & 0xfffff:05x}-")]
    return left


def loops_for(image):
    r = subprocess.run(["losetup", "-j", image], capture_output=True, text=True)
    return [l.split(":")[0] for l in r.stdout.splitlines() if l.strip()]


def loop_holders(dev):
    """Pids whose mount namespace still has a mount of loop device dev.

    A process that made a new mount namespace (private propagation) while
    this instance's pool was mounted keeps a copy of that mount, and with it
    the loop device, after our own unmount; on a shared machine that is some
    other program's process (another test run, a bench). Our own processes
    are all gone by the time this is asked."""
    try:
        st = os.stat(dev)
    except OSError:
        return []
    want = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    found = []

    # A btrfs mount shows an anonymous device number (0:N, one per
    # subvolume), not the loop device's: match the mount source too.
    def on_dev(line):
        f = line.split()
        return f[2] == want or (" - " in line and line.split(" - ", 1)[1].split()[1:2] == [dev])
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/mountinfo") as f:
                if any(on_dev(l) for l in f):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def login_fd_limit():
    """The daemons start as from a fresh root login: a soft open-files limit
    of 1024 under the hard one (the servers raise their own)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))


class ApiError(Exception):
    def __init__(self, status, body):
        self.status = status
        self.body = body
        try:
            self.code = json.loads(body)["error"]["code"]
        except Exception:
            self.code = None
        super().__init__(f"HTTP {status}: {body[:300]!r}")


class Server:
    """One `airlockd up` instance."""

    def __init__(self, templates="busybox", extra_args=(), airlockd=None, env=None):
        self.airlockd = airlockd or AIRLOCKD
        # No system config (/etc/airlock/airlockd.conf) leaks into a test.
        self.env = dict(os.environ, AIRLOCK_CONFIG="", **(env or {}))
        self.dir = tempfile.mkdtemp(prefix="airlock-e2e-")
        os.chmod(self.dir, 0o755)
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.log_path = os.path.join(self.dir, "up.log")
        self.templates = templates
        self.extra_args = list(extra_args)
        self.proc = None

    def start(self, timeout=600, until=b"airlock is up"):
        """Start `airlockd up` and wait for the line `until` in its log
        (by default: up, templates made)."""
        start_at = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [self.airlockd, "up", "--data-dir", self.dir, "--listen", self.addr,
                 "--templates", self.templates, "--pool-size-mb", "16384"] + self.extra_args,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=login_fd_limit, env=self.env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"airlockd up exited {self.proc.returncode}:\n{self.log()}")
            with open(self.log_path, "rb") as f:
                f.seek(start_at)
                if until in f.read():
                    break
            time.sleep(0.05)
        else:
            raise RuntimeError("airlockd up did not come up:\n" + self.log())
        if until != b"airlock is up":
            return self
        with open(os.path.join(self.dir, "cli.json")) as f:
            cfg = json.load(f)
        self.admin_key = cfg["api_key"]
        return self

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-20000:]
        except OSError:
            return ""

    def pid_of(self, role):
        with open(os.path.join(self.dir, "run", role + ".pid")) as f:
            return int(f.read())

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def cleanup(self):
        """Stop, then make sure nothing is left: processes, mounts, loop devices, dir."""
        self.stop()
        for pid in procs_for(self.dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        # Jail processes of this instance, if its nodemgr could not stop them.
        for parent in cgroup_dirs(self.dir):
            for sub in [d for d in os.listdir(parent) if os.path.isdir(os.path.join(parent, d))]:
                try:
                    with open(os.path.join(parent, sub, "cgroup.procs")) as f:
                        for pid in f.read().split():
                            os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        for parent in cgroup_dirs(self.dir):
            for sub in [d for d in os.listdir(parent) if os.path.isdir(os.path.join(parent, d))]:
                for _ in range(50):
                    try:
                        os.rmdir(os.path.join(parent, sub))
                        break
                    except OSError:
                        time.sleep(0.02)
            try:
                os.rmdir(parent)
            except OSError:
                pass
        # This instance's network, if its nodemgr could not remove it.
        h = instance_hash(self.dir)
        for name in net_leftovers(self.dir):
            if name.startswith("table "):
                subprocess.run(["nft", "delete", "table", "inet", f"airlock-{h:08x}"],
                               capture_output=True)
            else:
                subprocess.run(["ip", "link", "del", name.split("@")[0]], capture_output=True)
        pool = os.path.join(self.dir, "pool")
        for mp in sorted(mounts_under(self.dir), key=len, reverse=True):
            subprocess.run(["umount", "-l", mp], capture_output=True)
        img = os.path.join(self.dir, "pool.img")
        for dev in loops_for(img):
            subprocess.run(["losetup", "-d", dev], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        return pool

    def client(self, key=None):
        return Client(self.addr, key or self.admin_key)


class Client:
    def __init__(self, addr, key):
        self.host, port = addr.rsplit(":", 1)
        self.port = int(port)
        self.key = key

    def _conn(self):
        # generous: a create may wait for an on-demand debian build (minutes
        # on a loaded machine)
        return http.client.HTTPConnection(self.host, self.port, timeout=900)

    def raw(self, method, path, body=None, headers=None, auth=True):
        h = dict(headers or {})
        if auth and self.key:
            h["Authorization"] = "Bearer " + self.key
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            body = body.encode()
        c = self._conn()
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data, r

    def call(self, method, path, body=None, headers=None, expect=(200, 201, 204)):
        status, data, _ = self.raw(method, path, body, headers)
        if status not in expect:
            raise ApiError(status, data.decode(errors="replace"))
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return data

    def create(self, **kw):
        headers = {}
        if "idempotency_key" in kw:
            headers["Idempotency-Key"] = kw.pop("idempotency_key")
        kw.setdefault("template", "busybox")
        if BACKEND:
            kw.setdefault("backend", BACKEND)
        return self.call("POST", "/v1/sandboxes", kw, headers)

    def delete(self, sid):
        return self.call("DELETE", f"/v1/sandboxes/{sid}")

    def stream(self, method, path, body=None):
        """Yield NDJSON events as they arrive."""
        c = self._conn()
        h = {"Authorization": "Bearer " + self.key}
        if body is not None:
            body = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        if r.status != 200:
            data = r.read().decode(errors="replace")
            c.close()
            raise ApiError(r.status, data)
        try:
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.strip()
                if line:
                    yield json.loads(line)
        finally:
            c.close()

    def exec(self, sid, cmd, **kw):
        """Run to completion: returns (exit_code, stdout bytes, stderr bytes, events)."""
        body = {"cmd": cmd}
        body.update(kw)
        out, err, code, events = b"", b"", None, []
        for ev in self.stream("POST", f"/v1/sandboxes/{sid}/exec", body):
            events.append(ev)
            if ev["type"] == "stdout":
                out += base64.b64decode(ev["data"])
            elif ev["type"] == "stderr":
                err += base64.b64decode(ev["data"])
            elif ev["type"] == "exit":
                code = ev.get("exit_code")
                if code is None:
                    code = 128 + ev.get("signal", 0)
        return code, out, err, events


class SharedDb(Postgres):
    """A database for several `airlockd up` instances (a cluster on one
    machine): a PostgreSQL of the test's own."""

    def __init__(self):
        super().__init__()
        self.args = ("--db", self.url)

    def generation(self, node):
        rows = self.query("SELECT generation FROM nodes WHERE name=?", (node,))
        return rows[0][0] if rows else None

    def close(self):
        self.stop()


class S3Server:
    """The S3-compatible server of tests/s3 (s3rver behind a Signature V4
    check) on 127.0.0.1, bucket `airlock`, keys S3RVER/S3RVER; stop() ends it
    and removes its data. None from start() when its npm packages are
    missing (tests/s3/setup.sh; make test installs them)."""

    @staticmethod
    def start(check=True):
        """check=False: s3rver's own port, without the signature-checking
        front (which holds each request whole): for benchmarks."""
        here = os.path.join(SRC, "tests", "s3")
        if not shutil.which("node") or not os.path.isdir(os.path.join(here, "node_modules",
                                                                       "s3rver")):
            return None
        srv = S3Server()
        env = dict(os.environ, **({} if check else {"AIRLOCK_S3_NO_CHECK": "1"}))
        srv.proc = subprocess.Popen(["node", "--openssl-legacy-provider",
                                     os.path.join(here, "s3server.js"), "airlock"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    start_new_session=True, env=env)
        port = int(srv.proc.stdout.readline().strip())
        srv.port = port
        srv.url = (f"s3://airlock?endpoint=http://127.0.0.1:{port}&region=us-east-1"
                   "&path_style=1")
        return srv

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()   # it stops when its stdin closes
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start_world(ns, argv, log_path):
    """Start a test "internet" program (argv) in network namespace ns, in
    a session of its own, and wait until it writes "ready" to log_path."""
    proc = subprocess.Popen(["ip", "netns", "exec", ns] + argv, start_new_session=True,
                            stderr=subprocess.DEVNULL)
    for _ in range(200):
        if os.path.exists(log_path):
            with open(log_path) as f:
                if "ready" in f.read():
                    return proc
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    raise RuntimeError("test world did not start")


def shared_db_args():
    """A database to share between the instances of one test."""
    return SharedDb()


def stop_and_check(server):
    """Stop server, clean up, and fail if its shutdown left anything behind:
    processes, cgroups, mounts, loop devices, nftables table or links."""
    d = server.dir
    server.stop()
    time.sleep(0.2)
    procs = procs_for(d)
    cgroups = cgroup_dirs(d)
    leftover = mounts_under(d)
    # A pool that was still busy at shutdown is detached lazily and
    # its autoclear loop device goes once the last user is gone
    # (seen after big writes, e.g. full vm snapshots): wait for
    # that, but not forever.
    # (btrfs's teardown of a lazily detached pool can take a while
    # after many deleted subvolumes, e.g. vm images: up to 30 s on
    # a quiet machine, more when other jobs load it: 90 s was
    # exceeded at load averages over 100; 180 s here.)
    for i in range(1800):
        loops = loops_for(os.path.join(d, "pool.img"))
        if not loops:
            break
        # held by another program's mount namespace (see below): waiting
        # does not help, that is excused anyway
        if i % 10 == 9 and all(loop_holders(dev) for dev in loops):
            break
        time.sleep(0.1)
    # Still there: only a mount copy in a foreign mount namespace
    # may excuse it (our code unmounted; see loop_holders). A loop
    # device that nothing holds is a leak.
    held = {dev: loop_holders(dev) for dev in loops}
    foreign = {dev: pids for dev, pids in held.items() if pids}
    if foreign:
        print(f"note: loop device(s) {foreign} still mounted in other processes' "
              "mount namespaces (not this instance's); not counted as a leak",
              file=sys.stderr)
        loops = [dev for dev in loops if dev not in foreign]
    net = net_leftovers(d)
    server.cleanup()
    # A clean shutdown must leave no mount and no loop device behind.
    assert not procs, f"processes left after shutdown: {procs}"
    assert not cgroups, f"cgroups left after shutdown: {cgroups}"
    assert not leftover, f"mounts left after shutdown: {leftover}"
    assert not loops, f"loop devices left after shutdown: {loops}"
    assert not net, f"nftables table or sandbox links left after shutdown: {net}"


class AirlockTestCase(unittest.TestCase):
    templates = "busybox"
    extra_args = ()
    server = None

    pg = None

    @classmethod
    def setUpClass(cls):
        extra = list(cls.extra_args)
        if DB == "postgres":
            cls.pg = Postgres()
            extra += ["--db", cls.pg.url]
        cls.server = Server(cls.templates, extra)
        try:
            cls.server.start()
        except Exception:
            print(cls.server.log(), file=sys.stderr)
            cls.server.cleanup()
            if cls.pg:
                cls.pg.stop()
            raise
        cls.api = cls.server.client()

    @classmethod
    def tearDownClass(cls):
        if cls.server:
            try:
                stop_and_check(cls.server)
            finally:
                if cls.pg:
                    cls.pg.stop()
            assert not cls.pg or not os.path.exists(cls.pg.dir), \
                "the PostgreSQL dir was not removed"

    def db_rows(self, query, *args):
        """Rows of a query on the instance's database, SQLite or PostgreSQL
        (AIRLOCK_E2E_DB), as sqlite3's fetchall() gives them."""
        if self.pg:
            return self.pg.query(query, args)
        import sqlite3
        db = sqlite3.connect(f"file:{os.path.join(self.server.dir, 'db', 'airlock.db')}?mode=ro",
                             uri=True, timeout=30)
        try:
            return db.execute(query, args).fetchall()
        finally:
            db.close()

    def kill_and_wait_restarted(self, role, timeout=60):
        """kill -9 the role; return its new pid once `up` restarted it and the
        new process made its socket (the old socket file stays behind until
        then, so wait for a new inode, not just for the file). For the node,
        also until the API answers through it again."""
        sock = os.path.join(self.server.dir, "run", role + ".sock")
        old_pid = self.server.pid_of(role)
        old_ino = os.stat(sock).st_ino
        os.kill(old_pid, signal.SIGKILL)
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                pid = self.server.pid_of(role)
                ino = os.stat(sock).st_ino
            except (OSError, ValueError):
                pid, ino = old_pid, old_ino
            if pid != old_pid and ino != old_ino and \
                    (role != "node" or self.api.raw("GET", "/v1/sandboxes")[0] == 200):
                return pid
            time.sleep(0.05)
        self.fail(f"{role} was not restarted")

    def new_tenant(self, name):
        t = self.api.call("POST", "/v1/tenants", {"name": name})
        k = self.api.call("POST", "/v1/keys", {"tenant": t["id"]})
        return t, Client(self.server.addr, k["key"])

    def subvolumes(self):
        r = subprocess.run(["btrfs", "subvolume", "list", "-o",
                            os.path.join(self.server.dir, "pool", "sandboxes")],
                           capture_output=True, text=True)
        # -o on a plain directory lists the whole filesystem: keep sandboxes
        # only (not templates, vm snapshot caches or warm-pool subvolumes).
        return [l for l in r.stdout.splitlines() if "sandboxes/" in l]

    def cgroups(self):
        import glob
        found = []
        for base in glob.glob("/sys/fs/cgroup/*/airlock*") + glob.glob("/sys/fs/cgroup/airlock*"):
            if os.path.isdir(base):
                found += [os.path.join(base, d) for d in os.listdir(base)
                          if os.path.isdir(os.path.join(base, d))]
        return found


def main():
    if os.geteuid() != 0:
        print("skip: end-to-end tests need root")
        sys.exit(77)
    if not os.path.exists(AIRLOCKD):
        print(f"skip: {AIRLOCKD} not built")
        sys.exit(77)
    if DB == "postgres" and not os.path.exists("/usr/lib/postgresql/15/bin/initdb"):
        print("skip: AIRLOCK_E2E_DB=postgres needs postgresql-15")
        sys.exit(77)
    if BACKEND == "vm":
        vm_dir = os.environ.get("AIRLOCK_VM_DIR", os.path.join(BIN, "..", "vm"))
        if not shutil.which("qemu-system-x86_64") or not os.path.exists(os.path.join(vm_dir, "vmlinuz")):
            print("skip: the vm backend needs qemu-system-x86_64 and the guest kernel")
            sys.exit(77)
    unittest.main(verbosity=2)
