// Training-like mode for end-to-end tests: steps of (compute, allreduce, update) with atomic
// checkpoints, resume from the newest checkpoint every rank has, Progress/Checkpoint notices to
// C4_AGENT_SOCKET, and a final checksum that does not depend on interruptions.
#pragma once

#include <cstdint>
#include <string>

#include "bootstrap.h"
#include "c4/common/error.h"
#include "collectives.h"
#include "net.h"

namespace c4::netbench {

struct TrainingOptions {
  int steps = 0;
  int step_compute_ms = 0;
  std::string checkpoint_dir;  // empty: no checkpoints
  int checkpoint_every = 0;    // 0: no checkpoints
  std::size_t state_bytes = 1 << 20;
  bool json = false;
  // Non-empty: each rank appends "<unix seconds> <step>\n" per completed step to
  // <stepLogDir>/rank-<rank>.steps (kept across restarts, so a timeline shows the resume).
  std::string step_log_dir;
  // A long pause after step pauseAtStep (0: none) on rank pauseRank (-1: every rank), e.g. a
  // consolidated checkpoint written by one rank while its peers wait in the next allreduce.
  // Announced as ProgressState::kCheckpointing (then kTraining) unless pauseSilent.
  int pause_at_step = 0;
  int pause_ms = 0;
  int pause_rank = -1;
  bool pause_silent = false;
  // Compute slowdown control (fault injection for stragglers): before every step the rank reads
  // this file if it changed; a line "<node> <factor>" naming the rank's node (C4_NODE_NAME)
  // multiplies its step compute time by factor (>= 1). Empty: off.
  std::string slow_file;
};

// The compute factor that `slowFile` content assigns to `node` (1 when no line names it);
// kInvalidArgument for a malformed line or a factor below 1.
Result<double> parseSlowFile(const std::string& content, const std::string& node);

struct TrainingResult {
  int start_step = 0;  // 0: fresh start; otherwise the checkpoint step resumed from
  int final_step = 0;
  std::uint64_t checksum = 0;
};

Result<TrainingResult> runTraining(Net& net, Bootstrap& bs, const TrainingOptions& o,
                                   const CollectiveOptions& co);

// Checkpoint files (exposed for tests): write atomically, read with validation.
Status writeCheckpoint(const std::string& dir, int rank, int step,
                       const std::vector<std::uint32_t>& state);
Result<std::vector<std::uint32_t>> readCheckpoint(const std::string& dir, int rank, int step,
                                                  std::size_t words);
std::vector<int> listCheckpoints(const std::string& dir, int rank, std::size_t words);

}  // namespace c4::netbench
