// The leaf–spine Fabric the C4P benches plan on: one plane, spines = uplinks per leaf, and the
// named leaf uplinks failed (capacity 0, both directions) in its description. Exits on a refused
// description (a bench has no one to report it to).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "operator/c4p/fabric.h"

namespace c4::bench {

inline op::c4p::Fabric leafSpineFabric(int uplinks, double uplink_gbps, double host_gbps,
                                       const std::vector<std::pair<std::string, int>>& failed) {
  op::c4p::FabricSpec spec;
  spec.spines = uplinks;
  spec.uplinks_per_leaf = uplinks;
  spec.uplink_speed_gbps = uplink_gbps;
  spec.host_link_speed_gbps = host_gbps;
  for (const auto& [leaf, uplink] : failed) {
    op::c4p::LinkState st;
    st.link.leaf = leaf;
    st.link.uplink = uplink;
    st.capacity_fraction = 0;
    spec.links.push_back(st);
  }
  auto fabric = op::c4p::Fabric::fromSpec(spec);
  if (!fabric) {
    std::fprintf(stderr, "fabric: %s\n", fabric.error().toString().c_str());
    std::exit(1);
  }
  return *fabric;
}

}  // namespace c4::bench
