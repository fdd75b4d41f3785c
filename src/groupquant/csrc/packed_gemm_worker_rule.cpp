// The worker rule (packed_gemm_worker_rule.h).
#include "packed_gemm_worker_rule.h"

#include <algorithm>

namespace groupquant {
namespace packed {

namespace {
constexpr int64_t kWaitShare = 3;  // rule 4: the threads waited for more than 1/kWaitShare of the window
constexpr int64_t kQuiet = 20;     // rule 4: the other threads ran for less than 1/kQuiet of it
}  // namespace

int threads_for_work(int64_t multiply_adds, int torch_threads, bool in_parallel_region) {
  if (in_parallel_region) return 1;
  const int64_t useful = std::max<int64_t>(1, multiply_adds / kMultiplyAddsPerThread);
  return static_cast<int>(std::min<int64_t>(torch_threads, useful));
}

bool others_hold_cores(const OthersSample& s) {
  const bool caller_had_core = s.last_job_caller_ns * 5 >= s.last_job_ns * 4;  // else it shares one: keep helpers
  return caller_had_core && s.others_ns * 4 > s.gap_ns && (s.others_ns + s.helpers_ns) * 4 > s.gap_ns * 3;
}

bool threads_short_of_cores(const WaitSample& s) {
  return s.others_ns * kQuiet < s.window_ns && s.waited_ns * kWaitShare > s.window_ns;
}

int worker_rule(const WorkerSignals& s) {
  if (s.requested <= 1 || s.tasks <= 1) return 1;
  if (s.others_measured && others_hold_cores(s.others)) return 1;
  if (s.holding || (s.wait_measured && threads_short_of_cores(s.wait))) return 1;
  return s.requested;
}

}  // namespace packed
}  // namespace groupquant
