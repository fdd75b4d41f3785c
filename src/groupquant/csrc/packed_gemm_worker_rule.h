// The worker rule of the packed-GEMM CPU kernels: how many threads run a job, as plain arithmetic
// on numbers the library measures (packed_gemm_workers.cpp measures them; this file decides). Its
// own test calls it through the op groupquant::packed_worker_rule with hand-made numbers.
//
// 1. Size: at most at::get_num_threads() threads, at most one per kMultiplyAddsPerThread of work
//    (waking a helper costs more than a small layer's whole call), 1 inside a parallel region.
// 2. A job of one task, or for one thread, runs on the caller alone.
// 3. Other threads of this process (OthersSample, since the caller's last job): where they ran for
//    more than a quarter of the wall time, with the helpers for more than 3/4 of it (the second
//    core's time went to this process, not to another one), and the caller ran for at least 80% of
//    its last job's wall time, the job runs on the caller alone: a helper would share a core with
//    them (torch's OpenMP threads spin for milliseconds after each parallel kernel).
// 4. Threads short of a core (WaitSample, over a window of wall time): where the caller and the
//    helpers waited for a CPU (run-queue wait) for more than a third of the window while the
//    process's other threads ran for less than 1/20 of it, or a hold such a window started is
//    still on, the job runs on the caller alone.
// Plain C++ (no ATen, no system calls).
#pragma once

#include <cstdint>

namespace groupquant {
namespace packed {

constexpr int64_t kMultiplyAddsPerThread = int64_t(1) << 20;

// Rule 1: the threads a call of `multiply_adds` (weight elements x input rows) may use.
int threads_for_work(int64_t multiply_adds, int torch_threads, bool in_parallel_region);

// What rule 3 reads, in nanoseconds.
struct OthersSample {
  int64_t gap_ns;              // wall time since the caller's last job ended
  int64_t others_ns;           // CPU time of the process's other threads in that gap
  int64_t helpers_ns;          // CPU time of the helpers in that gap
  int64_t last_job_ns;         // wall time of the caller's last job
  int64_t last_job_caller_ns;  // the caller's CPU time in it
};

// Rule 3: the process's other threads hold the cores (the job should run on the caller alone).
bool others_hold_cores(const OthersSample& s);

// What rule 4 reads, in nanoseconds.
struct WaitSample {
  int64_t window_ns;  // wall time of the window
  int64_t waited_ns;  // run-queue wait of the caller and the helpers in it, summed
  int64_t others_ns;  // CPU time of the process's other threads in it
};

// Rule 4's test of one window: the job's threads were short of a core.
bool threads_short_of_cores(const WaitSample& s);

// Everything the rule reads for one job.
struct WorkerSignals {
  int requested = 1;           // rule 1's threads for the call (kernel_threads)
  int64_t tasks = 0;           // the job's tasks
  bool others_measured = false;  // others holds a sample (Linux, a caller with an earlier job)
  OthersSample others{};
  bool holding = false;        // a hold of rule 4 is on
  bool wait_measured = false;  // wait holds a finished window
  WaitSample wait{};
};

// The threads the job runs on: requested, or 1 (the caller alone) by rules 2 to 4.
int worker_rule(const WorkerSignals& s);

}  // namespace packed
}  // namespace groupquant
