// Sparse attention forward: per (row, head), an online softmax over the row's edges.
//   s_ij = scale <q_i, k_j> (+ bias_ij),  y_i = sum_j softmax_j(s_ij) v_j,  lse_i = log sum_j exp(s_ij)
// y is written in fp32 (the loader casts it for bf16 inputs); rows with no edges get y = 0 and
// lse = -inf. Schedules and layouts: see sparse_attention_common.cuh.
#include "sparse_attention_common.cuh"

namespace dsg {

struct ForwardOp {
  static constexpr int NF = 1;  // State: s[0] running max m, s[1] running sum l; f[0] sum of p v
  const long long* __restrict__ ptr;  // rowptr [N_dst+1]
  const int* __restrict__ col;        // [E]
  const scalar_t* __restrict__ q;
  const scalar_t* __restrict__ k;
  const scalar_t* __restrict__ v;
  float* __restrict__ y;
  float* __restrict__ lse;
  int H;
  float scale;
  DSG_IF_BIAS(const scalar_t* __restrict__ bias;)  // [E, H], CSR edge order

  struct Context {
    Frag q;
  };

  __device__ __forceinline__ Context context(int i, int h, int team_lane) const {
    return {load_frag(q + ((long long)i * H + h) * D + team_lane * VEC)};
  }

  __device__ __forceinline__ static State<NF> init() {
    State<NF> st;
    st.s[0] = neg_inf();
    st.s[1] = 0.0f;
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
    if (s > st.s[0]) {  // a new maximum: rescale what was summed so far
      const float r = expf(st.s[0] - s);
      st.s[1] *= r;
      scale_frag(st.f[0], r);
      st.s[0] = s;
    }
    const float p = expf(s - st.s[0]);
    st.s[1] += p;
    axpy(st.f[0], p, vj);
  }

  // a <- the state of the union of the edges of a and b (associative; order fixed by the callers)
  __device__ __forceinline__ static void combine(State<NF>& a, const State<NF>& b) {
    const float m = fmaxf(a.s[0], b.s[0]);
    if (m == neg_inf()) return;  // both empty
    const float ra = expf(a.s[0] - m), rb = expf(b.s[0] - m);
    a.s[0] = m;
    a.s[1] = a.s[1] * ra + b.s[1] * rb;
#pragma unroll
    for (int x = 0; x < VEC; ++x) a.f[0].x[x] = a.f[0].x[x] * ra + b.f[0].x[x] * rb;
  }

  __device__ __forceinline__ void finish(const State<NF>& st, int i, int h, int team_lane) const {
    const bool empty = !(st.s[1] > 0.0f);
    Frag out = st.f[0];
    scale_frag(out, empty ? 0.0f : 1.0f / st.s[1]);
    store_frag_f32(y + ((long long)i * H + h) * D + team_lane * VEC, out);
    if (team_lane == 0) lse[(long long)i * H + h] = empty ? neg_inf() : st.s[0] + logf(st.s[1]);
  }
};

}  // namespace dsg

using dsg::ForwardOp;

#define FORWARD_ARGS                                                                                 \
  const long long *rowptr, const int *col, const scalar_t *q, const scalar_t *k, const scalar_t *v, \
      float *y, float *lse, int H, float scale DSG_IF_BIAS(, const scalar_t *bias)
#define FORWARD_OP ForwardOp{rowptr, col, q, k, v, y, lse, H, scale DSG_IF_BIAS(, bias)}

extern "C" __global__ void sa_forward_small(FORWARD_ARGS, const int* items, int n_items) {
  dsg::run_team_per_item(FORWARD_OP, items, n_items);
}

extern "C" __global__ void sa_forward_warp(FORWARD_ARGS, const int* items, int n_items) {
  dsg::run_warp_per_item(FORWARD_OP, items, n_items);
}

extern "C" __global__ void __launch_bounds__(dsg::BLOCK_WARPS * 32)
    sa_forward_chunk(FORWARD_ARGS, const int* chunk_seg, const long long* chunk_begin, int chunk_edges, float* partial) {
  dsg::run_block_per_chunk(FORWARD_OP, chunk_seg, chunk_begin, chunk_edges, partial);
}

extern "C" __global__ void sa_forward_merge(FORWARD_ARGS, const int* long_segs, const int* seg_chunk_ptr, int n_long,
                                            const float* partial) {
  dsg::run_merge_chunks(FORWARD_OP, long_segs, seg_chunk_ptr, n_long, partial);
}
