#!/usr/bin/env bash
# Runs AMQP clients nobody here wrote against a fresh stream-broker: the pika and amqp091-go
# smokes, and with --suites the clients' own test suites. See README.md beside this file.
#
#   clients/run.sh [--suites] [--pika-src DIR] [--diffs] [--no-build] [--keep-logs]
#
# --suites       also run pika's acceptance tests (needs --pika-src or PIKA_SRC: a pika source
#                tree at the installed version, with tests/) and amqp091-go's integration tests
#                (from Debian's golang-github-rabbitmq-amqp091-go-dev); a failure not listed in
#                known_failures.txt fails the run
# --diffs        also run rabbitmq_diffs.py (frame-level checks of known differences from
#                RabbitMQ; fails until the server is fixed)
# --no-build     use the existing binary (STREAM_BROKER, default target/release/stream-broker)
# --keep-logs    keep the work directory (logs of the server and every client run)
#
# Exit status: 0 when every smoke check passed and no suite failed unexpectedly, 1 otherwise,
# 2 on a usage or setup error (a client or tool missing). The server listens on a port the
# system picks on 127.0.0.1; 5672 is never used.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
suites=0
diffs=0
build=1
keep=0
pika_src=${PIKA_SRC:-}
amqp091_dir=/usr/share/gocode/src/github.com/rabbitmq/amqp091-go

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --suites) suites=1 ;;
    --diffs) diffs=1 ;;
    --pika-src) pika_src=${2:?--pika-src needs a directory}; shift ;;
    --no-build) build=0 ;;
    --keep-logs) keep=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

setup_error() { echo "run.sh: $*" >&2; exit 2; }

# Every prerequisite is checked before the server starts.
command -v python3 >/dev/null || setup_error "python3 not found"
python3 -c 'import pika' 2>/dev/null || setup_error "python3 cannot import pika (pip install pika)"
command -v go >/dev/null || setup_error "go not found (apt-get install golang-go)"
[ -f "$amqp091_dir/go.mod" ] ||
  setup_error "$amqp091_dir missing (apt-get install golang-github-rabbitmq-amqp091-go-dev)"
if [ "$suites" = 1 ]; then
  [ -n "$pika_src" ] && [ -d "$pika_src/tests/acceptance" ] ||
    setup_error "--suites needs --pika-src DIR (or PIKA_SRC): a pika source tree with tests/acceptance"
  for module in pytest pytest_timeout tornado twisted gevent; do
    python3 -c "import $module" 2>/dev/null ||
      setup_error "python3 cannot import $module (pip install pytest pytest-timeout tornado twisted gevent)"
  done
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/stream-broker-clients.XXXXXX")
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if [ "$keep" = 1 ]; then echo "run.sh: logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

bin=${STREAM_BROKER:-$root/target/release/stream-broker}
if [ "$build" = 1 ]; then
  echo "== building stream-broker (release)"
  (cd "$root" && cargo build --release -q -p stream-broker)
fi
[ -x "$bin" ] || setup_error "$bin is not an executable (build it, or set STREAM_BROKER)"

echo "== starting $bin on 127.0.0.1:0"
"$bin" --listen 127.0.0.1:0 >"$work/broker.log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 100); do
  port=$(grep -o 'local_addr=127\.0\.0\.1:[0-9]*' "$work/broker.log" | head -n 1 | cut -d: -f2 || true)
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/broker.log" >&2; setup_error "the server exited"; }
  sleep 0.1
done
[ -n "$port" ] || { cat "$work/broker.log" >&2; setup_error "no listening line in 10 s"; }
[ "$port" != 5672 ] || setup_error "refusing port 5672"
echo "stream-broker listening on 127.0.0.1:$port"

failed=0
summary=()

# run_smoke NAME CMD...: a smoke passes when its command exits 0.
run_smoke() {
  local name=$1
  shift
  echo "== $name"
  if "$@" 2>&1 | tee "$work/$name.log"; then
    summary+=("$(tail -n 1 "$work/$name.log")")
  else
    failed=1
    summary+=("$name FAILED: $(tail -n 1 "$work/$name.log")")
  fi
}

go_smoke() {
  cd "$here/go_smoke" &&
    GOPROXY=off GOFLAGS=-mod=mod GOTOOLCHAIN=local go run . -port "$port"
}

run_smoke pika_smoke python3 "$here/pika_smoke.py" --port "$port"
run_smoke go_smoke go_smoke

# compare SUITE FAILED-IDS-FILE: failures not in known_failures.txt fail the run; known ones
# that passed are named so the list can shrink.
compare() {
  local suite=$1 failures=$2 known steady unexpected fixed
  known="$work/$suite.known"
  steady="$work/$suite.steady"
  awk -v s="$suite" '$1 == s { print $2 }' "$here/known_failures.txt" | sort -u >"$known"
  # Intermittent ones are not reported when they pass.
  awk -v s="$suite" '$1 == s && !/intermittent/ { print $2 }' "$here/known_failures.txt" |
    sort -u >"$steady"
  sort -u "$failures" -o "$failures"
  unexpected=$(comm -23 "$failures" "$known")
  fixed=$(comm -13 "$failures" "$steady")
  if [ -n "$unexpected" ]; then
    failed=1
    echo "$suite: failures not in known_failures.txt:"
    echo "$unexpected" | sed 's/^/  /'
  fi
  if [ -n "$fixed" ]; then
    echo "$suite: listed in known_failures.txt but passed now (remove them):"
    echo "$fixed" | sed 's/^/  /'
  fi
  echo "$suite: $(wc -l <"$failures") failed, of them $(echo -n "$unexpected" | grep -c . || true) unexpected"
}

pika_suite() {
  echo "== pika acceptance tests ($pika_src) against port $port"
  local dir="$work/pika-suite" installed source
  installed=$(python3 -c 'import pika; print(pika.__version__)')
  source=$(sed -n "s/^__version__ = ['\"]\(.*\)['\"]/\1/p" "$pika_src/pika/__init__.py" 2>/dev/null || true)
  [ "$installed" = "$source" ] ||
    echo "warning: the tests are pika $source's, the installed pika is $installed"
  mkdir -p "$dir"
  cp -r "$pika_src/tests" "$dir/"
  [ -d "$pika_src/testdata" ] && cp -r "$pika_src/testdata" "$dir/"
  [ -f "$pika_src/pyproject.toml" ] && cp "$pika_src/pyproject.toml" "$dir/"
  # The suite's broker address is fixed at localhost:5672 in two places; no option moves it.
  sed -i "s/{'port': 5672}/{'port': $port}/" "$dir/tests/acceptance/blocking_adapter_test.py"
  sed -i "s/host='localhost', port=5672)/host='localhost', port=$port)/" "$dir/tests/base/async_test_base.py"
  grep -q "{'port': $port}" "$dir/tests/acceptance/blocking_adapter_test.py" &&
    grep -q "port=$port)" "$dir/tests/base/async_test_base.py" ||
    setup_error "could not point pika's tests at port $port (their layout changed)"
  # The installed pika is tested (the tree's own pika/ is not copied).
  (cd "$dir" && timeout 1200 python3 -m pytest tests/acceptance -p no:cacheprovider \
    --timeout 60 -q -rfE -o addopts= >"$work/pika-suite.log" 2>&1) || true
  local counts
  counts=$(grep -E '^[= ]*[0-9]+ (passed|failed)' "$work/pika-suite.log" | tail -n 1 | sed 's/=//g; s/^ *//; s/ *$//' || true)
  [ -n "$counts" ] || counts=$(tail -n 1 "$work/pika-suite.log")
  echo "pika suite: $counts"
  # pytest's short summary: "FAILED tests/...::name - reason", "ERROR tests/... - reason".
  grep -E '^(FAILED|ERROR) tests/' "$work/pika-suite.log" |
    sed -E 's/^(FAILED|ERROR) ([^ ]*).*/\2/' >"$work/pika.failed" || true
  compare pika "$work/pika.failed"
  summary+=("pika suite: $counts")
}

# go_tests BINARY RESULTS TESTS...: each test in its own process, as a panic ends the binary.
go_tests() {
  local binary=$1 results=$2 t rc r
  shift 2
  : >"$results"
  for t in "$@"; do
    (cd "$amqp091_dir" && AMQP_URL="amqp://guest:guest@127.0.0.1:$port/" timeout 120 \
      "$binary" -test.run "^$t\$" -test.v -test.timeout 90s >"$work/go-suite/$t.log" 2>&1) && rc=0 || rc=$?
    if grep -q '^--- SKIP' "$work/go-suite/$t.log"; then
      r=SKIP
    elif [ "$rc" = 0 ]; then
      r=PASS
    else
      r=FAIL
    fi
    echo "$r $t" >>"$results"
  done
}

go_suite() {
  echo "== amqp091-go integration tests ($amqp091_dir) against port $port"
  mkdir -p "$work/go-suite" "$work/gocache"
  local gopath="/usr/share/gocode" tests counts
  # GOPATH mode over Debian's tree: no module download.
  (cd "$amqp091_dir" && GOCACHE="$work/gocache" GO111MODULE=off GOPATH=$gopath GOFLAGS= \
    go test -c -tags integration -o "$work/amqp091.test" .)
  mapfile -t tests < <("$work/amqp091.test" -test.list '.*' | grep -E '^(Test|Example)')
  go_tests "$work/amqp091.test" "$work/go.results" "${tests[@]}"
  counts="$(grep -c '^PASS' "$work/go.results" || true) passed, $(grep -c '^FAIL' "$work/go.results" || true) failed, $(grep -c '^SKIP' "$work/go.results" || true) skipped"
  echo "go suite: $counts"
  awk '$1 == "FAIL" { print $2 }' "$work/go.results" >"$work/go.failed"
  compare go "$work/go.failed"
  summary+=("go suite: $counts")

  # The RabbitMQ-only tests, with their product gate pointed at stream-broker.
  local gated="$work/gated/src/github.com/rabbitmq"
  mkdir -p "$gated"
  cp -r "$amqp091_dir" "$gated/"
  sed -i 's/product.(string) == "RabbitMQ"/product.(string) == "stream-broker"/; s/server == "RabbitMQ"/server == "stream-broker"/' \
    "$gated/amqp091-go/integration_test.go"
  (cd "$gated/amqp091-go" && GOCACHE="$work/gocache" GO111MODULE=off GOPATH="$work/gated:$gopath" GOFLAGS= \
    go test -c -tags integration -o "$work/amqp091-gated.test" .)
  go_tests "$work/amqp091-gated.test" "$work/go-gated.results" \
    TestIntegrationRecoverNotImplemented TestRabbitMQQueueTTLGet TestRabbitMQQueueNackMultipleRequeue
  counts="$(grep -c '^PASS' "$work/go-gated.results" || true) passed, $(grep -c '^FAIL' "$work/go-gated.results" || true) failed"
  echo "go RabbitMQ-only tests, gate pointed at stream-broker: $counts"
  if grep -q '^FAIL' "$work/go-gated.results"; then
    failed=1
    grep '^FAIL' "$work/go-gated.results" | sed 's/^/  /'
  fi
  summary+=("go RabbitMQ-only tests (gate retargeted): $counts")
}

if [ "$diffs" = 1 ]; then
  run_smoke rabbitmq_diffs python3 "$here/rabbitmq_diffs.py" --port "$port"
fi
if [ "$suites" = 1 ]; then
  pika_suite
  go_suite
fi

kill -0 "$server_pid" 2>/dev/null || { failed=1; summary+=("the server died during the run"); }
echo "== summary"
printf '%s\n' "${summary[@]}"
if [ "$failed" = 0 ]; then echo "run.sh: all passed"; else echo "run.sh: FAILED"; fi
exit "$failed"
