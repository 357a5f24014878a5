// The C shells: one function table per profiler ABI version, v6 native and v1..v5 adapting to it.
// They live in the core library so tests drive them exactly as NCCL does; the module
// (src/abi.cc) exports them as ncclProfiler_v1 ... ncclProfiler_v6. Every entry point is noexcept
// and maps c4::Error to ncclResult_t once; only init can fail.
#pragma once

#include <optional>

#include "c4/profiler/nccl_profiler_abi.h"
#include "c4/profiler/profiler.h"

namespace c4::profiler {

inline constexpr const char* kPluginName = "c4";

const C4NcclProfiler_v1_t& tableV1();
const C4NcclProfiler_v2_t& tableV2();
const C4NcclProfiler_v3_t& tableV3();
const C4NcclProfiler_v4_t& tableV4();
const C4NcclProfiler_v5_t& tableV5();
const C4NcclProfiler_v6_t& tableV6();

// Tests: options for the process-wide Profiler the next first init creates (std::nullopt: from
// the environment, real clock), and the live one (nullptr when no context is open).
void setProcessOptionsForTest(std::optional<ProfilerOptions> options);
Profiler* processProfilerForTest();

}  // namespace c4::profiler
