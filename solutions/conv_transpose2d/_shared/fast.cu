// Fast ConvTranspose2d, fp32 in and out. Kernels chosen per call from the shapes:
//
// 1. ct2d_mma (stride 1, groups 1, Cout % 32 == 0, kernel 3x3/3x5/3x7): implicit GEMM on the
//    tensor cores with mma.sync.m16n8k8 TF32. GEMM view per image: M = Cout, N = output pixels,
//    K = Cin * KH * KW,
//        y[co, oh, ow] = sum_{ci, kh, kw} w[ci, co, kh, kw] * x[ci, oh + pad_h - kh*dil_h, ow + pad_w - kw*dil_w].
//    For each chunk of 8 input channels a block stages the input tile WITH its halo (as it lies
//    in the NCHW input, 16-byte copies where rows are aligned) and the chunk's weights for all
//    taps in shared memory (cp.async, 2-3 stages), so every loaded input value feeds all KH*KW
//    taps; B fragments are conflict-free 4-byte shared loads, A fragments ldmatrix. SPLIT = 1: TF32-class
//    accuracy. SPLIT = 3: 3xTF32 (a_hi*b_hi + a_hi*b_lo + a_lo*b_hi), fp32-class accuracy.
//    The TF32 class with 32 channels per block runs ct2d_mmh instead: the same blocks with one
//    fp16 product per MMA (m16n8k16), x converted to fp16 in shared memory (see there).
//    On Hopper (sm_90a builds) more than 32 output channels run 5. (TF32 class) or 4. (fp32 class)
//    instead (below, with the wgmma kernels; 3. where 5. does not fit).
// 2. ct2d_phase (everything else, e.g. strided, grouped, dilated).
//    For output row oh only the taps kh with (oh + pad_h - kh*dil_h) divisible by stride_h
//    contribute (likewise kw for each column phase), so no multiply is spent on the zeros a
//    strided transposed convolution inserts, and rows with no valid tap are pure bias/zero
//    writes. A block takes rows of one residue mod stride_h (one tap set), stages their input
//    rows channels-innermost with cp.async, computes register tiles of P pixels x CT channels per
//    thread, and writes every output element once, coalesced, with streaming stores: these
//    problems are bound by writing the output. The products run on the tensor cores (TC variant,
//    three blocks per SM where they fit; config 7: two, 8: four) as TF32 mma.sync for SPLIT = 1
//    (TF32 class) or 3xTF32 for SPLIT = 3 (fp32 class), else as exact fp32 FMAs on the CUDA cores
//    (config 1..3 force that variant's tilings).
//
// Weights arrive pre-packed (by the Python side, once per weight version) as
// wp[ci][kh*KW + kw][co_in_group], i.e. w.permute(0, 2, 3, 1), for the phase kernel (CUDA cores), as
// wt[group][co / 16][kh][kw][ci / 8][hi, lo][lane][4] (m16n8k8 A fragments) for its TC variant, as
// wm[ci / 8][kh*KW + kw][co][ci % 8] for ct2d_mma (TF32-rounded for SPLIT = 1), as scaled fp16
// wmh[ci / 16][kh*KW + kw][co][ci % 16] for ct2d_mmh, and as
// wg[ci / 8][kh*KW + kw][co / 8][ci % 8 / 4][co % 8][ci % 4] (TF32-rounded) for the wgmma kernels,
// and as scaled fp16 parts for ct2d_wgf (hi) and ct2d_wgh (hi and lo; see there).
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda.h>  // CUtensorMap (the tensor map of ct2d_mmh's TMA staging; no driver call here)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <type_traits>

namespace {

// v rounded to nearest TF32, ties away from zero: what cvt.rna.tf32.f32 gives for finite v, in two
// integer instructions (cvt.rna.tf32 compiles to a longer sequence with NaN handling on sm_90)
__device__ __forceinline__ uint32_t to_tf32(float v) { return (__float_as_uint(v) + 0x1000u) & 0xffffe000u; }

// v -> (hi, lo): hi = v rounded to TF32, lo = the remainder rounded to TF32 (3xTF32 operands)
__device__ __forceinline__ void split_tf32(uint32_t& v, uint32_t& lo) {
  const float f = __uint_as_float(v);
  v = to_tf32(f);
  lo = to_tf32(f - __uint_as_float(v));
}

// The same split with lo = v - hi left unrounded (one instruction fewer per part): the MMA reads
// its TF32 part, i.e. truncates it, and |lo| <= 2^-11 |v|, so that costs at most 2^-21 |v|
__device__ __forceinline__ void split_tf32_trunc_lo(uint32_t& v, uint32_t& lo) {
  const float f = __uint_as_float(v);
  v = to_tf32(f);
  lo = __float_as_uint(f - __uint_as_float(v));
}

__device__ __forceinline__ void mma_tf32(float* c, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void cp_async4(uint32_t dst, const float* src, uint32_t bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const float* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

// 16 bytes, of which the first `bytes` (0 or 16) are read and the rest zero-filled
__device__ __forceinline__ void cp_async16z(uint32_t dst, const float* src, uint32_t bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_1() { asm volatile("cp.async.wait_group 1;\n" ::); }
__device__ __forceinline__ void cp_async_wait_0() { asm volatile("cp.async.wait_group 0;\n" ::); }

// The exponent ex with |x| * 2^ex in [2^14, 2^15) for the largest finite magnitude (bits of
// |x|, 0 for an all-zero input: ex = 0), kept within [-113, 100] so that 2^ex and 2^-ex are normal
// floats (|x| < 2^-86 would keep fewer bits; a magnitude of 2^128 cannot occur).
__device__ __forceinline__ int wgh_exp(unsigned amax_bits) {
  if (amax_bits == 0) return 0;
  const int e = 14 - ((int)(amax_bits >> 23) - 127);
  return min(max(e, -113), 100);
}

// max(m, |v|) as float bits where v is finite, else m: non-negative floats order as unsigned
// integers; inf and NaN are skipped, so they do not spoil the scale of the finite values
__device__ __forceinline__ unsigned finite_amax(unsigned m, float v) {
  const unsigned b = __float_as_uint(v) & 0x7fffffffu;
  return b < 0x7f800000u && b > m ? b : m;
}

// fp16 operands of the one-product kernels (ct2d_mmh, ct2d_wgf) taken unscaled: x's largest finite
// magnitude (bits) in [2^-2, 2^15), so no value overflows and every value down to 2^-16 of it is a
// normal fp16 (randn and rand inputs); else x is scaled by 2^wgh_exp(amax) first
__device__ __forceinline__ bool wgf_unscaled(unsigned amax_bits) {
  const int e = (int)(amax_bits >> 23) - 127;
  return amax_bits == 0 || (e >= -2 && e <= 14);
}

constexpr int KC = 8;        // input channels per pipeline stage (the MMA's K)
// columns staged to cover n where the staging starts at a multiple of 4 columns (16 bytes, as
// 16-byte cp.async copies and TMA boxes need), up to 3 before the first needed one
constexpr int64_t cols16(int64_t n) { return (n + 3 + 3) / 4 * 4; }
constexpr int THREADS = 256; // 8 warps

__device__ __forceinline__ void ldsm_x4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void mma_f16(float* c, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

struct MmaShape {
  int Cin, Hin, Win, Cout, Hout, Wout, pad_h, pad_w, dil_h, dil_w;
  int TW, TR, tiles_w, co_blocks;  // output tile: TR rows x TW columns, for BM channels
  int rows, rowlen, plane;         // staged input rows; row and channel-plane strides (floats)
  int vec, units;                  // copy unit: 4 columns (16 bytes) or 1; units per staged row
  int stages, chunks;              // cp.async pipeline depth; chunks of 8 (ct2d_mma) or 16 (ct2d_mmh) channels
  int epi;                         // epilogue through shared memory with 4- or 2-float stores, 0: direct
  int wres;                        // ct2d_mmh: every chunk's weights resident (else one chunk's at a time)
};

// Implicit GEMM per image: D[co][pixel] = sum_{ci,kh,kw} W[co][ci,kh,kw] * X[ci,kh,kw][pixel].
// Block: BM = 16*MT output channels x (8 warps * NT*8) pixels; a warp owns NT*8 consecutive
// pixels of one output row and all BM channels, i.e. MT x NT m16n8 tiles.
// Shared memory per stage: the input tile with its halo as it lies in the NCHW input,
// [8 channels][row][col] (channel planes s.plane floats apart, s.plane % 32 == 8), then the
// chunk's weights as [tap][co][8 channels], the two 4-channel halves of a 32-byte row swapped
// when bit 2 of co is set. The input is copied 16 bytes (4 columns) at a time where the width
// allows (s.vec: the staged columns start at a multiple of 4, m = iw_base & 3 columns
// before the tile's first), else 4 bytes at a time; either way a warp copies whole row segments,
// coalesced. A B fragment (k = t, t + 4; pixel g) is two 4-byte shared loads at channel-plane
// offsets t and t + 4 and column g: banks 8 t + g, conflict-free at any pixel offset a tap starts
// at. A (the weights) is fetched with ldmatrix.x4. Per tap: MT ldmatrix + 2 NT loads, MT*NT MMAs.
// Weights arrive packed as wm[chunk][tap][co][8] (input channels innermost, zero-padded to a
// multiple of 8): TF32-rounded for SPLIT = 1; exact for SPLIT = 3, which splits both operands
// into hi + lo TF32 parts and runs a_hi*b_hi + a_hi*b_lo + a_lo*b_hi with per-chunk accumulators.
// ct2d_mmh (below) shares the block's geometry, the staging, the tap loop and the epilogue.

template <int MT, int NT>
__device__ __forceinline__ void mma_zero(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.f;
}

// The block's tile and the warp's place in it.
template <int MT, int NT, int KH, int KW>
struct MmaBlock {
  int tid, warp, lane, g, t, n, co0, oh0, ow0, ih_base, iw_base, wr, col0, pairs;
  bool active;
  __device__ __forceinline__ explicit MmaBlock(const MmaShape& s) {
    tid = threadIdx.x; warp = tid >> 5; lane = tid & 31; g = lane >> 2; t = lane & 3;
    const int cob = blockIdx.x % s.co_blocks, tile = blockIdx.x / s.co_blocks;  // channel blocks
    oh0 = (tile / s.tiles_w) * s.TR; ow0 = (tile % s.tiles_w) * s.TW;            // of a tile adjacent
    co0 = cob * 16 * MT;
    n = blockIdx.z;
    ih_base = oh0 + s.pad_h - (KH - 1) * s.dil_h;
    iw_base = ow0 + s.pad_w - (KW - 1) * s.dil_w;
    // this warp's pixels: output row oh0 + wr, columns ow0 + wc*NT*8 + [0, NT*8)
    const int wpr = s.TW / (NT * 8);
    wr = warp / wpr;
    col0 = (warp % wpr) * NT * 8;
    active = oh0 + wr < s.Hout && ow0 + col0 < s.Wout;
    pairs = active ? min(NT / 2, (s.Wout - ow0 - col0 + 15) / 16) : 0;  // n-tile pairs in range
  }
};

// Input staging: copy item (channel ck of 8, staged row r, unit u), unit u = columns [V u, V u + V)
// of the staged row. The per-block table tab[r * units + u] holds the unit's input offset
// ih * Win + iw (-1: outside the image, zero-filled) and its shared-memory offset
// (r * rowlen + V u) * 4 bytes; the thread's items advance by THREADS with a counter (no division).
struct MmaStager {
  const int2* tab;
  const float* xn;
  int hw, RG, ck0, rg0, step_ck, step_rg;
  int m;  // staged column 0 is input column iw_base - m
  // builds the table; the caller syncs the block before the first copy
  __device__ __forceinline__ void init(const MmaShape& s, int2* t, const float* x_image, int ih_base, int iw_base,
                                       int tid) {
    tab = t;
    xn = x_image;
    hw = s.Hin * s.Win;
    m = s.vec ? (iw_base & 3) : 0;
    RG = s.rows * s.units;
    for (int i = tid; i < RG; i += THREADS) {
      const int r = i / s.units, u = i - r * s.units;
      const int ih = ih_base + r, iw = iw_base - m + (s.vec ? 4 * u : u);
      const bool ok = ih >= 0 && ih < s.Hin && iw >= 0 && iw < s.Win;  // vec: Win % 4 == 0, iw % 4 == 0
      t[i] = make_int2(ok ? ih * s.Win + iw : -1, (r * s.rowlen + (s.vec ? 4 * u : u)) * 4);
    }
    // the thread's first item and its steps; offsets kept as running sums (32-bit: the host
    // checks that KC * Hin * Win fits)
    ck0 = tid / RG;
    rg0 = tid - ck0 * RG;
    step_ck = THREADS / RG;
    step_rg = THREADS - step_ck * RG;
  }
  // input channels [8 u, 8 u + 8) (zeros past Cin) into the 8 channel planes at dst (shared, bytes)
  __device__ __forceinline__ void copy(const MmaShape& s, int u, uint32_t dst) const {
    const float* xc = xn + (int64_t)min(u * KC, s.Cin - 1) * hw;  // a valid address where all are zeros
    const int cvalid = min(KC, s.Cin - u * KC);  // channels of this chunk inside Cin
    int ck = ck0, rg = rg0;
    uint32_t src = ck0 * hw;  // wraps harmlessly after the thread's last copy
    uint32_t d = dst + ck0 * s.plane * 4;
    auto copies = [&](auto bytes) {
      constexpr uint32_t B = decltype(bytes)::value;
#pragma unroll 2
      while (ck < KC) {
        const int2 e = tab[rg];
        const bool ok = e.x >= 0 && ck < cvalid;
        if constexpr (B == 16) cp_async16z(d + e.y, xc + (ok ? src + e.x : 0u), ok ? 16u : 0u);
        else cp_async4(d + e.y, xc + (ok ? src + e.x : 0u), ok ? 4u : 0u);
        ck += step_ck;
        src += step_ck * hw;
        d += step_ck * s.plane * 4;
        rg += step_rg;
        if (rg >= RG) rg -= RG, ++ck, src += hw, d += s.plane * 4;
      }
    };
    if (s.vec) copies(std::integral_constant<uint32_t, 16>{});
    else copies(std::integral_constant<uint32_t, 4>{});
  }
};

// One chunk's weights for the block's BM channels: 32-byte rows (8 TF32 or 16 fp16 input channels)
// at src + (tap * Cout + co) * 32, to [tap][co] rows at dst, 16-byte halves swapped when bit 2 of co
// is set (conflict-free ldmatrix).
template <int TAPS, int BM>
__device__ __forceinline__ void mma_copy_weights(const char* src, int Cout, uint32_t dst, int tid) {
  for (int i = tid; i < TAPS * BM * 2; i += THREADS) {
    const int half = i & 1, co = (i >> 1) % BM, tap = (i >> 1) / BM;
    cp_async16(dst + (tap * BM + co) * 32 + ((half ^ (co >> 2)) & 1) * 16,
               reinterpret_cast<const float*>(src + ((int64_t)tap * Cout + co) * 32 + half * 16));
  }
}

// ldmatrix lane address (bytes from the weights' start) of the A fragments: sub-matrix lane>>3 =
// (co half, k half) = (bit 0, bit 1); rows of 32 bytes
__device__ __forceinline__ uint32_t mma_a_lane(int lane) {
  return ((lane & 7) + ((lane >> 3) & 1) * 8) * 32 + (((lane >> 4) ^ (lane >> 2)) & 1) * 16;
}

// All taps of one chunk for one warp, acc += W x X: SPLIT 1 TF32 (m16n8k8), 3 3xTF32 (the caller's
// per-chunk accumulators), 0 fp16 (m16n8k16; the planes hold channel pairs as half2, so the same two
// loads give a B fragment of 16 channels). xs: the lane's B address in the chunk's planes at tap
// (0, 0)'s offset of the warp's first pixel (floats), ws: the lane's A address for tap 0 (bytes).
// FULL: every n-tile of the warp is inside the output (no per-pair guards in the hot loop).
template <int MT, int NT, int SPLIT, int KH, int KW, bool FULL>
__device__ __forceinline__ void mma_taps(float (&acc)[MT][NT][4], const float* xs, uint32_t ws, int rowstep,
                                         int khalf, int dil_w, int pairs) {
  constexpr int BM = 16 * MT;
#pragma unroll 1
  for (int kh = 0; kh < KH; ++kh) {
    const float* xrow = xs + (KH - 1 - kh) * rowstep;
    const uint32_t wrow = ws + kh * KW * BM * 32;
#pragma unroll
    for (int kw = 0; kw < KW; ++kw) {
      const float* xb = xrow + (KW - 1 - kw) * dil_w;
      uint32_t a[MT][4], b[NT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) ldsm_x4(a[i], wrow + (kw * BM + i * 16) * 32);
#pragma unroll
      for (int jp = 0; jp < NT / 2; ++jp) {
        if (FULL || jp < pairs) {
#pragma unroll
          for (int j = 2 * jp; j < 2 * jp + 2; ++j) {
            b[j][0] = __float_as_uint(xb[8 * j]);
            b[j][1] = __float_as_uint(xb[8 * j + khalf]);
          }
        }
      }
      uint32_t a_lo[SPLIT == 3 ? MT : 1][4], b_lo[SPLIT == 3 ? NT : 1][2];  // 3xTF32's lo parts
      if constexpr (SPLIT == 3) {
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int k = 0; k < 4; ++k) split_tf32(a[i][k], a_lo[i][k]);
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int k = 0; k < 2; ++k) split_tf32(b[j][k], b_lo[j][k]);
      }
#pragma unroll
      for (int jp = 0; jp < NT / 2; ++jp) {
        if (FULL || jp < pairs) {
#pragma unroll
          for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 2 * jp; j < 2 * jp + 2; ++j) {
              if constexpr (SPLIT == 3) {
                mma_tf32(acc[i][j], a_lo[i], b[j]);
                mma_tf32(acc[i][j], a[i], b_lo[j]);
              }
              if constexpr (SPLIT == 0) mma_f16(acc[i][j], a[i], b[j]);
              else mma_tf32(acc[i][j], a[i], b[j]);
            }
        }
      }
    }
  }
}
template <int MT, int NT, int SPLIT, int KH, int KW>
__device__ __forceinline__ void mma_chunk(float (&acc)[MT][NT][4], const float* xs, uint32_t ws, int rowstep,
                                          int khalf, int dil_w, int pairs) {
  if (pairs == NT / 2) mma_taps<MT, NT, SPLIT, KH, KW, true>(acc, xs, ws, rowstep, khalf, dil_w, pairs);
  else mma_taps<MT, NT, SPLIT, KH, KW, false>(acc, xs, ws, rowstep, khalf, dil_w, pairs);
}

// Output stores, by the output's element type: float (fp32 runs), or __nv_bfloat16 (bf16 runs: the
// fp32 result rounded once, to nearest). The epilogues below are written once for both; with float
// they are the plain fp32 stores. st_out2 and st_out4 need the pair's and the quad's alignment.
__device__ __forceinline__ void st_out1(float* p, float v) { *p = v; }
__device__ __forceinline__ void st_out1(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
// st_out1 as a streaming store (st.global.cs), for epilogues whose output is not read again
__device__ __forceinline__ void st_cs1(float* p, float v) { __stcs(p, v); }
__device__ __forceinline__ void st_cs1(__nv_bfloat16* p, float v) {
  __stcs(reinterpret_cast<unsigned short*>(p), __bfloat16_as_ushort(__float2bfloat16_rn(v)));
}
__device__ __forceinline__ void st_out2(float* p, float a, float b) { __stcs(reinterpret_cast<float2*>(p), make_float2(a, b)); }
__device__ __forceinline__ void st_out2(__nv_bfloat16* p, float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  __stcs(reinterpret_cast<unsigned*>(p), *reinterpret_cast<const unsigned*>(&v));
}
__device__ __forceinline__ void st_out4(float* p, float4 v) { __stcs(reinterpret_cast<float4*>(p), v); }
__device__ __forceinline__ void st_out4(__nv_bfloat16* p, float4 v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  __stcs(reinterpret_cast<uint2*>(p),
         make_uint2(*reinterpret_cast<const unsigned*>(&lo), *reinterpret_cast<const unsigned*>(&hi)));
}
// Input loads, by the input's element type: float, or __nv_bfloat16 widened (exactly) to fp32.
__device__ __forceinline__ float in_float(float v) { return v; }
__device__ __forceinline__ float in_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class OutT>
__device__ __forceinline__ bool pair_aligned(const OutT* p) { return (reinterpret_cast<uintptr_t>(p) & (2 * sizeof(OutT) - 1)) == 0; }

// The epilogue of an active warp, y = acc * o1 * o2 (SCALED; ct2d_mmh's operand scales) + bias.
// C fragment c0 = (g, 2t), c1 = (g, 2t+1), c2 = (g+8, 2t), c3 = (g+8, 2t+1).
// s.epi: through shared memory (the caller has synced the block once every warp is past the last
// chunk, so every stage is free): each warp moves its BM channel rows x NT*8 pixels in MT pieces of
// 16 rows through its own 16 x (NT*8 + 8)-float buffer (fragment pairs in: rows 8 mod 32 floats
// apart, conflict-free), then writes s.epi-float vectors along each channel row, so one store
// instruction writes 32 / (NT*8 / V) contiguous row runs instead of 8 channel rows' 32 bytes.
// Else the fragments directly (8-byte stores where aligned).
template <int MT, int NT, bool SCALED, class Block, class OutT>
__device__ __forceinline__ void mma_store(const MmaShape& s, const float (&acc)[MT][NT][4], const Block& b,
                                          const float* __restrict__ bias, OutT* __restrict__ y, float* smem,
                                          float o1 = 1.f, float o2 = 1.f) {
  auto val = [&](float v) { return SCALED ? v * o1 * o2 : v; };
  const int g = b.g, t = b.t;
  if (s.epi) {
    constexpr int LD = NT * 8 + 8;
    float* buf = smem + b.warp * 16 * LD;
    const int ow = b.ow0 + b.col0, ncols = min(NT * 8, s.Wout - ow);
    const int64_t cstride = (int64_t)s.Hout * s.Wout;
    OutT* yrow = y + (((int64_t)b.n * s.Cout + b.co0) * s.Hout + b.oh0 + b.wr) * s.Wout + ow;
    auto store = [&](auto vec) {
      constexpr int V = decltype(vec)::value, L = NT * 8 / V, RPI = 32 / L;
      const int r0 = b.lane / L, c = (b.lane % L) * V;
#pragma unroll
      for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int j = 0; j < NT; ++j)
            *reinterpret_cast<float2*>(buf + (g + 8 * h) * LD + 8 * j + 2 * t) =
                make_float2(val(acc[i][j][2 * h]), val(acc[i][j][2 * h + 1]));
        __syncwarp();
        if (c < ncols) {
#pragma unroll
          for (int r = r0; r < 16; r += RPI) {
            const float b0 = bias ? bias[b.co0 + 16 * i + r] : 0.f;
            OutT* dst = yrow + (16 * i + r) * cstride + c;
            if constexpr (V == 4) {
              float4 v = *reinterpret_cast<const float4*>(buf + r * LD + c);
              v.x += b0; v.y += b0; v.z += b0; v.w += b0;
              st_out4(dst, v);
            } else {
              float2 v = *reinterpret_cast<const float2*>(buf + r * LD + c);
              st_out2(dst, v.x + b0, v.y + b0);
            }
          }
        }
        __syncwarp();
      }
    };
    if (s.epi == 4) store(std::integral_constant<int, 4>{});
    else store(std::integral_constant<int, 2>{});
    return;
  }
  OutT* yn = y + (int64_t)b.n * s.Cout * s.Hout * s.Wout;
  const int oh = b.oh0 + b.wr;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int co = b.co0 + i * 16 + g + half * 8;
      const float b0 = bias ? bias[co] : 0.f;
      OutT* yrow = yn + ((int64_t)co * s.Hout + oh) * s.Wout;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int ow = b.ow0 + b.col0 + j * 8 + 2 * t;
        OutT* dst = yrow + ow;
        const float v0 = val(acc[i][j][half * 2]) + b0, v1 = val(acc[i][j][half * 2 + 1]) + b0;
        if (ow + 1 < s.Wout && (reinterpret_cast<uintptr_t>(dst) & (2 * sizeof(OutT) - 1)) == 0) {
          st_out2(dst, v0, v1);
        } else {
          if (ow < s.Wout) st_out1(dst, v0);
          if (ow + 1 < s.Wout) st_out1(dst + 1, v1);
        }
      }
    }
}

template <int MT, int NT, int SPLIT, int KH, int KW>
__global__ void __launch_bounds__(THREADS, MT * NT * SPLIT <= 16 ? 2 : 1)
    ct2d_mma(const float* __restrict__ x, const float* __restrict__ wm, const float* __restrict__ bias,
             float* __restrict__ y, const MmaShape s) {
  constexpr int BM = 16 * MT;
  constexpr int TAPS = KH * KW;
  constexpr int WS_SIZE = TAPS * BM * KC;
  extern __shared__ __align__(16) float smem[];
  const int xs_size = s.plane * KC;
  const uint32_t stage_bytes = (xs_size + WS_SIZE) * 4;
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const MmaBlock<MT, NT, KH, KW> b(s);
  MmaStager st;
  st.init(s, reinterpret_cast<int2*>(smem + s.stages * (xs_size + WS_SIZE)),
          x + (int64_t)b.n * s.Cin * s.Hin * s.Win, b.ih_base, b.iw_base, b.tid);
  __syncthreads();
  const char* wsrc = reinterpret_cast<const char*>(wm) + (int64_t)b.co0 * 32;
  auto load_chunk = [&](int chunk, int stage) {
    const uint32_t xs_s = smem_base + stage * stage_bytes;
    st.copy(s, chunk, xs_s);
    mma_copy_weights<TAPS, BM>(wsrc + (int64_t)chunk * TAPS * s.Cout * 32, s.Cout, xs_s + xs_size * 4, b.tid);
    cp_async_commit();
  };

  float acc[MT][NT][4];
  float part[SPLIT == 3 ? MT : 1][SPLIT == 3 ? NT : 1][4];
  mma_zero(acc);

  const uint32_t a_lane = mma_a_lane(b.lane);
  // B: lane (g, t) reads channel planes t and t + 4 at the warp's row and column col0 + g
  const float* xs_lane = smem + b.t * s.plane + b.wr * s.rowlen + b.col0 + b.g + st.m;
  const int rowstep = s.dil_h * s.rowlen, khalf = 4 * s.plane;

  const int S = s.stages, chunks = s.chunks;
  for (int c = 0; c < S - 1; ++c) {
    if (c < chunks) load_chunk(c, c);
    else cp_async_commit();
  }
  int stage = 0, next_stage = S - 1;  // stage of this chunk / of chunk + S - 1
  for (int chunk = 0; chunk < chunks; ++chunk) {
    if (S == 3) cp_async_wait_1();
    else cp_async_wait_0();
    __syncthreads();
    if (chunk + S - 1 < chunks) load_chunk(chunk + S - 1, next_stage);
    else cp_async_commit();
    next_stage = next_stage + 1 == S ? 0 : next_stage + 1;
    const int cur = stage;
    stage = stage + 1 == S ? 0 : stage + 1;
    if (!b.active) continue;
    const uint32_t ws_s = smem_base + cur * stage_bytes + xs_size * 4;
    const float* xs_c = xs_lane + cur * (xs_size + WS_SIZE);
    if constexpr (SPLIT == 3) {  // short tensor-core accumulation chains, fp32 adds across chunks
      mma_zero(part);
      mma_chunk<MT, NT, 3, KH, KW>(part, xs_c, ws_s + a_lane, rowstep, khalf, s.dil_w, b.pairs);
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int k = 0; k < 4; ++k) acc[i][j][k] += part[i][j][k];
    } else {
      mma_chunk<MT, NT, SPLIT, KH, KW>(acc, xs_c, ws_s + a_lane, rowstep, khalf, s.dil_w, b.pairs);
    }
  }
  if (s.epi) {
    cp_async_wait_0();
    __syncthreads();
  }
  if (!b.active) return;
  mma_store<MT, NT, false>(s, acc, b, bias, y, smem);
}

#if defined(CT2D_WGMMA)
// orders this thread's generic-proxy shared-memory accesses (and, after a barrier, the block's)
// before later async-proxy ones: cp.async writes read by the wgmma, slots rewritten by TMA
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// mbarriers (shared::cta): the producer's cp.async copies arrive on "stage full" when they land
// (cp.async.mbarrier.arrive.noinc, one arrival per producer thread); each consumer warp arrives on
// "stage free" once the MMAs that read the stage have completed. Waits use the phase parity.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// bulk copy engine (TMA, 1-D): bytes (multiple of 16, both addresses 16-byte aligned) from global
// to shared memory, completing as transaction bytes on the mbarrier
__device__ __forceinline__ void bulk_copy(uint32_t dst, const float* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// TMA (tensor copy): the box at coordinates (c0 innermost .. c3) of the tensor map, out-of-range
// elements zero-filled, to shared memory at dst (128-byte aligned), completing as transaction bytes
// on the mbarrier
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
#endif  // CT2D_WGMMA

// 1b. ct2d_mmh: ct2d_mma's TF32 class with one fp16 product per MMA (mma.sync m16n8k16). fp16 has
//    TF32's 11-bit significand (both round to nearest), its MMA does twice the work per instruction,
//    and a B fragment of 16 channels takes the same two 4-byte shared loads as TF32's of 8. The
//    weights arrive scaled by 2^ew, as fp16 [chunk of 16][tap][co][16] (the same 32-byte rows as
//    ct2d_mma's), and the output is scaled back. Every chunk's weights are staged once where the
//    block has all output channels and they fit (s.wres), else one chunk's at a time.
//    x is staged as fp32, 8 channels per copy, into a ring of three slots: on sm_90a builds by TMA
//    where x's rows are 16-byte multiples and x is 16-byte aligned (one tensor copy per slot issued
//    by one thread, out-of-range elements zero-filled, completion on the slot's mbarrier; a slot is
//    then exactly [8][rows][rowlen], rowlen and rows chosen so that a plane is 8 mod 16 floats),
//    else as in ct2d_mma (every thread's cp.async copies from the offset table; on 71 that loop was
//    a third of the block's instructions, ncu: TMA took 71 from 0.535 to 0.444 ms and 78 from 0.695
//    to 0.632, H200, one process). The slots are
//    converted in shared memory: per chunk of 16 channels, slot a (channels 0-7) and slot 1 (8-15)
//    become 8 planes of fp16 channel pairs over slot a (mmh_convert, in place). Per chunk: wait,
//    sync (the previous chunk's MMAs are done: its slot and the weights are free), copy the chunk's
//    weights (unless resident) and the next chunk's first 8 channels into the previous chunk's slot,
//    convert, wait for the weights, sync, copy the next chunk's other 8 channels into slot 1, MMAs.
//    The block takes x unscaled where the largest magnitude of what it staged (all the input its
//    outputs depend on) is in the fp16 range (wgf_unscaled). Otherwise it runs its tile again from
//    x scaled by 2^wgh_exp(its largest finite magnitude), measured first by a staging-only pass
//    where the first saw an inf. So no pre-pass, no host sync, and one pass in the common case.
template <int MODE>  // 0: unscaled, amax = max |x| (inf included); 1: finite amax only, no writes; 2: x * sc
__device__ __forceinline__ void mmh_convert(const MmaShape& s, float* xa, const float* xb, float sc, float& amax,
                                            int tid) {
  const int P = s.rows * s.rowlen;  // staged positions per plane (plane % 4 == 0, so 4 at a time stay inside)
  for (int q = 4 * tid; q < P; q += 4 * THREADS) {
    const int nv = P - q;
    // quarter h: 4 fp32 planes (slot a's 0-3, 4-7, slot 1's 0-3, 4-7) -> fp16 pair planes 2h, 2h + 1,
    // which lie over slot a's fp32 planes read in this or an earlier quarter
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const float* src = (h < 2 ? xa : xb) + (h & 1) * 4 * s.plane + q;
      float v[4][4];
#pragma unroll
      for (int k = 0; k < 4; ++k) *reinterpret_cast<float4*>(v[k]) = *reinterpret_cast<const float4*>(src + k * s.plane);
      if constexpr (MODE != 2) {
#pragma unroll
        for (int k = 0; k < 4; ++k)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float f = fabsf(v[k][e]);
            if (e == 0 || nv > e) amax = fmaxf(amax, MODE == 0 || f < INFINITY ? f : 0.f);  // fmaxf skips NaN
          }
      }
      if constexpr (MODE != 1) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          uint32_t w[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const __half2 p = MODE == 2 ? __floats2half2_rn(v[2 * j][e] * sc, v[2 * j + 1][e] * sc)
                                        : __floats2half2_rn(v[2 * j][e], v[2 * j + 1][e]);
            w[e] = *reinterpret_cast<const uint32_t*>(&p);
          }
          *reinterpret_cast<uint4*>(xa + (2 * h + j) * s.plane + q) = make_uint4(w[0], w[1], w[2], w[3]);
        }
      }
    }
  }
}

template <int MT, int NT, int KH, int KW, bool TMA, class OutT = float>
__global__ void __launch_bounds__(THREADS, 2)
    ct2d_mmh(const float* __restrict__ x, const __half* __restrict__ wh, int ew, const float* __restrict__ bias,
             OutT* __restrict__ y, const MmaShape s, const __grid_constant__ CUtensorMap xmap) {
  constexpr int BM = 16 * MT, TAPS = KH * KW;
  constexpr int W_BYTES = TAPS * BM * 32;
  extern __shared__ __align__(128) float mmh_smem[];  // TMA: slots 128-byte aligned
  float* smem = mmh_smem;
  __shared__ unsigned block_amax[2];  // of passes 0 and 1 (mode 1)
  __shared__ __align__(8) uint64_t xbar[3];  // TMA: slot i's copy has landed
  const int xs_size = s.plane * KC;  // floats per slot
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t w_s = smem_base + 3 * xs_size * 4;
  const MmaBlock<MT, NT, KH, KW> b(s);
  if (b.tid < 2) block_amax[b.tid] = 0;
  MmaStager st;
  const uint32_t bar0 = static_cast<uint32_t>(__cvta_generic_to_shared(xbar));
  [[maybe_unused]] uint32_t phase = 0;  // TMA: bit i, the parity of slot i's next copy
  if constexpr (TMA) {
#if defined(CT2D_WGMMA)
    st.m = b.iw_base & 3;  // the box starts at a multiple of 4 columns (16 bytes), as TMA needs
    if (b.tid < 3) mbar_init(bar0 + 8 * b.tid, 1);
    fence_proxy_async();  // the initialised barriers, seen by the tensor copies
#endif
  } else {
    st.init(s, reinterpret_cast<int2*>(smem + 3 * xs_size + (s.wres ? s.chunks : 1) * (W_BYTES / 4)),
            x + (int64_t)b.n * s.Cin * s.Hin * s.Win, b.ih_base, b.iw_base, b.tid);
  }
  __syncthreads();
  const char* wsrc = reinterpret_cast<const char*>(wh) + (int64_t)b.co0 * 32;
  auto slot = [&](int i) { return smem_base + i * xs_size * 4; };
  auto w_chunk = [&](int c) { return s.wres ? w_s + c * W_BYTES : w_s; };
  auto copy_weights = [&](int c) {
    mma_copy_weights<TAPS, BM>(wsrc + (int64_t)c * TAPS * s.Cout * 32, s.Cout, w_chunk(c), b.tid);
  };
  // input channels [8 u, 8 u + 8) into slot i: TMA, one box of 8 channel planes issued by thread 0
  // (the block has synced since every earlier access to the slot), else the block's cp.async copies
  auto stage = [&](int u, int i) {
    if constexpr (TMA) {
#if defined(CT2D_WGMMA)
      if (b.tid == 0) {
        fence_proxy_async();  // the slot's earlier generic accesses (conversion, epilogue) before the copy
        mbar_arrive_expect_tx(bar0 + 8 * i, xs_size * 4);
        tma_load_4d(slot(i), &xmap, b.iw_base - st.m, b.ih_base, u * KC, b.n, bar0 + 8 * i);
      }
#endif
    } else {
      st.copy(s, u, slot(i));
    }
  };
  auto landed = [&](int i) {  // TMA: wait for slot i's copy
#if defined(CT2D_WGMMA)
    mbar_wait(bar0 + 8 * i, (phase >> i) & 1);
    phase ^= 1u << i;
#endif
  };
  const uint32_t a_lane = mma_a_lane(b.lane);
  const float* xs_lane = smem + b.t * s.plane + b.wr * s.rowlen + b.col0 + b.g + st.m;
  const int rowstep = s.dil_h * s.rowlen, khalf = 4 * s.plane;
  const int subs = 2 * s.chunks;  // 8-channel copies

  float acc[MT][NT][4];
  float sc = 1.f;  // x's scale
  for (int pass = 0, mode = 0;; ++pass) {
    mma_zero(acc);
    float amax = 0.f;
    stage(0, 0);
    stage(1, 1);
    if (TMA && subs > 2) stage(2, 2);
    for (int c = 0; c < (s.wres ? s.chunks : 1); ++c) copy_weights(c);
    cp_async_commit();
    if (!TMA && subs > 2) stage(2, 2);
    cp_async_commit();
    int a = 0, o = 2;  // this chunk's slot (its channels 0-7, then the fp16 pairs); the previous chunk's
    for (int c = 0; c < s.chunks; ++c) {
      if (TMA) {
        landed(a);
        landed(1);
        if (c == 0) cp_async_wait_0();  // the weights
      } else if (c == 0) {
        cp_async_wait_1();
      } else {
        cp_async_wait_0();
      }
      __syncthreads();
      if (c > 0) {
        if (!s.wres) copy_weights(c);
        cp_async_commit();
        if (2 * c + 2 < subs) stage(2 * c + 2, o);
        cp_async_commit();
      }
      float* xa = smem + a * xs_size;
      if (mode == 0) mmh_convert<0>(s, xa, smem + xs_size, sc, amax, b.tid);
      else if (mode == 1) mmh_convert<1>(s, xa, smem + xs_size, sc, amax, b.tid);
      else mmh_convert<2>(s, xa, smem + xs_size, sc, amax, b.tid);
      if (c > 0) {  // the weights (the next chunk's first copy may fly)
        if (TMA) cp_async_wait_0();
        else cp_async_wait_1();
      }
      __syncthreads();
      if (2 * c + 3 < subs) stage(2 * c + 3, 1);
      cp_async_commit();
      if (b.active && mode != 1) mma_chunk<MT, NT, 0, KH, KW>(acc, xs_lane + a * xs_size, w_chunk(c) + a_lane, rowstep, khalf,
                                                             s.dil_w, b.pairs);
      const int tmp = a;
      a = o;
      o = tmp;
    }
    if (mode == 2) break;
    const unsigned m = __reduce_max_sync(0xffffffffu, __float_as_uint(amax));
    if (b.lane == 0 && m) atomicMax(&block_amax[pass], m);
    __syncthreads();  // also: every warp is past its last MMA
    const unsigned bm = block_amax[pass];
    if (mode == 0 && wgf_unscaled(bm)) break;
    if (mode == 0 && bm >= 0x7f800000u) {  // an inf: measure the finite values first
      mode = 1;
      continue;
    }
    sc = wgf_unscaled(bm) ? 1.f : ldexpf(1.f, wgh_exp(bm));
    mode = 2;
  }
  if (s.epi) {
    cp_async_wait_0();
    __syncthreads();
  }
  if (!b.active) return;
  mma_store<MT, NT, true>(s, acc, b, bias, y, smem, ldexpf(1.f, -ew), 1.f / sc);
}

#if defined(CT2D_WGMMA)
// 3. ct2d_wg / ct2d_wgs (stride 1, groups 1, TF32 class; built only for sm_90a, see ct2d_fast.py): the same
//    implicit GEMM as ct2d_mma, on the Hopper warpgroup MMA (wgmma), both operands read by the
//    tensor cores straight from shared memory. Warp-specialized, persistent block (one per SM,
//    looping over the (tile, image) items) of three warpgroups: one producer stages the input
//    with cp.async and the weights with the bulk copy engine, both signalling an mbarrier per
//    stage; two consumers issue the MMAs, each for 64 output channels (the wgmma M; A = weights)
//    x 256 pixels (the wgmma N; B = input).
//    The pixels are a "flattened" tile: output rows oh0 + r, columns ow0 + c for flat index
//    p = r * rowlen + c, rowlen = TW + (KW - 1) * dil_w, with c >= TW computed but never stored.
//    The input tile is staged with the same flat indexing (q = r * rowlen + c over the tile's
//    input rows and columns), so tap (kh, kw) reads the staged input at q = p + toff(kh, kw),
//    toff = (KH-1-kh) * dil_h * rowlen + (KW-1-kw) * dil_w: each tap is one m64n256k8 wgmma whose
//    B descriptor starts toff 16-byte rows further on. No im2col, no transpose pass.
//    Shared memory (no swizzle, K-major "core matrices" of 8 rows x 16 bytes): the input as two
//    planes (channels 0-3 / 4-7 of the chunk) of [q][4 channels]; the weights as
//    [tap][co / 8][channel half][co % 8][4 channels], exactly as the Python side packs them.
//    ct2d_wg is the one-warpgroup version (stages, then waits for, each chunk's MMAs itself); it
//    runs where three of its blocks fit on an SM, which hides its waits as well (see run_wg).
//    Measured and not kept: the 32-byte swizzle instead of the no-swizzle layout (no faster),
//    pipelined MMAs in the one-warpgroup kernel (fewer blocks per SM: slower).
constexpr int WG_THREADS = 128;   // one warpgroup
constexpr int WGS_THREADS = 384;  // producer + two consumer warpgroups
constexpr int WG_N = 256;         // pixels per consumer: the wgmma N

struct WgShape {
  int Cin, Hin, Win, Cout, Hout, Wout, KH, KW, pad_h, pad_w, dil_h, dil_w;
  int TW, TR, rowlen, S;           // output tile; flat row length; staged input positions
  int tiles_w, co_blocks, co8, chunks, stages;
  int cwn;                         // consumers on different 64-channel halves (2) or pixel halves (1)
  int wbytes, stage_bytes, tab_bytes;  // per stage: weights (64 cwn channels max), whole stage; offset table
  int epi_vec;                     // epilogue through shared memory (wg_epilogue_smem) with 4- or 2-float stores, 0: direct
  int stagger;                     // ct2d_wgs: consumer 1 runs this many chunks behind consumer 0 (0: in step)
  int raw;                         // ct2d_wgf: its producer's raw ring, bytes after the stages' start (0: none)
  int raw_rl, raw_rows;            // the ring's slots as TMA boxes [8 ch][raw_rows][raw_rl] (0: [8 ch][S], cp.async)
};

__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr >> 4) & 0x3FFF) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFF) << 32);  // layout type 0: no swizzle
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
// keep the compiler from moving accumulator accesses across the asynchronous MMAs
__device__ __forceinline__ void pin(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// the 128 accumulator registers of an m64n256 wgmma, as asm text and as operands
#define WG_ACC_REGS \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
  " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
  " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
  " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63," \
  " %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
  " %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95," \
  " %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
  " %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127},"
#define WG_ACC_OPERANDS(d) \
  "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]), "+f"((d)[4]), "+f"((d)[5]), "+f"((d)[6]), "+f"((d)[7]), \
  "+f"((d)[8]), "+f"((d)[9]), "+f"((d)[10]), "+f"((d)[11]), "+f"((d)[12]), "+f"((d)[13]), "+f"((d)[14]), "+f"((d)[15]), \
  "+f"((d)[16]), "+f"((d)[17]), "+f"((d)[18]), "+f"((d)[19]), "+f"((d)[20]), "+f"((d)[21]), "+f"((d)[22]), "+f"((d)[23]), \
  "+f"((d)[24]), "+f"((d)[25]), "+f"((d)[26]), "+f"((d)[27]), "+f"((d)[28]), "+f"((d)[29]), "+f"((d)[30]), "+f"((d)[31]), \
  "+f"((d)[32]), "+f"((d)[33]), "+f"((d)[34]), "+f"((d)[35]), "+f"((d)[36]), "+f"((d)[37]), "+f"((d)[38]), "+f"((d)[39]), \
  "+f"((d)[40]), "+f"((d)[41]), "+f"((d)[42]), "+f"((d)[43]), "+f"((d)[44]), "+f"((d)[45]), "+f"((d)[46]), "+f"((d)[47]), \
  "+f"((d)[48]), "+f"((d)[49]), "+f"((d)[50]), "+f"((d)[51]), "+f"((d)[52]), "+f"((d)[53]), "+f"((d)[54]), "+f"((d)[55]), \
  "+f"((d)[56]), "+f"((d)[57]), "+f"((d)[58]), "+f"((d)[59]), "+f"((d)[60]), "+f"((d)[61]), "+f"((d)[62]), "+f"((d)[63]), \
  "+f"((d)[64]), "+f"((d)[65]), "+f"((d)[66]), "+f"((d)[67]), "+f"((d)[68]), "+f"((d)[69]), "+f"((d)[70]), "+f"((d)[71]), \
  "+f"((d)[72]), "+f"((d)[73]), "+f"((d)[74]), "+f"((d)[75]), "+f"((d)[76]), "+f"((d)[77]), "+f"((d)[78]), "+f"((d)[79]), \
  "+f"((d)[80]), "+f"((d)[81]), "+f"((d)[82]), "+f"((d)[83]), "+f"((d)[84]), "+f"((d)[85]), "+f"((d)[86]), "+f"((d)[87]), \
  "+f"((d)[88]), "+f"((d)[89]), "+f"((d)[90]), "+f"((d)[91]), "+f"((d)[92]), "+f"((d)[93]), "+f"((d)[94]), "+f"((d)[95]), \
  "+f"((d)[96]), "+f"((d)[97]), "+f"((d)[98]), "+f"((d)[99]), "+f"((d)[100]), "+f"((d)[101]), "+f"((d)[102]), "+f"((d)[103]), \
  "+f"((d)[104]), "+f"((d)[105]), "+f"((d)[106]), "+f"((d)[107]), "+f"((d)[108]), "+f"((d)[109]), "+f"((d)[110]), "+f"((d)[111]), \
  "+f"((d)[112]), "+f"((d)[113]), "+f"((d)[114]), "+f"((d)[115]), "+f"((d)[116]), "+f"((d)[117]), "+f"((d)[118]), "+f"((d)[119]), \
  "+f"((d)[120]), "+f"((d)[121]), "+f"((d)[122]), "+f"((d)[123]), "+f"((d)[124]), "+f"((d)[125]), "+f"((d)[126]), "+f"((d)[127])

__device__ __forceinline__ void wgmma_m64n256k8(float (&d)[128], uint64_t da, uint64_t db) {
  asm volatile("{\nwgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 " WG_ACC_REGS " %128, %129, 1, 1, 1;\n}\n"
               : WG_ACC_OPERANDS(d)
               : "l"(da), "l"(db));
}

// Block coordinates shared by both kernels. pxb: flat pixels per block; cob_ch: channels per block.
struct WgBlock {
  int oh0, ow0, n, co0, co_b;  // co_b: channels staged (multiple of 8)
  int ih_base, iw_base;        // the input row and column of staged position 0
};
__device__ __forceinline__ WgBlock wg_block(const WgShape& s, int cob_ch, int bx, int n) {
  WgBlock b;
  const int cob = bx % s.co_blocks, tile = bx / s.co_blocks;
  b.oh0 = (tile / s.tiles_w) * s.TR;
  b.ow0 = (tile % s.tiles_w) * s.TW;
  b.n = n;
  b.co0 = cob * cob_ch;
  b.co_b = min(cob_ch, s.co8 * 8 - b.co0);
  b.ih_base = b.oh0 + s.pad_h - (s.KH - 1) * s.dil_h;
  b.iw_base = b.ow0 + s.pad_w - (s.KW - 1) * s.dil_w;
  return b;
}

// off[q] = ih * Win + iw of staged position q, or -1 outside the image (zero-filled)
__device__ __forceinline__ void wg_offsets(const WgShape& s, const WgBlock& b, int* off, int tid, int nthreads) {
  for (int q = tid; q < s.S; q += nthreads) {
    const int r = q / s.rowlen, c = q - r * s.rowlen;
    const int ih = b.ih_base + r, iw = b.iw_base + c;
    off[q] = (ih >= 0 && ih < s.Hin && iw >= 0 && iw < s.Win) ? ih * s.Win + iw : -1;
  }
}

// One chunk (8 input channels) into the stage at sb, by one warpgroup (tid 0..127): the weights
// (wg_stage_weights; ct2d_wgs copies them with the bulk copy engine instead, see wg_bulk_weights)
// and the input tile (wg_stage_input), as cp.async copies (ct2d_wg commits each chunk as one group). The input thread copies channel
// kk = 4 (warp & 1) + (lane & 3) of positions qs + 16 j: a warp instruction writes 8 positions x 16
// bytes = one 128-byte core matrix.
// Weights per tap: co_b * 32 contiguous bytes (16-byte pieces [co / 8][half][co % 8]).
__device__ __forceinline__ const float* wg_chunk_weights(const WgShape& s, const WgBlock& b, const float* wg,
                                                         int chunk) {
  return wg + ((int64_t)chunk * s.KH * s.KW * s.co8 * 8 + b.co0) * 8;
}
__device__ __forceinline__ void wg_stage_weights(const WgShape& s, const WgBlock& b, const float* __restrict__ wg,
                                                 uint32_t sb, int chunk, int tid) {
  const int taps = s.KH * s.KW;
  const float* wsrc = wg_chunk_weights(s, b, wg, chunk);
  if (b.co_b == s.co8 * 8) {  // all channels in one block: one contiguous range
    const int pieces = taps * b.co_b * 2;
#pragma unroll 4
    for (int i = tid; i < pieces; i += WG_THREADS) cp_async16(sb + i * 16, wsrc + i * 4);
  } else {
    for (int tap = 0; tap < taps; ++tap)
      for (int i = tid; i < b.co_b * 2; i += WG_THREADS)
        cp_async16(sb + (tap * b.co_b * 2 + i) * 16, wsrc + (int64_t)tap * s.co8 * 64 + i * 4);
  }
}
__device__ __forceinline__ void wg_stage_input(const WgShape& s, const WgBlock& b, const float* __restrict__ x,
                                               const int* off, uint32_t sb, int chunk, int tid) {
  const int warp = tid >> 5, lane = tid & 31;
  const int kk = (warp & 1) * 4 + (lane & 3), qs = (warp >> 1) * 8 + (lane >> 2);
  const int ci = chunk * 8 + kk;
  const bool ci_ok = ci < s.Cin;
  const float* xc = x + ((int64_t)b.n * s.Cin + (ci_ok ? ci : 0)) * s.Hin * s.Win;
  const uint32_t in_mask = ci_ok ? 0xffffffffu : 0u;  // a padding channel is all zero-fill
  // off[q] >= 0: copy 4 bytes from xc + off[q]; -1: zero-fill (source xc, 0 bytes read)
  uint32_t d = sb + s.wbytes + (warp & 1) * s.S * 16 + (lane & 3) * 4 + qs * 16;
#pragma unroll 4
  for (int q = qs; q < s.S; q += 16, d += 256) {
    const int o = off[q];
    const uint32_t bytes = (uint32_t)(~o >> 31) & in_mask & 4u;
    cp_async4(d, xc + (bytes ? o : 0), bytes);
  }
}

// All taps of one chunk for one consumer warpgroup: channels co_w.. of the block (A rows start
// co_w * 32 bytes into each tap's weights), flat pixels p0..p0+255.
__device__ __forceinline__ void wg_mma_chunk(const WgShape& s, const WgBlock& b, float (&acc)[128], uint32_t sb,
                                             int co_w, int p0) {
  const uint32_t a0 = sb + co_w * 32, a_step = b.co_b * 32, plane = s.S * 16;
  const uint32_t b0 = sb + s.wbytes + p0 * 16;
  // the descriptors' start fields count 16-byte units: each tap only adds to them (tap 0 reads
  // the input at toff = (KH-1) * dil_h * rowlen + (KW-1) * dil_w, each kw one dil_w less, each
  // kh one dil_h * rowlen less); no field can carry, the addresses stay below 256 KB
  uint64_t da = wg_desc(a0, 128, 256);
  const uint64_t db0 = wg_desc(b0 + ((s.KH - 1) * s.dil_h * s.rowlen + (s.KW - 1) * s.dil_w) * 16, plane, 128);
  const uint32_t da_step = a_step >> 4, row_step = s.dil_h * s.rowlen;
#pragma unroll 1
  for (int kh = 0; kh < s.KH; ++kh) {
    uint64_t db = db0 - (uint64_t)(kh * row_step);
#pragma unroll 1
    for (int kw = 0; kw < s.KW; ++kw) {
      wgmma_m64n256k8(acc, da, db);
      da += da_step;
      db -= s.dil_w;
    }
  }
}

// D fragment of warp w of a consumer: channel rows 16 w + g (+8), pixel columns 8 i + 2 t (+1)
template <class OutT>
__device__ __forceinline__ void wg_epilogue(const WgShape& s, const WgBlock& b, const float (&acc)[128],
                                            const float* __restrict__ bias, OutT* __restrict__ y, int tid,
                                            int co_w, int p0, float scale = 1.f) {
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  OutT* yn = y + (int64_t)b.n * s.Cout * s.Hout * s.Wout;
  float bv[2];
  OutT* yrow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int co = b.co0 + co_w + 16 * warp + g + 8 * h;
    bv[h] = (bias && co < s.Cout) ? bias[co] : 0.f;
    yrow[h] = co < s.Cout ? yn + (int64_t)co * s.Hout * s.Wout : nullptr;
  }
  const int p = p0 + 2 * t;
  int r = p / s.rowlen, c = p - r * s.rowlen;  // flat pixel p0 + 8 i + 2 t
  if (s.TW % 2 == 0 && s.rowlen % 2 == 0 && s.Wout % 2 == 0 && s.rowlen >= 8) {
    // pairs (c even) never straddle a row and are 8-byte aligned, and a pair is inside the tile
    // and the output iff its first pixel is (cmax is even); c moves by 8 and wraps at most once:
    // branch-free offset and bounds updates, one float2 store per pair and channel row
    const int rmax = min(s.TR, s.Hout - b.oh0), cmax = min(s.TW, s.Wout - b.ow0);
    int off = (b.oh0 + r) * s.Wout + b.ow0 + c;  // within a channel plane (< 2^31, checked on the host)
    const int wrap_off = s.Wout - s.rowlen;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      if (c < cmax && r < rmax) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (yrow[h] != nullptr)
            st_out2(yrow[h] + off, fmaf(acc[4 * i + 2 * h], scale, bv[h]), fmaf(acc[4 * i + 2 * h + 1], scale, bv[h]));
      }
      c += 8;
      off += 8;
      const bool wrap = c >= s.rowlen;
      c -= wrap ? s.rowlen : 0;
      r += wrap;
      off += wrap ? wrap_off : 0;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int oh = b.oh0 + r, ow = b.ow0 + c;
    // the pair's second pixel: same row, or the first column of the next row
    const int r2 = c + 1 < s.rowlen ? r : r + 1, c2 = c + 1 < s.rowlen ? c + 1 : 0;
    const bool ok1 = c < s.TW && r < s.TR && oh < s.Hout && ow < s.Wout;
    const bool ok2 = c2 < s.TW && r2 < s.TR && b.oh0 + r2 < s.Hout && b.ow0 + c2 < s.Wout;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (yrow[h] == nullptr) continue;
      const float v0 = fmaf(acc[4 * i + 2 * h], scale, bv[h]), v1 = fmaf(acc[4 * i + 2 * h + 1], scale, bv[h]);
      OutT* dst = yrow[h] + (int64_t)oh * s.Wout + ow;
      if (ok1 && ok2 && r2 == r && pair_aligned(dst)) {
        st_out2(dst, v0, v1);
      } else {
        if (ok1) st_out1(dst, v0);
        if (ok2) st_out1(yrow[h] + (int64_t)(b.oh0 + r2) * s.Wout + b.ow0 + c2, v1);
      }
    }
    c += 8;
    while (c >= s.rowlen) {
      c -= s.rowlen;
      ++r;
    }
  }
}

// The wgmma kernels' epilogue through shared memory (s.epi_vec = VEC): each consumer warp moves its
// 16 channel rows x 256 pixels in four pieces of 64 pixels through its own 16 x 72-float buffer in
// a stage that every MMA has finished reading (ct2d_wgs: the item's last; ct2d_wg: the first). The fragments go in with 8-byte
// stores (rows 8 mod 32 floats apart: conflict-free); each warp store then writes VEC-float
// vectors of 64 / VEC consecutive flat pixels of one channel (32 / VEC lanes per channel row), so
// one store instruction touches 2-3 contiguous output runs instead of 8 channel rows. VEC = 4 needs
// TW, rowlen and Wout multiples of 4 (no vector straddles a row, all 16-byte aligned), VEC = 2 even.
constexpr int WGE_LD = 72;                           // buffer row stride, floats
constexpr int WGE_WARP_BYTES = 16 * WGE_LD * 4;      // one consumer warp's buffer
__device__ __forceinline__ void st_shared_f2(uint32_t a, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(x), "f"(y) : "memory");
}
template <int VEC, class OutT>
__device__ __forceinline__ void wg_epilogue_smem(const WgShape& s, const WgBlock& b, const float (&acc)[128],
                                                 const float* __restrict__ bias, OutT* __restrict__ y, int tid,
                                                 int co_w, int p0, uint32_t buf, float scale = 1.f) {
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int co_base = b.co0 + co_w + 16 * warp;
  const int nrows = min(16, s.Cout - co_base);  // rows of real channels (may be <= 0)
  float bv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int co = co_base + g + 8 * h;
    bv[h] = (bias && co < s.Cout) ? bias[co] : 0.f;
  }
  constexpr int LPR = 64 / VEC;            // lanes per channel row
  constexpr int RPI = 32 / LPR;            // channel rows per store instruction
  const int sub = lane / LPR, px = VEC * (lane % LPR);
  const int64_t plane = (int64_t)s.Hout * s.Wout;
  const int rmax = min(s.TR, s.Hout - b.oh0), cmax = min(s.TW, s.Wout - b.ow0);
  OutT* yc = y + ((int64_t)b.n * s.Cout + co_base + sub) * plane + (int64_t)b.oh0 * s.Wout + b.ow0;
  const uint32_t rd = buf + (sub * WGE_LD + px) * 4;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
#pragma unroll
    for (int ii = 0; ii < 8; ++ii) {
      const int i = 8 * k + ii;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        st_shared_f2(buf + ((g + 8 * h) * WGE_LD + 8 * ii + 2 * t) * 4, fmaf(acc[4 * i + 2 * h], scale, bv[h]),
                     fmaf(acc[4 * i + 2 * h + 1], scale, bv[h]));
    }
    __syncwarp();
    const int q = p0 + 64 * k + px, r = q / s.rowlen, c = q - r * s.rowlen;
    if (c < cmax && r < rmax) {
      OutT* dst = yc + r * s.Wout + c;
#pragma unroll
      for (int it = 0; it < 16 / RPI; ++it) {
        if (RPI * it + sub < nrows) {
          const uint32_t a = rd + RPI * it * WGE_LD * 4;
          if (VEC == 4) {
            float4 v;
            asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                         : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a) : "memory");
            st_out4(dst + RPI * it * plane, v);
          } else {
            float2 v;
            asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(a) : "memory");
            st_out2(dst + RPI * it * plane, v.x, v.y);
          }
        }
      }
    }
    __syncwarp();
  }
}

// ct2d_wgs: one chunk's weights with the bulk copy engine, issued by one producer warp: one copy
// where the block has all channels (contiguous), else one per tap. Lane 0 announces the bytes on
// the stage's "full" barrier (one of its arrivals).
__device__ __forceinline__ void wg_bulk_weights(const WgShape& s, const WgBlock& b, const float* __restrict__ wg,
                                                uint32_t sb, int chunk, int lane, uint32_t bar) {
  const int taps = s.KH * s.KW;
  const uint32_t tap_bytes = b.co_b * 32;
  const float* wsrc = wg_chunk_weights(s, b, wg, chunk);
  if (lane == 0) mbar_arrive_expect_tx(bar, taps * tap_bytes);
  if (b.co_b == s.co8 * 8) {
    if (lane == 0) bulk_copy(sb, wsrc, taps * tap_bytes, bar);
  } else {
    for (int tap = lane; tap < taps; tap += 32) bulk_copy(sb + tap * tap_bytes, wsrc + (int64_t)tap * s.co8 * 64, tap_bytes, bar);
  }
}
constexpr int WGS_MAX_STAGES = 5;
constexpr int WGR_SLOTS = 3;  // ct2d_wgf's raw ring (WgdFp16Ops)
constexpr int kWgSmemMax = 227 * 1024 - 1024;  // dynamic shared memory: 227 KB per block less the static barriers

// Warp-specialized and persistent: each block takes the work items (tile, image) blockIdx.x,
// blockIdx.x + gridDim.x, ... Warpgroup 0 stages chunk c of an item into stage g % S (g counts the
// block's chunks over all its items) once the consumers have released it; its copies signal "full"
// themselves when they land, so the producer never waits for a copy and runs up to S chunks ahead,
// into the next item while the consumers write this one out. Warpgroups 1 and 2 run the MMAs,
// keeping one chunk's MMAs in flight while the next chunk's are issued, and release a stage when
// its MMAs have completed. Ops supplies what differs between the TF32 kernel (WgsTf32Ops) and the
// fp16 ones (WghFp16Ops for ct2d_wgh, WgfFp16Ops for ct2d_wgf, below): a chunk's copies into a
// stage, its MMAs, the output scale, and whether this launch has nothing to do (skip).
__device__ __forceinline__ void producer_sync() { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }
// a producer thread's own state across its chunks (Ops::kDirect): the largest finite magnitude it
// staged (bits), the raw ring's shared address, and where its slots are filled by TMA, their
// mbarriers' shared address and parities (bit i: slot i's next completion)
struct WgProducer {
  unsigned amax;
  uint32_t raw, rbar, rphase;
};
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 2, 256;\n" ::: "memory"); }
// What an Ops has unless it says otherwise: every launch runs, nothing before an item's chunks or
// after the producer's last, consumers in step, the input staged with cp.async copies that arrive
// on "full" themselves.
struct WgOpsDefaults {
  __device__ __forceinline__ bool skip() const { return false; }
  __device__ __forceinline__ void begin(const WgShape&, const WgBlock&, const int*, int, WgProducer&) const {}
  __device__ __forceinline__ void done(const WgProducer&, int) const {}
  static constexpr bool kStagger = false;  // staggered consumers (s.stagger) compiled in
  static constexpr bool kDirect = false;   // stage() writes the stage with shared stores (plain arrival)
  static constexpr bool kTable = true;     // stage() reads the offset table (wg_offsets)
};
struct WgsTf32Ops : WgOpsDefaults {
  const float* __restrict__ x;
  const float* __restrict__ wg;
  __device__ __forceinline__ void stage(const WgShape& s, const WgBlock& b, const int* off, uint32_t sb, int c, int tid,
                                        uint32_t full, WgProducer&) const {
    if (tid < 32) wg_bulk_weights(s, b, wg, sb, c, tid, full);
    wg_stage_input(s, b, x, off, sb, c, tid);
  }
  __device__ __forceinline__ void mma(const WgShape& s, const WgBlock& b, float (&acc)[128], uint32_t sb, int co_w,
                                      int p0) const {
    wg_mma_chunk(s, b, acc, sb, co_w, p0);
  }
  __device__ __forceinline__ float scale() const { return 1.f; }
};
template <class Ops, class OutT = float>
__global__ void __launch_bounds__(WGS_THREADS, 1)
    ct2d_wgs(const __grid_constant__ Ops ops, const float* __restrict__ bias, OutT* __restrict__ y, const WgShape s, int gx,
             int items) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (ops.skip()) return;  // ct2d_wgf: the launch that is not for this call's x (see WgfFp16Ops)
  // its own name: ct2d_mma declares `smem` 16-byte aligned, and the TMA slots need 128 bytes
  extern __shared__ __align__(128) float wgs_smem[];
  __shared__ __align__(8) uint64_t bars[2 * WGS_MAX_STAGES + WGR_SLOTS];  // full[S], free[S], raw ring (TMA)
  int* off = reinterpret_cast<int*>(wgs_smem);
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(wgs_smem)) + s.tab_bytes;
  const uint32_t full0 = static_cast<uint32_t>(__cvta_generic_to_shared(bars)), free0 = full0 + 8 * WGS_MAX_STAGES;
  const int S = s.stages, chunks = s.chunks, wgi = threadIdx.x >> 7, tid = threadIdx.x & 127;
  if (threadIdx.x < S) {
    mbar_init(full0 + 8 * threadIdx.x, WG_THREADS + 1);  // one per producer thread, one for the weights
    mbar_init(free0 + 8 * threadIdx.x, 8);               // one per consumer warp
  }
  const uint32_t rbar0 = free0 + 8 * WGS_MAX_STAGES;
  if (threadIdx.x < WGR_SLOTS) mbar_init(rbar0 + 8 * threadIdx.x, 1);  // the TMA copy's arrival
  fence_proxy_async();  // the initialised barriers, seen by the tensor copies
  __syncthreads();  // barrier initialisation visible to all
  if (wgi == 0) {
    // stage st of the block's chunk g = st + S k; k's parity is ph (incremental: no division)
    int g = 0, st = 0, ph = 0;
    WgProducer pr{0u, base + s.raw, rbar0, 0u};
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      const WgBlock b = wg_block(s, 64 * s.cwn, item % gx, item / gx);
      producer_sync();  // every producer thread has issued the previous item's copies
      if constexpr (Ops::kTable) wg_offsets(s, b, off, tid, WG_THREADS);
      producer_sync();
      ops.begin(s, b, off, tid, pr);
      for (int c = 0; c < chunks; ++c, ++g) {
        if (g >= S) mbar_wait(free0 + 8 * st, ph ^ 1);  // consumers are done with chunk g - S
        ops.stage(s, b, off, base + st * s.stage_bytes, c, tid, full0 + 8 * st, pr);
        if constexpr (Ops::kDirect) {
          fence_proxy_async();  // this thread's shared stores, seen by the wgmma (async proxy)
          mbar_arrive(full0 + 8 * st);
        } else {
          cp_async_mbar_arrive_noinc(full0 + 8 * st);  // arrives once this thread's copies have landed
        }
        if (++st == S) st = 0, ph ^= 1;
      }
    }
    cp_async_wait_0();
    ops.done(pr, tid);
    return;
  }
  const int w = wgi - 1;
  const int co_w = (w % s.cwn) * 64, p0 = (w / s.cwn) * WG_N;
  const float scale = ops.scale();
  // staggered consumers: consumer 1 starts once consumer 0 has issued s.stagger chunks, and stays
  // that far behind, so one consumer's epilogue runs while the other's MMAs keep the tensor cores
  // busy (each alone can issue them at the full rate); the stages are released by both
  if (Ops::kStagger && s.stagger && w == 1) asm volatile("bar.sync 3, 256;\n" ::: "memory");
  int st = 0, ph = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const WgBlock b = wg_block(s, 64 * s.cwn, item % gx, item / gx);
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    int prev = 0;
    for (int c = 0; c < chunks; ++c) {
      mbar_wait(full0 + 8 * st, ph);
      fence_proxy_async();  // the cp.async (generic proxy) writes, seen by the wgmma (async proxy)
      pin(acc);
      wg_fence();
      ops.mma(s, b, acc, base + st * s.stage_bytes, co_w, p0);
      wg_commit();
      wg_wait1();  // chunk c - 1's MMAs are done: its stage can be refilled
      pin(acc);
      if (c >= 1 && (tid & 31) == 0) mbar_arrive(free0 + 8 * prev);
      if (Ops::kStagger && s.stagger && w == 0 && item == (int)blockIdx.x && c == s.stagger - 1)
        asm volatile("bar.arrive 3, 256;\n" ::: "memory");
      prev = st;
      if (++st == S) st = 0, ph ^= 1;
    }
    wg_wait0();
    pin(acc);
    if (Ops::kStagger && s.epi_vec && s.stagger) {
      // staggered: each warp's own buffer after the stages; the item's last stage is released first
      if ((tid & 31) == 0) mbar_arrive(free0 + 8 * prev);
      const uint32_t buf = base + S * s.stage_bytes + (4 * w + (tid >> 5)) * WGE_WARP_BYTES;
      if (s.epi_vec == 4) wg_epilogue_smem<4>(s, b, acc, bias, y, tid, co_w, p0, buf, scale);
      else wg_epilogue_smem<2>(s, b, acc, bias, y, tid, co_w, p0, buf, scale);
    } else if (s.epi_vec) {
      // the last chunk's stage is the epilogue's buffer once both consumers' MMAs have read it; it
      // is released after the epilogue (the fence orders these generic accesses before the
      // producer's next copies into it)
      consumer_sync();
      const uint32_t buf = base + prev * s.stage_bytes + (4 * w + (tid >> 5)) * WGE_WARP_BYTES;
      if (s.epi_vec == 4) wg_epilogue_smem<4>(s, b, acc, bias, y, tid, co_w, p0, buf, scale);
      else wg_epilogue_smem<2>(s, b, acc, bias, y, tid, co_w, p0, buf, scale);
      fence_proxy_async();
      __syncwarp();
      if ((tid & 31) == 0) mbar_arrive(free0 + 8 * prev);
    } else {
      if ((tid & 31) == 0) mbar_arrive(free0 + 8 * prev);  // the item's last chunk
      wg_epilogue(s, b, acc, bias, y, tid, co_w, p0, scale);
    }
  }
#endif
}

// One warpgroup: stages chunk c + S - 1 (into the stage chunk c - 1 used), then issues chunk c's
// MMAs and waits for them.
__global__ void __launch_bounds__(WG_THREADS, 3)
    ct2d_wg(const float* __restrict__ x, const float* __restrict__ wg, const float* __restrict__ bias,
            float* __restrict__ y, const WgShape s) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) float smem[];
  int* off = reinterpret_cast<int*>(smem);
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + s.tab_bytes;
  const WgBlock b = wg_block(s, 64, blockIdx.x, blockIdx.y);
  const int tid = threadIdx.x;
  wg_offsets(s, b, off, tid, WG_THREADS);
  __syncthreads();
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  const int S = s.stages, chunks = s.chunks;
  auto stage = [&](uint32_t sb, int c) {
    wg_stage_weights(s, b, wg, sb, c, tid);
    wg_stage_input(s, b, x, off, sb, c, tid);
  };
  for (int c = 0; c < S - 1; ++c) {
    if (c < chunks) stage(base + c * s.stage_bytes, c);
    cp_async_commit();
  }
  for (int c = 0; c < chunks; ++c) {
    if (S == 3) cp_async_wait_1();
    else cp_async_wait_0();
    fence_proxy_async();
    __syncthreads();  // chunk c landed for all threads; every MMA of chunk c - 1 has completed
    if (c + S - 1 < chunks) stage(base + ((c + S - 1) % S) * s.stage_bytes, c + S - 1);
    cp_async_commit();
    pin(acc);
    wg_fence();
    wg_mma_chunk(s, b, acc, base + (c % S) * s.stage_bytes, 0, 0);
    wg_commit();
    wg_wait0();
    pin(acc);
  }
  if (s.epi_vec) {  // no copies are in flight: stage 0 is the epilogue's buffer once every MMA is done
    __syncthreads();
    const uint32_t buf = base + (tid >> 5) * WGE_WARP_BYTES;
    if (s.epi_vec == 4) wg_epilogue_smem<4>(s, b, acc, bias, y, tid, 0, 0, buf);
    else wg_epilogue_smem<2>(s, b, acc, bias, y, tid, 0, 0, buf);
  } else {
    wg_epilogue(s, b, acc, bias, y, tid, 0, 0);
  }
#endif
}

// 4. ct2d_wgh (stride 1, groups 1, fp32 class; sm_90a): ct2d_wgs's implicit GEMM with each fp32
//    product as three fp16 products on the warpgroup MMA ("3xFP16"), which runs at twice the
//    TF32 rate, so three k16 MMAs cost 1.5 TF32 MMAs where 3xTF32 would cost 3. Both operands are
//    scaled by powers of two (x by 2^ex from its largest finite magnitude, computed on the device
//    per call; the weights by 2^ew, on the Python side per weight version) so that they lie below
//    2^15, and split as v = hi + lo with hi = fp16(v), lo = fp16(v - hi): |v - hi - lo| <=
//    2^-22 |v| for normal parts (2^-25 absolute in the scaled units below that). Each tap runs
//    a_lo*b_hi + a_hi*b_lo + a_hi*b_hi (a_lo*b_lo ~ 2^-22 dropped) into one fp32 accumulator,
//    and the epilogue multiplies by 2^-(ex + ew) (exact) before adding the bias. A pre-pass
//    (fp16_convert) writes x's scaled parts as [hi, lo][n][ci / 8][ih * Win + iw][ci % 8] (16 bytes
//    per pixel and 8 channels), so the producer stages the input with 16-byte cp.async copies.
//    Block: 64 output channels x two consumers on 256-pixel halves of 512 flat pixels (ct2d_wgs's
//    pixel-halves layout); a chunk is 16 input channels (the k16); a stage holds the chunk's weights
//    [hi, lo][tap][co / 8][ci half][co % 8][8 ci] (the Python side's packing, per 64-channel block)
//    and the input as four planes [hi ci 0-7, hi ci 8-15, lo ci 0-7, lo ci 8-15] of [q][8 ci].
//    The tensor cores' accumulation error grows with the number of MMAs into one accumulator
//    (chunks * taps * 3): rel L2 against float64 measured on an H200 (x uniform in [0, 1), the
//    default init) 2.1e-6 at 108, 3.3e-6 at 180, 4.3e-6 at 216, 6.9e-6 at 360, 1.4e-5 at 864,
//    against the fp32 class's 1e-5. run_wgh applies up to kWghMaxChain (about half the tolerance);
//    longer chains run ct2d_mma's 3xTF32 with its per-chunk fp32 adds (5e-7 to 1.2e-6 at any Cin).
constexpr int kWghMaxChain = 240;

__device__ __forceinline__ void wgmma_m64n256k16_f16(float (&d)[128], uint64_t da, uint64_t db) {
  asm volatile("{\nwgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " WG_ACC_REGS " %128, %129, 1, 1, 1, 0, 0;\n}\n"
               : WG_ACC_OPERANDS(d)
               : "l"(da), "l"(db));
}

// Largest finite |x| as float bits into *out (zeroed before).
__global__ void wgh_amax(const float* __restrict__ x, int64_t n, unsigned* __restrict__ out) {
  unsigned m = 0;
  const int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
  auto take = [&](float v) { m = finite_amax(m, v); };
  if ((reinterpret_cast<uintptr_t>(x) & 15) == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (int64_t i = i0; i < n / 4; i += step) {
      const float4 v = __ldcs(x4 + i);
      take(v.x); take(v.y); take(v.z); take(v.w);
    }
    for (int64_t i = n / 4 * 4 + i0; i < n; i += step) take(x[i]);
  } else {
    for (int64_t i = i0; i < n; i += step) take(x[i]);
  }
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0 && m) atomicMax(out, m);
}

// One chunk's input planes by the producer warpgroup (P parts: [hi ci 0-7, hi ci 8-15, lo ci 0-7,
// lo ci 8-15] for P = 2, the first two for P = 1): with P = 2 warp w copies plane w, with P = 1 warps
// w and w + 2 share plane w % 2 (alternate 32-position runs); 16 bytes per position, so a warp
// instruction copies 512 contiguous bytes either side.
template <int P>
__device__ __forceinline__ void wgh_stage_input(const WgShape& s, const WgBlock& b, const uint4* __restrict__ xs,
                                                int64_t half_elems, const int* off, uint32_t sb, int chunk, int tid) {
  constexpr int QS = 64 / P;  // positions between a lane's copies
  const int warp = tid >> 5, lane = tid & 31, hw = s.Hin * s.Win;
  const int plane = P == 2 ? warp : (warp & 1), q0 = P == 2 ? lane : lane + 32 * (warp >> 1);
  const uint4* src = xs + (plane >> 1) * half_elems + ((int64_t)b.n * 2 * s.chunks + 2 * chunk + (plane & 1)) * hw;
  uint32_t d = sb + s.wbytes + plane * s.S * 16 + q0 * 16;
#pragma unroll 4
  for (int q = q0; q < s.S; q += QS, d += QS * 16) {
    const int o = off[q];
    cp_async16z(d, reinterpret_cast<const float*>(src + (o >= 0 ? o : 0)), o >= 0 ? 16u : 0u);
  }
}

// All taps of one chunk for one consumer: flat pixels p0..p0+255, the block's 64 channels; P = 2:
// a_lo*b_hi + a_hi*b_lo + a_hi*b_hi per tap (3xFP16), P = 1: a_hi*b_hi.
template <int P>
__device__ __forceinline__ void wgh_mma_chunk(const WgShape& s, float (&acc)[128], uint32_t sb, int p0) {
  const uint32_t plane = s.S * 16, bh = sb + s.wbytes + p0 * 16;
  uint64_t da = wg_desc(sb, 128, 256);
  const uint64_t da_lo = (uint64_t)(s.wbytes / 2) >> 4, db_lo = (uint64_t)(2 * plane) >> 4;
  const uint64_t db0 = wg_desc(bh + ((s.KH - 1) * s.dil_h * s.rowlen + (s.KW - 1) * s.dil_w) * 16, plane, 128);
  const uint32_t row_step = s.dil_h * s.rowlen;
#pragma unroll 1
  for (int kh = 0; kh < s.KH; ++kh) {
    uint64_t db = db0 - (uint64_t)(kh * row_step);
#pragma unroll 1
    for (int kw = 0; kw < s.KW; ++kw) {
      if (P == 2) {
        wgmma_m64n256k16_f16(acc, da + da_lo, db);  // the small terms first
        wgmma_m64n256k16_f16(acc, da, db + db_lo);
      }
      wgmma_m64n256k16_f16(acc, da, db);
      da += (64 * 32) >> 4;  // the next tap's 64 x 16 weights
      db -= s.dil_w;
    }
  }
}

// What ct2d_wgh (P = 2) and ct2d_wgf (P = 1) share: a chunk's stage (the weights of the block's 64
// channels, P x taps x 64 x 16 fp16, with one contiguous bulk copy; the input planes) and its MMAs.
__device__ __forceinline__ void wgh_bulk_weights(const WgShape& s, const WgBlock& b, const __half* __restrict__ wh,
                                                 uint32_t sb, int c, uint32_t full) {
  const __half* src = wh + ((int64_t)(b.co0 / 64) * s.chunks + c) * (s.wbytes / 2);
  mbar_arrive_expect_tx(full, s.wbytes);
  bulk_copy(sb, reinterpret_cast<const float*>(src), s.wbytes, full);
}
template <int P>
struct WgFp16Stage : WgOpsDefaults {
  const uint4* __restrict__ xs;
  int64_t half_elems;
  const __half* __restrict__ wh;
  __device__ __forceinline__ void stage(const WgShape& s, const WgBlock& b, const int* off, uint32_t sb, int c, int tid,
                                        uint32_t full, WgProducer&) const {
    if (tid == 0) wgh_bulk_weights(s, b, wh, sb, c, full);
    wgh_stage_input<P>(s, b, xs, half_elems, off, sb, c, tid);
  }
  __device__ __forceinline__ void mma(const WgShape& s, const WgBlock&, float (&acc)[128], uint32_t sb, int,
                                      int p0) const {
    wgh_mma_chunk<P>(s, acc, sb, p0);
  }
};

// ct2d_wgh = ct2d_wgs<WghFp16Ops>: the fp16 stages above with both parts (consumers on pixel
// halves, s.cwn = 1); ew: the weights' scale exponent, amax: x's largest finite magnitude (wgh_amax).
struct WghFp16Ops : WgFp16Stage<2> {
  const unsigned* __restrict__ amax;
  int ew;
  __device__ __forceinline__ float scale() const { return ldexpf(1.f, -(wgh_exp(*amax) + ew)); }
};

// 5. ct2d_wgf (stride 1, groups 1, TF32 class; sm_90a): ct2d_wgs with one fp16 product per tap
//    (a_hi*b_hi of ct2d_wgh): fp16 has TF32's 11-bit significand (both round to nearest), and its
//    MMA runs at twice the TF32 rate with half the bytes staged. Its 5-bit exponent is what needs
//    care: the weights are scaled as for ct2d_wgh. x is converted to fp16 unscaled, and its largest
//    finite magnitude computed on the way, either
//    - by the kernel's producer as it stages x (WgdFp16Ops: raw fp32 copies into a ring of
//      buffers, by TMA where x's rows are 16-byte multiples, converted in shared memory; no
//      pre-pass), where the block has all output channels (x is read once) and the ring leaves
//      room for three stages with staggered consumers, or
//    - by a pre-pass (fp16_convert) whose copy the kernel stages (WgfFp16Ops, scaled = 0).
//    Where that magnitude lies in [2^-2, 2^15) (wgf_unscaled: no overflow, and every value down to
//    2^-16 of it is a normal fp16; randn and rand inputs) that launch's output stands. Otherwise a
//    pass rewrites x scaled by 2^ex as for ct2d_wgh (its largest magnitude in [2^14, 2^15)) and a
//    last launch (WgfFp16Ops, scaled = 1) overwrites the output from it. The choice is made on the
//    device, without a host sync: each pass and launch after the first reads the amax first and
//    exits at once when it is not its case.
__device__ __forceinline__ void st_shared_v4(uint32_t a, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}
// ct2d_wgf's producer stages x itself (no pre-pass): per item, its chunks' halves u (8 channels:
// chunk u / 2, channels 8 (u % 2)..+7) are copied raw (fp32; positions outside the image and
// channels past Cin zero-filled) into a ring of WGR_SLOTS slots, WGR_SLOTS - 1 halves ahead:
// - TMA (sm_90a, rows of 16-byte multiples, x 16-byte aligned): one box [8 ch][s.raw_rows rows]
//   [s.raw_rl columns] per half, issued by producer thread 0, starting at the tile's first staged
//   row and up to 3 columns before its first staged column (a multiple of 4: TMA needs 16-byte
//   aligned starts); slot i's mbarrier completes when it has landed;
// - else 4-byte cp.async copies by every producer thread into [8 ch][S positions], one group each.
// Half u is then converted by the producer into its stage's plane u % 2 of [q][8 ci] (fp16;
// consecutive lanes, consecutive positions: conflict-free 4-byte loads, one 16-byte store per
// position), which also takes the largest finite magnitude (m, bits).
__device__ __forceinline__ float ld_shared_f32(uint32_t a) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ void wgr_issue(const WgShape& s, const WgBlock& b, const float* __restrict__ x,
                                          const int* off, uint32_t raw, int u, int tid) {
  const int hw = s.Hin * s.Win, c0 = 8 * u, nc = min(8, s.Cin - c0);
  const float* src = x + ((int64_t)b.n * s.Cin + min(c0, s.Cin - 1)) * hw;
  const uint32_t dst = raw + (u % WGR_SLOTS) * s.S * 32;
  for (int q = tid; q < s.S; q += WG_THREADS) {
    const int o = off[q];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const bool ok = o >= 0 && k < nc;
      cp_async4(dst + (k * s.S + q) * 4, ok ? src + k * hw + o : x, ok ? 4u : 0u);
    }
  }
  cp_async_commit();
}
__device__ __forceinline__ void wgr_issue_tma(const WgShape& s, const WgBlock& b, const CUtensorMap* map,
                                              const WgProducer& p, int u) {
  const int i = u % WGR_SLOTS;
  const uint32_t bytes = 32u * s.raw_rows * s.raw_rl;
  fence_proxy_async();  // the slot's earlier generic reads (its conversion) before the copy
  mbar_arrive_expect_tx(p.rbar + 8 * i, bytes);
  tma_load_4d(p.raw + i * bytes, map, b.iw_base - (b.iw_base & 3), b.ih_base, 8 * u, b.n, p.rbar + 8 * i);
}
// TMA: position q (row r = q / rowlen, column c) lies at r * raw_rl + c + (iw_base & 3) of its
// channel's plane, and (r, c) steps with q without a division in the loop (holding the start and
// step in WgProducer across items instead, 57 measured 2.36 against 2.12 ms)
template <bool TMA>
__device__ __forceinline__ void wgr_convert(const WgShape& s, const WgBlock& b, uint32_t raw, uint32_t dst, int u,
                                            int tid, unsigned& m) {
  const int plane = TMA ? s.raw_rows * s.raw_rl : s.S;  // floats per channel
  uint32_t src = raw + (u % WGR_SLOTS) * plane * 32;
  int r = 0, c = tid, dr = 0, dc = 0;
  if constexpr (TMA) {
    src += (b.iw_base & 3) * 4;
    r = tid / s.rowlen;
    c = tid - r * s.rowlen;
    dr = WG_THREADS / s.rowlen;
    dc = WG_THREADS - dr * s.rowlen;
  }
  for (int q = tid; q < s.S; q += WG_THREADS) {
    const uint32_t a = src + (TMA ? r * s.raw_rl + c : q) * 4;
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = ld_shared_f32(a + k * plane * 4);
    if constexpr (TMA) {
      r += dr;
      c += dc;
      if (c >= s.rowlen) c -= s.rowlen, ++r;
    }
    uint32_t h[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      m = finite_amax(finite_amax(m, v[2 * k]), v[2 * k + 1]);
      const __half2 hv = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
      h[k] = *reinterpret_cast<const uint32_t*>(&hv);
    }
    st_shared_v4(dst + q * 16, h[0], h[1], h[2], h[3]);
  }
}
// ct2d_wgf's first launch: x staged unscaled by the producer (above; TMA: its ring filled by TMA
// from xmap); *amax (zeroed before) gets the largest finite magnitude staged (one atomic per
// producer warp, at its end).
template <bool TMA>
struct WgdFp16Ops : WgOpsDefaults {
  const float* __restrict__ x;
  const __half* __restrict__ wh;
  unsigned* __restrict__ amax;
  int ew;
  CUtensorMap xmap;  // TMA only
  __device__ __forceinline__ void begin(const WgShape& s, const WgBlock& b, const int* off, int tid,
                                        WgProducer& p) const {
    for (int u = 0; u < WGR_SLOTS - 1; ++u)
      if constexpr (TMA) {
        if (tid == 0 && u < 2 * s.chunks) wgr_issue_tma(s, b, &xmap, p, u);
      } else {
        if (u < 2 * s.chunks) wgr_issue(s, b, x, off, p.raw, u, tid);
        else cp_async_commit();
      }
  }
  __device__ __forceinline__ void stage(const WgShape& s, const WgBlock& b, const int* off, uint32_t sb, int c, int tid,
                                        uint32_t full, WgProducer& p) const {
    if (tid == 0) wgh_bulk_weights(s, b, wh, sb, c, full);
#pragma unroll 1
    for (int h = 0; h < 2; ++h) {
      const int u = 2 * c + h;
      if constexpr (TMA) {
        const int i = u % WGR_SLOTS;
        mbar_wait(p.rbar + 8 * i, (p.rphase >> i) & 1);  // half u has landed
        p.rphase ^= 1u << i;
        producer_sync();  // half u - 1's slot is converted
        if (tid == 0 && u + WGR_SLOTS - 1 < 2 * s.chunks) wgr_issue_tma(s, b, &xmap, p, u + WGR_SLOTS - 1);
      } else {
        static_assert(WGR_SLOTS == 3, "the wait below keeps WGR_SLOTS - 2 groups in flight");
        cp_async_wait_1();
        producer_sync();  // every thread's copies of half u have landed; half u - 1's slot is converted
        if (u + WGR_SLOTS - 1 < 2 * s.chunks) wgr_issue(s, b, x, off, p.raw, u + WGR_SLOTS - 1, tid);
        else cp_async_commit();
      }
      wgr_convert<TMA>(s, b, p.raw, sb + s.wbytes + h * s.S * 16, u, tid, p.amax);
    }
  }
  __device__ __forceinline__ void mma(const WgShape& s, const WgBlock&, float (&acc)[128], uint32_t sb, int,
                                      int p0) const {
    wgh_mma_chunk<1>(s, acc, sb, p0);
  }
  __device__ __forceinline__ float scale() const { return ldexpf(1.f, -ew); }
  __device__ __forceinline__ void done(const WgProducer& p, int tid) const {
    const unsigned m = __reduce_max_sync(0xffffffffu, p.amax);
    if ((tid & 31) == 0 && m) atomicMax(amax, m);
  }
  static constexpr bool kStagger = true;
  static constexpr bool kDirect = true;
  static constexpr bool kTable = !TMA;
};
// ct2d_wgf from fp16_convert's copy of x: unscaled (after the pre-pass, scaled = 0) or rescaled (the
// last launch, scaled = 1); each exits at once where the amax says the other one is this call's.
struct WgfFp16Ops : WgFp16Stage<1> {
  const unsigned* __restrict__ amax;
  int ew;
  int scaled;  // 0: the launch for an unscaled x, 1: for a rescaled one
  __device__ __forceinline__ float scale() const {
    const unsigned a = *amax;
    return ldexpf(1.f, -((wgf_unscaled(a) ? 0 : wgh_exp(a)) + ew));
  }
  __device__ __forceinline__ bool skip() const { return wgf_unscaled(*amax) == (scaled != 0); }
  static constexpr bool kStagger = true;
};

// x (N, Cin, H, W; fp32, or bf16 in a bf16 run) -> xs[part][n][c8][p][8]: P fp16 parts (hi =
// fp16(v); for P = 2 also lo = fp16(v - hi) at xs + half_elems), 16 bytes per pixel p and 8
// channels, channels past Cin zero.
// WGF_PX pixels 256 apart per thread, 8 channels each, loads coalesced along p (all 32 issued
// before any is used; 16-byte loads of 4 consecutive pixels, and __ldcs, measured slower). mode:
// kConvertUnscaled: v = x, and x's largest finite magnitude into *amax (zeroed before; one atomic
// per block, skipped where it would not raise it; ct2d_wgf); kConvertScaled: v = x * 2^wgh_exp(amax)
// (ct2d_wgh, after wgh_amax); kConvertRescale: the same, only where ct2d_wgf cannot take x unscaled
// (else it exits).
constexpr int WGF_PX = 4;
enum ConvertMode { kConvertUnscaled, kConvertScaled, kConvertRescale };
template <int P, class InT = float>
__global__ void __launch_bounds__(256) fp16_convert(const InT* __restrict__ x, unsigned* __restrict__ amax,
                                                    uint4* __restrict__ xs, int Cin, int C8, int HW,
                                                    int64_t half_elems, int mode) {
  float sc = 1.f;
  if (mode != kConvertUnscaled) {
    const unsigned a = *amax;
    if (mode == kConvertRescale && wgf_unscaled(a)) return;
    sc = ldexpf(1.f, wgh_exp(a));
  }
  const int c8 = blockIdx.y, n = blockIdx.z, nc = min(8, Cin - c8 * 8);
  const InT* xp = x + ((int64_t)n * Cin + c8 * 8) * HW;
  uint4* o = xs + ((int64_t)n * C8 + c8) * HW;
  unsigned m = 0;
  float v[WGF_PX][8];
  int p[WGF_PX];
#pragma unroll
  for (int j = 0; j < WGF_PX; ++j) p[j] = (blockIdx.x * WGF_PX + j) * 256 + threadIdx.x;
#pragma unroll
  for (int c = 0; c < 8; ++c)
#pragma unroll
    for (int j = 0; j < WGF_PX; ++j) v[j][c] = c < nc && p[j] < HW ? in_float(xp[(int64_t)c * HW + p[j]]) : 0.f;
#pragma unroll
  for (int j = 0; j < WGF_PX; ++j) {
    uint32_t h[4], l[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (mode == kConvertUnscaled) m = finite_amax(finite_amax(m, v[j][2 * k]), v[j][2 * k + 1]);
      const float v0 = v[j][2 * k] * sc, v1 = v[j][2 * k + 1] * sc;
      const __half2 hi = __floats2half2_rn(v0, v1);
      h[k] = *reinterpret_cast<const uint32_t*>(&hi);
      if (P == 2) {
        const float2 hf = __half22float2(hi);
        const __half2 lo = __floats2half2_rn(v0 - hf.x, v1 - hf.y);
        l[k] = *reinterpret_cast<const uint32_t*>(&lo);
      }
    }
    if (p[j] < HW) {
      o[p[j]] = make_uint4(h[0], h[1], h[2], h[3]);
      if (P == 2) o[p[j] + half_elems] = make_uint4(l[0], l[1], l[2], l[3]);
    }
  }
  if (mode != kConvertUnscaled) return;
  __shared__ unsigned wm[8];
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0) wm[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 1; i < 8; ++i) m = max(m, wm[i]);
    if (m > *reinterpret_cast<volatile unsigned*>(amax)) atomicMax(amax, m);
  }
}
#endif  // CT2D_WGMMA

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
  return (s.cot * khn * s.KW * s.cip * (tc == 3 ? 2 : 1) + 3) & ~3;
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
// MINB: blocks per SM the registers are limited for (the host sizes the shared memory to match).
// T: the element type of x and y, float, or __nv_bfloat16 for bf16 runs (x widened to fp32 as it
// is staged, with plain loads where fp32 uses cp.async; the fp32 result rounded once as it is
// written). The weights, the bias and the arithmetic are fp32 either way.
template <int P, int CT, int TC, int MINB, class T>
__global__ void __launch_bounds__(PHASE_THREADS, MINB)
    ct2d_phase(const T* __restrict__ x, const float* __restrict__ wp, const float* __restrict__ bias,
               T* __restrict__ y, const PhaseShape s) {
  static_assert(TC == 0 || TC == 1 || TC == 3, "TC: 0 (CUDA cores), 1 (TF32) or 3 (3xTF32)");
  static_assert(!TC || CT == 16, "the tensor-core variant takes 16 channels per warp task");
  constexpr int PXB = TC ? 8 * P : 32 * P;  // pixels per warp task
  constexpr int WU = TC == 3 ? 256 : 128;   // staged weight floats per (cb, kh_a, kw, ci / 8): hi (+ lo)
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

  // Writes output row oh of the tile, bias added, with streaming stores: from ys[c][col] when
  // FROM_TILE, else bias (or zero) only.
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
            v.x += bv;
            v.y += bv;
            __stcs(d2, v);
          }
        } else {
          T* d2 = dst + 2 * lane;
#pragma unroll 4
          for (int col = 2 * lane; col + 1 < width; col += 64, d2 += 64, s2 += 32) {
            const float2 v = FROM_TILE ? *s2 : make_float2(0.f, 0.f);
            st_out2(d2, v.x + bv, v.y + bv);
          }
        }
        const int last = width & ~1;  // an odd last column
        if (last < width && lane == 0) st_cs1(dst + last, (FROM_TILE ? src[last] : 0.f) + bv);
      } else {
        for (int col = lane; col < width; col += 32) st_cs1(dst + col, (FROM_TILE ? src[col] : 0.f) + bv);
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
    const int ks_n = s.cip / 8, nsteps = s.KW * khn * ks_n;  // each kw is in exactly one phase
    for (int e = tid; e < nsteps; e += PHASE_THREADS) {
      const int ks = e % ks_n, a = (e / ks_n) % khn, ee = e / (ks_n * khn);
      steps[e] = make_int2((a * s.ncol + kw_d[ee]) * s.cips + 8 * ks, ((a * s.KW + kw_sel[ee]) * ks_n + ks) * WU);
    }
  }
  if constexpr (TC) {  // fragment-ordered weights of the valid taps: units (cb, kh_a, kw, ci / 8) of hi (+ lo)
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
        const int ks_n = s.cip / 8, nst = kw_count[rw] * khn * ks_n;
        const int2* stp = steps + kw_first[rw] * khn * ks_n;
        const float* xb = xs + (j0 + g) * s.cips + t;
        const float* wb = wsm + cb * khn * s.KW * ks_n * WU + lane * 4;
#pragma unroll 2
        for (int st = 0; st < nst; ++st) {
          const int2 o = stp[st];
          const float* xp = xb + o.x;
          const float4 h4 = *reinterpret_cast<const float4*>(wb + o.y);
          if constexpr (TC == 1) {  // TF32: rounded weights, the input's raw bits (the MMA truncates them)
            const uint32_t ah[4] = {__float_as_uint(h4.x), __float_as_uint(h4.y), __float_as_uint(h4.z),
                                    __float_as_uint(h4.w)};
#pragma unroll
            for (int p = 0; p < P; ++p) {
              const uint32_t bh[2] = {__float_as_uint(xp[p * 8 * s.cips]), __float_as_uint(xp[p * 8 * s.cips + 4])};
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

// Host helpers of the launchers. K's dynamic shared memory limit raised to bytes, once per kernel
// (a static per instantiation), not on every call.
template <auto K>
void allow_smem(int bytes) {
  static bool done = false;
  if (!done) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    done = true;
  }
}

// Multiprocessors of the current device (queried once per device).
int sm_count() {
  static int cached[64] = {0};
  int dev = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= 64) {
    int sms = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
  }
  if (cached[dev] == 0) C10_CUDA_CHECK(cudaDeviceGetAttribute(&cached[dev], cudaDevAttrMultiProcessorCount, dev));
  return cached[dev];
}

// Shared memory of the phase kernel for a configuration, in bytes.
size_t phase_smem_bytes(const PhaseShape& s) {
  const size_t w = phase_w_floats(s, s.khn_max, s.tc), xs = phase_xs_floats(s);
  const size_t steps = s.tc ? (size_t)s.KW * s.khn_max * (s.cip / 8) * 2 : 0;  // int2 per MMA step
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
// T: x's and y's element type (float, or __nv_bfloat16 in bf16 runs).
template <int P, int CT, int TC, int MINB, class T = float>
bool launch_phase(const torch::Tensor& x, const torch::Tensor& wp, const float* bias, torch::Tensor& y,
                  PhaseShape s, cudaStream_t stream) {
  constexpr int PXB = TC ? 8 * P : 32 * P;
  s.tc = TC;
  s.cip = TC ? (s.cin_g + 7) / 8 * 8 : (s.cin_g + 3) / 4 * 4;  // the MMA's K is 8, the FMA loop's 4
  s.cips = (s.cip / 4) % 2 ? s.cip : s.cip + 4;  // float4 rows an odd number of 16 B apart
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
  allow_smem<ct2d_phase<P, CT, TC, MINB, T>>(220 * 1024);
  dim3 grid((s.Wout + s.seg - 1) / s.seg, gy, gz);
  ct2d_phase<P, CT, TC, MINB, T><<<grid, PHASE_THREADS, phase_smem_bytes(s), stream>>>(
      static_cast<const T*>(x.data_ptr()), wp.data_ptr<float>(), bias, static_cast<T*>(y.data_ptr()), s);
  return true;
}

template <int MT, int NT, int SPLIT, int KH, int KW>
void launch_mma(const torch::Tensor& x, const torch::Tensor& wm, const float* bias, torch::Tensor& y,
                const MmaShape& s, int N, size_t smem, cudaStream_t stream) {
  allow_smem<ct2d_mma<MT, NT, SPLIT, KH, KW>>(220 * 1024);
  dim3 grid(s.tiles_w * ((s.Hout + s.TR - 1) / s.TR) * s.co_blocks, 1, N);
  ct2d_mma<MT, NT, SPLIT, KH, KW><<<grid, THREADS, smem, stream>>>(x.data_ptr<float>(), wm.data_ptr<float>(), bias, y.data_ptr<float>(), s);
}

template <int MT, int NT, int SPLIT>
bool dispatch_taps(int KH, int KW, const torch::Tensor& x, const torch::Tensor& wm, const float* bias,
                   torch::Tensor& y, const MmaShape& s, int N, size_t smem, cudaStream_t stream) {
  if (KH == 3 && KW == 3) launch_mma<MT, NT, SPLIT, 3, 3>(x, wm, bias, y, s, N, smem, stream);
  else if (KH == 3 && KW == 5) launch_mma<MT, NT, SPLIT, 3, 5>(x, wm, bias, y, s, N, smem, stream);
  else if (KH == 3 && KW == 7) launch_mma<MT, NT, SPLIT, 3, 7>(x, wm, bias, y, s, N, smem, stream);
  else return false;
  return true;
}

template <int KH, int KW, bool TMA>
void launch_mmh_t(const torch::Tensor& x, const torch::Tensor& wh, int64_t ew, const float* bias, torch::Tensor& y,
                  const MmaShape& s, int N, size_t smem, const CUtensorMap& xmap, cudaStream_t stream) {
  dim3 grid(s.tiles_w * ((s.Hout + s.TR - 1) / s.TR) * s.co_blocks, 1, N);
  const __half* w = reinterpret_cast<const __half*>(wh.data_ptr<at::Half>());
  if (y.scalar_type() == at::kBFloat16) {  // a bf16 run: the epilogue rounds once to bf16
    allow_smem<ct2d_mmh<2, 8, KH, KW, TMA, __nv_bfloat16>>(110 * 1024);
    ct2d_mmh<2, 8, KH, KW, TMA, __nv_bfloat16><<<grid, THREADS, smem, stream>>>(
        x.data_ptr<float>(), w, (int)ew, bias, reinterpret_cast<__nv_bfloat16*>(y.data_ptr()), s, xmap);
    return;
  }
  allow_smem<ct2d_mmh<2, 8, KH, KW, TMA>>(110 * 1024);
  ct2d_mmh<2, 8, KH, KW, TMA><<<grid, THREADS, smem, stream>>>(x.data_ptr<float>(), w, (int)ew, bias,
                                                                y.data_ptr<float>(), s, xmap);
}
template <int KH, int KW>
void launch_mmh(const torch::Tensor& x, const torch::Tensor& wh, int64_t ew, const float* bias, torch::Tensor& y,
                const MmaShape& s, int N, size_t smem, const CUtensorMap* xmap, cudaStream_t stream) {
#if defined(CT2D_WGMMA)
  if (xmap) return launch_mmh_t<KH, KW, true>(x, wh, ew, bias, y, s, N, smem, *xmap, stream);
#endif
  launch_mmh_t<KH, KW, false>(x, wh, ew, bias, y, s, N, smem, CUtensorMap{}, stream);
}

#if defined(CT2D_WGMMA)
// TMA staging of x (sm_90a builds; ct2d_mmh's slots and ct2d_wgf's raw ring): x as a 4-D tensor
// (W, H, C, N; fp32) whose box is [8 channels][rows][rowlen]; out-of-range rows, columns and
// channels are zero-filled. Needs rows of a multiple of 16 bytes and x 16-byte aligned. The
// encoder is the driver's cuTensorMapEncodeTiled, looked up once through the runtime (no libcuda
// link). Returns false where the map cannot be made (the cp.async staging then runs).
bool x_tensor_map(CUtensorMap* map, const torch::Tensor& x, int64_t rowlen, int64_t rows) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                              const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      fn = nullptr;
    cudaGetLastError();
    return reinterpret_cast<Encode>(fn);
  }();
  const int64_t N = x.size(0), Cin = x.size(1), Hin = x.size(2), Win = x.size(3);
  if (!encode || Win % 4 || reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 || rowlen % 4 || rowlen > 256 ||
      rows > 256)
    return false;
  const cuuint64_t dims[4] = {(cuuint64_t)Win, (cuuint64_t)Hin, (cuuint64_t)Cin, (cuuint64_t)N};
  const cuuint64_t strides[3] = {(cuuint64_t)Win * 4, (cuuint64_t)(Hin * Win * 4), (cuuint64_t)(Cin * Hin * Win * 4)};
  const cuuint32_t box[4] = {(cuuint32_t)rowlen, (cuuint32_t)rows, 8, 1};
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, x.data_ptr(), dims, strides, box, estr,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
#endif

// mma.sync tensor-core path for stride 1, groups 1. config 0 and 4..9 pick the tiling from the
// shapes (0, 5 and 6 run the wgmma kernels instead where they apply; 4 forces this path; the TF32
// class runs ct2d_mmh where it applies with config 0 and 4, and ct2d_mma with 9); 1..3 force
// (MT, NT) = (4, 8), (4, 4), (2, 8) of ct2d_mma (for tuning runs; on the phase path they force
// (P, CT) = (4, 8), (2, 8), (1, 4)). Returns false where the path does not apply.
bool run_mma(const torch::Tensor& x, const torch::Tensor& wm, const torch::Tensor& wmh, int64_t wmh_exp,
             const float* b, torch::Tensor& y, int64_t KH, int64_t KW, int64_t pad_h, int64_t pad_w,
             int64_t dil_h, int64_t dil_w, int64_t split, int64_t config, cudaStream_t stream) {
  const int64_t N = x.size(0), Cin = x.size(1), Hin = x.size(2), Win = x.size(3);
  const int64_t Cout = y.size(1), Hout = y.size(2), Wout = y.size(3);
  if (!(KH == 3 && (KW == 3 || KW == 5 || KW == 7)) || Cout % 32 != 0 || Cin < 4) return false;
  const int64_t chunks = (Cin + KC - 1) / KC;
  TORCH_CHECK(wm.is_cuda() && wm.is_contiguous() && wm.numel() == chunks * KH * KW * Cout * KC,
              "MMA weight copy: expected (ceil(Cin/8), KH*KW, Cout, 8)");
  int mt, nt;
  if (config == 0 || config >= 4) {
    mt = Cout % 64 == 0 ? 4 : 2;
    nt = split == 3 ? (mt == 4 ? 4 : 8) : 8;
  } else {
    TORCH_CHECK(config >= 1 && config <= 3, "config must be 0..9");
    mt = config == 3 ? 2 : 4;
    nt = config == 1 ? 8 : (config == 2 ? 4 : 8);
  }
  if (Cout % (16 * mt) != 0) return false;
  if (split == 3 && mt * nt > 16) return false;
  // the TF32 class as one fp16 product (ct2d_mmh) for 32 channels per block (config 0 and 4; 9 and
  // the tilings 1..3 keep TF32)
  const bool f16 = split == 1 && mt == 2 && nt == 8 && wmh.numel() > 0 && (config == 0 || config == 4);
  TORCH_CHECK(!f16 || (wmh.is_cuda() && wmh.is_contiguous() && wmh.scalar_type() == at::kHalf &&
                       wmh.numel() == (Cin + 15) / 16 * KH * KW * Cout * 16),
              "fp16 MMA weight copy: expected (ceil(Cin/16), KH*KW, Cout, 16) half");
  MmaShape s{};
  s.Cin = Cin; s.Hin = Hin; s.Win = Win; s.Cout = Cout; s.Hout = Hout; s.Wout = Wout;
  s.pad_h = pad_h; s.pad_w = pad_w; s.dil_h = dil_h; s.dil_w = dil_w;
  s.co_blocks = Cout / (16 * mt);
  const int seg = nt * 8;  // pixels per warp, along one row
  // one warp per row when that covers the width with little waste, else two per row
  const int64_t waste1 = ((Wout + seg - 1) / seg) * seg - Wout;
  const int64_t waste2 = ((Wout + 2 * seg - 1) / (2 * seg)) * 2 * seg - Wout;
  s.TW = (waste2 < waste1 && Wout >= 4 * seg) ? 2 * seg : seg;
  s.TR = (THREADS / 32) * seg / s.TW;
  s.tiles_w = (Wout + s.TW - 1) / s.TW;
  s.rows = s.TR + (KH - 1) * dil_h;
  // staged columns: the tile's last tap window ends need - 1 columns after its first column; with
  // 16-byte copies (rows 16-byte aligned) the staging starts up to 3 columns earlier
  if ((int64_t)KC * Hin * Win >= (int64_t(1) << 31)) return false;  // 32-bit staging offsets
  const int64_t need = s.TW + (KW - 1) * dil_w;
  s.vec = Win % 4 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
  s.units = s.vec ? cols16(need) / 4 : need;
  s.rowlen = s.vec ? 4 * s.units : need;
  const int64_t tile = (int64_t)s.rows * s.rowlen;
  s.plane = tile + ((8 - tile) % 32 + 32) % 32;  // plane % 32 == 8: conflict-free B loads
  s.chunks = chunks;
  const size_t stage = ((size_t)s.plane * KC + (size_t)KH * KW * 16 * mt * KC) * sizeof(float);
  const size_t tab = (size_t)s.rows * s.units * sizeof(int2);
  const uintptr_t y_addr = reinterpret_cast<uintptr_t>(y.data_ptr());
  // the epilogue through shared memory (ct2d_mma's s.epi) where the direct fragment stores' 32-byte
  // runs would not be whole sectors (Wout not a multiple of 8 or y not 32-byte aligned; H200, one
  // process: 71 0.669 to 0.624 ms; 78, whose rows are aligned, 1.003 against 1.021) and the warps'
  // buffers fit in the stages: 4-float stores where Wout is a multiple of 4 and y 16-byte aligned
  // (every warp's first column is a multiple of 64), 2-float where it is even and y 8-byte aligned
  auto epilogue = [&](size_t stages_bytes) {
    if ((Wout % 8 != 0 || y_addr % 32 != 0) &&
        (size_t)(THREADS / 32) * 16 * (nt * 8 + 8) * sizeof(float) <= stages_bytes) {
      if (Wout % 4 == 0 && y_addr % 16 == 0) s.epi = 4;
      else if (Wout % 2 == 0 && y_addr % 8 == 0) s.epi = 2;
    }
  };
  if (f16) {  // three 8-channel slots, the fp16 weights (every chunk's where one block has all channels
              // and they fit, else one chunk's), the table (cp.async staging); 2 blocks per SM
    const MmaShape s_cp = s;
    const CUtensorMap* xmap = nullptr;
#if defined(CT2D_WGMMA)
    // TMA staging: the box is the slot, so a plane is exactly rows x rowlen floats. The box starts
    // at a multiple of 4 columns (TMA needs 16-byte aligned starts), up to 3 before the tile's
    // first; rows and rowlen are chosen (up to 3 more rows, 12 more columns) so that the plane is
    // 8 mod 16 floats (conflict-free B loads, and slots of a multiple of 128 bytes, as TMA needs)
    CUtensorMap map;
    int best = 0;
    const int64_t w0 = cols16(need);
    for (int r = s.rows; r <= s.rows + 3; ++r)
      for (int64_t w = w0; w <= w0 + 12; w += 4)
        if ((r * w) % 16 == 8 && (!best || r * w < best)) best = r * w, s.rows = r, s.rowlen = w;
    s.plane = best;
    if (best && x_tensor_map(&map, x, s.rowlen, s.rows)) xmap = &map;
    else s = s_cp;
#endif
    const size_t slots = 3 * (size_t)s.plane * KC * sizeof(float), wchunk = (size_t)KH * KW * 32 * 32;
    const size_t table = xmap ? 0 : tab;
    const int64_t c16 = (Cin + 15) / 16;
    s.wres = s.co_blocks == 1 && slots + c16 * wchunk + table <= 110 * 1024;
    const size_t smem = slots + (s.wres ? c16 : 1) * wchunk + table;
    if (smem <= 110 * 1024) {
      s.chunks = (Cin + 15) / 16;
      s.stages = 3;
      epilogue(slots);
      if (KW == 3) launch_mmh<3, 3>(x, wmh, wmh_exp, b, y, s, N, smem, xmap, stream);
      else if (KW == 5) launch_mmh<3, 5>(x, wmh, wmh_exp, b, y, s, N, smem, xmap, stream);
      else launch_mmh<3, 7>(x, wmh, wmh_exp, b, y, s, N, smem, xmap, stream);
      return true;
    }
    s = s_cp;
  }
  if (y.scalar_type() != at::kFloat) return false;  // a bf16 y: only ct2d_mmh writes one
  const size_t per_block = (mt * nt * split <= 16) ? 110 * 1024 : 220 * 1024;  // 2 or 1 blocks per SM
  s.stages = 3 * stage + tab <= per_block ? 3 : 2;
  if (s.stages * stage + tab > per_block) return false;
  const size_t smem = s.stages * stage + tab;
  epilogue(s.stages * stage);
  if (split == 3) {
    if (mt == 4) return dispatch_taps<4, 4, 3>(KH, KW, x, wm, b, y, s, N, smem, stream);
    return dispatch_taps<2, 8, 3>(KH, KW, x, wm, b, y, s, N, smem, stream);
  }
  if (mt == 4 && nt == 8) return dispatch_taps<4, 8, 1>(KH, KW, x, wm, b, y, s, N, smem, stream);
  if (mt == 4) return dispatch_taps<4, 4, 1>(KH, KW, x, wm, b, y, s, N, smem, stream);
  return dispatch_taps<2, 8, 1>(KH, KW, x, wm, b, y, s, N, smem, stream);
}


#if defined(CT2D_WGMMA)
// Shapes of one wgmma launch. spec: ct2d_wgs, else ct2d_wg; blocks_min: the fewest blocks per SM
// acceptable (ct2d_wgs runs one). f16: the fp16 parts per operand, 0 for TF32 (ct2d_wgh: 2, ct2d_wgf:
// 1; both spec and pix_halves, chunks of 16 channels, at least two stages). y_addr: the output's address (the
// epilogue's vector stores need it aligned to them). raw_slots: ct2d_wgf's raw ring of that many
// slots (0: none), raw_tma: filled by TMA (s.raw_rl, s.raw_rows). Returns the dynamic shared memory
// size, 0 where it does not fit or 32-bit offsets within a channel plane would overflow.
size_t plan_wg(WgShape& s, bool spec, bool pix_halves, int blocks_min, int64_t Cin, int64_t Hin, int64_t Win, int64_t Cout,
               int64_t Hout, int64_t Wout, int64_t KH, int64_t KW, int64_t pad_h, int64_t pad_w, int64_t dil_h,
               int64_t dil_w, uintptr_t y_addr, int f16 = 0, int raw_slots = 0, bool raw_tma = false) {
  const int64_t taps = KH * KW, chunks = f16 ? (Cin + 15) / 16 : (Cin + 7) / 8, co8 = (Cout + 7) / 8;
  s = WgShape{};
  // ct2d_wgs: two consumers on the two 64-channel halves of 128 channels (the same 256 pixels), or
  // on two 256-pixel halves of 512 pixels where there are at most 64 channels
  s.cwn = spec && co8 * 8 > 64 && !pix_halves ? 2 : 1;
  const int64_t pxb = spec ? WG_N * 2 / s.cwn : WG_N, cob_ch = 64 * s.cwn;
  // per stage: the weights (fp16: f16 parts x taps x 64 channels x 16 input channels), then the
  // input's staged positions, 32 bytes each (per fp16 part); the offset table
  const int64_t wbytes = f16 ? f16 * taps * 64 * 32 : taps * std::min<int64_t>(cob_ch, co8 * 8) * 32;
  auto stage_bytes = [&](int64_t S) { return (wbytes + S * 32 * std::max(f16, 1) + 127) / 128 * 128; };
  auto tab_bytes = [](int64_t S) { return (S * 4 + 127) / 128 * 128; };
  // ct2d_wgf's raw ring: slots of S positions x 8 channels, or with raw_tma TMA boxes of whole
  // staged rows, each starting up to 3 columns early at a multiple of 4 (16 bytes, as TMA needs)
  auto raw_bytes = [&](int64_t S, int64_t rowlen) {
    return (size_t)raw_slots * (raw_tma ? ((S - 1) / rowlen + 1) * cols16(rowlen) : S) * 32;
  };
  // a consumer whose 64 rows reach past the block's channels reads past the last tap's weights
  // (results discarded): up to 2 KB in ct2d_wg, 4 KB in ct2d_wgs, which stay allocated
  const size_t slack = spec ? 4096 : 2048;
  const int64_t halo_w = (KW - 1) * dil_w, halo_h = (KH - 1) * dil_h;
  // tile: TW columns (even where the halo is, so pixel pairs stay 8-byte aligned) and TR rows with
  // (TR - 1) * rowlen + TW <= pxb: the most stored pixels per computed one, then the fewest staged
  // ct2d_wgs where Wout and the halo are multiples of 4: a width that is one too, if it scores
  // within 0.02 of the best, for its 16-byte epilogue stores (wg_epilogue_smem)
  const bool vec4 = spec && Wout % 4 == 0 && halo_w % 4 == 0;
  int64_t TW = 0, TR = 0, TW4 = 0, TR4 = 0;
  double best = -1e9, best4 = -1e9;
  for (int64_t tw = 1; tw <= std::min<int64_t>(Wout, pxb); ++tw) {
    if (halo_w % 2 == 0 && tw % 2 && tw != Wout) continue;
    const int64_t rowlen = tw + halo_w, S = pxb + halo_h * rowlen + halo_w;
    // fp16 parts: two stages of the tile must fit (ct2d_wgh's weights take half of the memory or more)
    if (f16 && (size_t)(tab_bytes(S) + 2 * stage_bytes(S)) + raw_bytes(S, rowlen) + slack > (size_t)kWgSmemMax) continue;
    const int64_t tr = std::min<int64_t>((pxb - tw) / rowlen + 1, Hout);
    const int64_t tiles = ((Wout + tw - 1) / tw) * ((Hout + tr - 1) / tr);
    const double eff = (double)Hout * Wout / ((double)tiles * pxb);
    const double staged = (double)S / (double)(tr * tw);
    const double score = eff - 0.01 * staged;
    if (score > best) { best = score; TW = tw; TR = tr; }
    if (vec4 && tw % 4 == 0 && score > best4) { best4 = score; TW4 = tw; TR4 = tr; }
  }
  if (vec4 && TW4 && best4 >= best - 0.02) { TW = TW4; TR = TR4; }
  if (TW == 0) return 0;  // fp16 parts: no tile fits
  s.Cin = Cin; s.Hin = Hin; s.Win = Win; s.Cout = Cout; s.Hout = Hout; s.Wout = Wout; s.KH = KH; s.KW = KW;
  s.pad_h = pad_h; s.pad_w = pad_w; s.dil_h = dil_h; s.dil_w = dil_w;
  s.TW = TW; s.TR = TR; s.rowlen = TW + halo_w;
  const int64_t S = pxb + halo_h * s.rowlen + halo_w;  // the last tap window of the last pixel ends at S - 1
  if (S >= 16384) return 0;                            // descriptor offsets are 14 bits of 16 bytes
  s.S = S;
  if (raw_slots && raw_tma) {  // box dimensions of at most 256 elements
    s.raw_rl = (int)cols16(s.rowlen);
    s.raw_rows = (int)((S - 1) / s.rowlen + 1);
    if (s.raw_rl > 256 || s.raw_rows > 256) return 0;
  }
  s.tiles_w = (Wout + TW - 1) / TW;
  s.co8 = co8;
  s.co_blocks = (co8 * 8 + cob_ch - 1) / cob_ch;
  s.chunks = chunks;
  s.wbytes = wbytes;
  s.stage_bytes = stage_bytes(S);
  s.tab_bytes = tab_bytes(S);
  if ((Hout + 2 * TR) * (Wout + s.rowlen) >= (int64_t(1) << 31)) return 0;  // 32-bit offsets in a channel plane
  if (s.stage_bytes >= (spec ? 8 : 4) * WGE_WARP_BYTES) {  // the consumer warps' epilogue buffers fit in a stage
    // 4-float stores: TW, rowlen and Wout multiples of 4 and y 16-byte aligned; 2-float: even, 8
    if (TW % 4 == 0 && s.rowlen % 4 == 0 && Wout % 4 == 0 && y_addr % 16 == 0) s.epi_vec = 4;
    else if (TW % 2 == 0 && s.rowlen % 2 == 0 && Wout % 2 == 0 && y_addr % 8 == 0) s.epi_vec = 2;
  }
  auto need = [&](int st) { return (size_t)s.tab_bytes + (size_t)st * s.stage_bytes + slack; };
  // ct2d_wgf: staggered consumers (ct2d_wgs) where at least 3 stages fit beside the consumer warps'
  // own epilogue buffers, half an item's chunks apart (fewer than the stages: the leading
  // consumer needs a stage the trailing one has released)
  // (the raw ring, where there is one, after the stages and those buffers)
  const size_t epi_own = s.epi_vec ? 8 * WGE_WARP_BYTES : 0, raw = raw_bytes(S, s.rowlen);
  if (spec && f16 == 1 && chunks >= 2)
    for (int st = WGS_MAX_STAGES; st >= 3; --st)
      if (need(st) + epi_own + raw <= kWgSmemMax) {
        s.stages = st;
        s.stagger = (int)std::min<int64_t>(chunks / 2, st - 1);
        s.raw = st * s.stage_bytes + epi_own;
        return need(st) + epi_own + raw;
      }
  if (spec) {  // one block per SM: the deepest pipeline that fits, up to WGS_MAX_STAGES
    for (int st = WGS_MAX_STAGES; st >= 2; --st)
      if (need(st) + raw <= kWgSmemMax) { s.stages = st; s.raw = st * s.stage_bytes; return need(st) + raw; }
  } else {  // the most blocks per SM, then 3 stages if they fit
    for (int blocks = 3; blocks >= blocks_min; --blocks)
      for (int st = 3; st >= 2; --st)
        if (need(st) <= std::min<size_t>(kWgSmemMax, (228 * 1024) / blocks - 1024)) { s.stages = st; return need(st); }
  }
  return 0;
}

// Tensor-core path on the warpgroup MMA (sm_90a): stride 1, groups 1, TF32 class. config 5 forces
// ct2d_wg, 6 ct2d_wgs, 8 ct2d_wgs with its consumers on two pixel halves of 64 channels (a tuning
// hook: 69 2.52 against 2.26 ms); 0 runs ct2d_wg where three of its blocks fit on an SM (measured
// faster there, e.g. 57: 3.66 against 3.91 ms), else ct2d_wgs (65: 1.43 ms; 69: 2.26 against
// 3.44-3.69 ms for ct2d_wg). Returns false where the path does not apply.
bool run_wg(const torch::Tensor& x, const torch::Tensor& wg, const float* b, torch::Tensor& y, int64_t KH,
            int64_t KW, int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t config,
            cudaStream_t stream) {
  const int64_t N = x.size(0), Cin = x.size(1), Hin = x.size(2), Win = x.size(3);
  const int64_t Cout = y.size(1), Hout = y.size(2), Wout = y.size(3);
  TORCH_CHECK(wg.is_cuda() && wg.is_contiguous() && wg.numel() == (Cin + 7) / 8 * KH * KW * ((Cout + 7) / 8) * 64,
              "wgmma weight copy: expected (ceil(Cin/8), KH*KW, ceil(Cout/8), 2, 8, 4)");
  if (N > 65535) return false;
  WgShape s;
  auto plan = [&](bool spec, int blocks_min) {
    return plan_wg(s, spec, config == 8, blocks_min, Cin, Hin, Win, Cout, Hout, Wout, KH, KW, pad_h, pad_w, dil_h, dil_w,
                   reinterpret_cast<uintptr_t>(y.data_ptr()));
  };
  bool spec = config == 6 || config == 8;
  size_t smem = 0;
  if (config == 0) {
    smem = plan(false, 3);
    if (!smem) {
      spec = true;
      smem = plan(true, 1);
    }
  } else {
    smem = plan(spec, 1);
  }
  if (!smem) return false;
  const int64_t gx = s.tiles_w * ((Hout + s.TR - 1) / s.TR) * s.co_blocks;
  if (gx >= (int64_t(1) << 31)) return false;
  if (spec) {  // persistent: one block per SM, each taking every SM-count-th work item
    const int64_t items = gx * N;
    if (items >= (int64_t(1) << 31)) return false;
    allow_smem<ct2d_wgs<WgsTf32Ops>>(kWgSmemMax);
    ct2d_wgs<<<(int)std::min<int64_t>(items, sm_count()), WGS_THREADS, smem, stream>>>(
        WgsTf32Ops{{}, x.data_ptr<float>(), wg.data_ptr<float>()}, b, y.data_ptr<float>(), s, (int)gx, (int)items);
  } else {
    allow_smem<ct2d_wg>(kWgSmemMax);
    ct2d_wg<<<dim3(gx, N), WG_THREADS, smem, stream>>>(x.data_ptr<float>(), wg.data_ptr<float>(), b,
                                                       y.data_ptr<float>(), s);
  }
  return true;
}

// ct2d_wgs on P fp16 parts (ct2d_wgh, ct2d_wgf): stride 1, groups 1. wh: the weights' scaled fp16
// parts, (ceil(Cout/64), ceil(Cin/16), P, KH*KW, 8, 2, 8, 8) as [co block][chunk][part][tap][co / 8
// in the block][ci half][co % 8][ci % 8] (ct2d_fast.py's _fp16_parts). Plans the tiles; returns the
// dynamic shared memory (0: the tiles do not fit), the tiles per image (gx) and work items.
size_t plan_f16(WgShape& s, int P, const torch::Tensor& x, const torch::Tensor& wh, const torch::Tensor& y, int64_t KH,
                int64_t KW, int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t& gx, int64_t& items,
                int raw_slots = 0, bool raw_tma = false) {
  const int64_t N = x.size(0), Cin = x.size(1), Hin = x.size(2), Win = x.size(3);
  const int64_t Cout = y.size(1), Hout = y.size(2), Wout = y.size(3);
  TORCH_CHECK(wh.is_cuda() && wh.is_contiguous() && wh.scalar_type() == at::kHalf &&
                  wh.numel() == (Cout + 63) / 64 * ((Cin + 15) / 16) * P * KH * KW * 64 * 16,
              "fp16 weight parts: expected half (ceil(Cout/64), ceil(Cin/16), ", P, ", KH*KW, 8, 2, 8, 8)");
  if (N > 65535) return 0;
  const size_t smem = plan_wg(s, true, true, 1, Cin, Hin, Win, Cout, Hout, Wout, KH, KW, pad_h, pad_w, dil_h, dil_w,
                              reinterpret_cast<uintptr_t>(y.data_ptr()), P, raw_slots, raw_tma);
  if (!smem) return 0;
  gx = s.tiles_w * ((Hout + s.TR - 1) / s.TR) * s.co_blocks;
  items = gx * N;
  return items < (int64_t(1) << 31) ? smem : 0;
}

// fp32-class path on the warpgroup MMA (ct2d_wgh, 3xFP16): wh holds hi and lo (P = 2), ew their
// scale exponent. Runs the amax and split pre-passes, then the kernel. Returns false where it does
// not apply: more MMAs per accumulator than kWghMaxChain (the tensor cores' accumulation error,
// measured growing with it), or the tiles do not fit.
bool run_wgh(const torch::Tensor& x, const torch::Tensor& wh, int64_t ew, const float* b, torch::Tensor& y,
             int64_t KH, int64_t KW, int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w, cudaStream_t stream) {
  const int64_t N = x.size(0), Cin = x.size(1), chunks = (Cin + 15) / 16;
  WgShape s;
  int64_t gx = 0, items = 0;
  const size_t smem = plan_f16(s, 2, x, wh, y, KH, KW, pad_h, pad_w, dil_h, dil_w, gx, items);
  if (!smem || chunks * KH * KW * 3 > kWghMaxChain) return false;
  const int sms = sm_count();
  const int64_t HW = x.size(2) * x.size(3), C8 = 2 * chunks, half_elems = N * C8 * HW;
  auto amax = torch::zeros({1}, x.options().dtype(at::kInt));
  auto xs = torch::empty({2, N, C8, HW, 8}, x.options().dtype(at::kHalf));
  unsigned* amax_p = reinterpret_cast<unsigned*>(amax.data_ptr<int>());
  const int64_t n = x.numel();
  wgh_amax<<<(int)std::min<int64_t>((n / 4 + 255) / 256 + 1, 8 * sms), 256, 0, stream>>>(x.data_ptr<float>(), n, amax_p);
  fp16_convert<2><<<dim3((HW + 256 * WGF_PX - 1) / (256 * WGF_PX), C8, N), 256, 0, stream>>>(
      x.data_ptr<float>(), amax_p, reinterpret_cast<uint4*>(xs.data_ptr()), Cin, C8, HW, half_elems, kConvertScaled);
  allow_smem<ct2d_wgs<WghFp16Ops>>(kWgSmemMax);
  const WghFp16Ops ops{{{}, reinterpret_cast<const uint4*>(xs.data_ptr()), half_elems,
                        reinterpret_cast<const __half*>(wh.data_ptr())}, amax_p, (int)ew};
  ct2d_wgs<<<(int)std::min<int64_t>(items, sms), WGS_THREADS, smem, stream>>>(ops, b, y.data_ptr<float>(), s,
                                                                                     (int)gx, (int)items);
  return true;
}

// TF32-class path on the warpgroup MMA (ct2d_wgf, one fp16 product): wh holds hi (P = 1), ew its
// scale exponent. In order on the stream: x converted unscaled by the kernel's producer
// (WgdFp16Ops) where the block has all output channels and the raw ring leaves three stages with
// staggered consumers (H200, one process: 57 2.47 against 2.93 ms with the pre-pass; 65, where it
// leaves two stages, 0.99 against 0.93; 69, two channel blocks, 1.46 against 1.29), else by
// fp16_convert and the kernel on its copy (WgfFp16Ops, scaled = 0); then fp16_convert's rescale
// and the kernel on the rescaled copy (scaled = 1), which exit at once unless x's largest
// magnitude is outside [2^-2, 2^15). Returns false where the tiles do not fit. A bf16 x (and y, a
// bf16 run) always takes the pre-pass, which reads it as bf16 (exact in fp16 wherever fp32 is);
// the epilogue rounds the fp32 sums once to bf16.
bool run_wgf(const torch::Tensor& x, const torch::Tensor& wh, int64_t ew, const float* b, torch::Tensor& y,
             int64_t KH, int64_t KW, int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w, cudaStream_t stream) {
  const int64_t N = x.size(0), Cin = x.size(1), HW = x.size(2) * x.size(3), C8 = 2 * ((Cin + 15) / 16);
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  WgShape s;
  int64_t gx = 0, items = 0;
  // the producer's raw ring filled by TMA, else by cp.async, else the pre-pass
  CUtensorMap xmap;
  auto producer_path = [&](size_t bytes) { return bytes && s.co_blocks == 1 && s.stagger > 0; };
  size_t smem = 0;
  bool tma = false, direct = false;
  if (!bf16) {
    smem = plan_f16(s, 1, x, wh, y, KH, KW, pad_h, pad_w, dil_h, dil_w, gx, items, WGR_SLOTS, true);
    tma = producer_path(smem) && x_tensor_map(&xmap, x, s.raw_rl, s.raw_rows);
    direct = tma;
    if (!direct) {
      smem = plan_f16(s, 1, x, wh, y, KH, KW, pad_h, pad_w, dil_h, dil_w, gx, items, WGR_SLOTS);
      direct = producer_path(smem);
    }
  }
  if (!direct) smem = plan_f16(s, 1, x, wh, y, KH, KW, pad_h, pad_w, dil_h, dil_w, gx, items);
  if (!smem) return false;
  auto amax = torch::zeros({1}, x.options().dtype(at::kInt));
  auto xs = torch::empty({N, C8, HW, 8}, x.options().dtype(at::kHalf));
  unsigned* amax_p = reinterpret_cast<unsigned*>(amax.data_ptr<int>());
  uint4* xs_p = reinterpret_cast<uint4*>(xs.data_ptr());
  const __half* wh_p = reinterpret_cast<const __half*>(wh.data_ptr());
  const dim3 grid((HW + 256 * WGF_PX - 1) / (256 * WGF_PX), C8, N);
  const int blocks = (int)std::min<int64_t>(items, sm_count());
  allow_smem<ct2d_wgs<WgdFp16Ops<true>>>(kWgSmemMax);
  allow_smem<ct2d_wgs<WgdFp16Ops<false>>>(kWgSmemMax);
  allow_smem<ct2d_wgs<WgfFp16Ops>>(kWgSmemMax);
  for (int scaled = 0; scaled < 2; ++scaled) {
    if (direct && !scaled) {
      if (tma)
        ct2d_wgs<<<blocks, WGS_THREADS, smem, stream>>>(
            WgdFp16Ops<true>{{}, x.data_ptr<float>(), wh_p, amax_p, (int)ew, xmap}, b, y.data_ptr<float>(), s, (int)gx,
            (int)items);
      else
        ct2d_wgs<<<blocks, WGS_THREADS, smem, stream>>>(
            WgdFp16Ops<false>{{}, x.data_ptr<float>(), wh_p, amax_p, (int)ew, {}}, b, y.data_ptr<float>(), s, (int)gx,
            (int)items);
      continue;
    }
    const int mode = scaled ? kConvertRescale : kConvertUnscaled;
    const WgfFp16Ops ops{{{}, xs_p, 0, wh_p}, amax_p, (int)ew, scaled};
    if (bf16) {
      allow_smem<ct2d_wgs<WgfFp16Ops, __nv_bfloat16>>(kWgSmemMax);
      fp16_convert<1><<<grid, 256, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(x.data_ptr()), amax_p, xs_p,
                                                Cin, C8, HW, 0, mode);
      ct2d_wgs<<<blocks, WGS_THREADS, smem, stream>>>(ops, b, reinterpret_cast<__nv_bfloat16*>(y.data_ptr()), s,
                                                      (int)gx, (int)items);
      continue;
    }
    fp16_convert<1><<<grid, 256, 0, stream>>>(x.data_ptr<float>(), amax_p, xs_p, Cin, C8, HW, 0, mode);
    ct2d_wgs<<<blocks, WGS_THREADS, smem, stream>>>(ops, b, y.data_ptr<float>(), s, (int)gx, (int)items);
  }
  return true;
}
#endif

}  // namespace

// Whether a bf16 x (a bf16 run) goes to a kernel that writes bf16 itself, all TF32-class (split 1,
// config 0), whose products are exact for bf16 values:
// - stride 1, one group: the tensor-core kernels with fp16 products (bf16's significand fits
//   fp16's): ct2d_wgf (more than 32 output channels, sm_90a builds), which also reads x as bf16,
//   or ct2d_mmh (32 output channels per block), which stages x widened to fp32;
// - otherwise the phase kernel's TF32 variant, which reads x as bf16 (widened as it is staged).
// The rest run on x widened and their fp32 output rounded once (conv_transpose2d_fast).
static bool bf16_native(const torch::Tensor& wt, const torch::Tensor& wh, const torch::Tensor& wmh, int64_t Cout,
                 int64_t stride_h, int64_t stride_w, int64_t groups, int64_t split, int64_t config) {
  if (split != 1 || config != 0) return false;
  if (stride_h != 1 || stride_w != 1 || groups != 1) return wt.numel() > 0;
#if defined(CT2D_WGMMA)
  if (Cout > 32 && wh.numel() > 0) return true;
#endif
  return Cout % 32 == 0 && wmh.numel() > 0;
}

// x: (N, Cin, H, W) fp32 CUDA; wp: packed weights (Cin, KH*KW, Cout/groups), exact, for the
// phase kernel; wt: (groups, ceil(Cout/groups/16), KH, KW, ceil(Cin/groups/8), 2, 32, 4), its
// tensor-core variant's fragment-ordered TF32 hi and lo parts (empty: CUDA cores only); wm: (ceil(Cin/8), KH*KW, Cout, 8) for ct2d_mma, TF32-rounded when split == 1 and
// exact when split == 3; wmh (half) and wmh_exp: (ceil(Cin/16), KH*KW, Cout, 16), scaled by 2^wmh_exp,
// for ct2d_mmh (split 1); wg: (ceil(Cin/8), KH*KW, ceil(Cout/8), 2, 8, 4), TF32-rounded, for ct2d_wgs;
// wh (half) and wh_exp: the scaled fp16 parts for ct2d_wgf (split 1, hi) or ct2d_wgh (split 3, hi
// and lo; see plan_f16)
// (wm, wmh, wg and wh may be empty where their kernel does not apply). Returns y.
torch::Tensor conv_transpose2d_fast(torch::Tensor x, torch::Tensor wp, torch::Tensor wt, torch::Tensor wm,
                                    torch::Tensor wmh, int64_t wmh_exp, torch::Tensor wg, torch::Tensor wh, int64_t wh_exp, c10::optional<torch::Tensor> bias,
                                    int64_t Cout, int64_t KH, int64_t KW, int64_t stride_h, int64_t stride_w,
                                    int64_t pad_h, int64_t pad_w, int64_t outpad_h, int64_t outpad_w,
                                    int64_t dil_h, int64_t dil_w, int64_t groups, int64_t split, int64_t config) {
  TORCH_CHECK(x.is_cuda() && wp.is_cuda(), "x and the packed weight must be CUDA tensors");
  TORCH_CHECK((x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) && wp.scalar_type() == at::kFloat,
              "x float32 or bfloat16, the packed weights float32");
  // a bf16 run where no kernel reads or writes bf16 itself (or none fits): the fp32 path on x
  // widened (exact), its output rounded once to bf16
  auto widened = [&]() {
    return conv_transpose2d_fast(x.to(at::kFloat), wp, wt, wm, wmh, wmh_exp, wg, wh, wh_exp, bias, Cout, KH, KW,
                                 stride_h, stride_w, pad_h, pad_w, outpad_h, outpad_w, dil_h, dil_w, groups, split,
                                 config).to(at::kBFloat16);
  };
  if (x.scalar_type() == at::kBFloat16 && !bf16_native(wt, wh, wmh, Cout, stride_h, stride_w, groups, split, config))
    return widened();
  TORCH_CHECK(x.dim() == 4, "expected a 4-D input");
  TORCH_CHECK(split == 1 || split == 3, "split must be 1 (TF32) or 3 (3xTF32)");
  TORCH_CHECK(config >= 0 && config <= 9, "config must be 0..9");
  x = x.contiguous();
  wp = wp.contiguous();
  const int64_t N = x.size(0), Cin = x.size(1), Hin = x.size(2), Win = x.size(3);
  TORCH_CHECK(groups >= 1 && Cin % groups == 0 && Cout % groups == 0, "channels must divide by groups");
  TORCH_CHECK(wp.size(0) == Cin && wp.size(1) == KH * KW && wp.size(2) == Cout / groups, "packed weight shape");
  TORCH_CHECK(wt.numel() == 0 || (wt.is_cuda() && wt.is_contiguous() &&
                                   wt.numel() == groups * ((Cout / groups + 15) / 16) * KH * KW *
                                                     ((Cin / groups + 7) / 8) * 256),
              "tensor-core phase weights: expected (groups, ceil(Cout/groups/16), KH, KW, ceil(Cin/groups/8), 2, 32, 4)");
  const int64_t Hout = (Hin - 1) * stride_h - 2 * pad_h + dil_h * (KH - 1) + outpad_h + 1;
  const int64_t Wout = (Win - 1) * stride_w - 2 * pad_w + dil_w * (KW - 1) + outpad_w + 1;
  TORCH_CHECK(Hout > 0 && Wout > 0, "output size is not positive");
  TORCH_CHECK(x.numel() < (int64_t(1) << 31) && N * Cout * Hout * Wout < (int64_t(1) << 40), "tensor too large");
  const float* b = nullptr;
  torch::Tensor bias_c;
  if (bias.has_value() && bias->defined()) {
    bias_c = bias->contiguous();
    TORCH_CHECK(bias_c.is_cuda() && bias_c.numel() == Cout && bias_c.scalar_type() == at::kFloat,
                "bias must be a float32 CUDA tensor of out_channels elements");
    b = bias_c.data_ptr<float>();
  }
  auto y = torch::empty({N, Cout, Hout, Wout}, x.options());
  if (y.numel() == 0) return y;
  auto stream = c10::cuda::getCurrentCUDAStream();

  if (stride_h == 1 && stride_w == 1 && groups == 1) {
    // tensor cores: on sm_90a builds the wgmma kernels for the TF32 class with more than 32 output
    // channels (with 32 or fewer, half of the wgmma's 64 rows would be idle: ct2d_mma measured
    // faster on 71 and 78), else ct2d_mma, else the wgmma kernels where ct2d_mma does not apply
    bool done = false;
#if defined(CT2D_WGMMA)
    // more than 32 output channels: fp16 parts on the wgmma, one (TF32 class, ct2d_wgf) or three
    // products (fp32 class, 3xFP16, ct2d_wgh); else (or config 5, 6, 8) the TF32 wgmma kernels
    if (config == 0 && Cout > 32 && wh.numel() > 0)
      done = split == 1 ? run_wgf(x, wh, wh_exp, b, y, KH, KW, pad_h, pad_w, dil_h, dil_w, stream)
                        : run_wgh(x, wh, wh_exp, b, y, KH, KW, pad_h, pad_w, dil_h, dil_w, stream);
    const bool wg_ok = split == 1 && wg.numel() > 0 && x.scalar_type() == at::kFloat;
    if (!done && wg_ok && ((config == 0 && Cout > 32) || config == 5 || config == 6 || config == 8))
      done = run_wg(x, wg, b, y, KH, KW, pad_h, pad_w, dil_h, dil_w, config, stream);
#endif
    if (!done && wm.numel() > 0)  // a bf16 x widened for ct2d_mmh's fp32 staging; y stays bf16
      done = run_mma(x.scalar_type() == at::kFloat ? x : x.to(at::kFloat), wm, wmh, wmh_exp, b, y, KH, KW, pad_h,
                     pad_w, dil_h, dil_w, split, config, stream);
#if defined(CT2D_WGMMA)
    if (!done && wg_ok && config == 0) done = run_wg(x, wg, b, y, KH, KW, pad_h, pad_w, dil_h, dil_w, 0, stream);
#endif
    if (done) {
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return y;
    }
  }
  const bool bf16 = y.scalar_type() == at::kBFloat16;
  if (bf16 && stride_h == 1 && stride_w == 1 && groups == 1) return widened();  // no stride-1 bf16 kernel fitted

  TORCH_CHECK(stride_w <= kMaxStride && KH <= kMaxTaps && KW <= kMaxTaps,
              "fast phase kernel: stride_w <= 16 and kernel sizes <= 32 (use the direct solution)");
  PhaseShape s{};
  s.N = N; s.Cin = Cin; s.Hin = Hin; s.Win = Win; s.Cout = Cout; s.Hout = Hout; s.Wout = Wout;
  s.KH = KH; s.KW = KW; s.sh = stride_h; s.sw = stride_w; s.ph = pad_h; s.pw = pad_w;
  s.dh = dil_h; s.dw = dil_w; s.groups = groups;
  s.cin_g = Cin / groups;
  s.cout_g = Cout / groups;
  for (int r = 0; r < stride_h; ++r) {
    int c = 0;
    for (int kh = 0; kh < KH; ++kh) c += pos_mod(r + pad_h - kh * dil_h, stride_h) == 0;
    s.khn_max = std::max(s.khn_max, c);
  }
  // config 0 (and 4..9): the tensor-core variant where its shared memory fits (TF32 for split 1,
  // 3xTF32 for split 3; sized for three blocks per SM, or two with config 7 and four with 8, which
  // are tuning hooks), else the CUDA-core one with (P, CT) pixels x channels per thread chosen
  // here; 1..3 force (4, 8), (2, 8), (1, 4)
  int cfg = config >= 4 ? 0 : config;
  if (bf16) {  // bf16_native: split 1, config 0, wt given
    if (!launch_phase<4, 16, 1, 3, __nv_bfloat16>(x, wt, b, y, s, stream)) return widened();
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
  }
  auto launch_tc = [&](auto tc) {
    constexpr int TC = decltype(tc)::value;
    return config == 7   ? launch_phase<4, 16, TC, 2>(x, wt, b, y, s, stream)
           : config == 8 ? launch_phase<4, 16, TC, 4>(x, wt, b, y, s, stream)
                         : launch_phase<4, 16, TC, 3>(x, wt, b, y, s, stream);
  };
  if (cfg == 0 && wt.numel() > 0 &&
      (split == 1 ? launch_tc(std::integral_constant<int, 1>{}) : launch_tc(std::integral_constant<int, 3>{}))) {
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
  }
  if (cfg == 0) {
    const int per_phase = (Wout + stride_w - 1) / stride_w;
    if (s.cout_g < 8) cfg = 3;
    else if (per_phase >= 96 && (per_phase + 127) / 128 * 128 <= 1.2 * per_phase) cfg = 1;
    else cfg = 2;
  }
  TORCH_CHECK(cfg >= 1 && cfg <= 3, "config must be 0..9");
  const bool fits = cfg == 1   ? launch_phase<4, 8, 0, 2>(x, wp, b, y, s, stream)
                    : cfg == 2 ? launch_phase<2, 8, 0, 2>(x, wp, b, y, s, stream)
                               : launch_phase<1, 4, 0, 2>(x, wp, b, y, s, stream);
  TORCH_CHECK(fits, "fast phase kernel: too many input channels per group or kernel taps for shared memory "
                    "(use the direct solution)");
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
