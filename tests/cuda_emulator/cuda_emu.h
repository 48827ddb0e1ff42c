// CUDA built-ins for compiling the project's .cu sources with the host C++ compiler (g++), so that
// their kernels run on the CPU under tests/cuda_emulator/runtime.cpp. Test infrastructure only.
//
// Included before the kernel text (g++ -include cuda_emu.h). Each CUDA thread is a fiber; the
// fibers of a block switch only at __syncthreads and at warp collectives (__shfl_*_sync,
// __syncwarp, __ballot_sync, ...), where the runtime checks the barrier and the mask against the
// lanes that actually arrive. See README.md for what is modelled and what is not.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __constant__
// Blocks run one after another in one OS thread, so a function-local static is one per block at a
// time. It is not cleared between blocks: a read before the block's own write sees stale values.
#define __shared__ static

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
// 16-byte types are 16-byte aligned as in CUDA, so UBSan's alignment check flags a misaligned
// vector load or store (the kernels' reinterpret_cast<uint4*> accesses).
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(8) int2 { int x, y; };
struct alignas(8) float2 { float x, y; };
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline float2 make_float2(float x, float y) { return {x, y}; }

namespace emu {
// Implemented in runtime.cpp.
const uint3& thread_index();
extern uint3 block_index;
extern dim3 block_dim, grid_dim;
enum Collective { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, SYNCWARP, BALLOT, ANY, ALL };
unsigned long long warp_collective(Collective kind, unsigned mask, unsigned long long bits, int arg, int width,
                                   const char* file, int line);
void syncthreads(const char* file, int line);
void check_aligned(const void* p, unsigned long alignment, const char* what, const char* file, int line);

template <class To, class From>
inline To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast: sizes differ");
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}

template <class T>
inline T shuffle(Collective kind, unsigned mask, T var, int arg, int width, const char* file, int line) {
  static_assert(std::is_trivially_copyable<T>::value && (sizeof(T) == 4 || sizeof(T) == 8),
                "__shfl_*_sync: 32- or 64-bit values only");
  unsigned long long bits = 0;
  std::memcpy(&bits, &var, sizeof(T));
  bits = warp_collective(kind, mask, bits, arg, width, file, line);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
}  // namespace emu

#define threadIdx (::emu::thread_index())
#define blockIdx (::emu::block_index)
#define blockDim (::emu::block_dim)
#define gridDim (::emu::grid_dim)
constexpr int warpSize = 32;

#define EMU_SITE const char *emu_file_ = __builtin_FILE(), int emu_line_ = __builtin_LINE()

inline void __syncthreads(EMU_SITE) { emu::syncthreads(emu_file_, emu_line_); }
inline void __syncwarp(unsigned mask = 0xffffffffu, EMU_SITE) {
  emu::warp_collective(emu::SYNCWARP, mask, 0, 0, 32, emu_file_, emu_line_);
}
inline void __threadfence() {}
inline void __threadfence_block() {}

template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32, EMU_SITE) {
  return emu::shuffle(emu::SHFL_IDX, mask, var, src_lane, width, emu_file_, emu_line_);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, EMU_SITE) {
  return emu::shuffle(emu::SHFL_UP, mask, var, (int)delta, width, emu_file_, emu_line_);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32, EMU_SITE) {
  return emu::shuffle(emu::SHFL_DOWN, mask, var, (int)delta, width, emu_file_, emu_line_);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32, EMU_SITE) {
  return emu::shuffle(emu::SHFL_XOR, mask, var, lane_mask, width, emu_file_, emu_line_);
}
inline unsigned __ballot_sync(unsigned mask, int predicate, EMU_SITE) {
  return (unsigned)emu::warp_collective(emu::BALLOT, mask, predicate != 0, 0, 32, emu_file_, emu_line_);
}
inline int __any_sync(unsigned mask, int predicate, EMU_SITE) {
  return (int)emu::warp_collective(emu::ANY, mask, predicate != 0, 0, 32, emu_file_, emu_line_);
}
inline int __all_sync(unsigned mask, int predicate, EMU_SITE) {
  return (int)emu::warp_collective(emu::ALL, mask, predicate != 0, 0, 32, emu_file_, emu_line_);
}

// Read-only loads: the alignment of T is checked (a misaligned 16-byte load faults on a GPU).
template <class T>
inline T __ldg(const T* p, EMU_SITE) {
  emu::check_aligned(p, alignof(T), "__ldg", emu_file_, emu_line_);
  return *p;
}

inline float __int_as_float(int x) { return emu::bit_cast<float>(x); }
inline int __float_as_int(float x) { return emu::bit_cast<int>(x); }
inline float __uint_as_float(unsigned x) { return emu::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return emu::bit_cast<unsigned>(x); }
inline double __longlong_as_double(long long x) { return emu::bit_cast<double>(x); }
inline long long __double_as_longlong(double x) { return emu::bit_cast<long long>(x); }

// CUDA's integer and float min/max overloads (no templates, as in CUDA: mixed types are ambiguous).
#define EMU_MINMAX(T)                             \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
EMU_MINMAX(int)
EMU_MINMAX(unsigned)
EMU_MINMAX(long)
EMU_MINMAX(unsigned long)
EMU_MINMAX(long long)
EMU_MINMAX(unsigned long long)
#undef EMU_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __saturatef(float x) { return fminf(fmaxf(x, 0.0f), 1.0f); }

// Atomics: fibers switch only at barriers and collectives, so a plain read-modify-write is atomic.
template <class T>
inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <class T>
inline T atomicMax(T* p, T v) { T old = *p; *p = old < v ? v : old; return old; }
template <class T>
inline T atomicMin(T* p, T v) { T old = *p; *p = v < old ? v : old; return old; }
template <class T>
inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <class T>
inline T atomicCAS(T* p, T compare, T v) { T old = *p; if (old == compare) *p = v; return old; }

// bf16 (cuda_bf16.h): the storage type and the conversions (round to nearest even; NaN stays NaN).
struct __nv_bfloat16 {
  unsigned short x;
};
inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((unsigned)h.x << 16); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {0x7fc0};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {(unsigned short)(u >> 16)};
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return {x}; }
