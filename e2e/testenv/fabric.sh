#!/usr/bin/env bash
# Emulated leaf-spine fabric made of network namespaces (root only).
#
#   fabric.sh up    --dir DIR --nodes N --leaves L --spines S [--link-rate R] [--path-mode M]
#                   [--tcp-cc reno|bbr]   (the hosts' TCP congestion control; default reno)
#                   [--mtu BYTES]         (every link's MTU, 1280 ... 9216; default 1500)
#   fabric.sh down  --dir DIR
#   fabric.sh links --dir DIR                       list link names
#   fabric.sh link  --dir DIR LINK down|up          (port down/up; see Failures below)
#   fabric.sh link  --dir DIR LINK set [--rate R] [--delay D] [--loss P]   (both directions;
#                   replaces all three: omitted = plan rate, no delay, no loss)
#   fabric.sh path-mode --dir DIR sport|hash
#   fabric.sh ns    --dir DIR NAME                  print the netns of node-I, leaf-K or spine-J
#   fabric.sh exec  --dir DIR NAME CMD...           run CMD inside that netns
#   fabric.sh ip    --dir DIR node-I                print the node's address
#
# Plan (addresses only from 198.18.0.0/15, only inside namespaces this script creates):
#   node-i sits on leaf-(i % L) and has 198.18.<leaf>.<10 + i / L>/32 on its eth0; the leaf
#   answers as 198.18.<leaf>.1 on its port h<i>. Leaf k and spine j share the /30
#   198.19.<k>.<4j>: the leaf is .4j+1 (port s<j>), the spine is .4j+2 (port l<k>).
# Links: "node-i" (host <-> leaf) and "leaf-k:spine-j". Every link end shapes its egress to the
# link rate (tbf), so both directions are shaped; loss (nftables) and delay (netem, only where the
# kernel has it) are per link when set.
# Path choice at the source leaf for traffic to another leaf:
#   sport (default): TCP/UDP flows entering from a host take spine (source port % S); other
#                    packets (ICMP) use the kernel's multipath route.
#   hash:            Linux L4 multipath hashing (fib_multipath_hash_policy=1) over all spines.
# Failures of a leaf-spine link (both ends, both directions):
#   link down: the ports go down and routing converges at once (ECMP member removal once BGP
#              has withdrawn the routes): spine t is live for leaves k and m when leaf-k:spine-t
#              and leaf-m:spine-t are both up. Leaf k's multipath route to leaf m keeps only the
#              live spines; a flow pinned to spine j (sport) takes spine j if it is live, else the
#              next live one of j+1, j+2, ... (cyclically); no live spine = blackhole (the leaves
#              are cut apart). `link up` restores the routes.
#   gray:      `link set --loss 100`: the link stays up and drops every packet, routing does not
#              notice, and the flows pinned to it are blackholed; `link set` restores it.
#   A node link (node-I) down cuts that host off; up restores it.
set -euo pipefail
die() { echo "fabric: $*" >&2; exit 1; }

CMD=${1:-}; [[ -n $CMD ]] || { sed -n '2,37p' "$0"; exit 2; }; shift
DIR="" NODES="" LEAVES="" SPINES="" RATE=1gbit PATH_MODE=sport TCP_CC=reno MTU=1500
ARGS=()
while (($#)); do
  case "$1" in
    --dir) DIR=${2:?}; shift 2 ;;
    --nodes) NODES=${2:?}; shift 2 ;;
    --leaves) LEAVES=${2:?}; shift 2 ;;
    --spines) SPINES=${2:?}; shift 2 ;;
    --link-rate) RATE=${2:?}; shift 2 ;;
    --path-mode) PATH_MODE=${2:?}; shift 2 ;;
    --tcp-cc) TCP_CC=${2:?}; shift 2 ;;
    --mtu) MTU=${2:?}; shift 2 ;;
    --) shift; ARGS+=("$@"); break ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
[[ -n $DIR ]] || die "--dir is required"
mkdir -p "$DIR"; DIR=$(cd "$DIR" && pwd)
F=$DIR/fabric
# netns names are global: prefix them with a hash of DIR so two clusters never collide.
PREFIX=c4$(printf '%s' "$DIR" | sha1sum | cut -c1-6)

ns_of() {  # ns_of node-I|leaf-K|spine-J
  [[ $1 =~ ^(node|leaf|spine)-[0-9]+$ ]] || die "bad name '$1' (node-I, leaf-K or spine-J)"
  echo "$PREFIX-$1"
}
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
load_plan() { [[ -f $F/plan.env ]] || die "no fabric in $DIR"; source "$F/plan.env"; }

node_leaf() { echo $(($1 % LEAVES)); }
node_addr() { echo "198.18.$(($1 % LEAVES)).$((10 + $1 / LEAVES))"; }

mk_ns() {
  local ns=$1
  echo "$ns" >>"$F/netns.list"
  ip netns add "$ns"
  in_ns "$ns" ip link set lo up
  in_ns "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
}

rate_bps() {  # rate_bps 100mbit -> 100000000
  python3 - "$1" <<'PY' || die "bad rate '$1' (e.g. 100mbit, 1gbit)"
import re, sys
m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(bit|kbit|mbit|gbit)", sys.argv[1].lower())
if not m:
    sys.exit(1)
print(int(float(m.group(1)) * {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2)]))
PY
}

have_netem() {
  [[ -f $F/netem ]] && return "$(<"$F/netem")"
  local ns=$PREFIX-probe-netem r=1
  ip netns add "$ns" 2>/dev/null || true
  in_ns "$ns" ip link add name a type veth peer name b 2>/dev/null || true
  if in_ns "$ns" tc qdisc add dev a root netem delay 1ms 2>/dev/null; then r=0; fi
  ip netns del "$ns"
  echo "$r" >"$F/netem"
  return "$r"
}

# shape <ns> <dev> <rate> [delay] [loss%]: the link end's egress. Rate: tbf (this kernel may lack
# sch_netem). Delay: a netem child under tbf, only where the kernel has sch_netem. Loss: an
# nftables rule that drops a random fraction of the packets leaving <dev>.
shape() {
  local ns=$1 dev=$2 rate=$3 delay=${4:-} loss=${5:-} bps burst
  bps=$(rate_bps "$rate") || exit 1
  # Burst: 4 ms at the rate, and never under 128 KiB. tbf sends a packet only once the bucket
  # holds all of it, and a rate change keeps the packets already queued: a GSO packet (up to
  # 64 KiB of payload plus its segments' headers, ~68 KB) queued under a larger burst never
  # leaves a bucket smaller than itself, and the link stalls for good (seen when a 1 Gbit/s link
  # with flows on it was cut to 100 Mbit/s with a 64 KiB burst). Two GSO packets always fit.
  burst=$((bps / 8 / 250)); ((burst >= 131072)) || burst=131072
  in_ns "$ns" tc qdisc replace dev "$dev" root handle 1: tbf rate "$bps"bit burst "$burst" \
    latency 20ms
  if [[ -n $delay && $delay != 0 && $delay != 0ms ]]; then
    have_netem || die "delay needs the kernel's sch_netem, which this kernel lacks"
    in_ns "$ns" tc qdisc replace dev "$dev" parent 1:1 handle 10: netem delay "$delay"
  else
    in_ns "$ns" tc qdisc del dev "$dev" parent 1:1 handle 10: 2>/dev/null || true
  fi
  local chain=loss_$dev
  if [[ -n $loss || -f $F/loss/$ns.$dev ]]; then
    mkdir -p "$F/loss"
    if [[ ! -f $F/loss/$ns.$dev ]]; then
      in_ns "$ns" nft -f - <<NFT
table ip c4loss {
  chain post { type filter hook postrouting priority 0; policy accept; }
  chain $chain { }
}
add rule ip c4loss post oifname "$dev" jump $chain
NFT
      touch "$F/loss/$ns.$dev"
    fi
    in_ns "$ns" nft flush chain ip c4loss "$chain"
    if [[ -n $loss ]]; then
      local ppm
      ppm=$(python3 -c 'import sys; v=float(sys.argv[1].rstrip("%")); assert 0<=v<=100; print(int(v*10000))' "$loss") \
        || die "bad loss '$loss' (percent, e.g. 1 or 0.5%)"
      if ((ppm >= 1000000)); then  # 100 %: numgen's range stops at 999999
        in_ns "$ns" nft add rule ip c4loss "$chain" counter drop
      elif ((ppm > 0)); then
        in_ns "$ns" nft add rule ip c4loss "$chain" numgen random mod 1000000 lt "$ppm" \
          counter drop
      fi
    fi
  fi
}

set_path_mode() {  # set_path_mode sport|hash  (on every leaf)
  local k ns mode=$1
  [[ $mode == sport || $mode == hash ]] || die "path mode must be sport or hash"
  for ((k = 0; k < LEAVES; k++)); do
    ns=$PREFIX-leaf-$k
    in_ns "$ns" nft delete table ip c4 2>/dev/null || true
    if [[ $mode == sport ]]; then
      in_ns "$ns" nft -f "$F/sport-map.nft"
    fi
  done
  echo "$mode" >"$F/path-mode"
}

# Routes that use one link; the kernel deletes them when the link goes down, so `link up`
# re-installs them (replace = idempotent).
host_routes() {  # host_routes <i>
  local i=$1 k ns lns addr
  k=$(node_leaf "$i"); ns=$PREFIX-node-$i; lns=$PREFIX-leaf-$k; addr=$(node_addr "$i")
  in_ns "$ns" ip route replace "198.18.$k.1/32" dev eth0 scope link
  in_ns "$ns" ip route replace 198.18.0.0/15 via "198.18.$k.1" dev eth0 src "$addr"
  in_ns "$lns" ip route replace "$addr/32" dev "h$i" scope link
}

spine_routes() {  # spine_routes <leaf k> <spine j>: the spine's route down to the leaf
  local k=$1 j=$2
  in_ns "$PREFIX-spine-$j" ip route replace "198.18.$k.0/24" via "198.19.$k.$((4 * j + 1))" \
    dev "l$k"
}

# Which leaf-spine links are down: one file per link in $F/down (created by `link down`).
spine_live() {  # spine_live <leaf k> <leaf m> <spine t>: both leaves' links to spine t are up
  [[ ! -e $F/down/leaf-$1:spine-$3 && ! -e $F/down/leaf-$2:spine-$3 ]]
}

# converge_routes: every leaf's routes to every other leaf, from the links that are up (what the
# leaves hold once routing has converged). For leaf k and leaf m: table 100+j (spine j's sport
# flows) goes via spine j if it is live for k and m, else via the next live spine j+1, j+2, ...
# (cyclically); the main table's multipath route (hash mode, ICMP) has every live spine. No live
# spine: blackhole in both.
converge_routes() {
  local k m j n t cmds live nh
  for ((k = 0; k < LEAVES; k++)); do
    cmds=""
    for ((m = 0; m < LEAVES; m++)); do
      ((m == k)) && continue
      live=()
      for ((t = 0; t < SPINES; t++)); do
        spine_live "$k" "$m" "$t" && live+=("$t")
      done
      for ((j = 0; j < SPINES; j++)); do
        nh="blackhole 198.18.$m.0/24"
        for ((n = 0; n < SPINES; n++)); do
          t=$(((j + n) % SPINES))
          if spine_live "$k" "$m" "$t"; then
            nh="198.18.$m.0/24 via 198.19.$k.$((4 * t + 2)) dev s$t"
            break
          fi
        done
        cmds+="route replace $nh table $((100 + j))"$'\n'
      done
      if ((${#live[@]} == 0)); then
        nh="blackhole 198.18.$m.0/24"
      elif ((${#live[@]} == 1)); then
        t=${live[0]}
        nh="198.18.$m.0/24 via 198.19.$k.$((4 * t + 2)) dev s$t"
      else
        nh="198.18.$m.0/24"
        for t in "${live[@]}"; do nh+=" nexthop via 198.19.$k.$((4 * t + 2)) dev s$t"; done
      fi
      cmds+="route replace $nh"$'\n'
    done
    [[ -z $cmds ]] || in_ns "$PREFIX-leaf-$k" ip -batch - <<<"$cmds" \
      || die "leaf-$k: could not install its routes"
  done
}

do_up() {
  [[ $(id -u) == 0 ]] || die "the netns fabric needs root"
  [[ -n $NODES && -n $LEAVES && -n $SPINES ]] || die "up needs --nodes, --leaves and --spines"
  # A namespace other than the machine's may only select what the machine allows.
  local allowed
  allowed=$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control)
  [[ " $allowed " == *" $TCP_CC "* ]] \
    || die "--tcp-cc '$TCP_CC' is not one a network namespace may select (allowed: $allowed)"
  [[ $MTU =~ ^[0-9]+$ ]] && ((MTU >= 1280 && MTU <= 9216)) \
    || die "--mtu '$MTU' is not a link MTU (bytes, 1280 ... 9216)"
  [[ -f $F/netns.list ]] && do_down
  mkdir -p "$F"
  : >"$F/netns.list"
  printf 'NODES=%s\nLEAVES=%s\nSPINES=%s\nRATE=%s\nMTU=%s\n' "$NODES" "$LEAVES" "$SPINES" \
    "$RATE" "$MTU" >"$F/plan.env"
  local i k j ns lns sns addr
  for ((k = 0; k < LEAVES; k++)); do
    mk_ns "$PREFIX-leaf-$k"
    in_ns "$PREFIX-leaf-$k" sysctl -qw net.ipv4.ip_forward=1 \
      net.ipv4.fib_multipath_hash_policy=1
  done
  for ((j = 0; j < SPINES; j++)); do
    mk_ns "$PREFIX-spine-$j"
    in_ns "$PREFIX-spine-$j" sysctl -qw net.ipv4.ip_forward=1
  done
  # Hosts.
  for ((i = 0; i < NODES; i++)); do
    ns=$PREFIX-node-$i; k=$(node_leaf "$i"); lns=$PREFIX-leaf-$k; addr=$(node_addr "$i")
    mk_ns "$ns"
    # The hosts' TCP congestion control: reno by default (loss-based, and one a network
    # namespace may always select), not the machine's: BBR kept pacing a link cut to 10 % at
    # its old rate into the shaper's tail drop and lost thousands of segments per connection.
    in_ns "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$TCP_CC"
    ip link add name eth0 netns "$ns" mtu "$MTU" type veth peer name "h$i" netns "$lns" mtu "$MTU"
    in_ns "$ns" ip addr add "$addr/32" dev eth0
    in_ns "$ns" ip link set eth0 up
    in_ns "$lns" ip addr add "198.18.$k.1/32" dev "h$i"
    in_ns "$lns" ip link set "h$i" up
    host_routes "$i"
    shape "$ns" eth0 "$RATE"
    shape "$lns" "h$i" "$RATE"
  done
  # Leaf <-> spine links.
  for ((k = 0; k < LEAVES; k++)); do
    lns=$PREFIX-leaf-$k
    for ((j = 0; j < SPINES; j++)); do
      sns=$PREFIX-spine-$j
      ip link add name "s$j" netns "$lns" mtu "$MTU" type veth peer name "l$k" netns "$sns" \
        mtu "$MTU"
      in_ns "$lns" ip addr add "198.19.$k.$((4 * j + 1))/30" dev "s$j"
      in_ns "$sns" ip addr add "198.19.$k.$((4 * j + 2))/30" dev "l$k"
      in_ns "$lns" ip link set "s$j" up
      in_ns "$sns" ip link set "l$k" up
      shape "$lns" "s$j" "$RATE"
      shape "$sns" "l$k" "$RATE"
    done
  done
  # Routes between leaves: a multipath route (hash mode, ICMP) plus one table per spine that
  # the sport rule selects through the packet mark (0x100 + spine); see converge_routes. A
  # spine's table ends in a blackhole for anything outside the plan.
  for ((k = 0; k < LEAVES; k++)); do
    lns=$PREFIX-leaf-$k
    in_ns "$lns" ip rule add pref 100 to "198.18.$k.0/24" lookup main
    for ((j = 0; j < SPINES; j++)); do
      in_ns "$lns" ip rule add pref $((200 + j)) fwmark $((0x100 + j)) lookup $((100 + j))
      in_ns "$lns" ip route add blackhole 198.18.0.0/15 table $((100 + j))
      spine_routes "$k" "$j"
    done
  done
  converge_routes
  # sport % S -> mark, as an nftables map over the whole port range (exact for any S).
  python3 - "$SPINES" >"$F/sport-map.nft" <<'EOF'
import sys
s = int(sys.argv[1])
els = ", ".join(f"{p} : {0x100 + p % s}" for p in range(65536))
print("table ip c4 {\n  map sport_spine { type inet_service : mark; elements = { %s } }\n"
      "  chain pre {\n    type filter hook prerouting priority mangle; policy accept;\n"
      "    iifname \"h*\" meta l4proto { tcp, udp } meta mark set th sport map @sport_spine\n"
      "  }\n}" % els)
EOF
  set_path_mode "$PATH_MODE"
}

do_down() {
  [[ -f $F/netns.list ]] || return 0
  local ns
  # Processes left in a namespace (pods, iperf3) would keep it alive; stop them first.
  while read -r ns; do
    [[ -n $ns && $ns == "$PREFIX"-* ]] || continue
    if ip netns pids "$ns" >/dev/null 2>&1; then
      ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
      ip netns del "$ns" 2>/dev/null || true
    fi
  done <"$F/netns.list"
  rm -rf "$F"
}

link_ends() {  # link_ends <link>: prints "ns dev" lines for both ends
  local l=$1 i k j
  if [[ $l =~ ^node-([0-9]+)$ ]]; then
    i=${BASH_REMATCH[1]}; ((i < NODES)) || die "no link $l"
    echo "$PREFIX-node-$i eth0"
    echo "$PREFIX-leaf-$(node_leaf "$i") h$i"
  elif [[ $l =~ ^leaf-([0-9]+):spine-([0-9]+)$ ]]; then
    k=${BASH_REMATCH[1]}; j=${BASH_REMATCH[2]}
    ((k < LEAVES && j < SPINES)) || die "no link $l"
    echo "$PREFIX-leaf-$k s$j"
    echo "$PREFIX-spine-$j l$k"
  else
    die "bad link '$l' (node-I or leaf-K:spine-J)"
  fi
}

do_link() {
  load_plan
  local l=${ARGS[0]:-} op=${ARGS[1]:-} ns dev rate=$RATE delay="" loss="" a ends
  [[ -n $l && -n $op ]] || die "usage: link --dir DIR LINK down|up|set [--rate R] [--delay D] [--loss P]"
  ends=$(link_ends "$l")
  case "$op" in
    down|up)
      while read -r ns dev; do in_ns "$ns" ip link set "$dev" "$op"; done <<<"$ends"
      if [[ $l =~ ^node-([0-9]+)$ ]]; then
        [[ $op == down ]] || host_routes "${BASH_REMATCH[1]}"
      elif [[ $l =~ ^leaf-([0-9]+):spine-([0-9]+)$ ]]; then
        # Routing converges at once: the leaves drop the dead spine for the pairs it served.
        mkdir -p "$F/down"
        if [[ $op == down ]]; then
          : >"$F/down/$l"
        else
          rm -f "$F/down/$l"
          spine_routes "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
        fi
        converge_routes
      fi ;;
    set)
      a=("${ARGS[@]:2}")
      while ((${#a[@]})); do
        case "${a[0]}" in
          --rate) rate=${a[1]:?}; a=("${a[@]:2}") ;;
          --delay) delay=${a[1]:?}; a=("${a[@]:2}") ;;
          --loss) loss=${a[1]:?}; a=("${a[@]:2}") ;;
          *) die "unknown link option '${a[0]}'" ;;
        esac
      done
      while read -r ns dev; do shape "$ns" "$dev" "$rate" "$delay" "$loss"; done <<<"$ends" ;;
    *) die "link operation must be down, up or set" ;;
  esac
}

do_links() {
  load_plan
  local i k j
  for ((i = 0; i < NODES; i++)); do echo "node-$i"; done
  for ((k = 0; k < LEAVES; k++)); do
    for ((j = 0; j < SPINES; j++)); do echo "leaf-$k:spine-$j"; done
  done
}

case "$CMD" in
  up) do_up ;;
  down) do_down ;;
  link) do_link ;;
  links) do_links ;;
  path-mode) load_plan; set_path_mode "${ARGS[0]:-}" ;;
  ns) ns_of "${ARGS[0]:-}" ;;
  exec) name=${ARGS[0]:-}; ns=$(ns_of "$name"); exec ip netns exec "$ns" "${ARGS[@]:1}" ;;
  ip) load_plan; [[ ${ARGS[0]:-} =~ ^node-([0-9]+)$ ]] || die "ip needs node-I"
      node_addr "${BASH_REMATCH[1]}" ;;
  *) die "unknown command '$CMD'" ;;
esac
