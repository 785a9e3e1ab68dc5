#!/usr/bin/env bash
# Tern vs NATS on this machine: installs the nats-server release pinned in bench/lib.sh
# (NATS_SERVER_VERSION) into bench/.tools/bin with go install if it is missing, builds
# tern, starts both servers on loopback on non-default ports, runs the same workload
# matrix against each (bench/natsvs), prints a Markdown table, and stops exactly the
# servers it started.
#
# Usage: bench/run.sh [natsvs options]      e.g. bench/run.sh --runs 5
#                                                 bench/run.sh --only reqrep --scale 0.2
#        TLS=1 bench/run.sh                      both servers TLS-only
#        AUTH=1 bench/run.sh                     both servers with a user and permissions
# Environment:
#   NATS_PORT (14222), TERN_PORT (17400)  ports the two servers listen on (127.0.0.1);
#                                         with TLS=1 these are TLS-only ports
#   OUT (bench/out)                       where logs, results.md and results.json go
#                                         (with TLS or AUTH: $OUT/tls, $OUT/auth or
#                                         $OUT/tls-auth)
#   TLS=1                                 every client connection over TLS: a throwaway CA
#                                         and a certificate for 127.0.0.1 are made into
#                                         $OUT/certs (openssl; kept while valid), and
#                                         nats-server runs with --tls --tlscert --tlskey,
#                                         tern with --port -1 --tls-port $TERN_PORT
#                                         --tls-cert-file --tls-key-file; the clients use
#                                         tls:// URLs and verify against the CA
#   AUTH=1                                both servers know one user "bench" with a
#                                         password (the same bcrypt hash) and the same
#                                         publish and subscribe permissions (allow
#                                         loadgen.> and _INBOX.>, deny loadgen.denied.>):
#                                         NATS from a config file (authorization), Tern
#                                         from a users file; the clients log in as it.
#                                         TLS=1 AUTH=1 does both.
#   TERN_CPUPROFILE=FILE                  run the Tern server under a CPU profile
#                                         (bench/ternserve), written to FILE on exit
# Outputs: $OUT/results.md (the table), $OUT/results.json (every run), server logs.
set -euo pipefail
cd "$(dirname "$0")/.."

# Listing the rows or asking for help needs no servers.
for a in "$@"; do
	case "$a" in
	--list | -list | -h | -help | --help) exec go -C bench run ./natsvs "$@" ;;
	esac
done

NATS_PORT=${NATS_PORT:-14222}
TERN_PORT=${TERN_PORT:-17400}
OUT=${OUT:-bench/out}
TLS=${TLS:-0}
AUTH=${AUTH:-0}
for v in TLS AUTH; do
	case "${!v}" in 0 | 1) ;; *) echo "run.sh: $v=${!v}: want 0 or 1" >&2; exit 2 ;; esac
done
CERTS=$OUT/certs
MODE=
[ "$TLS" = 1 ] && MODE=tls
[ "$AUTH" = 1 ] && MODE=${MODE:+$MODE-}auth
[ -n "$MODE" ] && OUT=$OUT/$MODE
mkdir -p "$OUT"
BENCH=run.sh BENCH_LOGS=$OUT
. bench/lib.sh

# --- nats-server (the pinned release, built by go install; run by its path) -----------
NATS_SERVER=$(go_tool nats-server)

require_free_ports "NATS_PORT / TERN_PORT" "$NATS_PORT" "$TERN_PORT"

# --- build ------------------------------------------------------------------------------
echo "== building tern"
go build -o "$OUT/tern" ./cmd/tern
bench_build "$OUT/natsvs" ./natsvs
if [ -n "${TERN_CPUPROFILE:-}" ]; then
	bench_build "$OUT/ternserve" ./ternserve
fi

# --- TLS certificates, users and permissions (TLS=1, AUTH=1) -----------------------------
NATS_ARGS=(-a 127.0.0.1 -p "$NATS_PORT")
TERN_NATIVE=(--port "$TERN_PORT")
NATS_URL=nats://127.0.0.1:$NATS_PORT
TERN_URL=tern://127.0.0.1:$TERN_PORT
VS_ARGS=()
if [ "$TLS" = 1 ]; then
	make_test_certs "$CERTS"
	NATS_ARGS+=(--tls --tlscert "$CERTS/server.pem" --tlskey "$CERTS/server-key.pem")
	# TLS only: no plaintext native port (and so no UDP), the TLS port in its place.
	TERN_NATIVE=(--port -1 --tls-port "$TERN_PORT" --tls-cert-file "$CERTS/server.pem" --tls-key-file "$CERTS/server-key.pem")
	NATS_URL=tls://127.0.0.1:$NATS_PORT
	TERN_URL=tls://127.0.0.1:$TERN_PORT
	VS_ARGS+=(--tls-ca "$CERTS/ca.pem")
fi
TERN_ARGS=(--host 127.0.0.1 "${TERN_NATIVE[@]}" --mqtt-port -1 --kafka-port -1 --udp-port -1 --http "" --store-dir "$OUT/tern-store")
if [ "$AUTH" = 1 ]; then
	# A throwaway password; both servers get the same bcrypt hash of it (tern passwd).
	AUTH_PASSWORD=bench-$RANDOM$RANDOM
	hash=$(printf '%s' "$AUTH_PASSWORD" | "$OUT/tern" passwd | sed -n 's/^password = "\(.*\)"$/\1/p')
	[ -n "$hash" ] || { echo "run.sh: tern passwd gave no password hash" >&2; exit 1; }
	perms_pub='allow = ["loadgen.>", "_INBOX.>"], deny = ["loadgen.denied.>"]'
	cat >"$OUT/users.toml" <<-END
		# made by bench/run.sh (AUTH=1): the one user the benchmark logs in as
		[[users]]
		name = "bench"
		password = "$hash"
		publish = { $perms_pub }
		subscribe = { $perms_pub }
	END
	cat >"$OUT/nats-auth.conf" <<-END
		# made by bench/run.sh (AUTH=1): the same user, password hash and permissions as users.toml
		authorization {
		  users = [
		    {
		      user: "bench"
		      password: "$hash"
		      permissions: {
		        publish: { allow: ["loadgen.>", "_INBOX.>"], deny: ["loadgen.denied.>"] }
		        subscribe: { allow: ["loadgen.>", "_INBOX.>"], deny: ["loadgen.denied.>"] }
		      }
		    }
		  ]
		}
	END
	NATS_ARGS=(-c "$OUT/nats-auth.conf" "${NATS_ARGS[@]}")
	TERN_ARGS+=(--users-file "$OUT/users.toml")
	VS_ARGS+=(--creds "bench:$AUTH_PASSWORD")
fi

# --- start both servers; stop exactly these pids on exit -------------------------------
PIDS=()
cleanup() {
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$NATS_SERVER" "${NATS_ARGS[@]}" >"$OUT/nats-server.log" 2>&1 &
PIDS+=($!)
wait_port "$NATS_PORT" "${PIDS[-1]}" nats-server

if [ -n "${TERN_CPUPROFILE:-}" ]; then
	"$OUT/ternserve" --cpuprofile "$TERN_CPUPROFILE" "${TERN_ARGS[@]}" >"$OUT/tern-server.log" 2>&1 &
else
	"$OUT/tern" server "${TERN_ARGS[@]}" >"$OUT/tern-server.log" 2>&1 &
fi
PIDS+=($!)
wait_port "$TERN_PORT" "${PIDS[-1]}" "tern server"

# --- machine -----------------------------------------------------------------------------
nats_version=$("$NATS_SERVER" --version 2>&1 | sed -n 's/^nats-server: *//p')
tern_version=$("$OUT/tern" version | sed -n 's/^tern *//p')
machine_head
machine_go
echo "nats-server:  $nats_version (pid ${PIDS[0]}, 127.0.0.1:$NATS_PORT)"
echo "tern:         $tern_version (pid ${PIDS[1]}, 127.0.0.1:$TERN_PORT)"
echo "GOMAXPROCS:   ${GOMAXPROCS:-unset (Go uses every CPU)}; brokers and load generator share the machine"
echo "TLS:          $([ "$TLS" = 1 ] && echo "on, TLS-only client ports, CA $CERTS/ca.pem" || echo off)"
echo "auth:         $([ "$AUTH" = 1 ] && echo "on, user bench with permissions (nats: $OUT/nats-auth.conf, tern: $OUT/users.toml)" || echo off)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min, at the start)"
echo

# --- run ---------------------------------------------------------------------------------
echo "== running the matrix (progress on stderr, table on stdout)"
"$OUT/natsvs" --nats "$NATS_URL" --tern "$TERN_URL" "${VS_ARGS[@]}" \
	--nats-version "$nats_version" --tern-version "$tern_version" \
	--json "$OUT/results.json" "$@" | tee "$OUT/results.md"
echo
echo "== written: $OUT/results.md, $OUT/results.json"
