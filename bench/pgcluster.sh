#!/bin/bash
# pgcluster.sh: imserver nodes on an own PostgreSQL and Redis, and the
# send bench spread over them, with each node's CPU per message.
#
#   bench/pgcluster.sh BIN [BIN ...]
#
# For ROUNDS rounds, each BIN in turn (old, new, old, new ... when given two):
# a fresh database, Redis flushed, NODES nodes of BIN started, one
# `BENCH bench --url a,b,c --scenario send --messages MESSAGES` over them,
# then CPU per message: each node over the measured phase (the bench reads
# their /metrics as the admin imbench-metrics), the nodes in all with setup (/proc), PostgreSQL and Redis
# (with setup).
# BENCH is the load generator for every build (default: the last BIN).
# WRITE_DELAY sets the nodes' websocket.write_delay.
# PROFILE=S takes a S-second CPU profile of every node during each bench
# (debug.pprof; PROFILE_DELAY seconds after the nodes answer, default 3), saved as $WORK/prof-<round>-<bin#>-<node>.pb.gz.
#
# PostgreSQL 15 is initialised once under $WORK (initdb as user postgres
# when run as root; fsync and synchronous_commit on, shared_buffers 256MB,
# as in BENCHMARKS.md) and left running for the next call; STOP=1 stops it
# and Redis at the end. Everything lives in $WORK (default /tmp/pgcluster).
set -eu

NODES=${NODES:-3}
ROUNDS=${ROUNDS:-3}
MESSAGES=${MESSAGES:-100000}
PROFILE=${PROFILE:-0}
WORK=${WORK:-/tmp/pgcluster}
PGBIN=${PGBIN:-$(pg_config --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)}
PGPORT=${PGPORT:-55471}
REDISPORT=${REDISPORT:-56471}
BASEPORT=${BASEPORT:-18470}
PW=bench
[ $# -ge 1 ] || { sed -n 2,17p "$0"; exit 2; }
BINS=("$@")
BENCH=${BENCH:-${BINS[$#-1]}} # one load generator for every build
mkdir -p "$WORK"
chmod 755 "$WORK"

asuser() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

ticks() { # utime+stime of a process, in clock ticks
	awk '{print $14+$15}' "/proc/$1/stat"
}

pgticks() { # this cluster's postmaster and backends, children included
	local pm t=0 p
	pm=$(head -1 "$WORK/pg/data/postmaster.pid")
	for p in $pm $(pgrep -P "$pm"); do
		t=$((t + $(awk '{print $14+$15+$16+$17}' "/proc/$p/stat" 2>/dev/null || echo 0)))
	done
	echo $t
}

psql_() { PGPASSWORD=$PW "$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -qAt "$@"; }

if ! psql_ -c 'select 1' >/dev/null 2>&1; then
	rm -rf "$WORK/pg"
	mkdir -p "$WORK/pg"
	echo $PW >"$WORK/pg/pw"
	[ "$(id -u)" = 0 ] && chown -R postgres "$WORK/pg"
	asuser "$PGBIN/initdb" -D "$WORK/pg/data" -U postgres --auth=scram-sha-256 --pwfile "$WORK/pg/pw" \
		-E UTF8 --locale=C --no-sync >"$WORK/pg/initdb.log"
	asuser "$PGBIN/pg_ctl" -D "$WORK/pg/data" -l "$WORK/pg/log" -w start -o \
		"-p $PGPORT -k $WORK/pg -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on -c shared_buffers=256MB -c max_connections=200" >/dev/null
fi
if ! redis-cli -p "$REDISPORT" ping >/dev/null 2>&1; then
	redis-server --port "$REDISPORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
		--logfile "$WORK/redis.log" --pidfile "$WORK/redis.pid"
	sleep 0.5
fi

echo "# $(date -u +%FT%TZ) nodes=$NODES messages=$MESSAGES load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %-24s %9s %-28s %8s %7s %7s %7s %s\n' round bin sends/s 'node_us(sum:each,run)' nodes_us_all pg_us redis_us load verdict
run=0
for round in $(seq 1 "$ROUNDS"); do
	b=0
	for bin in "${BINS[@]}"; do
		b=$((b + 1))
		run=$((run + 1))
		db="b$$_$run"
		psql_ -c "create database $db" >/dev/null
		redis-cli -p "$REDISPORT" flushall >/dev/null
		urls="" pids=""
		for n in $(seq 1 "$NODES"); do
			port=$((BASEPORT + n))
			cat >"$WORK/node$n.yaml" <<EOF
addr: 127.0.0.1:$port
db: postgres://postgres:$PW@127.0.0.1:$PGPORT/$db?sslmode=disable
$([ "$NODES" -gt 1 ] && echo "redis: redis://127.0.0.1:$REDISPORT/0")
limits:
  send_rate: 1000000
  send_burst: 1000000
  max_frame_bytes: 65536
  register_per_hour: 0
  login_failures: 0
auth:
  registration: open
  admins: [imbench-metrics]
storm:
  threshold: 1000000000
  lower_mark: 1
websocket:
  max_sessions_per_user: 1000000
$([ -n "${WRITE_DELAY:-}" ] && echo "  write_delay: $WRITE_DELAY")
debug:
  pprof: true
log:
  level: warn
EOF
			"$bin" serve --config "$WORK/node$n.yaml" >"$WORK/node$n.log" 2>&1 &
			pids="$pids $!"
			urls="$urls${urls:+,}http://127.0.0.1:$port"
		done
		for n in $(seq 1 "$NODES"); do
			for _ in $(seq 1 100); do
				curl -sf "http://127.0.0.1:$((BASEPORT + n))/healthz" >/dev/null && break
				sleep 0.1
			done
		done
		before=(); for p in $pids; do before+=("$(ticks "$p")"); done
		pg0=$(pgticks)
		rd0=$(ticks "$(cat "$WORK/redis.pid")")
		load=$(cut -d' ' -f1 /proc/loadavg)
		if [ "$PROFILE" != 0 ]; then
			(sleep "${PROFILE_DELAY:-3}"; for n in $(seq 1 "$NODES"); do
				curl -s -o "$WORK/prof-$round-$b-$n.pb.gz" "http://127.0.0.1:$((BASEPORT + n))/debug/pprof/profile?seconds=$PROFILE" &
			done; wait) &
			profpid=$!
		fi
		out="$WORK/bench-$round-$b.txt"
		# /metrics is for admins: the nodes' config makes imbench-metrics one.
		token=$(curl -s -X POST -H 'Content-Type: application/json' "http://127.0.0.1:$((BASEPORT + 1))/api/v1/auth/register" \
			-d '{"username":"imbench-metrics","password":"bench-password-0123456789"}' | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
		"$BENCH" bench --url "$urls" --metrics-token "$token" --scenario send --progress=false --messages "$MESSAGES" >"$out" 2>&1 || true
		if [ "$PROFILE" != 0 ]; then wait "$profpid"; fi
		total=0 i=0
		for p in $pids; do
			total=$((total + $(ticks "$p") - before[i]))
			i=$((i + 1))
		done
		pg1=$(pgticks)
		rd1=$(ticks "$(cat "$WORK/redis.pid")")
		for p in $pids; do kill "$p"; done
		wait $pids 2>/dev/null || true
		rate=$(awk '/^durable sends\/s/ {print $3}' "$out")
		verdict=$(awk '/^verdict/ {print $2}' "$out")
		if [ "$NODES" -gt 1 ]; then
			cpu=$(sed -n 's/^cpu µs\/msg nodes (sum: each) *//p' "$out" | tr -d ' ')
		else
			cpu=$(sed -n 's/^cpu µs\/msg server\/bench *\([0-9.]*\).*/\1/p' "$out")
		fi
		printf '%-5s %-24s %9s %-28s %8s %7s %7s %7s %s\n' "$round" "$(basename "$bin")" "$rate" "$cpu" \
			"$(awk -v d="$total" -v m="$MESSAGES" 'BEGIN{printf "%.1f", d*10000/m}')" \
			"$(awk -v d="$((pg1 - pg0))" -v m="$MESSAGES" 'BEGIN{printf "%.1f", d*10000/m}')" \
			"$(awk -v d="$((rd1 - rd0))" -v m="$MESSAGES" 'BEGIN{printf "%.1f", d*10000/m}')" "$load" "$verdict"
		psql_ -c "drop database $db" >/dev/null || true
	done
done
if [ "${STOP:-0}" = 1 ]; then
	redis-cli -p "$REDISPORT" shutdown nosave >/dev/null 2>&1 || true
	asuser "$PGBIN/pg_ctl" -D "$WORK/pg/data" -m fast stop >/dev/null
fi
