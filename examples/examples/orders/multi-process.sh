#!/usr/bin/env bash
# The orders demo as separate processes: `stream-broker` on a loopback port, and each of the
# five services started on its own with the `rabbit` binder pointed at it. Each service says
# `ready` once its bindings are up (consumers first, so no order is published before its
# queue exists), does its share of the fixed workload and ends with a `done:` line; the
# script prints the same summary line as `cargo run --example orders`.
#
#   examples/examples/orders/multi-process.sh        # PORT=5673 by default
set -euo pipefail
cd "$(dirname "$0")/../../.."

port=${PORT:-5673}
logs=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$logs"
}
trap cleanup EXIT

cargo build -q -p stream-broker --bin stream-broker
cargo build -q -p stream-examples --example orders
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
broker="$target_dir/debug/stream-broker"
orders="$target_dir/debug/examples/orders"

# Waits (30 s at most) until file $1 has a line matching $2.
wait_for_line() {
  for _ in $(seq 300); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "no line matching '$2' in $1 within 30 s:" >&2
  cat "$1" >&2
  return 1
}

"$broker" --listen "127.0.0.1:$port" > "$logs/broker.log" 2>&1 &
pids+=($!)
wait_for_line "$logs/broker.log" "stream-broker listening"

export SPRING_CLOUD_STREAM_DEFAULTBINDER=rabbit
export SPRING_RABBITMQ_HOST=127.0.0.1 SPRING_RABBITMQ_PORT=$port
export STREAM_CONFIG=examples/examples/orders/application.yaml
for service in sms coupon invoice stock; do
  "$orders" "$service" > "$logs/$service.log" 2>&1 &
  pids+=($!)
  wait_for_line "$logs/$service.log" "\[$service\] ready"
done
"$orders" order > "$logs/order.log" 2>&1
for service in sms coupon invoice stock; do
  wait_for_line "$logs/$service.log" "^done:"
done
for service in order stock invoice coupon sms; do
  sed -n 's/^\[/  [/p' "$logs/$service.log" | head -n 3
done

value() { grep -ho "$1=[0-9]*" "$logs"/*.log | head -n 1 | cut -d= -f2; }
echo "summary: placed=$(value placed) reserved=$(value reserved) invoiced=$(value invoiced) couponed=$(value couponed) notified=$(value notified) dead-lettered=$(value dead-lettered)"
