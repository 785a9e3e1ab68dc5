# Shell helpers the bench scripts (and scripts/deps.sh) share: installing what is
# missing, building the bench module's commands, waiting for a server's port,
# stopping exactly the processes a script started (on EXIT, INT and TERM too), and
# the machine's description a script prints before measuring.
# A script sets BENCH (its name, for messages) and BENCH_LOGS (where its server logs
# go), then sources this file from the repository root: `. bench/lib.sh`.

apt_updated=
apt_install() { # packages...: apt-get update at most once per script
	local sudo_cmd=""
	command -v apt-get >/dev/null 2>&1 || { echo "$BENCH: no apt-get; install the Debian package(s) $* by hand" >&2; exit 1; }
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 || { echo "$BENCH: need root or sudo to install $*" >&2; exit 1; }
		sudo_cmd="sudo"
	fi
	if [ -z "$apt_updated" ]; then
		$sudo_cmd apt-get update -qq
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "$@" >/dev/null
}

# Reference servers built from source, pinned: `go install` puts the release into
# bench/.tools/bin (ignored by git) unless exactly that version is there already, so a
# second call costs a few milliseconds. Scripts and the bench module's tests run them by
# this path, never whatever of the same name is on PATH.
NATS_SERVER_VERSION=2.15.2 # github.com/nats-io/nats-server/v2
MOCHI_VERSION=2.7.9        # github.com/mochi-mqtt/server/v2, its cmd (a plain TCP+WS broker)
BENCH_TOOLS=$PWD/bench/.tools/bin

go_tool() { # name (nats-server, mochi-mqtt): print its path, installing it first if missing
	local name=$1 mod pkg version bin tmp
	case "$name" in
	nats-server) mod=github.com/nats-io/nats-server/v2 pkg=$mod version=v$NATS_SERVER_VERSION ;;
	mochi-mqtt) mod=github.com/mochi-mqtt/server/v2 pkg=$mod/cmd version=v$MOCHI_VERSION ;;
	*) echo "$BENCH: go_tool: unknown tool $name" >&2; return 1 ;;
	esac
	bin=$BENCH_TOOLS/$name
	# The module version the binary was built from, as recorded in it by the go command.
	if [ "$(go version -m "$bin" 2>/dev/null | awk -v m="$mod" '$1 == "mod" && $2 == m {print $3}')" != "$version" ]; then
		echo "== installing $name $version (go install $pkg@$version into bench/.tools/bin)" >&2
		mkdir -p "$BENCH_TOOLS"
		tmp=$(mktemp -d "$BENCH_TOOLS/.install.XXXXXX")
		# go install names the binary after the package ("cmd" for Mochi): the one file
		# in $tmp is renamed to the tool's name.
		if ! GOBIN=$tmp go install "$pkg@$version" >&2; then
			rm -rf "$tmp"
			echo "$BENCH: go install $pkg@$version failed" >&2
			return 1
		fi
		mv -f "$tmp"/* "$bin"
		rm -rf "$tmp"
	fi
	echo "$bin"
}

bench_build() { # output package: go build a command of the bench module (e.g. ./natsvs);
	# output is relative to the repository root, where the scripts run
	local out=$1
	case "$out" in /*) ;; *) out=$PWD/$out ;; esac
	go -C bench build -o "$out" "$2"
}

tern_server_bin() { # tern-binary out-dir: print the command that runs "tern server"; with
	# TERN_CPUPROFILE set, a wrapper that runs "server --server-name NAME ..." under
	# bench/ternserve, writing a CPU profile TERN_CPUPROFILE/NAME.prof when stopped (exec
	# keeps the pid the script records)
	if [ -z "${TERN_CPUPROFILE:-}" ]; then
		echo "$1"
		return
	fi
	mkdir -p "$TERN_CPUPROFILE"
	bench_build "$2/ternserve" ./ternserve >&2
	cat >"$2/tern-profiled" <<-EOF
		#!/bin/sh
		shift
		exec "$(realpath "$2/ternserve")" --cpuprofile "$(realpath "$TERN_CPUPROFILE")/\$2.prof" "\$@"
	EOF
	chmod +x "$2/tern-profiled"
	echo "$2/tern-profiled"
}
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

require_free_ports() { # "variables to set" ports...: exit if one is taken
	local hint=$1 p
	shift
	for p in "$@"; do
		if port_busy "$p"; then
			echo "$BENCH: 127.0.0.1:$p is already in use; set $hint" >&2
			exit 1
		fi
	done
}

wait_port() { # port pid name [seconds]: until it listens, at most seconds (10), while pid lives
	local secs=${4:-10}
	for _ in $(seq 1 $((secs * 20))); do
		port_busy "$1" && return 0
		kill -0 "$2" 2>/dev/null || { echo "$BENCH: $3 exited during start-up; see its log in $BENCH_LOGS" >&2; return 1; }
		sleep 0.05
	done
	echo "$BENCH: $3 did not listen on 127.0.0.1:$1 within ${secs}s" >&2
	return 1
}

stop_pid() { # pid [name [seconds]]: TERM, wait up to seconds (30), then KILL
	local pid=$1 name=${2:-process} secs=${3:-30}
	[ -n "$pid" ] || return 0
	kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 1 $((secs * 10))); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "$BENCH: $name (pid $pid) did not stop in ${secs}s; killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

# --- the harness being waited for, and stopping everything on exit -----------------------
JOB=          # the harness run_job is waiting for
BENCH_STOPS=() # what bench_stop_on_exit was told to run on exit

PIDS=() # servers a script started one by one (mqtt.sh, streams.sh), for stop_servers
stop_servers() { # stop each of PIDS in turn
	local pid
	for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
	PIDS=()
}

run_job() { # command...: in the background, waited for, so a signal is handled at once
	"$@" &
	JOB=$!
	local rc=0
	wait "$JOB" || rc=$?
	JOB=
	return "$rc"
}

bench_stop_on_exit() { # command...: on EXIT, INT and TERM stop the harness run_job waits
	# for, run each command (the script's own stop functions, which stop its servers by
	# pid), remove RUN_DIR if set, and exit with the script's status (130 after INT,
	# 143 after TERM)
	BENCH_STOPS=("$@")
	trap bench_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

bench_cleanup() {
	local rc=$? stop
	trap - EXIT INT TERM
	[ -z "$JOB" ] || stop_pid "$JOB" harness 30
	for stop in "${BENCH_STOPS[@]}"; do "$stop"; done
	[ -z "${RUN_DIR:-}" ] || rm -rf "$RUN_DIR"
	exit "$rc"
}

# --- the machine, as a script prints it before measuring -------------------------------------
machine_head() { # "== machine", then the CPUs, memory and kernel, one fact a line
	echo "== machine"
	echo "nproc:        $(nproc)"
	echo "CPU:          $(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -1)"
	echo "memory:       $(awk '/^MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "kernel:       $(uname -sr)"
}
machine_disk() { # dir: the filesystem the stores in dir live on, and its free space
	echo "disk:         $(df -h "$1" | awk 'NR==2 {print $1 ", " $4 " free"}') (stores in $1)"
}
machine_go() { echo "go:           $(go version | awk '{print $3, $4}')"; }
machine_java() { echo "java:         $(java -version 2>&1 | head -1)"; }
machine_tern() { # tern-binary [note]: its version and this tree's commit
	echo "tern:         $("$1" version | head -1) ($(git rev-parse --short HEAD 2>/dev/null || echo '?'))${2:-}"
}
machine_nats() { echo "nats-server:  $("$NATS_SERVER" --version 2>&1)"; }
machine_load() { echo "load:         $(uptime | sed 's/.*load average/load average/')"; }

run_order() { # run items...: the items, the first two swapped on even runs, so that
	# neither of two systems always runs first
	if [ $(($1 % 2)) -eq 0 ] && [ $# -gt 2 ]; then
		echo "$3" "$2" "${@:4}"
	else
		echo "${@:2}"
	fi
}

make_test_certs() { # dir: a throwaway CA and a server certificate for 127.0.0.1 (and ::1,
	# localhost) in dir: ca.pem, server.pem, server-key.pem (ECDSA P-256, openssl). Kept
	# when they are there already, chain to that CA and stay valid for another day;
	# made afresh otherwise. Only for benchmarks on loopback: the CA's key is thrown away.
	local dir=$1
	mkdir -p "$dir"
	if [ -s "$dir/ca.pem" ] && [ -s "$dir/server.pem" ] && [ -s "$dir/server-key.pem" ] &&
		openssl verify -CAfile "$dir/ca.pem" "$dir/server.pem" >/dev/null 2>&1 &&
		openssl x509 -in "$dir/server.pem" -noout -checkend 86400 >/dev/null 2>&1; then
		return 0
	fi
	command -v openssl >/dev/null 2>&1 || apt_install openssl
	local tmp
	tmp=$(mktemp -d "$dir/.certs.XXXXXX")
	printf 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' >"$tmp/ext"
	if ! {
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
			-keyout "$tmp/ca-key.pem" -out "$tmp/ca.pem" -subj "/CN=Tern bench throwaway CA" &&
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
				-keyout "$tmp/server-key.pem" -out "$tmp/server.csr" -subj "/CN=127.0.0.1" &&
			openssl x509 -req -in "$tmp/server.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca-key.pem" \
				-CAcreateserial -days 30 -out "$tmp/server.pem" -extfile "$tmp/ext"
	} >"$tmp/openssl.log" 2>&1; then
		echo "$BENCH: making test certificates failed:" >&2
		cat "$tmp/openssl.log" >&2
		rm -rf "$tmp"
		return 1
	fi
	chmod 600 "$tmp/server-key.pem"
	mv -f "$tmp/ca.pem" "$tmp/server.pem" "$tmp/server-key.pem" "$dir/"
	rm -rf "$tmp"
}
