# Throwaway PostgreSQL clusters for tests and the demo.  Source this file.
#
# A cluster lives in a directory of its own, listens only on a Unix socket in
# that directory (no TCP), and is stopped by cluster_stop.  The functions run
# as the current user, which must not be root: PostgreSQL refuses that.

PG_CONFIG=${PG_CONFIG:-$(command -v /usr/lib/postgresql/15/bin/pg_config || command -v pg_config)}
PG_BINDIR=$("$PG_CONFIG" --bindir)
PGXS_DIR=$(cd "$(dirname "$("$PG_CONFIG" --pgxs)")/../.." && pwd)

# cluster_start DIR [CONF]: initdb into DIR/data, append CONF (a file of
# postgresql.conf lines) and start.  Exports PGHOST, PGPORT and PGDATA.
cluster_start() {
	local dir=$1 conf=${2:-}
	mkdir -p "$dir/socket"
	"$PG_BINDIR/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; return 1; }
	{
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$dir/socket'"
		echo "port = 5432"
		echo "fsync = off"
		[ -n "$conf" ] && cat "$conf"
	} >>"$dir/data/postgresql.conf"
	export PGHOST="$dir/socket" PGPORT=5432 PGDATA="$dir/data" PGUSER=postgres
	"$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
		{ cat "$dir/server.log" >&2; return 1; }
}

# cluster_stop DIR: stop the cluster in DIR, if it runs.
cluster_stop() {
	local dir=$1
	if [ -f "$dir/data/postmaster.pid" ]; then
		"$PG_BINDIR/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
	fi
}

# hand_over DIR: let the unprivileged user own a staged copy.  Sets the array
# AS_USER to the command prefix that runs as that user: runuser when this
# runs as root (PostgreSQL refuses root), nothing otherwise.
hand_over() {
	chmod 755 "$1"
	if [ "$(id -u)" -eq 0 ]; then
		chown -R postgres: "$1"
		AS_USER=(runuser -u postgres --)
	else
		AS_USER=()
	fi
}
