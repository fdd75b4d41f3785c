// A stand-in for <cuda_runtime.h> that lets the extension's CUDA sources (csrc/*.cu) compile with
// g++ and run on the CPU, so their indexing, vector widths, padding and warp reductions are tested
// bit for bit against the CPU kernel on a machine without a GPU (tests/csrc/test_cuda_kernels_emulated.py).
//
// How a launch runs: the blocks of the grid one after another; the threads of a block at once, one
// OS thread per CUDA thread, so __syncthreads and the warp shuffles are real barriers between them.
// A launch `k<<<grid, block, smem, stream>>>(args)` is rewritten by the test's build step into
// `::gq_emu::launch(k, grid, block, smem, stream, args)` (C++ has no <<< >>>). __shared__ variables
// become function statics (one block runs at a time). A barrier that waits for more than 20 s
// (threads of a warp or block that took different paths to a shuffle or __syncthreads) ends the
// process with a message: on a GPU that would be undefined behaviour.
//
// What this does not test: the device compiler's code (nvcc, --fmad=false, __CUDA_ARCH__ branches
// such as __float_as_uint) and memory ordering or speed on a real card. Those need a GPU.
#pragma once

#include <math.h>  // the device math functions kernels call unqualified (fmaf, fabsf)

#include <barrier>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct CUstream_st;
using cudaStream_t = CUstream_st*;
enum cudaError_t { cudaSuccess = 0 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "no error (emulated)"; }

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;

// The device min / max overloads kernels call unqualified (both arguments of one type).
template <class T>
inline T min(T a, T b) { return b < a ? b : a; }
template <class T>
inline T max(T a, T b) { return a < b ? b : a; }

namespace gq_emu {

// A reusable barrier for n threads (a futex wait, not a spin: a block's threads outnumber the cores).
class Barrier {
 public:
  explicit Barrier(unsigned n) : barrier_(n) {}
  void wait() { barrier_.arrive_and_wait(); }

 private:
  std::barrier<> barrier_;
};

// Ends the process with a message when a launch runs for more than 60 s: threads of a warp or
// block that took different paths to a shuffle or __syncthreads wait for each other for ever.
class Watchdog {
 public:
  Watchdog() : thread_([this] {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, std::chrono::seconds(60), [this] { return done_; })) {
      std::fprintf(stderr, "cuda emulation: a launch ran for 60 s (threads waiting at a shuffle or "
                           "__syncthreads that others never reach?)\n");
      std::_Exit(70);
    }
  }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// The threads of one block: a barrier for __syncthreads, one per warp for shuffles, a slot each.
struct Team {
  explicit Team(unsigned n) : block(n), end(n), slots(n) {
    for (unsigned w = 0; w * 32 < n; ++w) warps.emplace_back(new Barrier(n - w * 32 < 32 ? n - w * 32 : 32));
  }
  Barrier block, end;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<uint64_t> slots;
};

inline thread_local Team* team = nullptr;

// Every lane of the calling warp publishes v; returns the value lane `src` published.
template <class T>
T exchange(T v, unsigned src) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "shuffles move at most 8 bytes");
  const unsigned t = threadIdx.x, warp = t / 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  team->slots[t] = bits;
  team->warps[warp]->wait();
  const uint64_t got = team->slots[warp * 32 + src];
  team->warps[warp]->wait();
  T out;
  std::memcpy(&out, &got, sizeof(T));
  return out;
}

// Runs kernel(args...) for every block of grid (in order) with block.x threads at once.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t, cudaStream_t, Args... args) {
  if (block.y * block.z != 1 || block.x == 0 || block.x > 1024) {
    std::fprintf(stderr, "cuda emulation: blocks of threads must be 1-d with 1..1024 threads\n");
    std::_Exit(70);
  }
  Watchdog watchdog;
  Team shared(block.x);
  std::vector<std::thread> threads;
  threads.reserve(block.x);
  for (unsigned t = 0; t < block.x; ++t) {
    threads.emplace_back([&, t] {
      threadIdx = uint3{t, 0, 0};
      blockDim = block;
      gridDim = grid;
      team = &shared;
      for (unsigned z = 0; z < grid.z; ++z) {
        for (unsigned y = 0; y < grid.y; ++y) {
          for (unsigned x = 0; x < grid.x; ++x) {
            blockIdx = uint3{x, y, z};
            kernel(args...);
            shared.end.wait();
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
}

}  // namespace gq_emu

inline void __syncthreads() { gq_emu::team->block.wait(); }

// CUDA's rules: xor reads lane ^ mask, unless that lies in a later group of `width` lanes (own value).
template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask, int width = 32) {
  const unsigned lane = threadIdx.x % 32;
  unsigned src = lane ^ static_cast<unsigned>(lane_mask);
  if (src >= (lane / width + 1) * width) src = lane;
  return gq_emu::exchange(v, src);
}

// Down: reads lane + delta inside the lane's group of `width` lanes, else its own value.
template <class T>
T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned src = (lane % width) + delta < static_cast<unsigned>(width) ? lane + delta : lane;
  return gq_emu::exchange(v, src);
}
