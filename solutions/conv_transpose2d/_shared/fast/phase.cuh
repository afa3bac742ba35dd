// ct2d_phase: a ConvTranspose2d of any stride, groups, dilation and channel count (dispatch.cu,
// rows 6-8), on the tensor cores (TF32 or 3xTF32 mma.sync) or on the CUDA cores (fp32 FMAs), x and
// y fp32 or bf16; launch_phase sizes its tiles for the shared memory and launches it. Needs
// common.cuh.
//
// 2. ct2d_phase (everything else, e.g. strided, grouped, dilated).
//    For output row oh only the taps kh with (oh + pad_h - kh*dil_h) divisible by stride_h
//    contribute (likewise kw for each column phase), so no multiply is spent on the zeros a
//    strided transposed convolution inserts, and rows with no valid tap are pure bias/zero
//    writes. A block takes rows of one residue mod stride_h (one tap set), stages their input
//    rows channels-innermost with cp.async, computes register tiles of P pixels x CT channels per
//    thread, and writes every output element once, coalesced, with streaming stores: these
//    problems are bound by writing the output. The products run on the tensor cores (TC variant,
//    three blocks per SM where they fit; config 7: two, 8: four) as TF32 mma.sync for SPLIT = 1
//    (TF32 class) or 3xTF32 for SPLIT = 3 (fp32 class), or for a bf16 x as bf16 mma.sync (config 9,
//    not yet the rule's: issue 77), else as exact fp32 FMAs on the CUDA cores (config 1..3 force
//    that variant's tilings).
#pragma once

#include "common.cuh"
#include "epilogue.cuh"

namespace {

constexpr int kMaxStride = 16;  // phase kernel limits (the host raises an error naming the direct solution otherwise)
constexpr int kMaxTaps = 32;
constexpr int PHASE_THREADS = 256;

struct PhaseShape {
  int N, Cin, Hin, Win, Cout, Hout, Wout, KH, KW, sh, sw, ph, pw, dh, dw, groups;
  int cin_g, cout_g, cip, cips;  // channels per group; input channels padded to 4; staged row stride
  int cot, tiles_c;              // output channels per block (multiple of CT) and tiles per group
  int npx, seg, ncol;            // pixels per column phase, output columns (sw * npx), staged input columns
  int rows, khn_max;             // output rows per block (sh apart); most valid kh of any row
  int tc, ysw, cbg;              // tensor-core variant; output tile row stride; 16-channel blocks per group
};

// Shared-memory floats of the phase kernel's weights (for khn valid kh; TC: hi and lo parts) and of
// its staged input rows, each rounded up to 16 bytes; the host sizes the allocation with them.
__host__ __device__ __forceinline__ int phase_w_floats(const PhaseShape& s, int khn, int tc) {
  return (s.cot * khn * s.KW * s.cip * (tc == 3 ? 2 : 1) / (tc == 2 ? 2 : 1) + 3) & ~3;  // TC 2: bf16 pairs
}
__host__ __device__ __forceinline__ int phase_xs_floats(const PhaseShape& s) {
  return (s.khn_max * s.ncol * s.cips + 3) & ~3;
}

__device__ __forceinline__ int floor_div(int a, int b) { return (a >= 0 ? a : a - b + 1) / b; }
__host__ __device__ __forceinline__ int pos_mod(int a, int b) { return ((a % b) + b) % b; }

// A block owns one image, one group, s.cot output channels, s.seg output columns and s.rows output
// rows that are s.sh apart (the same row residue), so the set of valid kh is the same for all its
// rows and only those taps' weights are staged: w[cb][kh_a][kw][ci][CT], zero-padded.
// Per output row with valid taps:
//   1. the input rows of the valid kh are staged as xs[kh_a][column][ci] (ci innermost, row stride
//      s.cips with s.cips / 4 odd, so float4 reads by consecutive columns are conflict-free);
//   2. warp tasks (column phase, block of 32 P pixels, block of CT channels): lane l owns pixels
//      j = 32 p + l of its phase, i.e. output columns rw + sw * j, and CT channels, in registers.
//      Per 4 input channels: P float4 input reads, CT float4 weight broadcasts, 4 P CT FMAs. All
//      lanes of a warp share the phase, so the valid kw are uniform; phases without taps give 0;
//   3. the tile goes through shared memory (ys[channel][column]) and is written once, coalesced,
//      with streaming stores (+ bias).
// Rows without any valid kh are pure bias (or zero) stores.
//
// TC (tensor cores, CT = 16): step 2 runs on mma.sync m16n8k8, as 3xTF32 (TC = 3, fp32 class) or
// TF32 (TC = 1, TF32 class): a warp task is (column phase, 8 P pixels, 16 channels), per valid tap
// and 8 input channels: the A fragments (weights, split into TF32 hi and lo on the host and packed
// in fragment order, one float4 each per lane; TC = 1 stages and reads hi only), then per 8 pixels
// the B fragment from the staged input and the MMAs: TC = 3 splits it in registers and runs
// a_lo*b_hi + a_hi*b_lo + a_hi*b_hi, TC = 1 passes its raw bits to one MMA. Weights arrive as
// wt[group][co / 16][kh][kw][ci / 8][hi, lo][lane][4]; input channels are padded to 8.
// TC = 2 (a bf16 x, config 9): bf16 mma.sync m16n8k16, fp32 accumulation. x is staged as it is, bf16
// channel pairs in 32-bit words (s.cips words a column, 4 mod 8, so lane (g, t)'s B words, channels
// 2t, 2t + 1 and 2t + 8, 2t + 9 of pixel g, fall in 32 different banks); input channels are padded
// to 16; the weights are gathered from the same packed TF32 hi part (exact for bf16 weights) into
// the m16n8k16 A-fragment order, units (cb, kh_a, kw, ci / 16) of 128 words. One MMA does the work
// of two TF32 ones on operands of half the bytes; the C fragment and the tile are TF32's.
// MINB: blocks per SM the registers are limited for (the host sizes the shared memory to match).
// T: the element type of x and y, float, or __nv_bfloat16 for bf16 runs (x widened to fp32 as it
// is staged, with plain loads where fp32 uses cp.async; the fp32 result rounded once as it is
// written). The weights, the bias and the arithmetic are fp32 either way.
// EPI: what each output element gets after its bias (epilogue.cuh): EpiNone in ct2d_phase (the
// conv family), an Epilogue in ct2d_phase_epi (the fused family's elementwise tails).
template <int P, int CT, int TC, int MINB, class T, class EPI>
__device__ __forceinline__ void phase_body(const T* __restrict__ x, const float* __restrict__ wp,
                                           const float* __restrict__ bias, T* __restrict__ y, const PhaseShape& s,
                                           const EPI& epi) {
  static_assert(TC >= 0 && TC <= 3, "TC: 0 (CUDA cores), 1 (TF32), 2 (bf16) or 3 (3xTF32)");
  static_assert(!TC || CT == 16, "the tensor-core variant takes 16 channels per warp task");
  static_assert(TC != 2 || std::is_same<T, __nv_bfloat16>::value, "the bf16 MMA takes a bf16 x");
  constexpr int PXB = TC ? 8 * P : 32 * P;  // pixels per warp task
  constexpr int WU = TC == 3 ? 256 : 128;   // staged weight words per (cb, kh_a, kw, ci / KC): hi (+ lo)
  constexpr int KC = TC == 2 ? 16 : 8;      // input channels per MMA step
  extern __shared__ __align__(16) float phase_smem[];
  __shared__ int kh_sel[kMaxTaps], ih_first[kMaxTaps];  // valid kh; input row of each for the first row
  // per column phase rw: its valid kw are kw_sel[kw_first[rw] + q], q < kw_count[rw] (each kw is
  // valid for exactly one phase), read from staged column kw_d[...] + pixel
  __shared__ int kw_first[kMaxStride], kw_count[kMaxStride], kw_sel[kMaxTaps], kw_d[kMaxTaps];
  __shared__ int order[kMaxStride];  // column phases with taps first

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int ct = s.groups * s.tiles_c;
  const int n = blockIdx.z / ct, grp = (blockIdx.z % ct) / s.tiles_c;
  const int cog0 = (blockIdx.z % s.tiles_c) * s.cot;  // first channel of the tile within its group
  const int r0 = blockIdx.y % s.sh, k0 = (blockIdx.y / s.sh) * s.rows;
  const int ow0 = blockIdx.x * s.seg;
  const int iw_lo = floor_div(ow0 + s.pw - (s.KW - 1) * s.dw, s.sw);  // first staged input column

  int khn = 0;  // block-uniform: kh with (oh + ph - kh dh) divisible by sh, for oh = r0 (mod sh)
  for (int kh = 0; kh < s.KH; ++kh) khn += pos_mod(r0 + s.ph - kh * s.dh, s.sh) == 0;
  if (tid == 0) {
    for (int kh = 0, c = 0; kh < s.KH; ++kh) {
      const int hn = r0 + s.sh * k0 + s.ph - kh * s.dh;
      if (pos_mod(hn, s.sh)) continue;
      kh_sel[c] = kh;
      ih_first[c++] = floor_div(hn, s.sh);  // exact; the next rows (sh apart) read ih + 1, + 2, ...
    }
    int first = 0, last = s.sw, e = 0;
    for (int rw = 0; rw < s.sw; ++rw) {
      kw_first[rw] = e;
      for (int kw = 0; kw < s.KW; ++kw) {
        const int wn = ow0 + rw + s.pw - kw * s.dw;
        if (pos_mod(wn, s.sw)) continue;
        kw_sel[e] = kw;
        kw_d[e] = floor_div(wn, s.sw) - iw_lo;  // exact division
        ++e;
      }
      kw_count[rw] = e - kw_first[rw];
      order[kw_count[rw] ? first++ : --last] = rw;
    }
  }
  const int plane_in = s.Hin * s.Win;
  const int64_t plane = (int64_t)s.Hout * s.Wout;
  const int cov = min(s.cot, s.cout_g - cog0);  // channels of the tile that exist
  const int co_abs = grp * s.cout_g + cog0;
  const int width = min(s.seg, s.Wout - ow0);
  const int nrows = min(s.rows, (s.Hout - r0 + s.sh - 1) / s.sh - k0);  // this block's rows
  if (nrows <= 0) return;
  T* const out0 = y + ((int64_t)n * s.Cout + co_abs) * plane + ow0;
  float* const wsm = phase_smem;  // [cb][kh_a][kw][ci][CT]
  float* const xs = wsm + phase_w_floats(s, khn, TC);  // [kh_a][col][cips]
  float* const ys = xs + phase_xs_floats(s);        // [cot][ysw]
  const bool pairs = plane % 2 == 0 && s.Wout % 2 == 0 && ow0 % 2 == 0;  // rows pair-aligned: pair stores
  // TC: per column phase, its MMA steps (kw of the phase, kh_a, 8 input channels) as offsets into
  // xs and into a channel block's weights, from steps[kw_first[rw] * khn * ks_n]
  int2* const steps = reinterpret_cast<int2*>(ys + s.cot * s.ysw);

  // Writes output row oh of the tile, bias and epilogue applied, with streaming stores: from
  // ys[c][col] when FROM_TILE, else bias (or zero) only.
  auto write_row = [&](int oh, auto from_tile) {
    constexpr bool FROM_TILE = decltype(from_tile)::value;
    T* yrow = out0 + (int64_t)oh * s.Wout;
    for (int c = warp; c < cov; c += PHASE_THREADS / 32) {
      const float bv = bias ? __ldg(bias + co_abs + c) : 0.f;
      T* dst = yrow + c * plane;
      const float* src = ys + c * s.ysw;
      if (pairs) {
        const float2* s2 = reinterpret_cast<const float2*>(src) + lane;
        if constexpr (std::is_same<T, float>::value) {  // (as float2 pointers: fp32's code as before)
          float2* d2 = reinterpret_cast<float2*>(dst) + lane;
#pragma unroll 4
          for (int col = 2 * lane; col + 1 < width; col += 64, d2 += 32, s2 += 32) {
            float2 v = FROM_TILE ? *s2 : make_float2(0.f, 0.f);
            v.x = epi(v.x + bv);
            v.y = epi(v.y + bv);
            __stcs(d2, v);
          }
        } else {
          T* d2 = dst + 2 * lane;
#pragma unroll 4
          for (int col = 2 * lane; col + 1 < width; col += 64, d2 += 64, s2 += 32) {
            const float2 v = FROM_TILE ? *s2 : make_float2(0.f, 0.f);
            st_out2(d2, epi(v.x + bv), epi(v.y + bv));
          }
        }
        const int last = width & ~1;  // an odd last column
        if (last < width && lane == 0) st_cs1(dst + last, epi((FROM_TILE ? src[last] : 0.f) + bv));
      } else {
        for (int col = lane; col < width; col += 32) st_cs1(dst + col, epi((FROM_TILE ? src[col] : 0.f) + bv));
      }
    }
  };

  if (khn == 0) {  // no tap reaches these rows: bias (or zero) only
    for (int i = 0; i < nrows; ++i) write_row(r0 + s.sh * (k0 + i), std::false_type{});
    return;
  }

  const T* xg = x + ((int64_t)n * s.Cin + grp * s.cin_g) * plane_in;
  const int quads = s.cip / 4, npb = s.npx / PXB, ncb = s.cot / CT;
  const uint32_t xs_base = static_cast<uint32_t>(__cvta_generic_to_shared(xs));

  // Input staging of row i with cp.async (zero-filled outside the image and past cin_g): item =
  // (kh_a, channel quad q, column), column fastest; each thread steps by PHASE_THREADS with a
  // mixed-radix counter (no divisions in the loop). Input row of kh_a for row i: ih_first[a] + i.
  const int step_col = PHASE_THREADS % s.ncol, carry = PHASE_THREADS / s.ncol;
  const int step_q = carry % quads, step_a = carry / quads;
  const int col_first = tid % s.ncol, q_first = (tid / s.ncol) % quads, a_first = tid / (s.ncol * quads);
  auto stage = [&](int i) {
    int col = col_first, q = q_first, a = a_first;
    while (a < khn) {
      const int ih = ih_first[a] + i, iw = iw_lo + col, ci = 4 * q;
      const bool in = ih >= 0 && ih < s.Hin && iw >= 0 && iw < s.Win;
      const T* src = in ? xg + (int64_t)ci * plane_in + ih * s.Win + iw : xg;
      if constexpr (std::is_same<T, float>::value) {
        const uint32_t dst = xs_base + ((a * s.ncol + col) * s.cips + ci) * 4;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const bool ok = in && ci + k < s.cin_g;
          cp_async4(dst + 4 * k, ok ? src + k * plane_in : xg, ok ? 4 : 0);
        }
      } else if constexpr (TC == 2) {  // bf16 as it is: four loads, two channel pairs, one 8-byte store
        uint32_t h[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) h[k] = in && ci + k < s.cin_g ? __bfloat16_as_ushort(src[k * plane_in]) : 0u;
        *reinterpret_cast<uint2*>(xs + (a * s.ncol + col) * s.cips + ci / 2) = make_uint2(h[0] | h[1] << 16, h[2] | h[3] << 16);
      } else {  // bf16: four loads, widened, one 16-byte shared store (visible after the next barrier)
        float v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = in && ci + k < s.cin_g ? in_float(src[k * plane_in]) : 0.f;
        *reinterpret_cast<float4*>(xs + (a * s.ncol + col) * s.cips + ci) = make_float4(v[0], v[1], v[2], v[3]);
      }
      col += step_col;
      const int c1 = col >= s.ncol;
      col -= c1 ? s.ncol : 0;
      q += step_q + c1;
      const int c2 = q >= quads;
      q -= c2 ? quads : 0;
      a += step_a + c2;
    }
    cp_async_commit();
  };

  __syncthreads();  // tap tables
  stage(0);
  if constexpr (TC) {
    const int ks_n = s.cip / KC, nsteps = s.KW * khn * ks_n;  // each kw is in exactly one phase
    for (int e = tid; e < nsteps; e += PHASE_THREADS) {
      const int ks = e % ks_n, a = (e / ks_n) % khn, ee = e / (ks_n * khn);
      steps[e] = make_int2((a * s.ncol + kw_d[ee]) * s.cips + 8 * ks, ((a * s.KW + kw_sel[ee]) * ks_n + ks) * WU);
    }
  }
  if constexpr (TC == 2) {  // units (cb, kh_a, kw, ci / 16): lane (g, t)'s four A words from the TF32 hi units
    // (ci / 8 = 2 (ci / 16) + h): word j holds rows g + 8 (j & 1), k 2t and 2t + 1 of half h = j >> 1,
    // which the TF32 fragment holds at lane 4 g + (2t & 3), register (j & 1) + 2 (t >= 2), and the next lane
    const int ks_n = s.cip / 16, k8_n = (s.cin_g + 7) / 8, nunit = ncb * khn * s.KW * ks_n;
    const int g = lane >> 2, t = lane & 3;
    for (int o = warp; o < nunit; o += PHASE_THREADS / 32) {
      const int ks = o % ks_n, kw = (o / ks_n) % s.KW, a = (o / (ks_n * s.KW)) % khn, cb = o / (ks_n * s.KW * khn);
      const int cbg = cog0 / 16 + cb;
      uint32_t wv[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int k8 = 2 * ks + (j >> 1);
        float v0 = 0.f, v1 = 0.f;
        if (cbg < s.cbg && k8 < k8_n) {
          const float* src = wp + ((((int64_t)grp * s.cbg + cbg) * s.KH + kh_sel[a]) * s.KW * k8_n + kw * k8_n + k8) * 256 +
                             (j & 1) + 2 * (t >= 2);
          v0 = __ldg(src + (4 * g + ((2 * t) & 3)) * 4);
          v1 = __ldg(src + (4 * g + ((2 * t + 1) & 3)) * 4);
        }
        wv[j] = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(v0)) |
                (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(v1)) << 16;
      }
      *reinterpret_cast<uint4*>(wsm + o * WU + lane * 4) = make_uint4(wv[0], wv[1], wv[2], wv[3]);
    }
  } else if constexpr (TC) {  // fragment-ordered weights of the valid taps: units (cb, kh_a, kw, ci / 8) of hi (+ lo)
    const int ks_n = s.cip / 8, nunit = ncb * khn * s.KW * ks_n;
    for (int o = warp; o < nunit; o += PHASE_THREADS / 32) {
      const int ks = o % ks_n, kw = (o / ks_n) % s.KW, a = (o / (ks_n * s.KW)) % khn, cb = o / (ks_n * s.KW * khn);
      const int cbg = cog0 / 16 + cb;
      const float4* src = reinterpret_cast<const float4*>(
          wp + ((((int64_t)grp * s.cbg + cbg) * s.KH + kh_sel[a]) * s.KW * ks_n + kw * ks_n + ks) * 256);
      float4* dst = reinterpret_cast<float4*>(wsm + o * WU);
      for (int e = lane; e < WU / 4; e += 32) dst[e] = cbg < s.cbg ? __ldg(src + e) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  } else {  // weights of the valid taps: outer (cb, kh_a, kw) per warp, inner (ci, c) per lane
    const int inner = s.cip * CT, nouter = ncb * khn * s.KW;
    for (int o = warp; o < nouter; o += PHASE_THREADS / 32) {
      const int kw = o % s.KW, a = (o / s.KW) % khn, cb = o / (s.KW * khn);
      const int kh = kh_sel[a];
      for (int e = lane; e < inner; e += 32) {
        const int c = e % CT, ci = e / CT, co = cog0 + cb * CT + c;
        wsm[o * inner + e] =
            (ci < s.cin_g && co < s.cout_g)
                ? wp[((int64_t)(grp * s.cin_g + ci) * s.KH * s.KW + kh * s.KW + kw) * s.cout_g + co]
                : 0.f;
      }
    }
  }
  // warp tasks (phase in order[], pixel block, channel block), channel block fastest; each warp
  // steps by the warp count with a mixed-radix counter
  const int nw = PHASE_THREADS / 32;
  const int t_cb = nw % ncb, t_carry = nw / ncb, t_pb = t_carry % npb, t_ph = t_carry / npb;
  const int cb_first = warp % ncb, pb_first = (warp / ncb) % npb, ph_first = warp / (ncb * npb);

  for (int i = 0; i < nrows; ++i) {
    const int oh = r0 + s.sh * (k0 + i);
    cp_async_wait_0();
    __syncthreads();  // input row i (and the weights) staged; the previous tile is written out
    int cb = cb_first, pb = pb_first, ph = ph_first;
    while (ph < s.sw) {
      const int rw = order[ph];
      if constexpr (TC) {
        const int g = lane >> 2, t = lane & 3, j0 = pb * PXB;
        float acc[P][4];
#pragma unroll
        for (int p = 0; p < P; ++p)
#pragma unroll
          for (int r = 0; r < 4; ++r) acc[p][r] = 0.f;
        const int ks_n = s.cip / KC, nst = kw_count[rw] * khn * ks_n;
        const int2* stp = steps + kw_first[rw] * khn * ks_n;
        const float* xb = xs + (j0 + g) * s.cips + t;
        const float* wb = wsm + cb * khn * s.KW * ks_n * WU + lane * 4;
#pragma unroll 2
        for (int st = 0; st < nst; ++st) {
          const int2 o = stp[st];
          const float* xp = xb + o.x;
          const float4 h4 = *reinterpret_cast<const float4*>(wb + o.y);
          if constexpr (TC == 1 || TC == 2) {  // TF32: rounded weights, the input's raw bits (the MMA
            // truncates them), or the input rounded to nearest where the epilogue asks (EPI::kRoundX);
            // bf16: words of channel pairs (2t, 2t + 1) and (2t + 8, 2t + 9) of pixel g, as they are
            const uint32_t ah[4] = {__float_as_uint(h4.x), __float_as_uint(h4.y), __float_as_uint(h4.z),
                                    __float_as_uint(h4.w)};
#pragma unroll
            for (int p = 0; p < P; ++p) {
              uint32_t bh[2] = {__float_as_uint(xp[p * 8 * s.cips]), __float_as_uint(xp[p * 8 * s.cips + 4])};
              if constexpr (TC == 2) {
                mma_bf16(acc[p], ah, bh);
                continue;
              }
              if constexpr (EPI::kRoundX) {
                bh[0] = to_tf32(__uint_as_float(bh[0]));
                bh[1] = to_tf32(__uint_as_float(bh[1]));
              }
              mma_tf32(acc[p], ah, bh);
            }
            continue;
          }
          const float4 l4 = *reinterpret_cast<const float4*>(wb + o.y + 128);
          const uint32_t ah[4] = {__float_as_uint(h4.x), __float_as_uint(h4.y), __float_as_uint(h4.z),
                                  __float_as_uint(h4.w)};
          const uint32_t al[4] = {__float_as_uint(l4.x), __float_as_uint(l4.y), __float_as_uint(l4.z),
                                  __float_as_uint(l4.w)};
#pragma unroll
          for (int p = 0; p < P; ++p) {
            uint32_t bh[2] = {__float_as_uint(xp[p * 8 * s.cips]), __float_as_uint(xp[p * 8 * s.cips + 4])};
            uint32_t bl[2];
            split_tf32_trunc_lo(bh[0], bl[0]);
            split_tf32_trunc_lo(bh[1], bl[1]);
            mma_tf32(acc[p], al, bh);
            mma_tf32(acc[p], ah, bl);
            mma_tf32(acc[p], ah, bh);
          }
        }
        // C fragment: (channel g, pixels 2t, 2t + 1) and (channel g + 8, the same pixels)
        float* yp = ys + (cb * 16 + g) * s.ysw + rw + s.sw * (j0 + 2 * t);
#pragma unroll
        for (int p = 0; p < P; ++p) {
          float* yq = yp + p * 8 * s.sw;
          yq[0] = acc[p][0];
          yq[s.sw] = acc[p][1];
          yq[8 * s.ysw] = acc[p][2];
          yq[8 * s.ysw + s.sw] = acc[p][3];
        }
      } else {
        const int j0 = pb * PXB + lane;
        float acc[P][CT];
#pragma unroll
        for (int p = 0; p < P; ++p)
#pragma unroll
          for (int c = 0; c < CT; ++c) acc[p][c] = 0.f;
        const int nkw = kw_count[rw], e0 = kw_first[rw];
        for (int a = 0; a < khn; ++a) {
          for (int q = 0; q < nkw; ++q) {
            const float* xp = xs + (a * s.ncol + kw_d[e0 + q] + j0) * s.cips;
            const float* wq = wsm + ((cb * khn + a) * s.KW + kw_sel[e0 + q]) * s.cip * CT;
#pragma unroll 2
            for (int c4 = 0; c4 < quads; ++c4, xp += 4, wq += 4 * CT) {
              float4 xv[P];
#pragma unroll
              for (int p = 0; p < P; ++p) xv[p] = *reinterpret_cast<const float4*>(xp + p * 32 * s.cips);
#pragma unroll
              for (int k = 0; k < 4; ++k) {
#pragma unroll
                for (int c = 0; c < CT; c += 4) {
                  const float4 w4 = *reinterpret_cast<const float4*>(wq + k * CT + c);
#pragma unroll
                  for (int p = 0; p < P; ++p) {
                    const float xk = k == 0 ? xv[p].x : k == 1 ? xv[p].y : k == 2 ? xv[p].z : xv[p].w;
                    acc[p][c] = fmaf(xk, w4.x, acc[p][c]);
                    acc[p][c + 1] = fmaf(xk, w4.y, acc[p][c + 1]);
                    acc[p][c + 2] = fmaf(xk, w4.z, acc[p][c + 2]);
                    acc[p][c + 3] = fmaf(xk, w4.w, acc[p][c + 3]);
                  }
                }
              }
            }
          }
        }
        float* yp = ys + cb * CT * s.ysw + rw + s.sw * j0;
#pragma unroll
        for (int c = 0; c < CT; ++c, yp += s.ysw)
#pragma unroll
          for (int p = 0; p < P; ++p) yp[p * 32 * s.sw] = acc[p][c];
      }
      cb += t_cb;
      const int c1 = cb >= ncb;
      cb -= c1 ? ncb : 0;
      pb += t_pb + c1;
      const int c2 = pb >= npb;
      pb -= c2 ? npb : 0;
      ph += t_ph + c2;
    }
    __syncthreads();  // tile complete; xs free
    if (i + 1 < nrows) stage(i + 1);  // in flight while the tile is written out
    write_row(oh, std::true_type{});
  }
}

template <int P, int CT, int TC, int MINB, class T>
__global__ void __launch_bounds__(PHASE_THREADS, MINB)
    ct2d_phase(const T* __restrict__ x, const float* __restrict__ wp, const float* __restrict__ bias,
               T* __restrict__ y, const PhaseShape s) {
  phase_body<P, CT, TC, MINB, T>(x, wp, bias, y, s, EpiNone{});
}

// The same kernel with an elementwise epilogue in its store (fp32 x and y).
template <int P, int CT, int TC, int MINB>
__global__ void __launch_bounds__(PHASE_THREADS, MINB)
    ct2d_phase_epi(const float* __restrict__ x, const float* __restrict__ wp, const float* __restrict__ bias,
                   float* __restrict__ y, const PhaseShape s, const Epilogue epi) {
  phase_body<P, CT, TC, MINB, float>(x, wp, bias, y, s, epi);
}

// Shared memory of the phase kernel for a configuration, in bytes.
size_t phase_smem_bytes(const PhaseShape& s) {
  const size_t w = phase_w_floats(s, s.khn_max, s.tc), xs = phase_xs_floats(s);
  const size_t steps = s.tc ? (size_t)s.KW * s.khn_max * (s.cip / (s.tc == 2 ? 16 : 8)) * 2 : 0;  // int2 per MMA step
  return (w + xs + (size_t)s.cot * s.ysw + steps) * sizeof(float);
}

// Row stride of the output tile: seg, or for the tensor-core variant the even stride >= seg whose
// C-fragment stores (lane (g, t) at g * ysw + 2 sw t) meet the fewest bank conflicts.
int phase_tile_stride(const PhaseShape& s) {
  if (!s.tc) return s.seg;
  int best = s.seg, best_ways = 33;
  for (int ysw = s.seg; ysw < s.seg + 32; ysw += 2) {
    int count[32] = {0}, ways = 0;
    for (int g = 0; g < 8; ++g)
      for (int t = 0; t < 4; ++t) ways = std::max(ways, ++count[(g * ysw + 2 * s.sw * t) % 32]);
    if (ways < best_ways) { best_ways = ways; best = ysw; }
  }
  return best;
}

// Launches the phase kernel (TC: its tensor-core variant, wp then holds the fragment-ordered
// weights). Returns false where its shared memory does not fit.
// T: x's and y's element type (float, or __nv_bfloat16 in bf16 runs). FUSE: an instance that can
// apply an elementwise epilogue in its store (ct2d_phase_epi, fp32; epi.kind 0 runs ct2d_phase).
template <int P, int CT, int TC, int MINB, class T = float, bool FUSE = false>
bool launch_phase(const torch::Tensor& x, const torch::Tensor& wp, const float* bias, torch::Tensor& y,
                  PhaseShape s, cudaStream_t stream, Plan& plan, const Epilogue epi = Epilogue{kEpiNone, 0.f, 0.f}) {
  static_assert(!FUSE || std::is_same<T, float>::value, "phase kernel: a fused epilogue needs fp32");
  TORCH_CHECK(FUSE || epi.kind == kEpiNone, "phase kernel: this instance has no fused epilogue");
  constexpr int PXB = TC ? 8 * P : 32 * P;
  s.tc = TC;
  s.cip = TC == 2 ? (s.cin_g + 15) / 16 * 16 : TC ? (s.cin_g + 7) / 8 * 8 : (s.cin_g + 3) / 4 * 4;  // the MMA's K: 16, 8; FMAs: 4
  if (TC == 2) s.cips = s.cip / 2 + (12 - (s.cip / 2) % 8) % 8;  // words of channel pairs a column, 4 mod 8
  else s.cips = (s.cip / 4) % 2 ? s.cip : s.cip + 4;  // float4 rows an odd number of 16 B apart
  s.cbg = (s.cout_g + 15) / 16;
  // channel tile: up to 32 channels, balanced over the tiles of a group
  s.tiles_c = (s.cout_g + 31) / 32;
  s.cot = ((s.cout_g + s.tiles_c - 1) / s.tiles_c + CT - 1) / CT * CT;
  const int per_phase = (s.Wout + s.sw - 1) / s.sw;
  s.npx = (per_phase + PXB - 1) / PXB * PXB;
  auto fit = [&](size_t budget) {
    for (;;) {
      s.seg = s.sw * s.npx;
      s.ncol = s.npx + ((s.KW - 1) * s.dw + s.sw - 1) / s.sw + 1;
      s.ysw = phase_tile_stride(s);
      if (phase_smem_bytes(s) <= budget) return true;
      if (s.npx > PXB) s.npx = (s.npx / 2 + PXB - 1) / PXB * PXB;
      else if (s.cot > CT) {
        s.cot -= CT;
        s.tiles_c = (s.cout_g + s.cot - 1) / s.cot;
      } else return false;
    }
  };
  // MINB blocks per SM where that fits (228 KB per SM; 1 KB reserved and under 1 KB of static
  // tables per block), else two, else one
  if (!(MINB > 2 && fit((228 * 1024) / MINB - 2048)) && !fit(112 * 1024) && !fit(220 * 1024)) return false;
  const int per_res = (s.Hout + s.sh - 1) / s.sh;
  const int64_t blocks1 = (int64_t)((s.Wout + s.seg - 1) / s.seg) * s.Hout * s.N * s.groups * s.tiles_c;
  // rows per block, to amortize the block's setup (tap tables, weights, the first staging): 4, or 8
  // for the tensor-core variant (measured on the H200 against 4 and 16: 75 0.412 against 0.441 and
  // 0.432 ms, 81 0.416 against 0.408 and 0.461, 901 0.409 against 0.424 and 0.422)
  s.rows = std::min(per_res, blocks1 >= 8 * 2 * sm_count() ? (TC ? 8 : 4) : 1);
  const int64_t gz = (int64_t)s.N * s.groups * s.tiles_c;
  const int64_t gy = (int64_t)s.sh * ((per_res + s.rows - 1) / s.rows);
  TORCH_CHECK(gz < 65536 && gy < 65536, "fast phase kernel: batch * groups or output height too large");
  TORCH_CHECK(x.element_size() == sizeof(T) && y.element_size() == sizeof(T), "phase kernel: x and y element type");
  if (!plan.launch)
    return plan.set(epi.kind == kEpiNone ? strf("ct2d_phase<%d, %d, %d, %d, %s>", P, CT, TC, MINB,
                                                std::is_same<T, float>::value ? "float" : "__nv_bfloat16")
                                         : strf("ct2d_phase_epi<%d, %d, %d, %d>", P, CT, TC, MINB),
                    "phase.cuh",
                    strf("%s; block: %d output rows (%d apart) x %d columns x %d channels, %d blocks per SM targeted; "
                         "grid %d x %d x %d%s%s%s",
                         TC == 1 ? "TF32 mma.sync" : TC == 2 ? "bf16 mma.sync (m16n8k16)" : TC == 3 ? "3xTF32 mma.sync"
                                                                                           : "fp32 FMAs on the CUDA cores",
                         s.rows, s.sh, s.seg, s.cot, MINB, (int)((s.Wout + s.seg - 1) / s.seg), (int)gy, (int)gz,
                         epi.kind == kEpiNone ? "" : "; epilogue ", epi.kind == kEpiNone ? "" : fused_epilogue_name(epi.kind),
                         epi.kind == kEpiNone ? "" : " in the store"));
  dim3 grid((s.Wout + s.seg - 1) / s.seg, gy, gz);
  if constexpr (FUSE) {
    if (epi.kind != kEpiNone) {
      allow_smem<ct2d_phase_epi<P, CT, TC, MINB>>(220 * 1024);
      ct2d_phase_epi<P, CT, TC, MINB><<<grid, PHASE_THREADS, phase_smem_bytes(s), stream>>>(
          x.data_ptr<float>(), wp.data_ptr<float>(), bias, y.data_ptr<float>(), s, epi);
      return true;
    }
  }
  allow_smem<ct2d_phase<P, CT, TC, MINB, T>>(220 * 1024);
  ct2d_phase<P, CT, TC, MINB, T><<<grid, PHASE_THREADS, phase_smem_bytes(s), stream>>>(
      static_cast<const T*>(x.data_ptr()), wp.data_ptr<float>(), bias, static_cast<T*>(y.data_ptr()), s);
  return true;
}

}  // namespace
