#!/usr/bin/env bash
# Installs the Debian packages eventhub builds, tests and demos with, or the
# ones named as arguments, when they are missing.  Needs root only when
# something is missing.
set -euo pipefail

# pgbouncer: the pooler tests run behind; postgresql-15-pgq3: PgQ, the peer
# make bench measures publishing against.
packages=(make gcc pkg-config postgresql-15 postgresql-server-dev-15 libpq-dev uuid-dev libipc-run-perl valgrind pgbouncer
	postgresql-15-pgq3
	# the Go package (go/: pgx, and client_golang for go/ehprom) and the reference consumers in
	# examples/ (Go, Python with psycopg), built and run by make test
	golang-go golang-github-jackc-pgx-v4-dev golang-github-prometheus-client-golang-dev python3-psycopg
	# regress/t/026: opens and forges notifications' sealed events (AES-GCM)
	python3-cryptography
	# prometheus/ and regress/t/023: Prometheus (with promtool) and the two exporters
	prometheus prometheus-postgres-exporter prometheus-node-exporter
	# regress/t/025 and make ha-demo (scripts/ha-cluster.sh): Patroni over one etcd, curl for its REST API.
	# Patroni's etcd module (etcd's v2 API) and etcd3 module (etcd 3.4's v3 JSON gateway) build
	# on python3-etcd: named, as patroni's package is content with any one DCS library (etcd,
	# consul, kazoo, ...)
	patroni python3-etcd etcd-server curl)
[ $# -eq 0 ] || packages=("$@")

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "eventhub: missing Debian packages: ${missing[*]}" >&2
	echo "eventhub: install them (sudo apt-get install ${missing[*]}) or run as root" >&2
	exit 1
fi
echo "eventhub: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

# Debian starts the daemons it installs, on their default ports (9090, 9187,
# 9100, etcd's 2379).  The tests start their own on free ports: stop and
# disable those that this run installed.
daemons=()
for p in "${missing[@]}"; do
	case $p in
	prometheus | prometheus-postgres-exporter | prometheus-node-exporter) daemons+=("$p") ;;
	etcd-server) daemons+=(etcd) ;;
	esac
done
[ ${#daemons[@]} -eq 0 ] && exit 0
if [ -d /run/systemd/system ]; then
	systemctl disable --now "${daemons[@]}" >/dev/null 2>&1 || true
elif command -v service >/dev/null; then
	for d in "${daemons[@]}"; do
		service "$d" stop >/dev/null 2>&1 || true
	done
fi
