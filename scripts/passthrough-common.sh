# Sourced by scripts/callgrind-passthrough and scripts/perf-passthrough:
# what both set up before they load a server with wrk.
#
# passthrough_setup BUILD [BINARY...]: builds the release binary and the
# load bench example when BUILD is 1; sets LB (the load bench), BINS (the
# binaries given, else target/release/toolstub) and TMP (a scratch folder,
# removed on exit with every background job); starts the mock upstream
# (on CPU $MOCK_CPU when set) and sets ADDR to its address; writes
# $TMP/post.lua, wrk's script for the small chat request.
passthrough_setup() {
  local build=$1; shift
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if [[ $build == 1 ]]; then
    (cd "$root" && cargo build --release --locked --bin toolstub --example loadbench)
  fi
  local target=${CARGO_TARGET_DIR:-$root/target}
  LB=$target/release/examples/loadbench
  BINS=("$@")
  [[ ${#BINS[@]} -eq 0 ]] && BINS=("$target/release/toolstub")
  TMP=$(mktemp -d)
  trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
  if [[ -n ${MOCK_CPU:-} ]]; then
    taskset -c "$MOCK_CPU" "$LB" --mock > "$TMP/mock.txt" &
  else
    "$LB" --mock > "$TMP/mock.txt" &
  fi
  for _ in $(seq 50); do [[ -s "$TMP/mock.txt" ]] && break; sleep 0.1; done
  ADDR=$(head -1 "$TMP/mock.txt")
  cat > "$TMP/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"model":"m","messages":[{"role":"user","content":"hello"}]}'
wrk.headers["content-type"] = "application/json"
wrk.headers["authorization"] = "Bearer sk-bench"
LUA
}
