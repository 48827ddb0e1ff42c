// Sparse attention backward (FlashAttention-2 style: scores recomputed from the saved lse).
//   p_ij = exp(scale <q_i, k_j> (+ bias_ij) - lse_i),  delta_i = <dy_i, y_i>,  ds_ij = p_ij (<dy_i, v_j> - delta_i)
//   dq_i = scale sum_j ds_ij k_j          (rows of the CSR, sa_dq_*; with a bias also dbias_ij = ds_ij)
//   dk_j = scale sum_i ds_ij q_i,  dv_j = sum_i p_ij dy_i   (columns of the CSC, sa_dkdv_*)
// Run sa_delta first. Schedules and layouts: see sparse_attention_common.cuh.
#include "sparse_attention_common.cuh"

namespace dsg {

// dQ over the rows of the CSR. State: f[0] = sum_j ds_ij k_j (scalars unused).
struct DqOp {
  static constexpr int NF = 1;
  const long long* __restrict__ ptr;  // rowptr [N_dst+1]
  const int* __restrict__ col;        // [E]
  const scalar_t* __restrict__ q;
  const scalar_t* __restrict__ k;
  const scalar_t* __restrict__ v;
  const scalar_t* __restrict__ dy;
  const float* __restrict__ lse;
  const float* __restrict__ delta;
  scalar_t* __restrict__ dq;
  int H;
  float scale;
  DSG_IF_BIAS(const scalar_t* __restrict__ bias;)  // [E, H], CSR edge order
  DSG_IF_BIAS(scalar_t* __restrict__ dbias;)       // [E, H]: ds, written once per edge-head

  struct Context {
    Frag q, dy;
    float lse, delta;
  };

  __device__ __forceinline__ Context context(int i, int h, int team_lane) const {
    const long long offset = ((long long)i * H + h) * D + team_lane * VEC;
    return {load_frag(q + offset), load_frag(dy + offset), lse[(long long)i * H + h], delta[(long long)i * H + h]};
  }

  __device__ __forceinline__ static State<NF> init() {
    State<NF> st;
    st.s[0] = st.s[1] = 0.0f;
    st.f[0] = zero_frag();
    return st;
  }

  __device__ __forceinline__ void edge(State<NF>& st, const Context& c, long long e, int h, int team_lane,
                                       unsigned mask) const {
    const long long offset = ((long long)col[e] * H + h) * D + team_lane * VEC;
    const Frag kj = load_frag(k + offset);
    const Frag vj = load_frag(v + offset);
    float s = scale * team_sum(dot(c.q, kj), mask);
    DSG_IF_BIAS(s += load_scalar(bias + e * H + h);)
    const float p = expf(s - c.lse);
    const float ds = p * (team_sum(dot(c.dy, vj), mask) - c.delta);
    DSG_IF_BIAS(if (team_lane == 0) store_scalar(dbias + e * H + h, ds);)
    axpy(st.f[0], ds, kj);
  }

  __device__ __forceinline__ static void combine(State<NF>& a, const State<NF>& b) {
#pragma unroll
    for (int x = 0; x < VEC; ++x) a.f[0].x[x] += b.f[0].x[x];
  }

  __device__ __forceinline__ void finish(const State<NF>& st, int i, int h, int team_lane) const {
    Frag out = st.f[0];
    scale_frag(out, scale);
    store_frag(dq + ((long long)i * H + h) * D + team_lane * VEC, out);
  }
};

// dK and dV over the columns of the CSC. State: f[0] = sum_i ds_ij q_i, f[1] = sum_i p_ij dy_i.
struct DkDvOp {
  static constexpr int NF = 2;
  const long long* __restrict__ ptr;  // colptr [N_src+1]
  const int* __restrict__ row;        // [E] destination of each CSC edge
  const scalar_t* __restrict__ q;
  const scalar_t* __restrict__ k;
  const scalar_t* __restrict__ v;
  const scalar_t* __restrict__ dy;
  const float* __restrict__ lse;
  const float* __restrict__ delta;
  scalar_t* __restrict__ dk;
  scalar_t* __restrict__ dv;
  int H;
  float scale;
  DSG_IF_BIAS(const long long* __restrict__ perm;)  // [E]: the CSR position of each CSC edge
  DSG_IF_BIAS(const scalar_t* __restrict__ bias;)   // [E, H], CSR edge order

  struct Context {
    Frag k, v;
  };

  __device__ __forceinline__ Context context(int j, int h, int team_lane) const {
    const long long offset = ((long long)j * H + h) * D + team_lane * VEC;
    return {load_frag(k + offset), load_frag(v + offset)};
  }

  __device__ __forceinline__ static State<NF> init() {
    State<NF> st;
    st.s[0] = st.s[1] = 0.0f;
    st.f[0] = zero_frag();
    st.f[1] = zero_frag();
    return st;
  }

  __device__ __forceinline__ void edge(State<NF>& st, const Context& c, long long e, int h, int team_lane,
                                       unsigned mask) const {
    const long long item = (long long)row[e] * H + h;
    const Frag qi = load_frag(q + item * D + team_lane * VEC);
    const Frag dyi = load_frag(dy + item * D + team_lane * VEC);
    float s = scale * team_sum(dot(qi, c.k), mask);
    DSG_IF_BIAS(s += load_scalar(bias + perm[e] * H + h);)
    const float p = expf(s - lse[item]);
    const float ds = p * (team_sum(dot(dyi, c.v), mask) - delta[item]);
    axpy(st.f[0], ds, qi);
    axpy(st.f[1], p, dyi);
  }

  __device__ __forceinline__ static void combine(State<NF>& a, const State<NF>& b) {
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int x = 0; x < VEC; ++x) a.f[f].x[x] += b.f[f].x[x];
  }

  __device__ __forceinline__ void finish(const State<NF>& st, int j, int h, int team_lane) const {
    const long long offset = ((long long)j * H + h) * D + team_lane * VEC;
    Frag dkj = st.f[0];
    scale_frag(dkj, scale);
    store_frag(dk + offset, dkj);
    store_frag(dv + offset, st.f[1]);
  }
};

}  // namespace dsg

using dsg::DkDvOp;
using dsg::DqOp;

// delta[t] = <dy[t], y[t]> for every item t = i * H + h < n_items: a team per item.
extern "C" __global__ void sa_delta(const scalar_t* dy, const float* y, float* delta, long long n_items) {
  const long long t = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / dsg::TEAM;
  if (t >= n_items) return;
  const int team_lane = threadIdx.x % dsg::TEAM;
  const long long offset = t * dsg::D + team_lane * dsg::VEC;
  const float s = dsg::team_sum(dsg::dot(dsg::load_frag(dy + offset), dsg::load_frag_f32(y + offset)),
                                dsg::team_mask(threadIdx.x & 31));
  if (team_lane == 0) delta[t] = s;
}

#define DQ_ARGS                                                                                      \
  const long long *rowptr, const int *col, const scalar_t *q, const scalar_t *k, const scalar_t *v, \
      const scalar_t *dy, const float *lse, const float *delta, scalar_t *dq, int H,                \
      float scale DSG_IF_BIAS(, const scalar_t *bias, scalar_t *dbias)
#define DQ_OP DqOp{rowptr, col, q, k, v, dy, lse, delta, dq, H, scale DSG_IF_BIAS(, bias, dbias)}

extern "C" __global__ void sa_dq_small(DQ_ARGS, const int* items, int n_items) {
  dsg::run_team_per_item(DQ_OP, items, n_items);
}

extern "C" __global__ void sa_dq_warp(DQ_ARGS, const int* items, int n_items) {
  dsg::run_warp_per_item(DQ_OP, items, n_items);
}

extern "C" __global__ void __launch_bounds__(dsg::BLOCK_WARPS * 32)
    sa_dq_chunk(DQ_ARGS, const int* chunk_seg, const long long* chunk_begin, int chunk_edges, float* partial) {
  dsg::run_block_per_chunk(DQ_OP, chunk_seg, chunk_begin, chunk_edges, partial);
}

extern "C" __global__ void sa_dq_merge(DQ_ARGS, const int* long_segs, const int* seg_chunk_ptr, int n_long,
                                       const float* partial) {
  dsg::run_merge_chunks(DQ_OP, long_segs, seg_chunk_ptr, n_long, partial);
}

#define DKDV_ARGS                                                                                     \
  const long long *colptr, const int *row, const scalar_t *q, const scalar_t *k, const scalar_t *v, \
      const scalar_t *dy, const float *lse, const float *delta, scalar_t *dk, scalar_t *dv, int H,  \
      float scale DSG_IF_BIAS(, const long long *perm, const scalar_t *bias)
#define DKDV_OP DkDvOp{colptr, row, q, k, v, dy, lse, delta, dk, dv, H, scale DSG_IF_BIAS(, perm, bias)}

extern "C" __global__ void sa_dkdv_small(DKDV_ARGS, const int* items, int n_items) {
  dsg::run_team_per_item(DKDV_OP, items, n_items);
}

extern "C" __global__ void sa_dkdv_warp(DKDV_ARGS, const int* items, int n_items) {
  dsg::run_warp_per_item(DKDV_OP, items, n_items);
}

extern "C" __global__ void __launch_bounds__(dsg::BLOCK_WARPS * 32)
    sa_dkdv_chunk(DKDV_ARGS, const int* chunk_seg, const long long* chunk_begin, int chunk_edges, float* partial) {
  dsg::run_block_per_chunk(DKDV_OP, chunk_seg, chunk_begin, chunk_edges, partial);
}

extern "C" __global__ void sa_dkdv_merge(DKDV_ARGS, const int* long_segs, const int* seg_chunk_ptr, int n_long,
                                         const float* partial) {
  dsg::run_merge_chunks(DKDV_OP, long_segs, seg_chunk_ptr, n_long, partial);
}
