// The helper threads and the job protocol of packed_gemm_workers.h.
//
// One job slot, guarded by `busy` (try-lock: a second caller runs its job alone). `state` packs
// the job's generation (bits 33..63), whether it is open to helpers (bit 32) and how many helpers
// are inside it (bits 0..31). A helper joins with a compare-and-swap that needs the generation it
// was woken for and the open bit; the caller clears the open bit when no task is left to claim and
// then waits until the count is zero. A helper that comes late fails the swap and touches nothing
// of the job but `state`, which outlives every job.
#include "packed_gemm_workers.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <immintrin.h>
#define GQW_PAUSE() _mm_pause()
#else
#define GQW_PAUSE() std::this_thread::yield()
#endif

#include "cpu_utils.h"

namespace groupquant {
namespace packed {
namespace {

constexpr uint64_t kOpen = uint64_t(1) << 32;
constexpr uint64_t kCountMask = kOpen - 1;
constexpr int kGenShift = 33;
constexpr auto kSpin = std::chrono::microseconds(200);  // helpers' busy wait for the next job

class Workers {
 public:
  static Workers& get() {
    static Workers* w = new Workers();  // never destroyed: helpers are detached and may outlive exit
    return *w;
  }

  void run(int64_t tasks, int threads, TaskFn task, void* ctx) {
    if (threads <= 1 || tasks <= 1 || !busy_.try_lock()) {
      run_alone(tasks, task, ctx);
      return;
    }
    std::lock_guard<std::mutex> hold(busy_, std::adopt_lock);
    start_helpers(threads - 1);
    task_ = task;
    ctx_ = ctx;
    tasks_ = tasks;
    next_.store(0, std::memory_order_relaxed);
    max_helpers_.store(static_cast<uint64_t>(threads - 1), std::memory_order_relaxed);
    const uint64_t gen = (state_.load(std::memory_order_relaxed) >> kGenShift) + 1;
    state_.store((gen << kGenShift) | kOpen, std::memory_order_release);  // count is 0: the last job drained
    {
      std::lock_guard<std::mutex> lock(wake_mutex_);
      woken_gen_ = gen;
    }
    wake_.notify_all();
    {
      KeepDenormals keep;
      claim_all();
    }
    state_.fetch_and(~kOpen, std::memory_order_acq_rel);
    // only helpers inside a task remain: they are running, so this is short
    for (int spins = 0; (state_.load(std::memory_order_acquire) & kCountMask) != 0; ++spins) {
      if (spins < 4096) GQW_PAUSE();
      else std::this_thread::yield();
    }
  }

 private:
  Workers() = default;

  static void run_alone(int64_t tasks, TaskFn task, void* ctx) {
    KeepDenormals keep;
    for (int64_t t = 0; t < tasks; ++t) task(ctx, t);
  }

  void claim_all() {
    for (int64_t t = next_.fetch_add(1, std::memory_order_relaxed); t < tasks_;
         t = next_.fetch_add(1, std::memory_order_relaxed)) {
      task_(ctx_, t);
    }
  }

  void start_helpers(int wanted) {
    while (static_cast<int>(helpers_) < wanted) {
      std::thread(&Workers::helper_loop, this).detach();
      ++helpers_;
    }
  }

  // Joins the job of generation gen if it is still open and has room; true if joined.
  bool join(uint64_t gen) {
    uint64_t s = state_.load(std::memory_order_acquire);
    const uint64_t room = max_helpers_.load(std::memory_order_relaxed);
    while ((s >> kGenShift) == gen && (s & kOpen) != 0 && (s & kCountMask) < room) {
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
    }
    return false;
  }

  void helper_loop() {
    uint64_t seen = state_.load(std::memory_order_acquire) >> kGenShift;
    for (;;) {
      uint64_t gen = state_.load(std::memory_order_acquire) >> kGenShift;
      const auto until = std::chrono::steady_clock::now() + kSpin;
      for (int i = 0; gen == seen; ++i) {
        GQW_PAUSE();
        if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) {
          std::unique_lock<std::mutex> lock(wake_mutex_);
          wake_.wait(lock, [&] { return woken_gen_ != seen; });
        }
        gen = state_.load(std::memory_order_acquire) >> kGenShift;
      }
      seen = gen;
      if (!join(gen)) continue;
      {
        KeepDenormals keep;
        claim_all();
      }
      state_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::mutex busy_;
  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> next_{0};
  TaskFn task_ = nullptr;
  void* ctx_ = nullptr;
  int64_t tasks_ = 0;
  std::atomic<uint64_t> max_helpers_{0};  // read by late helpers of an earlier job too
  unsigned helpers_ = 0;
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  uint64_t woken_gen_ = 0;
};

}  // namespace

int kernel_threads(int64_t multiply_adds) {
  if (at::in_parallel_region()) return 1;
  const int64_t useful = std::max<int64_t>(1, multiply_adds / kMultiplyAddsPerThread);
  return static_cast<int>(std::min<int64_t>(at::get_num_threads(), useful));
}

void run_claimed_tasks(int64_t tasks, int threads, TaskFn task, void* ctx) {
  if (tasks <= 0) return;
  Workers::get().run(tasks, threads, task, ctx);
}

}  // namespace packed
}  // namespace groupquant
