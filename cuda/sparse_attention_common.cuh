// Shared by the sparse attention kernels (sparse_attention_fwd.cu, sparse_attention_bwd.cu).
// Device code only (no host headers): compiled at run time by NVRTC through CuPy.
//
// Compile-time constants, set by the loader (dsgraph/ops/cuda_source.py):
//   DSG_HEAD_DIM  D, the head dim: 8, 16, 32, 64 or 128
//   DSG_BF16      1: q, k, v, dy and the gradients are bf16 (raw 16-bit words); 0: fp32
//   DSG_BIAS      1: the kernels take a score bias [E, H] in CSR edge order (the inputs' dtype),
//                 added to every score, and the dQ pass writes its gradient dbias = ds [E, H];
//                 0: no bias (the kernels and their arguments are those without one)
// All arithmetic is fp32. Layouts (contiguous, 16-byte aligned): q, dy, dq [N_dst, H, D];
// k, v, dk, dv [N_src, H, D]; y [N_dst, H, D] fp32; lse, delta [N_dst, H] fp32;
// rowptr/colptr int64; col/row int32.
//
// Work decomposition. A "segment" is a row of the CSR (forward, dQ) or a column of the CSC (dK, dV);
// an "item" is a (segment, head) pair. A team of TEAM = D / VEC lanes holds one D-vector, VEC
// elements per lane, read with one 16-byte load. Segments are binned by degree on the host:
//   small: a team per item, several items per warp;
//   warp:  a warp per item, its teams take every TEAMS_PER_WARP-th edge, merged by shuffles;
//   long:  a block per (chunk of at most chunk_edges edges, head); each block writes its partial
//          state, and a merge kernel combines a segment's chunks in order (a team per item).
// Every item is owned by one team at the end and partial states are combined in a fixed order:
// no atomics, bit-identical results from run to run.
#pragma once

#ifndef DSG_HEAD_DIM
#error "compile with -DDSG_HEAD_DIM=<8|16|32|64|128>"
#endif
#ifndef DSG_BF16
#error "compile with -DDSG_BF16=<0|1>"
#endif
#ifndef DSG_BIAS
#error "compile with -DDSG_BIAS=<0|1>"
#endif

#if DSG_BIAS
#define DSG_IF_BIAS(...) __VA_ARGS__  // a kernel argument, member or statement that exists only with a bias
#else
#define DSG_IF_BIAS(...)
#endif

#if DSG_BF16
typedef unsigned short scalar_t;  // bf16 bits
#define DSG_VEC 8                 // 8 x bf16 = 16 bytes
#else
typedef float scalar_t;
#define DSG_VEC 4  // 4 x fp32 = 16 bytes
#endif

namespace dsg {

constexpr int D = DSG_HEAD_DIM;
constexpr int VEC = DSG_VEC;
constexpr int TEAM = D / VEC;  // lanes per D-vector
constexpr int TEAMS_PER_WARP = 32 / TEAM;
constexpr int BLOCK_WARPS = 8;  // warps per block of the chunk kernels (the loader uses the same)
constexpr int SCALARS = 2;      // scalar slots of a State (the forward's running max and sum)
static_assert(D % VEC == 0 && TEAM >= 1 && TEAM <= 32 && (TEAM & (TEAM - 1)) == 0,
              "the head dim must be a power of two from 8 to 128");

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// VEC consecutive elements of one D-vector, in fp32.
struct Frag {
  float x[VEC];
};

__device__ __forceinline__ Frag zero_frag() {
  Frag f;
#pragma unroll
  for (int i = 0; i < VEC; ++i) f.x[i] = 0.0f;
  return f;
}

__device__ __forceinline__ float bf16_bits_to_float(unsigned bits16) { return __uint_as_float(bits16 << 16); }

// Round to nearest even; NaN stays NaN.
__device__ __forceinline__ unsigned float_to_bf16_bits(float x) {
  unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}

// Loads VEC elements of the input dtype (one 16-byte read-only load).
__device__ __forceinline__ Frag load_frag(const scalar_t* __restrict__ p) {
  Frag f;
#if DSG_BF16
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f.x[2 * i] = bf16_bits_to_float(w[i] & 0xffffu);
    f.x[2 * i + 1] = bf16_bits_to_float(w[i] >> 16);
  }
#else
  const float4 u = __ldg(reinterpret_cast<const float4*>(p));
  f.x[0] = u.x;
  f.x[1] = u.y;
  f.x[2] = u.z;
  f.x[3] = u.w;
#endif
  return f;
}

// Stores VEC elements in the input dtype.
__device__ __forceinline__ void store_frag(scalar_t* p, const Frag& f) {
#if DSG_BF16
  uint4 u;
  u.x = float_to_bf16_bits(f.x[0]) | (float_to_bf16_bits(f.x[1]) << 16);
  u.y = float_to_bf16_bits(f.x[2]) | (float_to_bf16_bits(f.x[3]) << 16);
  u.z = float_to_bf16_bits(f.x[4]) | (float_to_bf16_bits(f.x[5]) << 16);
  u.w = float_to_bf16_bits(f.x[6]) | (float_to_bf16_bits(f.x[7]) << 16);
  *reinterpret_cast<uint4*>(p) = u;
#else
  *reinterpret_cast<float4*>(p) = make_float4(f.x[0], f.x[1], f.x[2], f.x[3]);
#endif
}

// One element of the input dtype, in fp32 (the score bias: one per edge-head, read by a whole team).
__device__ __forceinline__ float load_scalar(const scalar_t* __restrict__ p) {
#if DSG_BF16
  return bf16_bits_to_float(*p);
#else
  return *p;
#endif
}

// Stores one element in the input dtype (the bias gradient).
__device__ __forceinline__ void store_scalar(scalar_t* p, float x) {
#if DSG_BF16
  *p = (scalar_t)float_to_bf16_bits(x);
#else
  *p = x;
#endif
}

// fp32 loads and stores of VEC elements (y is kept in fp32 for every input dtype).
__device__ __forceinline__ Frag load_frag_f32(const float* __restrict__ p) {
  Frag f;
#pragma unroll
  for (int i = 0; i < VEC; i += 4) {
    const float4 u = __ldg(reinterpret_cast<const float4*>(p + i));
    f.x[i] = u.x;
    f.x[i + 1] = u.y;
    f.x[i + 2] = u.z;
    f.x[i + 3] = u.w;
  }
  return f;
}

__device__ __forceinline__ void store_frag_f32(float* p, const Frag& f) {
#pragma unroll
  for (int i = 0; i < VEC; i += 4)
    *reinterpret_cast<float4*>(p + i) = make_float4(f.x[i], f.x[i + 1], f.x[i + 2], f.x[i + 3]);
}

__device__ __forceinline__ float dot(const Frag& a, const Frag& b) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < VEC; ++i) s = fmaf(a.x[i], b.x[i], s);
  return s;
}

// acc += w * f
__device__ __forceinline__ void axpy(Frag& acc, float w, const Frag& f) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc.x[i] = fmaf(w, f.x[i], acc.x[i]);
}

__device__ __forceinline__ void scale_frag(Frag& f, float w) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) f.x[i] *= w;
}

// The lanes of this lane's team, as a shuffle mask.
__device__ __forceinline__ unsigned team_mask(int lane) {
  return (0xffffffffu >> (32 - TEAM)) << (lane & ~(TEAM - 1));  // TEAM low bits, at the team's first lane
}

// Sum over the team; every lane of the team gets the total.
__device__ __forceinline__ float team_sum(float x, unsigned mask) {
#pragma unroll
  for (int offset = TEAM / 2; offset > 0; offset >>= 1) x += __shfl_xor_sync(mask, x, offset);
  return x;
}

// The running state of one item, spread over a team: SCALARS scalars (the same in every lane of
// the team) and NF D-vectors (VEC elements per lane).
template <int NF>
struct State {
  float s[SCALARS];
  Frag f[NF];
};

// Size in floats of a State written to memory: the scalars, then the NF D-vectors.
template <int NF>
__host__ __device__ constexpr int state_floats() {
  return SCALARS + NF * D;
}

template <int NF>
__device__ __forceinline__ void save_state(float* dst, const State<NF>& st, int team_lane) {
  if (team_lane == 0) {
#pragma unroll
    for (int i = 0; i < SCALARS; ++i) dst[i] = st.s[i];
  }
#pragma unroll
  for (int f = 0; f < NF; ++f)
#pragma unroll
    for (int i = 0; i < VEC; ++i) dst[SCALARS + f * D + team_lane * VEC + i] = st.f[f].x[i];
}

template <int NF>
__device__ __forceinline__ State<NF> load_state(const float* src, int team_lane) {
  State<NF> st;
#pragma unroll
  for (int i = 0; i < SCALARS; ++i) st.s[i] = src[i];
#pragma unroll
  for (int f = 0; f < NF; ++f)
#pragma unroll
    for (int i = 0; i < VEC; ++i) st.f[f].x[i] = src[SCALARS + f * D + team_lane * VEC + i];
  return st;
}

// Combines the states of the teams of a warp (butterfly over teams); all 32 lanes must call it.
template <class Op, int NF>
__device__ __forceinline__ void warp_combine(State<NF>& st) {
#pragma unroll
  for (int offset = TEAM; offset < 32; offset <<= 1) {
    State<NF> other;
#pragma unroll
    for (int i = 0; i < SCALARS; ++i) other.s[i] = __shfl_xor_sync(0xffffffffu, st.s[i], offset);
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int i = 0; i < VEC; ++i) other.f[f].x[i] = __shfl_xor_sync(0xffffffffu, st.f[f].x[i], offset);
    Op::combine(st, other);
  }
}

// ---- The four schedules. Op supplies: NF, ptr (segment offsets), H, context(seg, h, team_lane),
// init(), edge(state, context, e, h, team_lane, mask), combine(a, b), finish(state, seg, h, team_lane).

// A team per item (small segments). Threads of a block: any multiple of 32.
template <class Op>
__device__ __forceinline__ void run_team_per_item(const Op& op, const int* __restrict__ items, int n_items) {
  const long long team = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / TEAM;
  if (team >= (long long)n_items * op.H) return;  // a whole team leaves together
  const int team_lane = threadIdx.x % TEAM;
  const unsigned mask = team_mask(threadIdx.x & 31);
  const int seg = items[team / op.H];
  const int h = (int)(team % op.H);
  const auto ctx = op.context(seg, h, team_lane);
  State<Op::NF> st = Op::init();
  const long long end = op.ptr[seg + 1];
  for (long long e = op.ptr[seg]; e < end; ++e) op.edge(st, ctx, e, h, team_lane, mask);
  op.finish(st, seg, h, team_lane);
}

// A warp per item (medium segments). Threads of a block: any multiple of 32.
template <class Op>
__device__ __forceinline__ void run_warp_per_item(const Op& op, const int* __restrict__ items, int n_items) {
  const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (warp >= (long long)n_items * op.H) return;  // a whole warp leaves together
  const int lane = threadIdx.x & 31;
  const int team_lane = lane % TEAM, team = lane / TEAM;
  const unsigned mask = team_mask(lane);
  const int seg = items[warp / op.H];
  const int h = (int)(warp % op.H);
  const auto ctx = op.context(seg, h, team_lane);
  State<Op::NF> st = Op::init();
  const long long end = op.ptr[seg + 1];
  for (long long e = op.ptr[seg] + team; e < end; e += TEAMS_PER_WARP) op.edge(st, ctx, e, h, team_lane, mask);
  warp_combine<Op>(st);
  if (team == 0) op.finish(st, seg, h, team_lane);
}

// A block of BLOCK_WARPS warps per (chunk, head) of a long segment: grid (n_chunks, H). Writes the
// chunk's partial state to partial[(chunk * H + h) * state_floats<NF>()].
template <class Op>
__device__ __forceinline__ void run_block_per_chunk(const Op& op, const int* __restrict__ chunk_seg,
                                                    const long long* __restrict__ chunk_begin, int chunk_edges,
                                                    float* __restrict__ partial) {
  constexpr int NF = Op::NF;
  __shared__ float warp_states[BLOCK_WARPS * state_floats<NF>()];
  const int chunk = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int team_lane = lane % TEAM, team = lane / TEAM;
  const unsigned mask = team_mask(lane);
  const int seg = chunk_seg[chunk];
  const long long begin = chunk_begin[chunk];
  const long long end = min(begin + chunk_edges, op.ptr[seg + 1]);
  const auto ctx = op.context(seg, h, team_lane);
  State<NF> st = Op::init();
  for (long long e = begin + warp * TEAMS_PER_WARP + team; e < end; e += BLOCK_WARPS * TEAMS_PER_WARP)
    op.edge(st, ctx, e, h, team_lane, mask);
  warp_combine<Op>(st);
  if (team == 0) save_state(warp_states + warp * state_floats<NF>(), st, team_lane);
  __syncthreads();
  if (warp == 0 && team == 0) {
    State<NF> acc = load_state<NF>(warp_states, team_lane);
    for (int w = 1; w < BLOCK_WARPS; ++w) Op::combine(acc, load_state<NF>(warp_states + w * state_floats<NF>(), team_lane));
    save_state(partial + ((long long)chunk * op.H + h) * state_floats<NF>(), acc, team_lane);
  }
}

// A team per (long segment, head): combines the segment's chunk states in chunk order and finishes.
// Chunks of long segment r are seg_chunk_ptr[r] .. seg_chunk_ptr[r+1]-1.
template <class Op>
__device__ __forceinline__ void run_merge_chunks(const Op& op, const int* __restrict__ long_segs,
                                                 const int* __restrict__ seg_chunk_ptr, int n_long,
                                                 const float* __restrict__ partial) {
  constexpr int NF = Op::NF;
  const long long team = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / TEAM;
  if (team >= (long long)n_long * op.H) return;
  const int team_lane = threadIdx.x % TEAM;
  const int r = (int)(team / op.H), h = (int)(team % op.H);
  State<NF> acc = Op::init();
  for (int c = seg_chunk_ptr[r]; c < seg_chunk_ptr[r + 1]; ++c)
    Op::combine(acc, load_state<NF>(partial + ((long long)c * op.H + h) * state_floats<NF>(), team_lane));
  op.finish(acc, long_segs[r], h, team_lane);
}

}  // namespace dsg
