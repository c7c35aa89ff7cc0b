# shellcheck shell=bash
# The sandbox's pod network: a network namespace of its own (sourced by up.sh and down.sh, after
# lib.sh). docs/sandbox.md#pods-with-addresses says why and how; in short:
#
#   host namespace                                 namespace ${IR_POD_NETNS}
#   Traefik, Prometheus, ...                       each pod's shim listening on <podIP>:8000
#   ${IR_POD_VETH} 169.254.244.1/30  <-- veth -->  eth0 169.254.244.2/30
#   route ${IR_POD_CIDR} via 169.254.244.2         lo: ${IR_POD_CIDR} local (table local)
#
# The pod range is local inside the namespace only. The host reaches it through the veth, as a
# node reaches pods through a CNI, and holds no address of it: its veth end has a link-local
# address (169.254.0.0/16: no private range on the host), and the one route to the pod range is on
# that veth, so it goes with the veth when the namespace is deleted. Nothing of the pod network
# stays on the host after podnet_down.

# The veth's two ends (a /30 of the link-local range); overridable, e.g. for podnet's own test.
POD_VETH_HOST_ADDR="${IR_POD_VETH_HOST_ADDR:-169.254.244.1}"
POD_VETH_NS_ADDR="${IR_POD_VETH_NS_ADDR:-169.254.244.2}"

podnet_ns() { ip -n "${IR_POD_NETNS}" "$@"; }

podnet_exists() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF "${IR_POD_NETNS}"
}

# podnet_remove_host_route: the route sandboxes before the namespace left on the host's lo.
podnet_remove_host_route() {
  if ip route show table local 2>/dev/null | grep -qE "^local ${IR_POD_CIDR//./\\.} dev lo( |$)"; then
    ip route del local "${IR_POD_CIDR}" dev lo table local
    log pods "removed the host route 'local ${IR_POD_CIDR} dev lo' an earlier sandbox left"
  fi
}

# podnet_up: create (or keep) the namespace, the veth and the routes. Idempotent: a namespace that
# exists is kept, because running shims hold their pod listeners in it. Without the privileges to
# make a namespace it stops the start: no half sandbox.
podnet_up() {
  local errlog="${IR_LOGS}/pod-network.log" fresh=0
  : >"${errlog}"
  command -v ip >/dev/null || die "pod network: the ip command (iproute2) is missing; apt-get install iproute2"
  podnet_remove_host_route 2>>"${errlog}" ||
    die "pod network: could not remove the old host route 'local ${IR_POD_CIDR} dev lo' ($(cat "${errlog}")); needs root"
  if ! podnet_exists; then
    ip netns add "${IR_POD_NETNS}" 2>>"${errlog}" ||
      die "pod network: cannot create network namespace ${IR_POD_NETNS} ($(tr '\n' ' ' <"${errlog}")). The sandbox gives pods their addresses inside a namespace of its own and does not start without one: run it as root (CAP_SYS_ADMIN and CAP_NET_ADMIN). docs/sandbox.md#pods-with-addresses"
    fresh=1
  fi
  # A veth left from a namespace that is gone (or held by a leftover process) is made again.
  if ((fresh)) || ! podnet_ns link show eth0 >/dev/null 2>&1; then
    ip link del "${IR_POD_VETH}" 2>/dev/null || true
    ip link add "${IR_POD_VETH}" type veth peer name eth0 netns "${IR_POD_NETNS}" 2>>"${errlog}" ||
      die "pod network: cannot create veth ${IR_POD_VETH} ($(cat "${errlog}"))"
  fi
  {
    ip addr replace "${POD_VETH_HOST_ADDR}/30" dev "${IR_POD_VETH}" &&
      ip link set "${IR_POD_VETH}" up &&
      podnet_ns link set lo up &&
      podnet_ns addr replace "${POD_VETH_NS_ADDR}/30" dev eth0 &&
      podnet_ns link set eth0 up &&
      podnet_ns route replace local "${IR_POD_CIDR}" dev lo table local &&
      ip route replace "${IR_POD_CIDR}" via "${POD_VETH_NS_ADDR}" dev "${IR_POD_VETH}" src "${POD_VETH_HOST_ADDR}"
  } 2>>"${errlog}" || die "pod network: could not configure ${IR_POD_NETNS} ($(cat "${errlog}"))"
  log pods "pod network ${IR_POD_CIDR} in namespace ${IR_POD_NETNS}, reached through veth ${IR_POD_VETH} (pods listen on their own IPs there)"
}

# podnet_down: the namespace, its veth and the host's route to it gone.
podnet_down() {
  if podnet_exists; then
    ip netns del "${IR_POD_NETNS}" || log pods "WARNING: could not delete namespace ${IR_POD_NETNS}"
  fi
  # a socket still open in the namespace keeps it (and the veth) alive after `ip netns del`
  if ip link show "${IR_POD_VETH}" >/dev/null 2>&1; then
    ip link del "${IR_POD_VETH}" || log pods "WARNING: could not delete veth ${IR_POD_VETH}"
  fi
  podnet_remove_host_route || true
  log pods "pod network removed (namespace ${IR_POD_NETNS}, veth ${IR_POD_VETH})"
}
