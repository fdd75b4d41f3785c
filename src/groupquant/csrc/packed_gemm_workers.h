// Work claiming for the packed-GEMM CPU kernels that call nothing in ATen (the streaming kernel,
// the decode-to-buffer kernel, the decode op): a task counter that every taking part thread
// claims from, on the library's own helper threads, with no barrier that waits for a thread that
// has not started.
//
// Why not at::parallel_for (OpenMP): its region ends in a barrier that waits for every thread of
// the team. When another process holds one of the cores, a helper that has not been scheduled
// yet holds the caller up for a scheduler quantum (milliseconds), although the caller has long
// since done all the work. Here the caller claims tasks too; when none is left it closes the job,
// and a helper that had not joined by then never touches it. The caller waits only for helpers
// that are inside a task (running, so finishing soon), so a call on a shared machine takes at
// worst about the one-thread time, plus the rest of a task a helper was preempted in.
//
// Other threads of this process: where, between the caller's last job and this one, they ran for
// more than a quarter of the time and, with the helpers, took most of a core (torch's OpenMP
// threads spin for milliseconds after each parallel kernel), and the caller had its core in its
// last job, the job runs on the caller alone: a helper would share a core with them and could be
// preempted inside a task (Linux; packed_gemm_workers.cpp, OthersMeter).
//
// Threads short of a core: where, over the last few milliseconds, the caller and the helpers waited
// for a CPU (run-queue wait) for a third of the time while the process's other threads were quiet
// (another process holds a core), jobs run on the caller alone for 10 ms, doubled while it lasts
// (Linux; packed_gemm_workers.cpp, CoreContention).
//
// Threads: at::get_num_threads() per call (torch.set_num_threads is followed; the caller is one
// of them). Helpers are started on first use, spin briefly after a job (decode calls layers back
// to back) and then sleep. One job at a time: a call made while another thread's job runs does its
// own job alone. After fork(), a child has no helpers and its calls run on the calling thread.
#pragma once

#include <cstdint>

#include "packed_gemm_worker_rule.h"  // the rule behind the paragraphs above (worker_rule, threads_for_work)

namespace groupquant {
namespace packed {

// A task runner: task(ctx, t) does task t of the job (called once for each t in [0, tasks)).
using TaskFn = void (*)(void* ctx, int64_t t);

// Runs task(ctx, t) for every t in [0, tasks) on the calling thread and up to threads - 1 helpers,
// tasks claimed one at a time in increasing order; returns when all tasks are done. Each thread
// keeps subnormals while it runs tasks (KeepDenormals).
void run_claimed_tasks(int64_t tasks, int threads, TaskFn task, void* ctx);

// The threads a kernel call of `multiply_adds` (weight elements x input rows) may use:
// at::get_num_threads(), at most one per kMultiplyAddsPerThread of work (waking a helper costs more
// than a small layer's whole call: a language model's 576-wide projections run on one thread), and
// 1 when called inside a parallel region (no nested teams). Results do not depend on it.
// threads_for_work on torch's settings.
int kernel_threads(int64_t multiply_adds);

// f(i0, i1) over [0, n) in chunks of `chunk` (the last may be shorter), claimed dynamically by
// `threads` threads (run_claimed_tasks).
template <class F>
void claim_chunks(int64_t n, int64_t chunk, int threads, const F& f) {
  struct Ctx {
    const F* f;
    int64_t n, chunk;
  } ctx{&f, n, chunk};
  const int64_t tasks = (n + chunk - 1) / chunk;
  run_claimed_tasks(tasks, threads, [](void* c, int64_t t) {
    const Ctx& x = *static_cast<const Ctx*>(c);
    const int64_t i0 = t * x.chunk;
    (*x.f)(i0, i0 + x.chunk < x.n ? i0 + x.chunk : x.n);
  }, &ctx);
}

}  // namespace packed
}  // namespace groupquant
