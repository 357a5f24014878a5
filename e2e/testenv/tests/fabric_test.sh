#!/usr/bin/env bash
# Fabric test (root only; exits 77 = skipped otherwise): builds a 2-leaf x 2-spine netns fabric
# and measures real TCP throughput with tools/flow.py (one connection per flow, exact source port).
#  1. a flow's throughput matches the tc rate within 10%;
#  2. two flows whose planned source ports map to different spines each get the full rate;
#  3. two flows forced onto one spine share it;
#  4. taking a leaf-spine link down converges routing: a flow pinned to that spine takes the next
#     live spine in both directions, a leaf pair with no live spine gets a blackhole; up restores
#     the pinned path; a gray failure (link up, 100 % loss) blackholes the flows pinned to it only;
#  5. a rate cut on one link applies, and a cut under load never stalls the link; 6. hash mode (fib_multipath_hash_policy=1) spreads source
#     ports over both spines; 7. loss injection is visible as drops on that link;
#  8. delay uses netem where the kernel has it and is refused clearly otherwise;
#  9. the host namespace gets no fabric address or route;
# 10. the hosts run reno unless told otherwise; a congestion control a namespace may not select
#     is refused with its reason, and the running fabric is left as it was;
# 11. every link has MTU 1500 unless told otherwise; a bad --mtu is refused and changes nothing;
#     with --mtu 9000 a 9000-byte packet that may not be fragmented crosses the spine.
# Nothing is addressed outside the namespaces the fabric creates.
#   fabric_test.sh <work dir>
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FABRIC=$HERE/fabric.sh
DIR=${1:?usage: fabric_test.sh <work dir>}
if [[ $(id -u) != 0 ]]; then echo "SKIP: the netns fabric needs root"; exit 77; fi
mkdir -p "$DIR"; DIR=$(cd "$DIR" && pwd)
RATE_MBIT=100
cleanup() { "$FABRIC" down --dir "$DIR" || true; }
trap cleanup EXIT
fail() { echo "FABRIC FAIL: $*" >&2; exit 1; }

"$FABRIC" up --dir "$DIR" --nodes 4 --leaves 2 --spines 2 --link-rate ${RATE_MBIT}mbit
ip_of() { "$FABRIC" ip --dir "$DIR" "$1"; }
# node-0, node-2 on leaf-0; node-1, node-3 on leaf-1.
FLOW=$HERE/tools/flow.py
# Port 5201 is odd: the server's packets back to leaf 0 take spine 1. Port 5202 is even: both
# directions of a connection from an even source port are pinned to spine 0.
for n in node-1 node-3; do
  for port in 5201 5202; do
    setsid "$FABRIC" exec --dir "$DIR" "$n" python3 "$FLOW" server --bind "$(ip_of "$n")" \
      --port "$port" >"$DIR/server-$n-$port.log" 2>&1 &
    disown
  done
done
sleep 0.5  # let the servers bind (they die with their namespaces on cleanup)

# flow <src> <dst> <dst port> <client port> <seconds> -> prints received Mbit/s
flow() {
  "$FABRIC" exec --dir "$DIR" "$1" python3 "$FLOW" client --dst "$(ip_of "$2")" --port "$3" \
    --sport "$4" --seconds "$5" 2>>"$DIR/flow.log" || echo 0
}
within() { python3 -c 'import sys; v,t,p=map(float,sys.argv[1:]); sys.exit(0 if abs(v-t)<=t*p/100 else 1)' "$@"; }
spine_stat() {  # spine_stat <j> <port l0|l1> <counter>: spine-j's counter on that port
  ip netns exec "$("$FABRIC" ns --dir "$DIR" "spine-$1")" cat "/sys/class/net/$2/statistics/$3"
}
spine_bytes() { spine_stat "$1" l1 tx_bytes; }  # bytes spine-j forwarded out towards leaf-1
# leaf_route <leaf k> <table> <dst leaf m>: leaf k's route to leaf m's /24, on one line
leaf_route() {
  "$FABRIC" exec --dir "$DIR" "leaf-$1" ip route show table "$2" "198.18.$3.0/24" | tr -s ' \t\n' ' '
}

# 1. single flow matches the rate.
r=$(flow node-0 node-1 5201 40000 4)
echo "single flow: $r Mbit/s (rate $RATE_MBIT)"
within "$r" $RATE_MBIT 10 || fail "single flow $r Mbit/s not within 10% of $RATE_MBIT"

# 2. planned ports: 40000 % 2 = 0 -> spine-0, 40001 % 2 = 1 -> spine-1; both full rate.
s0=$(spine_bytes 0); s1=$(spine_bytes 1)
flow node-0 node-1 5201 40000 4 >"$DIR/a" & fa=$!; flow node-2 node-3 5201 40001 4 >"$DIR/b"; wait $fa
a=$(<"$DIR/a"); b=$(<"$DIR/b")
d0=$(( $(spine_bytes 0) - s0 )); d1=$(( $(spine_bytes 1) - s1 ))
echo "planned flows: $a and $b Mbit/s; spine-0 $d0 B, spine-1 $d1 B"
within "$a" $RATE_MBIT 10 && within "$b" $RATE_MBIT 10 || fail "planned flows not at full rate"
((d0 > 20000000 && d1 > 20000000)) || fail "planned flows did not use both spines"

# 3. forced onto one spine (both even ports): they share spine-0's link.
# Neither gets the link alone (about 95 % of it, item 1); the sum is one link, not two; nothing
# leaks onto spine-1. Over 4 s reno shared unevenly (CI: 74 and 22 Mbit/s, the first flow ahead);
# 8 s usually leave it time to even out, but not always (CI 2026-12-05: 70 and 25 Mbit/s). How
# fast two reno flows converge on a shaped link is TCP's business, not the fabric's: a pair that
# has not evened out is measured again, up to 3 times, and every bound holds within one pair.
for try in 1 2 3; do
  s1=$(spine_bytes 1)
  flow node-0 node-1 5201 40002 8 >"$DIR/a" & fa=$!; flow node-2 node-3 5201 40004 8 >"$DIR/b"; wait $fa
  a=$(<"$DIR/a"); b=$(<"$DIR/b"); d1=$(( $(spine_bytes 1) - s1 ))
  echo "colliding flows (try $try): $a and $b Mbit/s (sum $((a + b))); spine-1 carried $d1 B"
  within $((a + b)) $RATE_MBIT 10 || fail "colliding flows do not add up to one link"
  ((d1 < 2000000)) || fail "colliding flows leaked onto spine-1"
  ((a < RATE_MBIT * 70 / 100 && b < RATE_MBIT * 70 / 100)) && break
  ((try < 3)) || fail "colliding flows did not share in 3 tries"
done

# 4. link down: routing converges. Ports 40010 and 5202 are even, so both directions of the
# connection are pinned to spine 0; with leaf-0:spine-0 down, leaf 0 (data) and leaf 1 (ACKs)
# both take the next live spine, spine 1, which forwards the data out of l1 and the ACKs out of l0.
"$FABRIC" link --dir "$DIR" leaf-0:spine-0 down
fwd=$(spine_stat 1 l1 tx_bytes); rev=$(spine_stat 1 l0 tx_packets); old=$(spine_stat 0 l1 rx_packets)
a=$(flow node-0 node-1 5202 40010 3)
fwd=$(( $(spine_stat 1 l1 tx_bytes) - fwd )); rev=$(( $(spine_stat 1 l0 tx_packets) - rev ))
old=$(( $(spine_stat 0 l1 rx_packets) - old ))
echo "leaf-0:spine-0 down: flow pinned to spine 0 $a Mbit/s; spine-1 carried $fwd B to leaf-1" \
  "and $rev packets to leaf-0; spine-0 got $old packets from leaf-1"
within "$a" $RATE_MBIT 10 || fail "flow pinned to the downed link was not rerouted at full rate"
((fwd > 20000000)) || fail "the rerouted flow's data did not cross spine-1"
((rev > 100)) || fail "the rerouted flow's ACKs did not cross spine-1"
((old < 20)) || fail "leaf-1 still sent the flow's packets to spine-0, which cannot reach leaf-0"
[[ $(leaf_route 1 main 0) == "198.18.0.0/24 via 198.19.1.6 dev s1 " ]] \
  || fail "leaf-1's multipath route to leaf-0 kept spine-0: $(leaf_route 1 main 0)"
# No live spine between the leaves: every route from leaf 0 to leaf 1 is a blackhole.
"$FABRIC" link --dir "$DIR" leaf-1:spine-1 down
for t in 100 101 main; do
  [[ $(leaf_route 0 "$t" 1) == "blackhole 198.18.1.0/24 " ]] \
    || fail "leaves without a live spine: leaf-0 table $t has '$(leaf_route 0 "$t" 1)'"
done
"$FABRIC" link --dir "$DIR" leaf-1:spine-1 up
"$FABRIC" link --dir "$DIR" leaf-0:spine-0 up
sleep 0.5
# Up again: the same kind of flow (new even port: the last one waits in TIME_WAIT) takes spine 0.
fwd=$(spine_stat 0 l1 tx_bytes); rev=$(spine_stat 0 l0 tx_packets); old=$(spine_bytes 1)
a=$(flow node-0 node-1 5202 40012 3)
fwd=$(( $(spine_stat 0 l1 tx_bytes) - fwd )); rev=$(( $(spine_stat 0 l0 tx_packets) - rev ))
old=$(( $(spine_bytes 1) - old ))
echo "link up again: flow pinned to spine 0 $a Mbit/s; spine-0 carried $fwd B and $rev packets;" \
  "spine-1 $old B"
within "$a" $RATE_MBIT 10 || fail "path did not recover after link up"
((fwd > 20000000 && rev > 100)) || fail "after link up the flow did not take spine-0 again"
((old < 2000000)) || fail "after link up the flow still crossed spine-1"
[[ $(leaf_route 1 main 0) == *"dev s0 "*"dev s1 "* ]] \
  || fail "link up did not restore leaf-1's multipath route: $(leaf_route 1 main 0)"

# 4b. gray failure: the link stays up and drops every packet. Routing keeps it, so a flow pinned
# to spine 0 is blackholed (its SYN never arrives: the client reports 0) while spine 1 carries on.
"$FABRIC" link --dir "$DIR" leaf-0:spine-0 set --loss 100
old=$(spine_bytes 0)
flow node-0 node-1 5201 40014 2 >"$DIR/a" & fa=$!; b=$(flow node-2 node-3 5201 40015 3); wait $fa
a=$(<"$DIR/a"); old=$(( $(spine_bytes 0) - old ))
echo "leaf-0:spine-0 at 100% loss: flow pinned to spine 0 $a Mbit/s ($old B via spine-0)," \
  "flow pinned to spine 1 $b Mbit/s"
((a == 0 && old < 10000)) || fail "a flow crossed the gray link"
within "$b" $RATE_MBIT 10 || fail "flow on the healthy path was hurt by the gray link"
[[ $(leaf_route 0 100 1) == *"dev s0 "* ]] || fail "routing noticed the gray link: $(leaf_route 0 100 1)"
"$FABRIC" link --dir "$DIR" leaf-0:spine-0 set
a=$(flow node-0 node-1 5201 40016 3)
echo "gray link restored: flow pinned to spine 0 $a Mbit/s"
within "$a" $RATE_MBIT 10 || fail "path did not recover after the loss was removed"

# 5. rate cut on one link.
"$FABRIC" link --dir "$DIR" leaf-0:spine-1 set --rate 40mbit
b=$(flow node-0 node-1 5201 40013 4)
echo "leaf-0:spine-1 cut to 40mbit: odd port $b Mbit/s"
within "$b" 40 10 || fail "rate cut not applied"
"$FABRIC" link --dir "$DIR" leaf-0:spine-1 set

# 5b. a rate cut under load keeps the link moving. node-0 -> node-2 stays on leaf-0, and with
# node-0's link at 1 Gbit/s and node-2's at 2 Gbit/s the data queues at node-0's egress under a
# large burst, where GSO packets (up to ~68 KB) wait whole. Cut to 100 Mbit/s while the flow
# runs, the link must keep moving: tbf never sends a queued packet larger than its new bucket,
# so a burst below a GSO packet's size stalls the link for good and the flow never ends.
setsid "$FABRIC" exec --dir "$DIR" node-2 python3 "$FLOW" server --bind "$(ip_of node-2)" \
  --port 5203 >"$DIR/server-node-2-5203.log" 2>&1 &
disown
sleep 0.3
"$FABRIC" link --dir "$DIR" node-2 set --rate 2gbit
"$FABRIC" link --dir "$DIR" node-0 set --rate 1gbit
(flow node-0 node-2 5203 40014 4 >"$DIR/cut-under-load.out") &
cut_pid=$!
sleep 1.5
backlog=$(ip netns exec "$("$FABRIC" ns --dir "$DIR" node-0)" tc -s qdisc show dev eth0 |
  sed -n 's/.*backlog \([0-9]*\)b.*/\1/p' | head -1)
"$FABRIC" link --dir "$DIR" node-0 set --rate 100mbit
for ((i = 0; i < 150; i++)); do [[ -s $DIR/cut-under-load.out ]] && break; sleep 0.1; done
[[ -s $DIR/cut-under-load.out ]] || {
  kill "$cut_pid" 2>/dev/null || true
  fail "a flow stalled for good when its link was cut from 1gbit to 100mbit under load" \
    "(backlog at the cut: ${backlog:-?} B)"
}
wait "$cut_pid" || true
c=$(cat "$DIR/cut-under-load.out")
echo "node-0 cut from 1gbit to 100mbit under load (backlog at the cut ${backlog:-?} B):" \
  "the flow finished at $c Mbit/s"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)' "$c" \
  || fail "the flow cut under load did not finish (flow.py prints 0 when its link stalls)"
"$FABRIC" link --dir "$DIR" node-0 set
"$FABRIC" link --dir "$DIR" node-2 set

# 6. hash mode: L4 multipath hashing; many ports spread over both spines.
"$FABRIC" path-mode --dir "$DIR" hash
s0=$(spine_bytes 0); s1=$(spine_bytes 1)
for p in $(seq 41000 41015); do flow node-0 node-1 5201 "$p" 1 >/dev/null; done
d0=$(( $(spine_bytes 0) - s0 )); d1=$(( $(spine_bytes 1) - s1 ))
echo "hash mode, 16 ports: spine-0 $d0 B, spine-1 $d1 B"
((d0 > 1000000 && d1 > 1000000)) || fail "hash mode did not use both spines"
"$FABRIC" path-mode --dir "$DIR" sport

# 7. loss on a link shows as drops there.
"$FABRIC" link --dir "$DIR" node-0 set --loss 5
ns0=$("$FABRIC" ns --dir "$DIR" node-0)
flow node-0 node-1 5201 40020 2 >/dev/null
drops=$(ip netns exec "$ns0" nft list chain ip c4loss loss_eth0 | sed -n 's/.*packets \([0-9]*\).*/\1/p')
echo "5% loss on node-0: $drops packets dropped"
((drops > 0)) || fail "loss injection dropped nothing"
"$FABRIC" link --dir "$DIR" node-0 set

# 8. delay: netem where the kernel has it, else a clear refusal (never a silent no-op).
if "$FABRIC" link --dir "$DIR" node-1 set --delay 5ms 2>"$DIR/delay.err"; then
  ip netns exec "$("$FABRIC" ns --dir "$DIR" node-1)" tc qdisc show dev eth0 | grep -q "netem.*delay" \
    || fail "delay accepted but no netem qdisc installed"
  echo "delay: netem installed"
  "$FABRIC" link --dir "$DIR" node-1 set
else
  grep -q "sch_netem" "$DIR/delay.err" || fail "delay failed without a clear reason: $(cat "$DIR/delay.err")"
  echo "delay: refused clearly (kernel without sch_netem)"
fi

# 9. nothing outside the harness's namespaces: the host has no 198.18.0.0/15 address or route.
if ip -4 addr show | grep -qE 'inet 198\.(18|19)\.' || ip -4 route show | grep -qE '^198\.(18|19)\.'; then
  fail "a fabric address or route leaked into the host namespace"
fi

# 10. congestion control: the hosts' default, and a refused --tcp-cc changes nothing.
for n in node-0 node-3; do
  cc=$("$FABRIC" exec --dir "$DIR" "$n" sysctl -n net.ipv4.tcp_congestion_control)
  [[ $cc == reno ]] || fail "$n runs '$cc', not the fabric's default reno"
done
if "$FABRIC" up --dir "$DIR" --nodes 4 --leaves 2 --spines 2 --link-rate ${RATE_MBIT}mbit \
  --tcp-cc no-such-cc 2>"$DIR/cc.err"; then
  fail "--tcp-cc no-such-cc accepted"
fi
grep -q "not one a network namespace may select" "$DIR/cc.err" \
  || fail "--tcp-cc refused without its reason: $(cat "$DIR/cc.err")"
[[ $("$FABRIC" exec --dir "$DIR" node-0 sysctl -n net.ipv4.tcp_congestion_control) == reno ]] \
  || fail "a refused --tcp-cc changed the running fabric"
echo "tcp congestion control: reno; a bad --tcp-cc refused, fabric unchanged"

# 11. MTU: the default on a host link and a spine link, a refused value, then jumbo frames.
mtu_of() { "$FABRIC" exec --dir "$DIR" "$1" cat "/sys/class/net/$2/mtu"; }
[[ $(mtu_of node-0 eth0) == 1500 && $(mtu_of leaf-0 s1) == 1500 ]] \
  || fail "links do not have the default MTU 1500"
if "$FABRIC" up --dir "$DIR" --nodes 4 --leaves 2 --spines 2 --mtu 100000 2>"$DIR/mtu.err"; then
  fail "--mtu 100000 accepted"
fi
grep -q "is not a link MTU" "$DIR/mtu.err" || fail "--mtu refused without its reason: $(cat "$DIR/mtu.err")"
[[ $(mtu_of node-0 eth0) == 1500 ]] || fail "a refused --mtu changed the running fabric"
"$FABRIC" up --dir "$DIR" --nodes 4 --leaves 2 --spines 2 --link-rate ${RATE_MBIT}mbit --mtu 9000
[[ $(mtu_of node-0 eth0) == 9000 && $(mtu_of spine-1 l0) == 9000 ]] \
  || fail "--mtu 9000 not applied to the host and spine links"
# A 9000-byte IP packet (8972 bytes of UDP payload), don't-fragment set, from node-0 (leaf 0) to
# node-1 (leaf 1): host link, leaf, spine, leaf, host link. A smaller MTU on any hop drops it.
"$FABRIC" exec --dir "$DIR" node-1 timeout 10 python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 5300))
s.settimeout(8)
print(len(s.recv(65535)))' "$(ip_of node-1)" >"$DIR/jumbo.out" 2>&1 &
JUMBO=$!
sleep 0.5
"$FABRIC" exec --dir "$DIR" node-0 python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER = IP_PMTUDISC_DO: never fragment
for _ in range(3):
    s.sendto(bytes(8972), (sys.argv[1], 5300))
    time.sleep(0.2)' "$(ip_of node-1)" || fail "node-0 could not send a 9000-byte packet"
wait "$JUMBO" || true
[[ $(cat "$DIR/jumbo.out") == 8972 ]] \
  || fail "a 9000-byte packet did not cross the fabric with --mtu 9000: $(cat "$DIR/jumbo.out")"
echo "mtu: 1500 by default; a bad --mtu refused, fabric unchanged; 9000-byte frames cross the spine"

echo "FABRIC PASS"
