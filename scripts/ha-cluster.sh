#!/usr/bin/env bash
# A Patroni test cluster for eventhub: one etcd and three PostgreSQL 15 nodes
# managed by Patroni, all on loopback ports, all their state in DIR.
#
#   ha-cluster.sh up DIR                    start (or restart) it; waits until a leader
#                                           has eventhub and both replicas stream
#   ha-cluster.sh down DIR                  stop it; DIR and its data stay
#   ha-cluster.sh status DIR                etcd's health and patronictl list
#   ha-cluster.sh switchover DIR [NODE]     patronictl switchover --force (to NODE, else
#                                           to the replica Patroni picks); waits until the
#                                           new leader takes writes and both replicas stream
#   ha-cluster.sh leader DIR                the leader's name and PostgreSQL port: node2 25412
#   ha-cluster.sh conninfo DIR              a libpq conninfo naming the three nodes
#   ha-cluster.sh crash DIR NODE            SIGKILL NODE's Patroni, then its postmaster
#   ha-cluster.sh pause DIR NODE [WHAT]     SIGSTOP every process of NODE's PostgreSQL
#                                           (WHAT postgres, the default: a stalled database)
#                                           or of NODE's Patroni and PostgreSQL (WHAT node:
#                                           a frozen machine)
#   ha-cluster.sh resume DIR NODE           SIGCONT them all
#   ha-cluster.sh start DIR NODE            start NODE's Patroni again (it rejoins,
#                                           with pg_rewind where its history forked)
#   ha-cluster.sh config DIR JSON           change the cluster's dynamic configuration
#                                           (Patroni's PATCH /config), e.g.
#                                           '{"synchronous_mode": true}'
#
# Sourced, it defines the same as functions (ha_up DIR, ...).  The servers
# run as postgres (PostgreSQL refuses root): run as root, it hands DIR over
# to postgres and starts them with runuser; run as postgres, directly.
#
# up reads, for a new DIR (a restart keeps what DIR/ha.env recorded):
#   HA_BASE_PORT  (25400)     etcd's client port; its peer port is +1; node N's
#                             PostgreSQL port is +10+N and its REST API +20+N
#   HA_DATABASE   (postgres)  eventhub.database, created with the extension
#   HA_SYNC       (0)         1: Patroni's synchronous_mode (not strict)
#   HA_DCS        (etcd)      Patroni's etcd API: etcd (v2, etcd started with
#                             --enable-v2) or etcd3.  Debian 12's Patroni 3.0.2
#                             overwrites the leader key without a condition
#                             over etcd3 when a paused leader resumes (fixed
#                             in 3.0.3): docs/ha.md
#   HA_FSYNC      (off)       fsync on the nodes
#   HA_PARAMETERS ()          more server settings, "name=value,name=value"
# and always HA_WAIT_LIMIT (120): the seconds a wait may take before it fails.

# shellcheck source=scripts/cluster.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"

HA_NODES=(node1 node2 node3)
HA_WAIT_LIMIT=${HA_WAIT_LIMIT:-120}

ha_pg_port() { echo $((HA_BASE_PORT + 10 + ${1#node})); }
ha_rest_port() { echo $((HA_BASE_PORT + 20 + ${1#node})); }

# ha_load DIR: the cluster recorded in DIR: sets HA_DIR and its settings,
# and AS_USER (cluster.sh's hand_over) to run as the servers' user.
ha_load() {
	[ -f "$1/ha.env" ] || { echo "ha-cluster: $1: no cluster here (ha-cluster.sh up $1 makes one)" >&2; return 1; }
	HA_DIR=$(cd "$1" && pwd)
	# shellcheck source=/dev/null
	source "$HA_DIR/ha.env"
	if [ "$(id -u)" -eq 0 ]; then AS_USER=(runuser -u postgres --); else AS_USER=(); fi
}

# ha_sql PORT SQL [DB]: SQL's result, unaligned, on the node at PORT, in DB
# (HA_DATABASE).  Trust on loopback (the nodes' pg_hba.conf): any OS user
# connects as postgres.
ha_sql() {
	"$PG_BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 \
		"host=127.0.0.1 port=$1 user=postgres dbname=${3:-$HA_DATABASE} connect_timeout=5" -c "$2"
}

# ha_wait WHAT COMMAND...: until COMMAND succeeds; 1, naming WHAT, after
# HA_WAIT_LIMIT seconds.  The pause only paces the polling.
ha_wait() {
	local what=$1 deadline=$((SECONDS + HA_WAIT_LIMIT))
	shift
	until "$@" >/dev/null 2>&1; do
		if [ $SECONDS -ge $deadline ]; then
			echo "ha-cluster: $what: not within $HA_WAIT_LIMIT s" >&2
			return 1
		fi
		sleep 0.2
	done
}

# ha_running PIDFILE: the pid in PIDFILE, if that process runs and its
# command line names this cluster's directory (a recycled pid is someone
# else's process, never signalled).
ha_running() {
	local pid
	pid=$(cat "$1" 2>/dev/null) || return 1
	[ -n "$pid" ] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF "$HA_DIR/" || return 1
	echo "$pid"
}

# ha_spawn PIDFILE LOG COMMAND...: COMMAND in the background as the servers'
# user, its pid in PIDFILE, its output in LOG.  In a session of its own, so
# that a Ctrl-C in the caller's terminal does not reach it; holding none of
# the caller's files, so that $(ha-cluster.sh up DIR) or a pipe ends (and
# runuser's "Terminated" when etcd stops goes nowhere); with a clean
# environment: Patroni reads PATRONI_* variables as configuration, and
# libpq's PG* ones would redirect its connections.
ha_spawn() {
	local pidfile=$1 log=$2
	shift 2
	# shellcheck disable=SC2016 # $$, $0 and $1 are the inner shell's
	setsid "${AS_USER[@]}" env -i PATH=/usr/bin:/bin HOME="$HA_DIR" LC_ALL=C.UTF-8 \
		sh -c 'echo $$ >"$0"; exec >>"$1" 2>&1; shift; exec "$@"' "$pidfile" "$log" "$@" \
		</dev/null >/dev/null 2>&1 &
}

# ha_stop PIDFILE: SIGTERM to the process in PIDFILE, if it runs; see
# ha_stopped.
ha_stop() {
	local pid
	pid=$(ha_running "$1") && kill -TERM "$pid"
	return 0
}

# ha_stopped PIDFILE WHAT: waits until the process in PIDFILE has exited,
# SIGKILLs it after HA_WAIT_LIMIT seconds, and removes PIDFILE.
ha_gone() { ! kill -0 "$1" 2>/dev/null; }
ha_stopped() {
	local pid
	if pid=$(ha_running "$1"); then
		if ! ha_wait "$2 to stop" ha_gone "$pid"; then
			echo "ha-cluster: $2: SIGKILL" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$1"
}

# ha_write_config: etcd needs only flags; one Patroni YAML per node.
ha_write_config() {
	local node sync=false
	[ "$HA_SYNC" = 1 ] && sync=true
	case $HA_DCS in
	etcd | etcd3) ;;
	*)
		echo "ha-cluster: HA_DCS=$HA_DCS: etcd or etcd3" >&2
		return 1
		;;
	esac
	mkdir -p "$HA_DIR/socket"
	# etcd warns about a data directory others can read.
	[ -d "$HA_DIR/etcd" ] || mkdir -m 700 "$HA_DIR/etcd"
	for node in "${HA_NODES[@]}"; do
		mkdir -p "$HA_DIR/$node"
		# bootstrap.dcs is read once, when the first node initializes the
		# cluster in etcd; later changes go through patronictl edit-config.
		# Timings: Patroni wants loop_wait + 2 * retry_timeout <= ttl; a short
		# loop_wait makes a switchover quick, a ttl of 20 s rides out a
		# loaded machine.  The postgres user replicates too (trust on
		# loopback only, a throwaway cluster).
		cat >"$HA_DIR/$node/patroni.yml" <<-EOF
			scope: eventhub-ha
			namespace: /eventhub-ha/
			name: $node
			restapi:
			  listen: 127.0.0.1:$(ha_rest_port "$node")
			  connect_address: 127.0.0.1:$(ha_rest_port "$node")
			$HA_DCS:
			  hosts: 127.0.0.1:$HA_BASE_PORT
			watchdog:
			  mode: off
			bootstrap:
			  dcs:
			    ttl: 20
			    loop_wait: 2
			    retry_timeout: 5
			    synchronous_mode: $sync
			    synchronous_mode_strict: false
			    postgresql:
			      use_pg_rewind: true
			      use_slots: true
			      parameters:
			        shared_preload_libraries: eventhub
			        eventhub.database: $HA_DATABASE
			        fsync: '$HA_FSYNC'
			        wal_level: replica
			        hot_standby: 'on'
			        wal_log_hints: 'on'
			$(ha_parameters_yaml)
			  initdb:
			  - encoding: UTF8
			  - locale: C.UTF-8
			  - no-sync
			postgresql:
			  listen: 127.0.0.1:$(ha_pg_port "$node")
			  connect_address: 127.0.0.1:$(ha_pg_port "$node")
			  data_dir: $HA_DIR/$node/data
			  bin_dir: $PG_BINDIR
			  pgpass: $HA_DIR/$node/pgpass
			  authentication:
			    superuser:
			      username: postgres
			    replication:
			      username: postgres
			  parameters:
			    unix_socket_directories: $HA_DIR/socket
			  basebackup:
			  - checkpoint: fast
			  pg_hba:
			  - local all all trust
			  - host all all 127.0.0.1/32 trust
			  - local replication all trust
			  - host replication all 127.0.0.1/32 trust
		EOF
	done
}

# ha_parameters_yaml: HA_PARAMETERS as lines of the YAML above.
ha_parameters_yaml() {
	local kv
	local IFS=,
	for kv in ${HA_PARAMETERS:-}; do
		printf "        %s: '%s'\n" "${kv%%=*}" "${kv#*=}"
	done
}

# ha_leader_of: sets HA_LEADER and HA_LEADER_PORT to the node whose REST API
# says it holds the leader lock (GET /leader answers 200 there only); 1 if
# none does.
ha_leader_of() {
	local node
	for node in "${HA_NODES[@]}"; do
		if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 \
			"http://127.0.0.1:$(ha_rest_port "$node")/leader")" = 200 ]; then
			HA_LEADER=$node HA_LEADER_PORT=$(ha_pg_port "$node")
			return 0
		fi
	done
	return 1
}

# ha_leader_is [NOT_NODE]: a leader (not NOT_NODE) that accepts writes.
ha_leader_is() {
	ha_leader_of && [ "$HA_LEADER" != "${1:-}" ] &&
		[ "$(ha_sql "$HA_LEADER_PORT" "SELECT NOT pg_is_in_recovery()" postgres)" = t ]
}

# ha_replicas_streaming: both replicas stream from the leader (and, under
# synchronous_mode, one of them is synchronous), and Patroni sees every
# member running (its state lags PostgreSQL's by up to a loop_wait).
ha_replicas_streaming() {
	local want="count(*) FILTER (WHERE state = 'streaming') = 2"
	[ "$HA_SYNC" = 1 ] && want="$want AND count(*) FILTER (WHERE sync_state = 'sync') = 1"
	ha_leader_of && [ "$(ha_sql "$HA_LEADER_PORT" "SELECT $want FROM pg_stat_replication" postgres)" = t ] &&
		[ "$(curl -s --max-time 2 "http://127.0.0.1:$(ha_rest_port "$HA_LEADER")/cluster" |
			grep -o '"state": "running"' | wc -l)" -eq ${#HA_NODES[@]} ]
}

# ha_create_extension: the eventhub database, if not postgres, and the
# extension, on the leader; the replicas get both through replication.
ha_create_extension() {
	ha_leader_of || return 1
	if [ "$(ha_sql "$HA_LEADER_PORT" "SELECT count(*) FROM pg_database WHERE datname = '$HA_DATABASE'" postgres)" = 0 ]; then
		ha_sql "$HA_LEADER_PORT" "CREATE DATABASE \"$HA_DATABASE\"" postgres || return 1
	fi
	ha_sql "$HA_LEADER_PORT" "CREATE EXTENSION IF NOT EXISTS eventhub"
}

ha_up() {
	local dir=$1 node
	[ -n "$dir" ] || { echo "usage: ha-cluster.sh up DIR" >&2; return 2; }
	if [ ! -f "$dir/ha.env" ]; then
		# A directory of someone else's is never handed over to postgres.
		if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
			echo "ha-cluster: $dir is not empty and holds no cluster" >&2
			return 1
		fi
		mkdir -p "$dir" || return 1
		# Paths go unquoted into YAML and postgresql.conf, and a socket's
		# path has at most 107 bytes.
		local abs
		abs=$(cd "$dir" && pwd)
		if [[ ! $abs =~ ^[A-Za-z0-9/._-]+$ ]] || [ ${#abs} -gt 80 ]; then
			echo "ha-cluster: $abs: use a path of at most 80 characters among A-Z a-z 0-9 / . _ -" >&2
			return 1
		fi
		cat >"$dir/ha.env" <<-EOF
			HA_BASE_PORT=${HA_BASE_PORT:-25400}
			HA_DATABASE=${HA_DATABASE:-postgres}
			HA_SYNC=${HA_SYNC:-0}
			HA_DCS=${HA_DCS:-etcd}
			HA_FSYNC=${HA_FSYNC:-off}
			HA_PARAMETERS='${HA_PARAMETERS:-}'
		EOF
	fi
	ha_load "$dir" || return 1
	local pidfile port
	for pidfile in "$HA_DIR/etcd.pid" "$HA_DIR"/node*/patroni.pid; do
		if ha_running "$pidfile" >/dev/null; then
			echo "ha-cluster: $HA_DIR: already running (ha-cluster.sh down $HA_DIR stops it)" >&2
			return 1
		fi
	done
	for port in "$HA_BASE_PORT" $((HA_BASE_PORT + 1)) $(for node in "${HA_NODES[@]}"; do
		ha_pg_port "$node"
		ha_rest_port "$node"
	done); do
		if (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "ha-cluster: port $port is taken; choose another HA_BASE_PORT" >&2
			return 1
		fi
	done
	ha_write_config || return 1
	hand_over "$HA_DIR"
	if ! "${AS_USER[@]}" test -w "$HA_DIR"; then
		echo "ha-cluster: postgres cannot write $HA_DIR (are its parents searchable?)" >&2
		return 1
	fi

	# etcd 3.4 has no --unsafe-no-fsync: its writes are few here anyway.
	# Patroni's etcd key speaks etcd's v2 API, which etcd 3.4 serves only
	# when asked.
	local v2=()
	[ "$HA_DCS" = etcd ] && v2=(--enable-v2=true)
	ha_spawn "$HA_DIR/etcd.pid" "$HA_DIR/etcd.log" "$(command -v etcd)" --name eventhub-ha "${v2[@]}" \
		--data-dir "$HA_DIR/etcd" --logger zap --log-level warn \
		--listen-client-urls "http://127.0.0.1:$HA_BASE_PORT" \
		--advertise-client-urls "http://127.0.0.1:$HA_BASE_PORT" \
		--listen-peer-urls "http://127.0.0.1:$((HA_BASE_PORT + 1))" \
		--initial-advertise-peer-urls "http://127.0.0.1:$((HA_BASE_PORT + 1))" \
		--initial-cluster "eventhub-ha=http://127.0.0.1:$((HA_BASE_PORT + 1))"
	ha_wait "etcd" curl -sf --max-time 2 "http://127.0.0.1:$HA_BASE_PORT/health" ||
		{ ha_fail_up; return 1; }

	# All three at once: the first to take etcd's initialize key runs initdb,
	# the others clone it with pg_basebackup.
	for node in "${HA_NODES[@]}"; do
		ha_spawn "$HA_DIR/$node/patroni.pid" "$HA_DIR/$node/patroni.log" \
			"$(command -v patroni)" "$HA_DIR/$node/patroni.yml"
	done
	ha_wait "a leader" ha_leader_is || { ha_fail_up; return 1; }
	ha_wait "CREATE EXTENSION eventhub on the leader" ha_create_extension || { ha_fail_up; return 1; }
	ha_wait "both replicas streaming" ha_replicas_streaming || { ha_fail_up; return 1; }
	echo "ha-cluster: $HA_LEADER leads on port $HA_LEADER_PORT; $(ha_conninfo "$HA_DIR")"
}

# ha_fail_up: what a failed up leaves to read, and everything stopped.
ha_fail_up() {
	local log
	for log in "$HA_DIR/etcd.log" "$HA_DIR"/node*/patroni.log; do
		[ -f "$log" ] && { echo "== $log" >&2; tail -n 15 "$log" >&2; }
	done
	ha_down "$HA_DIR"
}

ha_down() {
	local dir=$1 node
	[ -n "$dir" ] || { echo "usage: ha-cluster.sh down DIR" >&2; return 2; }
	ha_load "$dir" || return 1
	# A paused node would not hear SIGTERM.
	for node in "${HA_NODES[@]}"; do
		[ ! -f "$HA_DIR/$node/paused" ] || ha_resume "$HA_DIR" "$node"
	done
	# The replicas first, then the leader: no replica takes over from a
	# leader that is only being stopped.  Patroni stops its PostgreSQL.
	ha_leader_of || HA_LEADER=
	for node in "${HA_NODES[@]}"; do
		[ "$node" = "$HA_LEADER" ] || ha_stop "$HA_DIR/$node/patroni.pid"
	done
	for node in "${HA_NODES[@]}"; do
		[ "$node" = "$HA_LEADER" ] || ha_stopped "$HA_DIR/$node/patroni.pid" "patroni $node"
	done
	if [ -n "$HA_LEADER" ]; then
		ha_stop "$HA_DIR/$HA_LEADER/patroni.pid"
		ha_stopped "$HA_DIR/$HA_LEADER/patroni.pid" "patroni $HA_LEADER"
	fi
	# A PostgreSQL whose Patroni died (or was SIGKILLed above) still runs.
	for node in "${HA_NODES[@]}"; do
		if [ -f "$HA_DIR/$node/data/postmaster.pid" ] &&
			"${AS_USER[@]}" "$PG_BINDIR/pg_ctl" -D "$HA_DIR/$node/data" status >/dev/null 2>&1; then
			"${AS_USER[@]}" "$PG_BINDIR/pg_ctl" -D "$HA_DIR/$node/data" -m fast -w stop >/dev/null
		fi
	done
	ha_stop "$HA_DIR/etcd.pid"
	ha_stopped "$HA_DIR/etcd.pid" etcd
}

ha_status() {
	ha_load "${1:?usage: ha-cluster.sh status DIR}" || return 1
	local health
	# patronictl retries an etcd that is down for ever.
	if ! health=$(curl -sf --max-time 2 "http://127.0.0.1:$HA_BASE_PORT/health"); then
		echo "etcd 127.0.0.1:$HA_BASE_PORT: down"
		return 1
	fi
	echo "etcd 127.0.0.1:$HA_BASE_PORT: $health"
	patronictl -c "$HA_DIR/node1/patroni.yml" list
}

ha_leader() {
	ha_load "${1:?usage: ha-cluster.sh leader DIR}" || return 1
	ha_leader_of || { echo "ha-cluster: no leader" >&2; return 1; }
	echo "$HA_LEADER $HA_LEADER_PORT"
}

# ha_conninfo DIR: every node, the writable one picked at connection time.
ha_conninfo() {
	ha_load "${1:?usage: ha-cluster.sh conninfo DIR}" || return 1
	local hosts=() ports=() node
	for node in "${HA_NODES[@]}"; do
		hosts+=(127.0.0.1)
		ports+=("$(ha_pg_port "$node")")
	done
	local IFS=,
	echo "host=${hosts[*]} port=${ports[*]} dbname=$HA_DATABASE user=postgres connect_timeout=5 target_session_attrs=read-write"
}

ha_switchover() {
	ha_load "${1:?usage: ha-cluster.sh switchover DIR [CANDIDATE]}" || return 1
	local candidate=${2:-} old out start writable
	ha_leader_of || { echo "ha-cluster: no leader" >&2; return 1; }
	old=$HA_LEADER
	start=$EPOCHREALTIME
	# patronictl exits 0 even when the switchover failed: read what it says.
	if ! out=$(patronictl -c "$HA_DIR/node1/patroni.yml" switchover --force ${candidate:+--candidate "$candidate"} 2>&1) ||
		! grep -q 'Successfully switched over' <<<"$out"; then
		echo "$out" >&2
		return 1
	fi
	ha_wait "a new leader" ha_leader_is "$old" || return 1
	if [ -n "$candidate" ] && [ "$HA_LEADER" != "$candidate" ]; then
		echo "ha-cluster: $HA_LEADER leads, not $candidate" >&2
		return 1
	fi
	writable=$EPOCHREALTIME
	ha_wait "both replicas streaming from $HA_LEADER" ha_replicas_streaming || return 1
	echo "ha-cluster: $HA_LEADER leads on port $HA_LEADER_PORT (was $old): writable after" \
		"$(awk -v a="$start" -v b="$writable" -v c="$EPOCHREALTIME" 'BEGIN { printf "%.1f s, both replicas streaming after %.1f s", b - a, c - a }')"
}

# ha_crash DIR NODE: NODE dies as in a crash: its Patroni SIGKILLed first
# (so that it restarts nothing), then its postmaster; the leader lock it
# may hold stays in etcd until its ttl runs out.
ha_crash() {
	ha_load "${1:?usage: ha-cluster.sh crash DIR NODE}" || return 1
	local node=${2:?usage: ha-cluster.sh crash DIR NODE} pid
	if pid=$(ha_running "$HA_DIR/$node/patroni.pid"); then
		kill -KILL "$pid"
		ha_wait "patroni $node to die" ha_gone "$pid" || return 1
	fi
	rm -f "$HA_DIR/$node/patroni.pid"
	if pid=$(head -1 "$HA_DIR/$node/data/postmaster.pid" 2>/dev/null) && [ -n "$pid" ] &&
		tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF "$HA_DIR/$node/data"; then
		kill -KILL "$pid"
		ha_wait "postgres of $node to die" ha_gone "$pid" || return 1
	fi
}

# ha_tree PID: PID and every process descended from it (read from /proc
# in one pass: procps is not on every machine).
ha_tree() {
	# A stat line: pid (command) state ppid ...; the command may hold spaces.
	cat /proc/[0-9]*/stat 2>/dev/null | awk -v root="$1" '
		{ line = $0; sub(/.*\) /, "", line); split(line, f, " "); parent[$1] = f[2] }
		END {
			n = 1; tree[1] = root
			for (i = 1; i <= n; i++)
				for (p in parent)
					if (parent[p] == tree[i]) tree[++n] = p
			for (i = 1; i <= n; i++) print tree[i]
		}'
}

# ha_pause DIR NODE [WHAT]: NODE stalls: with WHAT postgres (the default)
# every process of its PostgreSQL stops (SIGSTOP), as in a stall of the
# database or its storage, while its Patroni goes on; with WHAT node its
# Patroni too, as on a frozen machine.  Their sockets stay open, and the
# leader lock NODE may hold runs out after its ttl.  Their pids go to
# NODE/paused, which ha_resume reads.
ha_pause() {
	ha_load "${1:?usage: ha-cluster.sh pause DIR NODE [postgres|node]}" || return 1
	local node=${2:?usage: ha-cluster.sh pause DIR NODE [postgres|node]} what=${3:-postgres} pid pids='' postmaster wrapper
	case $what in
	postgres | node) ;;
	*) echo "usage: ha-cluster.sh pause DIR NODE [postgres|node]" >&2; return 2 ;;
	esac
	pid=$(ha_running "$HA_DIR/$node/patroni.pid") || { echo "ha-cluster: $node does not run" >&2; return 1; }
	if [ "$what" = node ]; then
		# Patroni first, so that it does not see its PostgreSQL stop, with
		# runuser above it when there is one: runuser stops itself when its
		# child stops and would not wake with it, so that the Patroni
		# stopped later could not be reaped.
		pids=$pid
		wrapper=$(awk '{ sub(/.*\) /, ""); print $2 }' "/proc/$pid/stat")
		tr '\0' ' ' 2>/dev/null <"/proc/$wrapper/cmdline" | grep -qF "$HA_DIR/$node/patroni.pid" && pids="$wrapper $pids"
		# shellcheck disable=SC2086 # one pid a word
		kill -STOP $pids
	fi
	# The postmaster is not Patroni's child (Patroni's launcher leaves it to
	# init): found by its pid file, and stopped before its children are
	# read (a stopped postmaster forks no more).
	postmaster=$(head -1 "$HA_DIR/$node/data/postmaster.pid" 2>/dev/null)
	if [ -z "$postmaster" ] || ! tr '\0' ' ' 2>/dev/null <"/proc/$postmaster/cmdline" | grep -qF "$HA_DIR/$node/data"; then
		# shellcheck disable=SC2086 # one pid a word
		ha_cont $pids
		echo "ha-cluster: $node's PostgreSQL does not run" >&2
		return 1
	fi
	kill -STOP "$postmaster"
	pids="$pids $(ha_tree "$postmaster")"
	# shellcheck disable=SC2086 # one pid a word
	kill -STOP $pids 2>/dev/null
	# shellcheck disable=SC2086 # one line, one pid a word
	echo $pids >"$HA_DIR/$node/paused"
}

# ha_cont PID...: SIGCONT to each, in the reverse order of ha_pause's:
# runuser, woken last, finds its child running (woken first, it would see
# it stopped and stop itself again).
ha_cont() {
	[ $# -gt 0 ] || return 0
	# shellcheck disable=SC2046 # one pid a word
	kill -CONT $(printf '%s\n' "$@" | tac) 2>/dev/null
}

# ha_resume DIR NODE: the processes ha_pause stopped go on, all at once.
ha_resume() {
	ha_load "${1:?usage: ha-cluster.sh resume DIR NODE}" || return 1
	local node=${2:?usage: ha-cluster.sh resume DIR NODE} pids
	pids=$(cat "$HA_DIR/$node/paused" 2>/dev/null) || { echo "ha-cluster: $node is not paused" >&2; return 1; }
	# shellcheck disable=SC2086 # one pid a word
	ha_cont $pids
	rm -f "$HA_DIR/$node/paused"
}

# ha_start DIR NODE: NODE's Patroni, started again (after a crash or a stop).
ha_start() {
	ha_load "${1:?usage: ha-cluster.sh start DIR NODE}" || return 1
	local node=${2:?usage: ha-cluster.sh start DIR NODE}
	if ha_running "$HA_DIR/$node/patroni.pid" >/dev/null; then
		echo "ha-cluster: $node runs already" >&2
		return 1
	fi
	ha_spawn "$HA_DIR/$node/patroni.pid" "$HA_DIR/$node/patroni.log" \
		"$(command -v patroni)" "$HA_DIR/$node/patroni.yml"
}

# ha_config DIR JSON: PATCH of the dynamic configuration, through the REST
# API of a member that runs.
ha_config() {
	ha_load "${1:?usage: ha-cluster.sh config DIR JSON}" || return 1
	local node
	for node in "${HA_NODES[@]}"; do
		ha_running "$HA_DIR/$node/patroni.pid" >/dev/null || continue
		curl -sf --max-time 5 -X PATCH -H 'Content-Type: application/json' \
			-d "${2:?usage: ha-cluster.sh config DIR JSON}" \
			"http://127.0.0.1:$(ha_rest_port "$node")/config" >/dev/null && return 0
	done
	echo "ha-cluster: no member took the configuration change" >&2
	return 1
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -uo pipefail
	cmd=${1:-}
	shift || true
	case $cmd in
	up | down | status | switchover | leader | conninfo | crash | pause | resume | start | config) "ha_$cmd" "$@" ;;
	*)
		sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2
		exit 2
		;;
	esac
fi
