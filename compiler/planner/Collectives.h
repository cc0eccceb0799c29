//===- Collectives.h - Collective times as the runtime's library runs them -===//
//
// GPU clusters: NCCL's own cost model (src/graph/tuning.cc, NCCL 2.2x): ring
// and tree algorithms (NVLS inside one NVSwitch domain), the LL, LL128 and
// Simple protocols, per-step hardware latencies (ring: one per step, 2(p-1)
// for an all-reduce; tree: 2 log2(nodes) network hops), and the algorithm and
// protocol NCCL picks: the fastest by that model. Bus bandwidth is what each
// GPU's own links and NIC carry (one ring channel set per NIC). NCCL runs no
// hierarchical ring; its tree is the only two-level algorithm.
//
// CPU clusters (MPI over shared memory): alpha-beta ring, binary tree and
// hierarchical ring, the best of them.
//
// docs/cost-model.md, "Communication", derives each term and checks the bus
// bandwidths against published nccl-tests numbers.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_COLLECTIVES_H
#define STRATA_COMPILER_PLANNER_COLLECTIVES_H

#include "compiler/planner/Cluster.h"

namespace strata::planner {

enum class Collective { AllReduce, ReduceScatter, AllGather };

/// The time of one collective and how the library would run it.
struct CollectiveCost {
  double timeS = 0;
  const char *algorithm = "none"; ///< "ring", "tree", "nvls", "hier-ring"
  const char *protocol = "";      ///< "LL", "LL128", "Simple" (NCCL only)
  /// Bus bandwidth achieved (bytes/s): bytes·factor/time, where factor is
  /// 2(p-1)/p for all-reduce and (p-1)/p otherwise (nccl-tests' busbw).
  double busBandwidth = 0;
};

/// Whether `c` is costed with NCCL's model (GPU devices, unless the cluster
/// asks for plain alpha-beta).
bool usesNccl(const ClusterSpec &c);

/// `bytes` per member (the full buffer of an all-reduce, the gathered
/// output of an all-gather, the input of a reduce-scatter) over a group laid
/// out as `span`.
CollectiveCost collectiveCost(const ClusterSpec &c, Collective kind,
                              double bytes, const GroupSpan &span);

/// Ring bus bandwidth of a group: the slowest crossed level, where a level's
/// links are shared by the group's members inside one unit of it (each
/// member drives its own link/NIC). Bytes/s.
double ringBusBandwidth(const ClusterSpec &c, const GroupSpan &span);

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_COLLECTIVES_H
