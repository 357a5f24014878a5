# A real Prometheus (Debian's `prometheus`) scraping a scenario's C4 (sourced after lib/c4.sh,
# which it needs: c4_install_c4 has set OP_METRICS and the node plugins run in the node netns).
#
#   c4_prometheus_up [node count]   start Prometheus on 127.0.0.1:<free port>, its storage under
#                                   $WORK/prometheus; jobs c4-operator (127.0.0.1:$OP_METRICS,
#                                   honor_labels) and c4-node-plugin (every node plugin's
#                                   127.0.0.1:9400 inside its node netns, through
#                                   lib/netns_bridge.py, label node=node-I); the chart's alerting
#                                   rules (helm/c4/files/alerts.yaml) loaded; scrape and rule
#                                   interval 1 s. Sets PROM_URL; waits until every target is up.
#                                   Stopped by c4_cleanup (c4_prometheus_down).
#   c4_prom_query <promql>          instant query: one line per series, "<labels JSON> <value>"
#   c4_prom_value <promql>          the value of a query that returns one series (else fails)
#   c4_promtool_check_metrics       `promtool check metrics` on the /metrics of the operator and
#                                   of every node plugin (fails on any finding)
#   c4_prom_dashboard_check <json> [panel...]   every query of a Grafana dashboard evaluates;
#                                   the named panels have data
# shellcheck shell=bash

PROM_PID="" PROM_BRIDGE_PID="" PROM_URL=""
C4_NODE_PLUGIN_METRICS_PORT=${C4_NODE_PLUGIN_METRICS_PORT:-9400}

c4_prometheus_up() {
  local nodes=${1:-$C4_NODES} dir=$WORK/prometheus i pairs=() t0=$SECONDS
  command -v prometheus >/dev/null && command -v promtool >/dev/null ||
    fail "prometheus/promtool not installed (scripts/setup.sh installs Debian's prometheus)"
  mkdir -p "$dir/data"
  for ((i = 0; i < nodes; i++)); do
    pairs+=("node-$i=$("$ROOT/e2e/testenv/fabric.sh" ns --dir "$CLUSTER" "node-$i")")
  done
  python3 "$ROOT/e2e/scenarios/lib/netns_bridge.py" --port "$C4_NODE_PLUGIN_METRICS_PORT" \
    --targets-file "$dir/node-plugins.json" "${pairs[@]}" >"$dir/bridge.log" 2>&1 &
  PROM_BRIDGE_PID=$!
  wait_until 10 "netns bridge targets" test -s "$dir/node-plugins.json"
  cp "$ROOT/helm/c4/files/alerts.yaml" "$dir/alerts.yaml"
  cat >"$dir/prometheus.yml" <<YAML
global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}
rule_files: [alerts.yaml]
scrape_configs:
  - job_name: c4-operator
    honor_labels: true
    static_configs: [{targets: ["127.0.0.1:$OP_METRICS"]}]
  - job_name: c4-node-plugin
    file_sd_configs: [{files: [node-plugins.json], refresh_interval: 1s}]
YAML
  promtool check config "$dir/prometheus.yml" >"$dir/check.log" 2>&1 ||
    fail "promtool check config: $(cat "$dir/check.log")"
  # A port below the kernel's ephemeral range: a port inside it may be the local end of any
  # client connection on the machine, which a connect() probe does not see and which makes
  # bind() fail (CI: "bind: address already in use"). Should the port be taken after all,
  # Prometheus exits at once and another port is tried.
  local port lo try ready=0
  lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range)
  ((lo > 11000)) || lo=32768
  for ((try = 1; try <= 5 && !ready; try++)); do
    port=$((10000 + RANDOM % (lo - 10000)))
    if (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi  # something listens
    prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
      --web.listen-address="127.0.0.1:$port" --log.level=warn >"$dir/prometheus.log" 2>&1 &
    PROM_PID=$!
    PROM_URL=http://127.0.0.1:$port
    for ((i = 0; i < 150; i++)); do
      if curl -sf "$PROM_URL/-/ready" >/dev/null 2>&1; then ready=1; break; fi
      kill -0 "$PROM_PID" 2>/dev/null || break
      sleep 0.2
    done
    if ((!ready)); then
      kill -0 "$PROM_PID" 2>/dev/null &&
        fail "Prometheus not ready after 30 s: $(tail -n 3 "$dir/prometheus.log")"
      wait "$PROM_PID" 2>/dev/null || true
      PROM_PID=""
      echo "prometheus: exited on port $port ($(tail -n 1 "$dir/prometheus.log")); another port" >&2
    fi
  done
  ((ready)) || fail "Prometheus did not start in 5 tries: $(tail -n 3 "$dir/prometheus.log")"
  export PROM_URL
  targets_up() { [[ $(c4_prom_value 'sum(up{job=~"c4-.*"})') == "$1" ]]; }
  wait_until 20 "$((nodes + 1)) Prometheus targets up" targets_up $((nodes + 1))
  echo "prometheus: $PROM_URL scraping the operator and $nodes node plugins (1 s), C4 alert rules loaded; ready in $((SECONDS - t0)) s"
}

c4_prometheus_down() {
  [[ -n $PROM_PID ]] && kill "$PROM_PID" 2>/dev/null && wait "$PROM_PID" 2>/dev/null
  [[ -n $PROM_BRIDGE_PID ]] && kill "$PROM_BRIDGE_PID" 2>/dev/null && wait "$PROM_BRIDGE_PID" 2>/dev/null
  PROM_PID="" PROM_BRIDGE_PID=""
  return 0
}

c4_prom_query() {
  curl -sf "$PROM_URL/api/v1/query" --data-urlencode "query=$1" | jq -r '
    if .status != "success" then error("query failed: \(.error)") else
      .data.result[] | "\(.metric | to_entries | sort_by(.key) | from_entries | tojson) \(.value[1])"
    end'
}

c4_prom_value() {
  local out
  out=$(c4_prom_query "$1") || return 1
  [[ $(wc -l <<<"$out") == 1 && -n $out ]] || return 1
  echo "${out##* }"
}

c4_promtool_check_metrics() {
  local out target name
  out=$(curl -sf "http://127.0.0.1:$OP_METRICS/metrics" | promtool check metrics 2>&1) ||
    fail "promtool check metrics (operator): $out"
  local n=0
  while read -r name target; do
    out=$(curl -sf "http://$target/metrics" | promtool check metrics 2>&1) ||
      fail "promtool check metrics (node plugin on $name): $out"
    n=$((n + 1))
  done < <(jq -r '.[] | "\(.labels.node) \(.targets[0])"' "$WORK/prometheus/node-plugins.json")
  ((n > 0)) || fail "no node plugin targets to check"
  echo "promtool check metrics: operator and $n node plugins clean"
}

# c4_prom_dashboard_check <dashboard JSON> [panel title...]: evaluates every query of the Grafana
# dashboard (variables match anything) in this Prometheus; fails on a query Prometheus refuses or
# on a named panel none of whose queries returns data.
c4_prom_dashboard_check() {
  local json=$1 title expr n=0 empty=()
  shift
  declare -A has_data=()
  while IFS=$'\t' read -r title expr; do
    expr=$(sed -E 's/\$\{?[A-Za-z_]+\}?/.*/g' <<<"$expr")
    local out
    out=$(curl -s "$PROM_URL/api/v1/query" --data-urlencode "query=$expr")
    [[ $(jq -r .status <<<"$out") == success ]] || fail "dashboard panel '$title': $expr: $out"
    n=$((n + 1))
    if [[ $(jq '.data.result | length' <<<"$out") -gt 0 ]]; then has_data[$title]=1; fi
  done < <(jq -r '.panels[] | select(.type != "row") | .title as $t | .targets[] | [$t, .expr] | @tsv' "$json")
  for title in "$@"; do
    [[ -n ${has_data[$title]:-} ]] || empty+=("$title")
  done
  ((${#empty[@]} == 0)) || fail "dashboard panels without data: ${empty[*]}"
  echo "dashboard: $n queries evaluated, ${#has_data[@]} panels with data (required: $*)"
}
