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

#if defined(__linux__)
#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <limits>
#endif

#include "cpu_utils.h"

namespace groupquant {
namespace packed {
namespace {

constexpr uint64_t kOpen = uint64_t(1) << 32;
constexpr uint64_t kCountMask = kOpen - 1;
constexpr int kGenShift = 33;
constexpr auto kSpin = std::chrono::microseconds(200);  // helpers' busy wait for the next job

// Whether other threads of this process ran between two jobs: the CPU time of every thread but the
// caller and the helpers since the caller's last job ended, over the wall time between. torch's
// OpenMP threads keep spinning for milliseconds after each parallel kernel; a helper woken then
// shares a core with one of them and can be preempted inside a task for a scheduler slice while
// the caller waits for it (docs/packed-inference.md, "Tuning figures", workers). While they run, a job runs on the caller alone, which keeps a core.
// Linux only: the threads are listed from /proc/self/task (again every kRelist), each read by its
// own CPU clock (exact; the process clock lags by up to a tick for threads running elsewhere),
// two reads per thread and job: with more than kMaxOthers other threads, never busy. Elsewhere
// never busy.
class OthersMeter {
 public:
  // At a job's start: the CPU times since the caller's last job ended, and the caller's share of
  // its last job (none for a first job or a new caller); worker_rule's rule 3 decides on them.
  // Returns whether *out holds a sample for worker_rule's rule 3 (others_hold_cores).
  bool sample(const std::vector<int64_t>& helper_tids, OthersSample* out) {
#if defined(__linux__)
    const int64_t wall = now_ns();
    const int64_t caller = static_cast<int64_t>(syscall(SYS_gettid));
    if (wall - listed_at_ > kRelist || caller != caller_ || helper_tids.size() != helpers_listed_) {
      relist(caller, helper_tids, wall);
    }
    start_wall_ = wall;
    start_caller_ = thread_cpu_ns(caller);
    if (others_.size() > kMaxOthers) return false;  // reading their clocks would cost more than it saves
    if (!valid_) return false;
    out->gap_ns = wall - wall_;
    out->others_ns = sum_cpu(others_) - cpu_;
    out->helpers_ns = sum_cpu(helpers_) - helper_cpu_;
    out->last_job_ns = wall_ - job_start_;
    out->last_job_caller_ns = caller_cpu_;
    return true;
#else
    (void)helper_tids;
    (void)out;
    return false;
#endif
  }

  // The CPU time (ns) the other threads have run for so far (-1 with more than kMaxOthers of them,
  // or off Linux); the thread list is the one busy() made.
  int64_t others_cpu() const {
#if defined(__linux__)
    return others_.size() > kMaxOthers ? -1 : sum_cpu(others_);
#else
    return -1;
#endif
  }

  // At a job's end: the baseline for the next job's test.
  void mark_end() {
#if defined(__linux__)
    if (others_.size() > kMaxOthers) return;
    wall_ = now_ns();
    cpu_ = sum_cpu(others_);
    helper_cpu_ = sum_cpu(helpers_);
    job_start_ = start_wall_;
    caller_cpu_ = thread_cpu_ns(caller_) - start_caller_;
    valid_ = true;
#endif
  }

 private:
#if defined(__linux__)
  static constexpr int64_t kRelist = 100000000;  // ns: threads are listed again this often
  static constexpr size_t kMaxOthers = 16;        // more other threads: never busy (a clock read each)

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  // CPU time (ns) of thread tid of this process by its CPU clock (Linux: clock id ~tid << 3 | 6,
  // the scheduler clock of one thread); 0 for a thread that has exited.
  static int64_t thread_cpu_ns(int64_t tid) {
    const clockid_t clock = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6);
    timespec ts;
    if (clock_gettime(clock, &ts) != 0) return 0;
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }

  static int64_t sum_cpu(const std::vector<int64_t>& tids) {
    int64_t sum = 0;
    for (int64_t tid : tids) sum += thread_cpu_ns(tid);
    return sum;
  }

  // The threads of this process but the caller and the helpers; the baseline restarts.
  void relist(int64_t caller, const std::vector<int64_t>& helper_tids, int64_t wall) {
    others_.clear();
    if (DIR* dir = opendir("/proc/self/task")) {
      while (const dirent* e = readdir(dir)) {
        char* end = nullptr;
        const long long tid = std::strtoll(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || tid == caller) continue;
        if (std::find(helper_tids.begin(), helper_tids.end(), tid) == helper_tids.end()) others_.push_back(tid);
      }
      closedir(dir);
    }
    caller_ = caller;
    helpers_ = helper_tids;
    helpers_listed_ = helper_tids.size();
    listed_at_ = wall;
    valid_ = false;
  }

  std::vector<int64_t> others_, helpers_;
  size_t helpers_listed_ = 0;
  int64_t caller_ = -1, listed_at_ = std::numeric_limits<int64_t>::min() / 2;
  int64_t wall_ = 0, cpu_ = 0, helper_cpu_ = 0;  // at the caller's last job end: wall clock, CPU times
  int64_t job_start_ = 0, caller_cpu_ = 0;  // that job's start (wall clock) and the caller's CPU time in it
  int64_t start_wall_ = 0, start_caller_ = 0;  // the same at this job's start
  bool valid_ = false;
#endif
};

// Whether the job's threads lack a core each: a helper that shares its core (with another
// process, or with the caller after a wake-up placed it there) is preempted for a scheduler slice
// (milliseconds) at times, and where that happens inside a task the caller waits for it (docs/packed-inference.md, "Tuning figures", workers). Measured over windows of kWindow wall time, read at a job's start once the window
// has passed: the run-queue wait (time runnable but not running, /proc/self/task/<tid>/schedstat)
// of the caller and the helpers over the window. Where together they waited for more than
// 1/kWaitShare of it while the process's other threads were quiet (their spinning is OthersMeter's
// case), jobs run on the caller alone, the helpers asleep, for a hold of kMinHold, doubled up to
// kMaxHold each time the window after a hold finds the same: a passing load costs 10 ms on one
// thread, a lasting one meets a window with helpers (which may stall once) ever more rarely.
// Linux with schedstat only; elsewhere never contended.
class CoreContention {
 public:
  // At a job's start: s->holding (a hold is on) or, where a window has passed, s->wait (rule 4's
  // sample, wait_measured); a window that finds the threads short of a core starts a hold.
  void measure(int64_t caller, const std::vector<int64_t>& helper_tids, const OthersMeter& others, WorkerSignals* s) {
#if defined(__linux__)
    const int64_t wall = now_ns();
    if (wall < alone_until_) {
      s->holding = true;
      return;
    }
    if (valid_ && wall - window_start_ < kWindow) return;
    const int64_t others_cpu = others.others_cpu();
    std::vector<int64_t> waits;
    waits.reserve(helper_tids.size() + 1);
    waits.push_back(run_queue_wait_ns(caller));
    for (int64_t tid : helper_tids) waits.push_back(run_queue_wait_ns(tid));
    const int64_t span = wall - window_start_;
    const bool same_threads = valid_ && caller == caller_ && helper_tids == tids_;
    const bool readable = std::all_of(waits.begin(), waits.end(), [](int64_t w) { return w >= 0; });
    bool taken = false;
    if (same_threads && readable && others_cpu >= 0 && others_cpu_ >= 0) {
      int64_t waited = 0;
      for (size_t i = 0; i < waits.size(); ++i) waited += waits[i] - waits_[i];
      s->wait = WaitSample{span, waited, others_cpu - others_cpu_};
      s->wait_measured = true;
      taken = threads_short_of_cores(s->wait);
    }
    if (same_threads) hold_ = taken ? std::min(kMaxHold, hold_ * 2 + kMinHold * (hold_ == 0)) : 0;
    if (taken) alone_until_ = wall + hold_;
    valid_ = !taken && readable;  // after a hold the next window starts afresh
    caller_ = caller;
    tids_ = helper_tids;
    waits_ = std::move(waits);
    others_cpu_ = others_cpu;
    window_start_ = wall;
#else
    (void)caller;
    (void)helper_tids;
    (void)others;
    (void)s;
#endif
  }

 private:
#if defined(__linux__)
  static constexpr int64_t kWindow = 5000000;     // ns of wall time per measurement (a file read per thread)
  static constexpr int64_t kMinHold = 10000000;   // ns on the caller alone after a window with the threads waiting
  static constexpr int64_t kMaxHold = 1280000000;  // 10 ms doubled 7 times

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  // Thread tid's total run-queue wait (ns): the second field of its schedstat; -1 where unreadable.
  static int64_t run_queue_wait_ns(int64_t tid) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%lld/schedstat", static_cast<long long>(tid));
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[128];
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    unsigned long long run = 0, wait = 0;
    return std::sscanf(buf, "%llu %llu", &run, &wait) == 2 ? static_cast<int64_t>(wait) : -1;
  }

  int64_t window_start_ = 0, alone_until_ = 0, hold_ = 0;
  int64_t caller_ = -1, others_cpu_ = -1;  // others_cpu_: the other threads' CPU time at the window's start
  std::vector<int64_t> tids_, waits_;  // the helpers measured; the caller's and their waits at the window's start
  bool valid_ = false;                 // waits_ is a baseline for the window now running
#endif
};

class Workers {
 public:
  static Workers& get() {
    static Workers* w = new Workers();  // never destroyed: helpers are detached and may outlive exit
    return *w;
  }

  void run(int64_t tasks, int threads, TaskFn task, void* ctx) {
    if (worker_rule(WorkerSignals{threads, tasks}) <= 1 || !busy_.try_lock()) {  // rule 2: nothing to measure
      run_alone(tasks, task, ctx);
      return;
    }
    std::lock_guard<std::mutex> hold(busy_, std::adopt_lock);
    start_helpers(threads - 1);
    WorkerSignals signals{threads, tasks};
    {
      std::lock_guard<std::mutex> lock(wake_mutex_);  // helpers add their ids under it
      signals.others_measured = others_.sample(helper_tids_, &signals.others);
      // rule 4 is measured only in jobs that rule 3 leaves to the helpers (its windows follow those)
      if (!signals.others_measured || !others_hold_cores(signals.others)) {
        contention_.measure(caller_tid(), helper_tids_, others_, &signals);
      }
    }
    if (worker_rule(signals) <= 1) {  // the cores are taken by other threads of this process, or of another
      run_alone(tasks, task, ctx);
      others_.mark_end();
      return;
    }
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
    others_.mark_end();
  }

 private:
  Workers() = default;

  static int64_t caller_tid() {
#if defined(__linux__)
    return static_cast<int64_t>(syscall(SYS_gettid));
#else
    return 0;
#endif
  }

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
#if defined(__linux__)
    {
      std::lock_guard<std::mutex> lock(wake_mutex_);
      helper_tids_.push_back(static_cast<int64_t>(syscall(SYS_gettid)));
    }
#endif
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
  std::vector<int64_t> helper_tids_;  // their thread ids (Linux), under wake_mutex_ while they start
  OthersMeter others_;
  CoreContention contention_;
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  uint64_t woken_gen_ = 0;
};

}  // namespace

int kernel_threads(int64_t multiply_adds) {
  return threads_for_work(multiply_adds, at::get_num_threads(), at::in_parallel_region());
}

void run_claimed_tasks(int64_t tasks, int threads, TaskFn task, void* ctx) {
  if (tasks <= 0) return;
  Workers::get().run(tasks, threads, task, ctx);
}

}  // namespace packed
}  // namespace groupquant
