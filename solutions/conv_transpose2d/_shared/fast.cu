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
//    contribute (likewise kw for each column), so no multiply is spent on the zeros a strided
//    transposed convolution inserts, and rows with no valid tap are pure bias/zero writes. One
//    thread per output column, COT output channels in registers, weights of the block's group and
//    channel tile in shared memory, every output element written once with coalesced streaming
//    stores: these problems are bound by writing the output.
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
  int col_off[MAXC];
  uint32_t col_in = 0;
#pragma unroll
  for (int j = 0; j < MAXC; ++j) {
    const int iw = iw_base + slot + 32 * j;
    const bool ok = slot + 32 * j < s.need && iw >= 0 && iw < s.Win;
    col_off[j] = ok ? iw : 0;
    col_in |= (ok ? 1u : 0u) << j;
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
      const uint32_t in = row_ok ? col_in : 0u;
      const uint32_t dr = xs_s + r * row_bytes + x_dst;
#pragma unroll
      for (int j = 0; j < MAXC; ++j)
        if (j < s.ncol) cp_async4(dr + j * 32 * KC * 4, xr + col_off[j], ((in >> j) & 1) * 4);
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

struct PhaseShape {
  int N, Cin, Hin, Win, Cout, Hout, Wout, KH, KW, sh, sw, ph, pw, dh, dw, groups;
  int rows_per_block, seg;  // seg = output columns per block (= sw * 32 * warps)
};

// One block: COT output channels of one group, rows_per_block output rows, seg columns. Warp w,
// lane l, column phase rw compute output column ow0 + rw + sw * (32 w + l): every lane of a warp
// has the same phase, so the same taps are valid (no divergence), input columns are consecutive
// (coalesced) and weights are shared-memory broadcasts. Results go through a shared-memory tile
// so the output row is written with coalesced streaming stores.
template <int COT>
__global__ void __launch_bounds__(256) ct2d_phase(const float* __restrict__ x, const float* __restrict__ wp,
                                                  const float* __restrict__ bias, float* __restrict__ y,
                                                  const PhaseShape s) {
  extern __shared__ __align__(16) float phase_smem[];
  const int cin_g = s.Cin / s.groups, cout_g = s.Cout / s.groups, taps = s.KH * s.KW;
  float* wsm = phase_smem;                                  // [ci_g][tap][COT]
  float* ys = phase_smem + ((cin_g * taps * COT + 3) & ~3);  // [COT][seg]
  const int tiles_c = s.Cout / COT;
  const int n = blockIdx.z / tiles_c, co0 = (blockIdx.z % tiles_c) * COT;
  const int grp = co0 / cout_g, cog0 = co0 - grp * cout_g;
  for (int i = threadIdx.x; i < cin_g * taps * COT; i += blockDim.x) {
    const int j = i % COT, rest = i / COT;  // rest = ci * taps + tap
    wsm[i] = wp[((int64_t)(grp * cin_g) * taps + rest) * cout_g + cog0 + j];
  }
  float b[COT];
#pragma unroll
  for (int j = 0; j < COT; ++j) b[j] = bias ? bias[co0 + j] : 0.f;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int ow0 = blockIdx.x * s.seg;
  const int64_t hw = (int64_t)s.Hin * s.Win;
  const int64_t plane = (int64_t)s.Hout * s.Wout;
  const float* xg = x + ((int64_t)n * s.Cin + (int64_t)grp * cin_g) * hw;
  // Per column phase rw, the valid kw and the input column of lane 0 of warp 0 (exact division):
  // iw = base + 32 * warp + lane. Computed once per block, so the hot loop has no divisions.
  __shared__ int kw_count[kMaxStride];
  __shared__ int kw_list[kMaxStride][kMaxTaps];
  __shared__ int kw_base[kMaxStride][kMaxTaps];
  if (threadIdx.x < s.sw) {
    const int rw = threadIdx.x;
    int c = 0;
    for (int kw = 0; kw < s.KW; ++kw) {
      const int wn = ow0 + rw + s.pw - kw * s.dw;
      if (((wn % s.sw) + s.sw) % s.sw) continue;
      kw_list[rw][c] = kw;
      kw_base[rw][c] = (wn - ((wn % s.sw) + s.sw) % s.sw) / s.sw;  // exact: wn divisible by sw
      ++c;
    }
    kw_count[rw] = c;
  }
  for (int rr = 0; rr < s.rows_per_block; ++rr) {
    const int oh = blockIdx.y * s.rows_per_block + rr;
    if (oh >= s.Hout) break;
    __syncthreads();  // weights and tap tables ready / previous row's tile copied out
    int kh_n = 0, kh_list[kMaxTaps], ih_list[kMaxTaps];
    for (int kh = 0; kh < s.KH; ++kh) {
      const int hn = oh + s.ph - kh * s.dh;
      if (hn < 0 || hn % s.sh) continue;
      const int ih = hn / s.sh;
      if (ih >= s.Hin) continue;
      kh_list[kh_n] = kh;
      ih_list[kh_n] = ih;
      ++kh_n;
    }
    for (int rw = 0; rw < s.sw; ++rw) {
      const int col = rw + s.sw * (warp * 32 + lane);  // column within the segment
      const int ow = ow0 + col;
      float acc[COT];
#pragma unroll
      for (int j = 0; j < COT; ++j) acc[j] = b[j];
      const int nkw = kw_count[rw];
      for (int a = 0; a < kh_n; ++a) {
        const int kh = kh_list[a];
        const float* xrow = xg + (int64_t)ih_list[a] * s.Win;
        for (int q = 0; q < nkw; ++q) {
          const int kw = kw_list[rw][q];
          const int iw = kw_base[rw][q] + warp * 32 + lane;
          const bool ok = ow < s.Wout && iw >= 0 && iw < s.Win;
          const float* xp = xrow + (ok ? iw : 0);
          const float* wq = wsm + (kh * s.KW + kw) * COT;
#pragma unroll 4
          for (int ci = 0; ci < cin_g; ++ci) {
            const float xv = ok ? __ldg(xp + ci * hw) : 0.f;
            const float* wc = wq + ci * taps * COT;
            if constexpr (COT % 4 == 0) {
#pragma unroll
              for (int j = 0; j < COT; j += 4) {
                const float4 w4 = *reinterpret_cast<const float4*>(wc + j);
                acc[j] = fmaf(xv, w4.x, acc[j]);
                acc[j + 1] = fmaf(xv, w4.y, acc[j + 1]);
                acc[j + 2] = fmaf(xv, w4.z, acc[j + 2]);
                acc[j + 3] = fmaf(xv, w4.w, acc[j + 3]);
              }
            } else {
#pragma unroll
              for (int j = 0; j < COT; ++j) acc[j] = fmaf(xv, wc[j], acc[j]);
            }
          }
        }
      }
      if (col < s.seg) {
#pragma unroll
        for (int j = 0; j < COT; ++j) ys[j * s.seg + col] = acc[j];
      }
    }
    __syncthreads();
    const int width = min(s.seg, s.Wout - ow0);
    float* yrow = y + ((int64_t)n * s.Cout + co0) * plane + (int64_t)oh * s.Wout + ow0 + threadIdx.x;
#pragma unroll
    for (int j = 0; j < COT; ++j, yrow += plane) {
      const float* src = ys + j * s.seg + threadIdx.x;
      float* dst = yrow;
      for (int c = threadIdx.x; c < width; c += blockDim.x, src += blockDim.x, dst += blockDim.x) __stcs(dst, *src);
    }
  }
}

template <int COT>
void launch_phase(const torch::Tensor& x, const torch::Tensor& wp, const float* bias, torch::Tensor& y,
                  PhaseShape s, cudaStream_t stream) {
  const int per_phase = (s.Wout + s.sw - 1) / s.sw;
  int warps = std::min(8, (per_phase + 31) / 32);
  while (warps > 1 && (size_t)COT * 32 * warps * s.sw * sizeof(float) > 64 * 1024) --warps;
  s.seg = 32 * warps * s.sw;
  // several rows per block amortize the weight staging, unless that leaves too few blocks
  const int64_t blocks1 = (int64_t)((s.Wout + s.seg - 1) / s.seg) * s.Hout * s.N * (s.Cout / COT);
  s.rows_per_block = blocks1 >= 4 * 4 * 132 ? 4 : 1;
  const int cin_g = s.Cin / s.groups;
  const size_t wfloats = ((size_t)cin_g * s.KH * s.KW * COT + 3) & ~size_t(3);
  const size_t smem = (wfloats + (size_t)COT * s.seg) * sizeof(float);
  auto kernel = ct2d_phase<COT>;
  static bool configured = false;  // once per instantiation, not on every call
  if (!configured) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    configured = true;
  }
  dim3 grid((s.Wout + s.seg - 1) / s.seg, (s.Hout + s.rows_per_block - 1) / s.rows_per_block, s.N * (s.Cout / COT));
  kernel<<<grid, 32 * warps, smem, stream>>>(x.data_ptr<float>(), wp.data_ptr<float>(), bias, y.data_ptr<float>(), s);
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
// (MT, NT) = (4, 8), (4, 4), (2, 8) (for tuning runs). Returns false where the path does not apply.
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
  const int64_t cout_g = Cout / groups;
  const size_t per_co = (size_t)(Cin / groups) * KH * KW * sizeof(float);
  // 16 channels per block when their weights are small, else 8 (more blocks resident per SM)
  if (cout_g % 16 == 0 && per_co * 16 <= 16 * 1024) launch_phase<16>(x, wp, b, y, s, stream);
  else if (cout_g % 8 == 0 && per_co * 8 <= 120 * 1024) launch_phase<8>(x, wp, b, y, s, stream);
  else if (cout_g % 4 == 0 && per_co * 4 <= 120 * 1024) launch_phase<4>(x, wp, b, y, s, stream);
  else {
    TORCH_CHECK(per_co <= 120 * 1024, "too many input channels per group for the phase kernel");
    launch_phase<1>(x, wp, b, y, s, stream);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
