// c4-notify: how a trainer that is not c4-netbench (a PyTorch script, a launcher) tells C4 where
// it is. It sends one ProgressNotice or CheckpointNotice to the node plugin's socket
// ($C4_AGENT_SOCKET), with the rank's identity taken from the environment the operator gives
// every trainer container (C4_RANK or RANK, WORLD_SIZE, C4_JOB, C4_NAMESPACE, C4_POD_NAME,
// C4_NODE_NAME, C4_RESTART_ATTEMPT). The node plugin attributes the datagram to the pod by the
// sender's cgroup, so this must run inside the trainer's container (a child of the trainer is).
//
//   c4-notify progress --step N [--state training|checkpointing|evaluating|idle|finished]
//                      [--expect-seconds S]   (a pause's expected length)
//   c4-notify checkpoint --step N --path FILE
//
// Exit status: 0 sent; 2 bad arguments or identity (nothing sent); 3 not delivered (no
// C4_AGENT_SOCKET, or the node plugin is not there) - training should go on, so callers ignore 3.
#include <getopt.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "c4/common/clock.h"
#include "c4/common/report.h"
#include "c4/common/unix_socket.h"
#include "c4/plugin/config.h"

namespace {

using c4::report::ProgressState;

constexpr int kBadArguments = 2;
constexpr int kNotDelivered = 3;

void usage(std::FILE* out) {
  std::fputs(
      "usage: c4-notify progress --step N [--state training|checkpointing|evaluating|idle|"
      "finished]\n"
      "                          [--expect-seconds S]\n"
      "       c4-notify checkpoint --step N --path FILE\n"
      "  --socket PATH   the node plugin's socket (default $C4_AGENT_SOCKET)\n"
      "  --rank R        this process's rank (default $C4_RANK, then $RANK)\n"
      "A pause state (checkpointing, evaluating, idle) suspends C4D's hang rules for the job\n"
      "until the next 'training' notice, for at most S seconds when --expect-seconds S is given\n"
      "(1..86400; else the job's maxPauseSeconds): a rank that hangs in its pause is then found\n"
      "soon after S. Send 'checkpoint' once the checkpoint file is complete.\n"
      "Exit: 0 sent, 2 bad arguments, 3 not delivered (no node plugin: training goes on).\n",
      out);
}

std::optional<std::int64_t> parseStep(std::string_view s) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

std::optional<ProgressState> parseState(std::string_view s) {
  if (s == "training") return ProgressState::kTraining;
  if (s == "checkpointing") return ProgressState::kCheckpointing;
  if (s == "evaluating") return ProgressState::kEvaluating;
  if (s == "idle") return ProgressState::kIdle;
  if (s == "finished") return ProgressState::kFinished;
  return std::nullopt;
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "c4-notify: %s\n", msg.c_str());
  return kBadArguments;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "-h" || std::string_view(argv[1]) == "--help") {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? kBadArguments : 0;
  }
  std::string_view kind = argv[1];
  if (kind != "progress" && kind != "checkpoint") {
    return fail("unknown notice '" + std::string(kind) + "' (progress or checkpoint)");
  }
  auto cfg = c4::plugin::loadConfigFromEnvironment();
  std::optional<std::int64_t> step;
  ProgressState state = ProgressState::kTraining;
  std::string path;
  std::uint32_t expect_seconds = 0;
  enum { kStep = 256, kState, kPath, kSocket, kRank, kExpect };
  const option longs[] = {{"step", required_argument, nullptr, kStep},
                          {"state", required_argument, nullptr, kState},
                          {"path", required_argument, nullptr, kPath},
                          {"socket", required_argument, nullptr, kSocket},
                          {"rank", required_argument, nullptr, kRank},
                          {"expect-seconds", required_argument, nullptr, kExpect},
                          {nullptr, 0, nullptr, 0}};
  optind = 2;
  opterr = 0;
  int c;
  while ((c = ::getopt_long(argc, argv, "", longs, nullptr)) != -1) {
    switch (c) {
      case kStep:
        step = parseStep(optarg);
        if (!step)
          return fail("--step must be a non-negative integer, got '" + std::string(optarg) + "'");
        break;
      case kState: {
        auto s = parseState(optarg);
        if (!s)
          return fail(
              "--state must be training, checkpointing, evaluating, idle or "
              "finished, got '" +
              std::string(optarg) + "'");
        state = *s;
        break;
      }
      case kPath:
        path = optarg;
        break;
      case kExpect: {
        auto v = parseStep(optarg);
        if (!v || *v < 1 || *v > c4::report::kMaxPauseSeconds) {
          return fail("--expect-seconds must be an integer in [1, 86400], got '" +
                      std::string(optarg) + "'");
        }
        expect_seconds = static_cast<std::uint32_t>(*v);
        break;
      }
      case kSocket:
        cfg.agent_socket = optarg;
        break;
      case kRank: {
        auto r = parseStep(optarg);
        if (!r || *r > INT32_MAX) return fail("--rank must be a non-negative integer");
        cfg.rank = static_cast<std::int32_t>(*r);
        break;
      }
      default:
        return fail(std::string("unknown or incomplete option '") + argv[optind - 1] + "'");
    }
  }
  if (optind != argc) return fail(std::string("unexpected argument '") + argv[optind] + "'");
  if (!step) return fail("--step is required");
  if (kind == "checkpoint" && path.empty()) return fail("checkpoint needs --path");
  if (kind == "progress" && !path.empty()) return fail("--path is for checkpoint notices");
  if (expect_seconds > 0 && (kind != "progress" || (state != ProgressState::kCheckpointing &&
                                                    state != ProgressState::kEvaluating &&
                                                    state != ProgressState::kIdle))) {
    return fail("--expect-seconds is for pauses (--state checkpointing, evaluating or idle)");
  }
  if (cfg.rank < 0) return fail("no rank: set C4_RANK or RANK (the operator sets them) or --rank");
  if (cfg.job.empty() || cfg.ns.empty()) {
    return fail(
        "no job identity: C4_JOB and C4_NAMESPACE are unset (run inside a TrainingJob "
        "pod)");
  }

  c4::report::RankIdentity id;
  id.ns = cfg.ns;
  id.job = cfg.job;
  id.pod = cfg.pod;
  id.node = cfg.node;
  id.rank = cfg.rank;
  id.world_size = cfg.world_size;
  id.restart_attempt = cfg.restart_attempt;
  id.pid = static_cast<std::uint32_t>(::getpid());
  auto now = c4::toUnixNanos(c4::realClock().wallNow());
  c4::report::Message msg;
  if (kind == "progress") {
    c4::report::ProgressNotice p;
    p.id = id;
    p.time_unix_ns = now;
    p.step = *step;
    p.state = state;
    p.expected_seconds = expect_seconds;
    msg = p;
  } else {
    c4::report::CheckpointNotice n;
    n.id = id;
    n.time_unix_ns = now;
    n.step = *step;
    n.path = path;
    msg = n;
  }
  auto bytes = c4::report::encodeCbor(msg);
  if (!bytes) return fail(bytes.error().toString());
  if (cfg.agent_socket.empty()) {
    std::fprintf(stderr, "c4-notify: not sent: C4_AGENT_SOCKET is unset (no node plugin)\n");
    return kNotDelivered;
  }
  auto sender = c4::UnixDatagramSender::create(cfg.agent_socket);
  if (!sender) return fail(sender.error().toString());
  if (sender->send(*bytes) != c4::SendOutcome::kSent) {
    std::fprintf(stderr, "c4-notify: not delivered to %s: %s\n", cfg.agent_socket.c_str(),
                 std::strerror(sender->lastError()));
    return kNotDelivered;
  }
  // This process exits next: stay until the node plugin has read the notice (it attributes the
  // notice by this pid's cgroup), at most half a second.
  (void)sender->awaitRead(std::chrono::milliseconds{500});
  return 0;
}
