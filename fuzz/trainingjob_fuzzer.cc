// TrainingJob parsing: the object as the API server hands it to the informer (JSON text, any
// shape the user's spec can take), through everything the operator reads of it: the spec,
// the endpoint's job facts, processes per pod, the labels and the status' index sets.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "operator/ingest/report_handler.h"
#include "operator/trainingjob/api.h"

using c4::op::Json;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // The first line (up to 64 bytes) is also read as an index set, the status' format.
  const std::string first_line(text.substr(0, std::min(text.find('\n'), std::size_t{64})));
  if (auto set = c4::op::parseIndexSet(first_line, 1 << 14)) {
    C4_FUZZ_CHECK(c4::op::parseIndexSet(c4::op::formatIndexSet(*set), 1 << 14) == set);
  }
  Json job = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (job.is_discarded()) return 0;
  auto spec = c4::op::parseTrainingJobSpec(job);
  static const bool verbose = std::getenv("C4_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "%s\n", spec ? "parsed" : spec.error().toString().c_str());
  if (spec) {
    C4_FUZZ_CHECK(spec->replicas >= 1);
    C4_FUZZ_CHECK(c4::op::procsPerPod(*spec) >= 1);
    (void)c4::op::usesC4NetPlugin(*spec);
    (void)c4::op::usesC4Profiler(*spec);
  }
  (void)c4::op::ingest::jobInfoOf(job);
  (void)c4::op::intLabelOf(job, "c4.dev/replica-index");
  if (job.is_object() && job.contains("status") && job["status"].is_object()) {
    (void)c4::op::isConditionTrue(job["status"], "Running");
  }
  return 0;
}
