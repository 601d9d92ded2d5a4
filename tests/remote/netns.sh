# SPDX-License-Identifier: MIT
# netns.sh - two "hosts" on one machine for the remote tests: network
# namespaces $NS_A and $NS_B joined by a veth pair ($IF_A 10.$N.0.1 <->
# $IF_B 10.$N.0.2), loopback up in each. Sourced by the run-*.sh scripts;
# needs root (CAP_NET_ADMIN). Names carry the shell's pid, so runs can
# overlap; netns_down removes everything (also on exit via a trap the
# caller sets).

netns_up() {
	local n=$(( ($$ % 200) + 20 ))
	NS_A=kvrA$$
	NS_B=kvrB$$
	IF_A=kva$$
	IF_B=kvb$$
	ADDR_A=10.$n.0.1
	ADDR_B=10.$n.0.2
	ip netns add "$NS_A" || return 1
	ip netns add "$NS_B" || return 1
	ip link add "$IF_A" type veth peer name "$IF_B" || return 1
	ip link set "$IF_A" netns "$NS_A"
	ip link set "$IF_B" netns "$NS_B"
	ip -n "$NS_A" addr add "$ADDR_A/24" dev "$IF_A"
	ip -n "$NS_B" addr add "$ADDR_B/24" dev "$IF_B"
	ip -n "$NS_A" link set lo up
	ip -n "$NS_B" link set lo up
	ip -n "$NS_A" link set "$IF_A" up
	ip -n "$NS_B" link set "$IF_B" up
}

# The link between the hosts goes away (a cable pulled, a host gone).
netns_cut() {
	ip -n "$NS_A" link del "$IF_A" 2>/dev/null || true
}

netns_down() {
	ip -n "$NS_A" link del "$IF_A" 2>/dev/null || true
	ip netns del "$NS_A" 2>/dev/null || true
	ip netns del "$NS_B" 2>/dev/null || true
}

# UCX over the veth only: its TCP transport on that interface (no shared
# memory between the two "hosts", which are one machine).
ucx_env_a() { echo "UCX_TLS=tcp UCX_NET_DEVICES=$IF_A"; }
ucx_env_b() { echo "UCX_TLS=tcp UCX_NET_DEVICES=$IF_B"; }
