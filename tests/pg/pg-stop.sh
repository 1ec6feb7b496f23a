#!/bin/sh
# pg-stop.sh DIR - stop the server that pg-start.sh started in DIR and remove
# DIR. Idempotent: a second call (or the watcher after an explicit stop)
# finds nothing to do.
set -u

dir=$1
bin=/usr/lib/postgresql/15/bin
pidfile="$dir/data/postmaster.pid"

if [ -f "$pidfile" ]; then
	pid=$(head -n 1 "$pidfile")
	if [ "$(id -u)" = 0 ]; then
		runuser -u nobody -- "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1
	else
		"$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1
	fi
	# pg_ctl failed (a broken data dir): the postmaster by the pid it wrote.
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null
	fi
fi
case "$dir" in
/tmp/*|/var/tmp/*) rm -rf "$dir" ;;
*) echo "pg-stop: not removing $dir (not under /tmp)" >&2 ;;
esac
