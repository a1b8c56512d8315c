#!/usr/bin/env bash
# ha-publisher.sh KIND CONNINFO ORG LOG STOPFILE [CLI]: publishes events to
# ORG one after another until STOPFILE exists, as a publisher rides out a
# failover, and logs what became of each (for regress/t/025_patroni.pl).
#
#   KIND cli: `CLI -d CONNINFO publish` (libeventhub's eh_publish); sql:
#   psql running SELECT eventhub.publish_event(...).
#
# Event i has entity and correlation id ORG-i (each entity has one event, so
# retention's compaction keeps them all).  A failed attempt whose error is
# one docs/protocol.md calls retryable (a lost or refused connection, a
# server shutting down or starting, a write on a standby, a timeout, a
# serialization failure) is sent again with the same correlation id: if the
# first attempt committed after all, the retry gets its revision back, and
# the event is there once.  Any other error ends the publisher.  LOG gets:
#
#   ACK id revision start end      acknowledged (start/end: Unix times of the
#                                  attempt that got the answer)
#   RETRY id time error            an attempt failed, tried again
#   FAIL id error                  a non-retryable error; the publisher ends
#   GAVEUP id                      stopped while retrying id: unacknowledged
set -u
kind=$1 conninfo=$2 org=$3 log=$4 stop=$5 cli=${6:-eventhub}
psql=${PSQL:-psql}
err=$log.err
retryable='could not connect|connection to server|server closed the connection|terminating connection|no connection to the server|SSL SYSCALL|the database system is (shutting down|starting up|in recovery)|read-only transaction|cannot execute .* in a read-only|57P0[123]|25006|08[0-9A-Z]{3}|40001|40P01|55P03|57014|canceling statement|could not receive data|connection timed out|timeout expired'
i=0
while [ ! -e "$stop" ]; do
	i=$((i + 1))
	id=$org-$i
	while :; do
		start=$EPOCHREALTIME
		if [ "$kind" = cli ]; then
			rev=$("$cli" -d "$conninfo" publish --org "$org" --type API --action CREATE \
				--entity "$id" --correlation-id "$id" --data '{"n": '"$i"'}' 2>"$err")
		else
			rev=$("$psql" -X -q -A -t -v VERBOSITY=verbose -d "$conninfo" \
				-c "SELECT eventhub.publish_event('$org', 'API', 'CREATE', '$id', '$id', '{\"n\": $i}')" 2>"$err")
		fi
		rc=$?
		if [ $rc -eq 0 ] && [[ $rev =~ ^[0-9]+$ ]]; then
			echo "ACK $id $rev $start $EPOCHREALTIME" >>"$log"
			break
		fi
		if grep -qE "$retryable" "$err"; then
			echo "RETRY $id $start $(tr -s ' \n\t' ' ' <"$err")" >>"$log"
			if [ -e "$stop" ]; then
				echo "GAVEUP $id" >>"$log"
				exit 0
			fi
			sleep 0.05
			continue
		fi
		echo "FAIL $id rc=$rc $(tr -s ' \n\t' ' ' <"$err") [$rev]" >>"$log"
		exit 1
	done
	sleep 0.05
done
