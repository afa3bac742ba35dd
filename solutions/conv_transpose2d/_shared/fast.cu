// Fast ConvTranspose2d, fp32 in and out. Two kernels, chosen per call from the shapes:
//
// 1. ct2d_mma (stride 1, groups 1, Cout % 32 == 0, kernel 3x3/3x5/3x7): implicit GEMM on the
//    tensor cores with mma.sync.m16n8k8 TF32. GEMM view per image: M = Cout, N = output pixels,
//    K = Cin * KH * KW,
//        y[co, oh, ow] = sum_{ci, kh, kw} w[ci, co, kh, kw] * x[ci, oh + pad_h - kh*dil_h, ow + pad_w - kw*dil_w].
//    For each chunk of 8 input channels a block stages the input tile WITH its halo and the
//    chunk's weights for all taps in shared memory (cp.async, 2-3 stages), so every loaded input
//    value feeds all KH*KW taps; both MMA operands are read with ldmatrix. SPLIT = 1: TF32-class
//    accuracy. SPLIT = 3: 3xTF32 (a_hi*b_hi + a_hi*b_lo + a_lo*b_hi), fp32-class accuracy.
// 2. ct2d_phase (everything else, e.g. strided, grouped, dilated): exact fp32 on the CUDA cores.
//    For output row oh only the taps kh with (oh + pad_h - kh*dil_h) divisible by stride_h
//    contribute (likewise kw for each column phase), so no multiply is spent on the zeros a
//    strided transposed convolution inserts, and rows with no valid tap are pure bias/zero
//    writes. A block takes rows of one residue mod stride_h (one tap set), stages their input
//    rows channels-innermost with cp.async, computes register tiles of P pixels x CT channels per
//    thread, and writes every output element once, coalesced, with streaming stores: these
//    problems are bound by writing the output.
//
// Weights arrive pre-packed (by the Python side, once per weight version) as
// wp[ci][kh*KW + kw][co_in_group], i.e. w.permute(0, 2, 3, 1), for the phase kernel, and as
// wm[ci / 8][kh*KW + kw][co][ci % 8] for the tensor-core kernel (TF32-rounded for SPLIT = 1).
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>
#include <type_traits>

namespace {

__device__ __forceinline__ uint32_t to_tf32(float v) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return r;
}

// v -> (hi, lo): hi = v rounded to TF32, lo = the remainder rounded to TF32 (3xTF32 operands)
__device__ __forceinline__ void split_tf32(uint32_t& v, uint32_t& lo) {
  const float f = __uint_as_float(v);
  v = to_tf32(f);
  lo = to_tf32(f - __uint_as_float(v));
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

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_1() { asm volatile("cp.async.wait_group 1;\n" ::); }
__device__ __forceinline__ void cp_async_wait_0() { asm volatile("cp.async.wait_group 0;\n" ::); }

constexpr int KC = 8;        // input channels per pipeline stage (the MMA's K)
constexpr int THREADS = 256; // 8 warps
constexpr int MAXC = 5;      // staged input columns per thread: slot + 32 j, j < MAXC

__device__ __forceinline__ void ldsm_x4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

struct MmaShape {
  int Cin, Hin, Win, Cout, Hout, Wout, pad_h, pad_w, dil_h, dil_w;
  int TW, TR, tiles_w, co_blocks;  // output tile: TR rows x TW columns, for BM channels
  int rows, need, ncol, rowlen;    // staged input rows, columns needed, 32-column groups, row stride (= 32 ncol)
  int stages, chunks;              // cp.async pipeline depth; Cin padded to 8 / 8
};

// Implicit GEMM per image: D[co][pixel] = sum_{ci,kh,kw} W[co][ci,kh,kw] * X[ci,kh,kw][pixel].
// Block: BM = 16*MT output channels x (8 warps * NT*8) pixels; a warp owns NT*8 consecutive
// pixels of one output row and all BM channels, i.e. MT x NT m16n8k8 tiles.
// Shared memory per stage: the input tile with its halo as [row][col][8 channels], then the
// chunk's weights as [tap][co][8 channels]. In both, the two 4-channel halves of a 32-byte row
// are swapped when bit 2 of the row index is set, so any 8 consecutive rows are one
// conflict-free ldmatrix phase (also at the odd pixel offsets the taps start at). Both operands
// are fetched with ldmatrix.x4: MT + NT/2 instructions feed MT*NT MMAs per tap.
// Weights arrive packed as wm[chunk][tap][co][8] (input channels innermost, zero-padded to a
// multiple of 8): TF32-rounded for SPLIT = 1; exact for SPLIT = 3, which splits both operands
// into hi + lo TF32 parts and runs a_hi*b_hi + a_hi*b_lo + a_lo*b_hi with per-chunk accumulators.
template <int MT, int NT, int SPLIT, int KH, int KW>
__global__ void __launch_bounds__(THREADS, MT * NT * SPLIT <= 16 ? 2 : 1)
    ct2d_mma(const float* __restrict__ x, const float* __restrict__ wm, const float* __restrict__ bias,
             float* __restrict__ y, const MmaShape s) {
  constexpr int BM = 16 * MT;
  constexpr int TAPS = KH * KW;
  constexpr int WS_SIZE = TAPS * BM * KC;
  extern __shared__ __align__(16) float smem[];
  const int xs_size = s.rows * s.rowlen * KC;
  const uint32_t stage_bytes = (xs_size + WS_SIZE) * 4;
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int cob = blockIdx.x % s.co_blocks, tile = blockIdx.x / s.co_blocks;  // channel blocks
  const int oh0 = (tile / s.tiles_w) * s.TR, ow0 = (tile % s.tiles_w) * s.TW;  // of a tile adjacent
  const int co0 = cob * BM;
  const int n = blockIdx.z;
  const int ih_base = oh0 + s.pad_h - (KH - 1) * s.dil_h;
  const int iw_base = ow0 + s.pad_w - (KW - 1) * s.dil_w;
  const float* xn = x + (int64_t)n * s.Cin * s.Hin * s.Win;
  const int hw = s.Hin * s.Win;

  // Input staging: thread (channel k_ld = tid & 7 of the chunk, slot = tid >> 3) copies columns
  // slot + 32 j of every staged row. Per block: the clamped input column of each and whether it
  // is inside the image; per element then only a row pointer add and a zero-fill size.
  const int k_ld = tid & 7, slot = tid >> 3;
  // col_in bit j: column slot + 32 j is inside the image (else zero-filled); bit 8 + j: it is
  // copied at all. Columns at or past need are never read by ldmatrix (the last tap window ends
  // at need - 1), so they are skipped.
  int col_off[MAXC];
  uint32_t col_in = 0;
#pragma unroll
  for (int j = 0; j < MAXC; ++j) {
    const int iw = iw_base + slot + 32 * j;
    const bool ok = slot + 32 * j < s.need && iw >= 0 && iw < s.Win;
    col_off[j] = ok ? iw : 0;
    col_in |= (ok ? 1u : 0u) << j | (slot + 32 * j < s.need ? 1u : 0u) << (8 + j);
  }
  const uint32_t x_dst = (slot * KC + (k_ld ^ (slot & 4))) * 4;  // + j * 32 * KC * 4
  const uint32_t row_bytes = s.rowlen * KC * 4;
  auto load_chunk = [&](int chunk, int stage) {
    const uint32_t xs_s = smem_base + stage * stage_bytes;
    const int ci = chunk * KC + k_ld;
    const bool ci_ok = ci < s.Cin;
    const float* xc = xn + (int64_t)(ci_ok ? ci : 0) * hw;
    for (int r = 0; r < s.rows; ++r) {
      const int ih = ih_base + r;
      const bool row_ok = ci_ok && ih >= 0 && ih < s.Hin;
      const float* xr = xc + (row_ok ? ih : 0) * s.Win;
      const uint32_t in = row_ok ? col_in : col_in & 0xff00u;
      const uint32_t dr = xs_s + r * row_bytes + x_dst;
#pragma unroll
      for (int j = 0; j < MAXC; ++j)
        if ((in >> (8 + j)) & 1) cp_async4(dr + j * 32 * KC * 4, xr + col_off[j], ((in >> j) & 1) * 4);
    }
    // weights [tap][co][8]: 16-byte halves, swapped when bit 2 of co is set
    const uint32_t ws_s = xs_s + xs_size * 4;
    const float* wsrc = wm + ((int64_t)chunk * TAPS * s.Cout + co0) * KC;
    for (int i = tid; i < TAPS * BM * 2; i += THREADS) {
      const int half = i & 1, co = (i >> 1) % BM, tap = (i >> 1) / BM;
      cp_async16(ws_s + ((tap * BM + co) * KC + ((half ^ (co >> 2)) & 1) * 4) * 4,
                  wsrc + ((int64_t)tap * s.Cout + co) * KC + half * 4);
    }
    cp_async_commit();
  };

  // this warp's pixels: output row oh0 + wr, columns ow0 + wc*NT*8 + [0, NT*8)
  const int wpr = s.TW / (NT * 8);
  const int wr = warp / wpr, wc = warp % wpr;
  const int col0 = wc * NT * 8;
  const bool active = oh0 + wr < s.Hout && ow0 + col0 < s.Wout;
  const int pairs = active ? min(NT / 2, (s.Wout - ow0 - col0 + 15) / 16) : 0;  // n-tile pairs in range

  float acc[MT][NT][4];
  float part[SPLIT == 3 ? MT : 1][SPLIT == 3 ? NT : 1][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.f;

  // ldmatrix lane addresses (bytes). A: sub-matrix lane>>3 = (co half, k half) = (bit 0, bit 1).
  const uint32_t a_lane = (((lane & 7) + ((lane >> 3) & 1) * 8) * KC + (((lane >> 4) ^ (lane >> 2)) & 1) * 4) * 4;
  // B: sub-matrix lane>>3 = (k half, n-tile of the pair) = (bit 0, bit 1)
  const int b_khalf = (lane >> 3) & 1;
  const uint32_t b_lane = ((wr * s.rowlen + col0 + (lane & 7) + (lane >> 4) * 8) * KC) * 4;
  const uint32_t rowstep = s.dil_h * s.rowlen * KC * 4;

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
    if (!active) continue;
    const uint32_t xs_s = smem_base + cur * stage_bytes;
    const uint32_t ws_s = xs_s + xs_size * 4;
    if constexpr (SPLIT == 3) {
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int k = 0; k < 4; ++k) part[i][j][k] = 0.f;
    }
    // FULL: every n-tile of the warp is inside the output (no per-pair guards in the hot loop)
    auto taps = [&](auto full) {
      constexpr bool FULL = decltype(full)::value;
  #pragma unroll 1
      for (int kh = 0; kh < KH; ++kh) {
        const uint32_t xrow = xs_s + b_lane + (KH - 1 - kh) * rowstep;
        const uint32_t wrow = ws_s + a_lane + kh * KW * BM * KC * 4;
  #pragma unroll
        for (int kw = 0; kw < KW; ++kw) {
          const int shift = (KW - 1 - kw) * s.dil_w;
          const uint32_t swz = ((((lane & 7) + shift) >> 2) ^ b_khalf) & 1;  // bit 2 of the pixel
          const uint32_t xb = xrow + shift * KC * 4 + swz * 16;
          uint32_t a[MT][4], b[NT][2];
  #pragma unroll
          for (int i = 0; i < MT; ++i) ldsm_x4(a[i], wrow + (kw * BM + i * 16) * KC * 4);
  #pragma unroll
          for (int jp = 0; jp < NT / 2; ++jp) {
            if (FULL || jp < pairs) {
              uint32_t r[4];
              ldsm_x4(r, xb + jp * 16 * KC * 4);
              b[2 * jp][0] = r[0]; b[2 * jp][1] = r[1]; b[2 * jp + 1][0] = r[2]; b[2 * jp + 1][1] = r[3];
            }
          }
          if constexpr (SPLIT == 3) {
            uint32_t a_lo[MT][4], b_lo[NT][2];
  #pragma unroll
            for (int i = 0; i < MT; ++i)
  #pragma unroll
              for (int k = 0; k < 4; ++k) split_tf32(a[i][k], a_lo[i][k]);
  #pragma unroll
            for (int j = 0; j < NT; ++j)
  #pragma unroll
              for (int k = 0; k < 2; ++k) split_tf32(b[j][k], b_lo[j][k]);
  #pragma unroll
            for (int jp = 0; jp < NT / 2; ++jp) {
              if (FULL || jp < pairs) {
  #pragma unroll
                for (int i = 0; i < MT; ++i)
  #pragma unroll
                  for (int j = 2 * jp; j < 2 * jp + 2; ++j) {
                    mma_tf32(part[i][j], a_lo[i], b[j]);
                    mma_tf32(part[i][j], a[i], b_lo[j]);
                    mma_tf32(part[i][j], a[i], b[j]);
                  }
              }
            }
          } else {
  #pragma unroll
            for (int jp = 0; jp < NT / 2; ++jp) {
              if (FULL || jp < pairs) {
  #pragma unroll
                for (int i = 0; i < MT; ++i) {
                  mma_tf32(acc[i][2 * jp], a[i], b[2 * jp]);
                  mma_tf32(acc[i][2 * jp + 1], a[i], b[2 * jp + 1]);
                }
              }
            }
          }
        }
      }
    };
    if (pairs == NT / 2) taps(std::true_type{});
    else taps(std::false_type{});
    if constexpr (SPLIT == 3) {  // short tensor-core accumulation chains, fp32 adds across chunks
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int k = 0; k < 4; ++k) acc[i][j][k] += part[i][j][k];
    }
  }
  if (!active) return;

  // epilogue: C fragment c0 = (g, 2t), c1 = (g, 2t+1), c2 = (g+8, 2t), c3 = (g+8, 2t+1)
  float* yn = y + (int64_t)n * s.Cout * s.Hout * s.Wout;
  const int oh = oh0 + wr;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int co = co0 + i * 16 + g + half * 8;
      const float b0 = bias ? bias[co] : 0.f;
      float* yrow = yn + ((int64_t)co * s.Hout + oh) * s.Wout;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int ow = ow0 + col0 + j * 8 + 2 * t;
        float* dst = yrow + ow;
        if (ow + 1 < s.Wout && (reinterpret_cast<uintptr_t>(dst) & 7) == 0) {
          __stcs(reinterpret_cast<float2*>(dst), make_float2(acc[i][j][half * 2] + b0, acc[i][j][half * 2 + 1] + b0));
        } else {
          if (ow < s.Wout) dst[0] = acc[i][j][half * 2] + b0;
          if (ow + 1 < s.Wout) dst[1] = acc[i][j][half * 2 + 1] + b0;
        }
      }
    }
}

constexpr int kMaxStride = 16;  // phase kernel limits (the host falls back to direct otherwise)
constexpr int kMaxTaps = 32;
constexpr int PHASE_THREADS = 256;

struct PhaseShape {
  int N, Cin, Hin, Win, Cout, Hout, Wout, KH, KW, sh, sw, ph, pw, dh, dw, groups;
  int cin_g, cout_g, cip, cips;  // channels per group; input channels padded to 4; staged row stride
  int cot, tiles_c;              // output channels per block (multiple of CT) and tiles per group
  int npx, seg, ncol;            // pixels per column phase, output columns (sw * npx), staged input columns
  int rows, khn_max;             // output rows per block (sh apart); most valid kh of any row
};

__host__ __device__ __forceinline__ int floor_div(int a, int b) { return (a >= 0 ? a : a - b + 1) / b; }
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
template <int P, int CT>
__global__ void __launch_bounds__(PHASE_THREADS, 2)
    ct2d_phase(const float* __restrict__ x, const float* __restrict__ wp, const float* __restrict__ bias,
               float* __restrict__ y, const PhaseShape s) {
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
  float* const out0 = y + ((int64_t)n * s.Cout + co_abs) * plane + ow0;
  float* const wsm = phase_smem;  // [cb][kh_a][kw][ci][CT]
  const int wsize = (s.cot * khn * s.KW * s.cip + 3) & ~3;
  float* const xs = wsm + wsize;  // [kh_a][col][cips]
  float* const ys = xs + ((s.khn_max * s.ncol * s.cips + 3) & ~3);  // [cot][seg]
  const bool pairs = plane % 2 == 0 && s.Wout % 2 == 0 && ow0 % 2 == 0;  // rows 8-byte aligned: float2 stores

  // Writes output row oh of the tile, bias added, with streaming stores: from ys[c][col] when
  // FROM_TILE, else bias (or zero) only.
  auto write_row = [&](int oh, auto from_tile) {
    constexpr bool FROM_TILE = decltype(from_tile)::value;
    float* yrow = out0 + (int64_t)oh * s.Wout;
    for (int c = warp; c < cov; c += PHASE_THREADS / 32) {
      const float bv = bias ? __ldg(bias + co_abs + c) : 0.f;
      float* dst = yrow + c * plane;
      const float* src = ys + c * s.seg;
      if (pairs) {
        float2* d2 = reinterpret_cast<float2*>(dst) + lane;
        const float2* s2 = reinterpret_cast<const float2*>(src) + lane;
        for (int col = 2 * lane; col + 1 < width; col += 64, d2 += 32, s2 += 32) {
          float2 v = FROM_TILE ? *s2 : make_float2(0.f, 0.f);
          v.x += bv;
          v.y += bv;
          __stcs(d2, v);
        }
        const int last = width & ~1;  // an odd last column
        if (last < width && lane == 0) __stcs(dst + last, (FROM_TILE ? src[last] : 0.f) + bv);
      } else {
        for (int col = lane; col < width; col += 32) __stcs(dst + col, (FROM_TILE ? src[col] : 0.f) + bv);
      }
    }
  };

  if (khn == 0) {  // no tap reaches these rows: bias (or zero) only
    for (int i = 0; i < nrows; ++i) write_row(r0 + s.sh * (k0 + i), std::false_type{});
    return;
  }

  const float* xg = x + ((int64_t)n * s.Cin + grp * s.cin_g) * plane_in;
  const int quads = s.cip / 4, npb = s.npx / (32 * P), ncb = s.cot / CT;
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
      const float* src = in ? xg + (int64_t)ci * plane_in + ih * s.Win + iw : xg;
      const uint32_t dst = xs_base + ((a * s.ncol + col) * s.cips + ci) * 4;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const bool ok = in && ci + k < s.cin_g;
        cp_async4(dst + 4 * k, ok ? src + k * plane_in : xg, ok ? 4 : 0);
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
  {  // weights of the valid taps: outer (cb, kh_a, kw) per warp, inner (ci, c) per lane
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

  for (int i = 0; i < nrows; ++i) {
    const int oh = r0 + s.sh * (k0 + i);
    cp_async_wait_0();
    __syncthreads();  // input row i (and the weights) staged; the previous tile is written out
    int cb = warp % ncb, pb = (warp / ncb) % npb, ph = warp / (ncb * npb);
    while (ph < s.sw) {
      const int rw = order[ph];
      const int j0 = pb * 32 * P + lane;
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
      float* yp = ys + cb * CT * s.seg + rw + s.sw * j0;
#pragma unroll
      for (int c = 0; c < CT; ++c, yp += s.seg)
#pragma unroll
        for (int p = 0; p < P; ++p) yp[p * 32 * s.sw] = acc[p][c];
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

// Shared memory of the phase kernel for a configuration, in bytes.
size_t phase_smem_bytes(const PhaseShape& s) {
  const size_t w = ((size_t)s.cot * s.khn_max * s.KW * s.cip + 3) & ~size_t(3);
  const size_t xs = ((size_t)s.khn_max * s.ncol * s.cips + 3) & ~size_t(3);
  return (w + xs + (size_t)s.cot * s.seg) * sizeof(float);
}

template <int P, int CT>
void launch_phase(const torch::Tensor& x, const torch::Tensor& wp, const float* bias, torch::Tensor& y,
                  PhaseShape s, cudaStream_t stream) {
  // channel tile: up to 32 channels, balanced over the tiles of a group
  s.tiles_c = (s.cout_g + 31) / 32;
  s.cot = ((s.cout_g + s.tiles_c - 1) / s.tiles_c + CT - 1) / CT * CT;
  const int per_phase = (s.Wout + s.sw - 1) / s.sw;
  s.npx = (per_phase + 32 * P - 1) / (32 * P) * (32 * P);
  auto fit = [&](size_t budget) {
    for (;;) {
      s.seg = s.sw * s.npx;
      s.ncol = s.npx + ((s.KW - 1) * s.dw + s.sw - 1) / s.sw + 1;
      if (phase_smem_bytes(s) <= budget) return true;
      if (s.npx > 32 * P) s.npx = (s.npx / 2 + 32 * P - 1) / (32 * P) * (32 * P);
      else if (s.cot > CT) {
        s.cot -= CT;
        s.tiles_c = (s.cout_g + s.cot - 1) / s.cot;
      } else return false;
    }
  };
  // two blocks per SM (228 KB; 1 KB reserved and under 1 KB of static tables per block) where
  // that fits, else one
  TORCH_CHECK(fit(112 * 1024) || fit(220 * 1024),
              "fast phase kernel: too many input channels per group or kernel taps for shared memory "
              "(use the direct solution)");
  const int per_res = (s.Hout + s.sh - 1) / s.sh;
  const int64_t blocks1 = (int64_t)((s.Wout + s.seg - 1) / s.seg) * s.Hout * s.N * s.groups * s.tiles_c;
  s.rows = std::min(per_res, blocks1 >= 8 * 2 * 132 ? 4 : 1);  // amortize weight staging
  const int64_t gz = (int64_t)s.N * s.groups * s.tiles_c;
  const int64_t gy = (int64_t)s.sh * ((per_res + s.rows - 1) / s.rows);
  TORCH_CHECK(gz < 65536 && gy < 65536, "fast phase kernel: batch * groups or output height too large");
  auto kernel = ct2d_phase<P, CT>;
  static bool configured = false;  // once per instantiation, not on every call
  if (!configured) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
    configured = true;
  }
  dim3 grid((s.Wout + s.seg - 1) / s.seg, gy, gz);
  kernel<<<grid, PHASE_THREADS, phase_smem_bytes(s), stream>>>(x.data_ptr<float>(), wp.data_ptr<float>(), bias,
                                                               y.data_ptr<float>(), s);
}

template <int MT, int NT, int SPLIT, int KH, int KW>
void launch_mma(const torch::Tensor& x, const torch::Tensor& wm, const float* bias, torch::Tensor& y,
                const MmaShape& s, int N, size_t smem, cudaStream_t stream) {
  auto kernel = ct2d_mma<MT, NT, SPLIT, KH, KW>;
  static bool configured = false;  // once per instantiation, not on every call
  if (!configured) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
    configured = true;
  }
  dim3 grid(s.tiles_w * ((s.Hout + s.TR - 1) / s.TR) * s.co_blocks, 1, N);
  kernel<<<grid, THREADS, smem, stream>>>(x.data_ptr<float>(), wm.data_ptr<float>(), bias, y.data_ptr<float>(), s);
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

// Tensor-core path for stride 1, groups 1. config 0 picks the tiling from the shapes; 1..3 force
// (MT, NT) = (4, 8), (4, 4), (2, 8) (for tuning runs; on the phase path they force (P, CT) =
// (4, 8), (2, 8), (1, 4)). Returns false where the path does not apply.
bool run_mma(const torch::Tensor& x, const torch::Tensor& wm, const float* b, torch::Tensor& y, int64_t KH,
             int64_t KW, int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t split,
             int64_t config, cudaStream_t stream) {
  const int64_t N = x.size(0), Cin = x.size(1), Hin = x.size(2), Win = x.size(3);
  const int64_t Cout = y.size(1), Hout = y.size(2), Wout = y.size(3);
  if (!(KH == 3 && (KW == 3 || KW == 5 || KW == 7)) || Cout % 32 != 0 || Cin < 4) return false;
  const int64_t chunks = (Cin + KC - 1) / KC;
  TORCH_CHECK(wm.is_cuda() && wm.is_contiguous() && wm.numel() == chunks * KH * KW * Cout * KC,
              "MMA weight copy: expected (ceil(Cin/8), KH*KW, Cout, 8)");
  int mt, nt;
  if (config == 0) {
    mt = Cout % 64 == 0 ? 4 : 2;
    nt = split == 3 ? (mt == 4 ? 4 : 8) : 8;
  } else {
    TORCH_CHECK(config >= 1 && config <= 3, "config must be 0..3");
    mt = config == 3 ? 2 : 4;
    nt = config == 1 ? 8 : (config == 2 ? 4 : 8);
  }
  if (Cout % (16 * mt) != 0) return false;
  if (split == 3 && mt * nt > 16) return false;
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
  s.need = s.TW + (KW - 1) * dil_w;
  s.ncol = (s.need + 31) / 32;
  if (s.ncol > MAXC) return false;
  s.rowlen = 32 * s.ncol;
  s.chunks = chunks;
  const size_t stage = ((size_t)s.rows * s.rowlen * KC + (size_t)KH * KW * 16 * mt * KC) * sizeof(float);
  const size_t per_block = (mt * nt * split <= 16) ? 110 * 1024 : 220 * 1024;  // 2 or 1 blocks per SM
  s.stages = 3 * stage <= per_block ? 3 : 2;
  if (s.stages * stage > per_block) return false;
  const size_t smem = s.stages * stage;
  if (split == 3) {
    if (mt == 4) return dispatch_taps<4, 4, 3>(KH, KW, x, wm, b, y, s, N, smem, stream);
    return dispatch_taps<2, 8, 3>(KH, KW, x, wm, b, y, s, N, smem, stream);
  }
  if (mt == 4 && nt == 8) return dispatch_taps<4, 8, 1>(KH, KW, x, wm, b, y, s, N, smem, stream);
  if (mt == 4) return dispatch_taps<4, 4, 1>(KH, KW, x, wm, b, y, s, N, smem, stream);
  return dispatch_taps<2, 8, 1>(KH, KW, x, wm, b, y, s, N, smem, stream);
}

}  // namespace

// x: (N, Cin, H, W) fp32 CUDA; wp: packed weights (Cin, KH*KW, Cout/groups), exact, for the
// phase kernel; wm: (ceil(Cin/8), KH*KW, Cout, 8) for the tensor-core kernel, TF32-rounded when
// split == 1 and exact when split == 3 (may be empty where that kernel does not apply). Returns y.
torch::Tensor conv_transpose2d_fast(torch::Tensor x, torch::Tensor wp, torch::Tensor wm,
                                    c10::optional<torch::Tensor> bias,
                                    int64_t Cout, int64_t KH, int64_t KW, int64_t stride_h, int64_t stride_w,
                                    int64_t pad_h, int64_t pad_w, int64_t outpad_h, int64_t outpad_w,
                                    int64_t dil_h, int64_t dil_w, int64_t groups, int64_t split, int64_t config) {
  TORCH_CHECK(x.is_cuda() && wp.is_cuda(), "x and the packed weight must be CUDA tensors");
  TORCH_CHECK(x.scalar_type() == at::kFloat && wp.scalar_type() == at::kFloat, "float32 only");
  TORCH_CHECK(x.dim() == 4, "expected a 4-D input");
  TORCH_CHECK(split == 1 || split == 3, "split must be 1 (TF32) or 3 (3xTF32)");
  x = x.contiguous();
  wp = wp.contiguous();
  const int64_t N = x.size(0), Cin = x.size(1), Hin = x.size(2), Win = x.size(3);
  TORCH_CHECK(groups >= 1 && Cin % groups == 0 && Cout % groups == 0, "channels must divide by groups");
  TORCH_CHECK(wp.size(0) == Cin && wp.size(1) == KH * KW && wp.size(2) == Cout / groups, "packed weight shape");
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

  if (stride_h == 1 && stride_w == 1 && groups == 1 && wm.numel() > 0 &&
      run_mma(x, wm, b, y, KH, KW, pad_h, pad_w, dil_h, dil_w, split, config, stream)) {
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
  }

  TORCH_CHECK(stride_w <= kMaxStride && KH <= kMaxTaps && KW <= kMaxTaps,
              "fast phase kernel: stride_w <= 16 and kernel sizes <= 32 (use the direct solution)");
  PhaseShape s{};
  s.N = N; s.Cin = Cin; s.Hin = Hin; s.Win = Win; s.Cout = Cout; s.Hout = Hout; s.Wout = Wout;
  s.KH = KH; s.KW = KW; s.sh = stride_h; s.sw = stride_w; s.ph = pad_h; s.pw = pad_w;
  s.dh = dil_h; s.dw = dil_w; s.groups = groups;
  s.cin_g = Cin / groups;
  s.cout_g = Cout / groups;
  s.cip = (s.cin_g + 3) / 4 * 4;
  s.cips = (s.cip / 4) % 2 ? s.cip : s.cip + 4;  // float4 rows an odd number of 16 B apart
  for (int r = 0; r < stride_h; ++r) {
    int c = 0;
    for (int kh = 0; kh < KH; ++kh) c += pos_mod(r + pad_h - kh * dil_h, stride_h) == 0;
    s.khn_max = std::max(s.khn_max, c);
  }
  // (P, CT): pixels x channels per thread. config 0 chooses; 1..3 force (4, 8), (2, 8), (1, 4)
  int cfg = config;
  if (cfg == 0) {
    const int per_phase = (Wout + stride_w - 1) / stride_w;
    if (s.cout_g < 8) cfg = 3;
    else if (per_phase >= 96 && (per_phase + 127) / 128 * 128 <= 1.2 * per_phase) cfg = 1;
    else cfg = 2;
  }
  TORCH_CHECK(cfg >= 1 && cfg <= 3, "config must be 0..3");
  if (cfg == 1) launch_phase<4, 8>(x, wp, b, y, s, stream);
  else if (cfg == 2) launch_phase<2, 8>(x, wp, b, y, s, stream);
  else launch_phase<1, 4>(x, wp, b, y, s, stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
