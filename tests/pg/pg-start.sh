#!/bin/sh
# pg-start.sh DIR [WATCH_PID] - a throwaway PostgreSQL 15 for the tests.
#
# Makes DIR (its parent must be traversable by that user) or takes an empty one, runs initdb and the server in it as an
# unprivileged user (initdb refuses root: `nobody` when run as root, else the
# caller), listening on a Unix socket in DIR and on 127.0.0.1 at a free port,
# with trust authentication (nothing but the local machine reaches it). It
# creates the role `airlock` (LOGIN CREATEDB) and its database `airlock`, and
# prints the URL to reach them:
#     postgresql://airlock@127.0.0.1:PORT/airlock
# WATCH_PID: a watcher stops the server and removes DIR once that process is
# gone, so a test that crashes leaves nothing behind; tests/pg/pg-stop.sh DIR
# does the same at once. Exits 77 when Debian's postgresql-15 is not installed.
set -eu

dir=$1
watch=${2:-}
bin=/usr/lib/postgresql/15/bin
here=$(cd "$(dirname "$0")" && pwd)

if [ ! -x "$bin/initdb" ] || [ ! -x "$bin/pg_ctl" ]; then
	echo "pg-start: $bin/initdb not found (apt-get install postgresql-15)" >&2
	exit 77
fi
mkdir -p "$dir"
if [ "$(id -u)" = 0 ]; then
	chown nobody "$dir"
	as() { (cd "$dir" && runuser -u nobody -- "$@"); }
else
	as() { (cd "$dir" && "$@"); }
fi
# The daemons (user airlock) connect over TCP; the socket is for psql here.
chmod 0755 "$dir"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 ||
	{ cat "$dir/initdb.log" >&2; exit 1; }
if [ -n "$watch" ]; then
	# Started before the server, so a failure below is cleaned up too.
	nohup sh -c "while kill -0 $watch 2>/dev/null; do sleep 1; done; sh '$here/pg-stop.sh' '$dir'" \
		>/dev/null 2>&1 &
fi
as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
	-o "-k $dir -p $port -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
	start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
as "$bin/psql" -h "$dir" -p "$port" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1 \
	-c "CREATE ROLE airlock LOGIN CREATEDB" -c "CREATE DATABASE airlock OWNER airlock" >/dev/null
echo "postgresql://airlock@127.0.0.1:$port/airlock"
