// ct2d_mma and ct2d_mmh: the implicit GEMM of a stride-1, one-group ConvTranspose2d on mma.sync
// (Ampere and later; the TMA staging of ct2d_mmh on sm_90a builds only), and run_mma, which plans
// their tiles and launches them (dispatch.cu, row 4). ct2d_mma: TF32 (split 1) or 3xTF32 (split 3)
// products; ct2d_mmh: one fp16 product of scaled operands, the TF32 class with 32 output channels
// per block, or one bf16 product for a bf16 x (config 9, issue 77). Needs common.cuh.
#pragma once

#include "common.cuh"

namespace {

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
constexpr int KC = 8;        // input channels per pipeline stage (the MMA's K)
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
// loads give a B fragment of 16 channels), 2 bf16 (m16n8k16, the planes holding bf16 pairs). xs: the lane's B address in the chunk's planes at tap
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
              else if constexpr (SPLIT == 2) mma_bf16(acc[i][j], a[i], b[j]);
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
//    A bf16 x (InT = __nv_bfloat16; config 9 on a bf16 call, TMA staging only; issue 77): bf16
//    products on m16n8k16, x staged as it is. Its 8-channel boxes land in the upper half of a slot
//    ([8][rows][rowlen] bf16, 16 bytes a position: the slot's fp32 planes 4-7), columns from a
//    multiple of 8 (16 bytes); mmh_pairs_bf16 makes the same 8 planes of channel pairs as the fp16
//    conversion, planes 0-3 from slot a's upper half, then (after a barrier: they lie over it)
//    planes 4-7 from slot 1's. Slot 1 only ever holds a box, so it is half a slot (2.5 slots in
//    all: a 3x7 window's chunk of weights fits beside them in 110 KB, which three did not). The
//    weights are ct2d_mmh's fp16 ones, made bf16 as they are staged (exact: the weights of a bf16
//    run have at most 8 significant bits), the output scaled by 2^-ew as before. No scaling of x
//    (bf16 has fp32's range) and so one pass, no amax.
// Channel pairs of a bf16 x for the MMAs (their low half the even channel, as the fp16 pairs):
// pair plane J0 + j of xa from the bf16 planes 2j, 2j + 1 of src (positions q..q+3 a thread, 8-byte loads).
template <int J0>
__device__ __forceinline__ void mmh_pairs_bf16(const MmaShape& s, float* xa, const float* src, int tid) {
  const int P = s.rows * s.rowlen;  // = s.plane (the TMA slot), a multiple of 4
  const unsigned short* raw = reinterpret_cast<const unsigned short*>(src);
  for (int q = 4 * tid; q < P; q += 4 * THREADS) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint2 lo = *reinterpret_cast<const uint2*>(raw + 2 * j * s.plane + q);
      const uint2 hi = *reinterpret_cast<const uint2*>(raw + (2 * j + 1) * s.plane + q);
      *reinterpret_cast<uint4*>(xa + (J0 + j) * s.plane + q) =
          make_uint4(__byte_perm(lo.x, hi.x, 0x5410), __byte_perm(lo.x, hi.x, 0x7632),
                     __byte_perm(lo.y, hi.y, 0x5410), __byte_perm(lo.y, hi.y, 0x7632));
    }
  }
}
// ct2d_mmh's fp16 weight rows (as mma_copy_weights copies them) made bf16 on the way: 16-byte
// loads, exact conversions, 16-byte shared stores (visible after the block's next barrier)
template <int TAPS, int BM>
__device__ __forceinline__ void mma_copy_weights_bf16(const char* src, int Cout, uint32_t dst, int tid) {
  for (int i = tid; i < TAPS * BM * 2; i += THREADS) {
    const int half = i & 1, co = (i >> 1) % BM, tap = (i >> 1) / BM;
    const uint4 h = __ldg(reinterpret_cast<const uint4*>(src + ((int64_t)tap * Cout + co) * 32 + half * 16));
    uint32_t w[4] = {h.x, h.y, h.z, h.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const __nv_bfloat162 v = __float22bfloat162_rn(__half22float2(*reinterpret_cast<const __half2*>(&w[k])));
      w[k] = *reinterpret_cast<const uint32_t*>(&v);
    }
    st_shared_v4(dst + (tap * BM + co) * 32 + ((half ^ (co >> 2)) & 1) * 16, w[0], w[1], w[2], w[3]);
  }
}
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

template <int MT, int NT, int KH, int KW, bool TMA, class OutT = float, class InT = float>
__global__ void __launch_bounds__(THREADS, 2)
    ct2d_mmh(const InT* __restrict__ x, const __half* __restrict__ wh, int ew, const float* __restrict__ bias,
             OutT* __restrict__ y, const MmaShape s, const __grid_constant__ CUtensorMap xmap) {
  constexpr bool BF = std::is_same<InT, __nv_bfloat16>::value;  // bf16 MMAs on x as it is
  static_assert(!BF || TMA, "a bf16 x is staged by TMA");
  constexpr int BM = 16 * MT, TAPS = KH * KW;
  constexpr int W_BYTES = TAPS * BM * 32;
  extern __shared__ __align__(128) float mmh_smem[];  // TMA: slots 128-byte aligned
  float* smem = mmh_smem;
  __shared__ unsigned block_amax[2];  // of passes 0 and 1 (mode 1)
  __shared__ __align__(8) uint64_t xbar[3];  // TMA: slot i's copy has landed
  const int xs_size = s.plane * KC;  // floats per slot
  // slot i's first float. A bf16 x: slot 1 holds only its box of channels 8-15 (half a slot: the
  // pairs are made over slot a), so slots 0 and 2 come first and slot 1 after them
  auto off = [&](int i) {
    if constexpr (BF) return i == 1 ? 2 * xs_size : (i >> 1) * xs_size;
    else return i * xs_size;
  };
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t w_s = smem_base + (BF ? 10 * xs_size : 3 * xs_size * 4);  // bf16: after 2.5 slots
  const MmaBlock<MT, NT, KH, KW> b(s);
  if (b.tid < 2) block_amax[b.tid] = 0;
  MmaStager st;
  const uint32_t bar0 = static_cast<uint32_t>(__cvta_generic_to_shared(xbar));
  [[maybe_unused]] uint32_t phase = 0;  // TMA: bit i, the parity of slot i's next copy
  if constexpr (TMA) {
#if defined(CT2D_WGMMA)
    st.m = b.iw_base & (BF ? 7 : 3);  // the box starts at a multiple of 16 bytes (4 or 8 columns)
    if (b.tid < 3) mbar_init(bar0 + 8 * b.tid, 1);
    fence_proxy_async();  // the initialised barriers, seen by the tensor copies
#endif
  } else {
    st.init(s, reinterpret_cast<int2*>(smem + 3 * xs_size + (s.wres ? s.chunks : 1) * (W_BYTES / 4)),
            x + (int64_t)b.n * s.Cin * s.Hin * s.Win, b.ih_base, b.iw_base, b.tid);
  }
  __syncthreads();
  const char* wsrc = reinterpret_cast<const char*>(wh) + (int64_t)b.co0 * 32;
  auto slot = [&](int i) { return smem_base + off(i) * 4; };
  auto w_chunk = [&](int c) { return s.wres ? w_s + c * W_BYTES : w_s; };
  auto copy_weights = [&](int c) {
    if constexpr (BF) mma_copy_weights_bf16<TAPS, BM>(wsrc + (int64_t)c * TAPS * s.Cout * 32, s.Cout, w_chunk(c), b.tid);
    else mma_copy_weights<TAPS, BM>(wsrc + (int64_t)c * TAPS * s.Cout * 32, s.Cout, w_chunk(c), b.tid);
  };
  // input channels [8 u, 8 u + 8) into slot i: TMA, one box of 8 channel planes issued by thread 0
  // (the block has synced since every earlier access to the slot), else the block's cp.async copies
  auto stage = [&](int u, int i) {
    if constexpr (TMA) {
#if defined(CT2D_WGMMA)
      if (b.tid == 0) {  // bf16: 2 bytes an element, into slot 0's or 2's upper half, or slot 1
        fence_proxy_async();  // the slot's earlier generic accesses (conversion, epilogue) before the copy
        mbar_arrive_expect_tx(bar0 + 8 * i, xs_size * (int)sizeof(InT));
        tma_load_4d(slot(i) + (BF && i != 1 ? xs_size * 2 : 0), &xmap, b.iw_base - st.m, b.ih_base, u * KC, b.n, bar0 + 8 * i);
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
      float* xa = smem + off(a);
      if constexpr (BF) {  // planes 0-3 from slot a's upper half, then 4-7 over it from slot 1's
        mmh_pairs_bf16<0>(s, xa, xa + xs_size / 2, b.tid);
        __syncthreads();
        mmh_pairs_bf16<4>(s, xa, smem + off(1), b.tid);
      } else if (mode == 0) mmh_convert<0>(s, xa, smem + xs_size, sc, amax, b.tid);
      else if (mode == 1) mmh_convert<1>(s, xa, smem + xs_size, sc, amax, b.tid);
      else mmh_convert<2>(s, xa, smem + xs_size, sc, amax, b.tid);
      if (c > 0) {  // the weights (the next chunk's first copy may fly)
        if (TMA) cp_async_wait_0();
        else cp_async_wait_1();
      }
      __syncthreads();
      if (2 * c + 3 < subs) stage(2 * c + 3, 1);
      cp_async_commit();
      if (b.active && mode != 1) mma_chunk<MT, NT, BF ? 2 : 0, KH, KW>(acc, xs_lane + off(a), w_chunk(c) + a_lane,
                                                                       rowstep, khalf, s.dil_w, b.pairs);
      const int tmp = a;
      a = o;
      o = tmp;
    }
    if (BF || mode == 2) break;
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
  if constexpr (TMA) {
    if (x.scalar_type() == at::kBFloat16) {  // bf16 MMAs on x as it is (config 9), a bf16 y
      using B = __nv_bfloat16;
      allow_smem<ct2d_mmh<2, 8, KH, KW, true, B, B>>(110 * 1024);
      ct2d_mmh<2, 8, KH, KW, true, B, B><<<grid, THREADS, smem, stream>>>(
          reinterpret_cast<const B*>(x.data_ptr()), w, (int)ew, bias, reinterpret_cast<B*>(y.data_ptr()), s, xmap);
      return;
    }
  }
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

// mma.sync tensor-core path for stride 1, groups 1. config 0 and 4..9 pick the tiling from the
// shapes (0, 5 and 6 run the wgmma kernels instead where they apply; 4 forces this path; the TF32
// class runs ct2d_mmh where it applies with config 0 and 4, and ct2d_mma with 9; a bf16 x comes
// with config 9 only, and runs ct2d_mmh's bf16 MMAs where they apply, else nothing); 1..3 force
// (MT, NT) = (4, 8), (4, 4), (2, 8) of ct2d_mma (for tuning runs; on the phase path they force
// (P, CT) = (4, 8), (2, 8), (1, 4)). Returns false where the path does not apply.
// The epilogue variants' names (plans): s.epi 4 and 2 go through shared memory
const char* epilogue_name(int epi) {
  return epi == 4 ? "via shared memory, 16-byte stores" : epi == 2 ? "via shared memory, 8-byte stores"
                                                                   : "fragments stored directly";
}

bool run_mma(const torch::Tensor& x, const torch::Tensor& wm, const torch::Tensor& wmh, int64_t wmh_exp,
             const float* b, torch::Tensor& y, int64_t KH, int64_t KW, int64_t pad_h, int64_t pad_w,
             int64_t dil_h, int64_t dil_w, int64_t split, int64_t config, cudaStream_t stream, Plan& plan) {
  const int64_t N = x.size(0), Cin = x.size(1), Hin = x.size(2), Win = x.size(3);
  const int64_t Cout = y.size(1), Hout = y.size(2), Wout = y.size(3);
  const bool bx = x.scalar_type() == at::kBFloat16;  // x as it is, for bf16 MMAs (config 9)
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
  // the tilings 1..3 keep TF32), or for a bf16 x one bf16 product (config 9)
  const bool f16 = split == 1 && mt == 2 && nt == 8 && wmh.numel() > 0 && (config == 0 || config == 4 || bx);
  if (bx && !f16) return false;
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
    // 8 mod 16 floats (conflict-free B loads, and slots of a multiple of 128 bytes, as TMA needs).
    // A bf16 x: 8 columns to 16 bytes (its box a plane of rows x rowlen bf16 in the slot's upper half)
    CUtensorMap map;
    int best = 0;
    const int64_t per16 = bx ? 8 : 4, w0 = (need + 2 * per16 - 2) / per16 * per16;  // cols16 for fp32
    for (int r = s.rows; r <= s.rows + 3; ++r)
      for (int64_t w = w0; w <= w0 + 3 * per16; w += per16)
        if ((r * w) % 16 == 8 && (!best || r * w < best)) best = r * w, s.rows = r, s.rowlen = w;
    s.plane = best;
    if (best && x_tensor_map(&map, x, s.rowlen, s.rows)) xmap = &map;
    else s = s_cp;
#endif
    if (bx && !xmap) return false;  // a bf16 x is staged by TMA only
    // a bf16 x's slot 1 is half a slot (its box only: kernel above)
    const size_t slots = (bx ? 5 : 6) * (size_t)s.plane * KC * sizeof(float) / 2, wchunk = (size_t)KH * KW * 32 * 32;
    const size_t table = xmap ? 0 : tab;
    const int64_t c16 = (Cin + 15) / 16;
    s.wres = s.co_blocks == 1 && slots + c16 * wchunk + table <= 110 * 1024;
    const size_t smem = slots + (s.wres ? c16 : 1) * wchunk + table;
    if (smem <= 110 * 1024) {
      s.chunks = (Cin + 15) / 16;
      s.stages = 3;
      epilogue(slots);
      if (!plan.launch && bx)
        return plan.set(strf("ct2d_mmh<2, 8, %d, %d, true, __nv_bfloat16, __nv_bfloat16>", (int)KH, (int)KW), "mma.cuh",
                        strf("tile %d rows x %d columns x 32 channels, %d channel block(s); x staged as bf16 by TMA "
                             "into 2.5 slots and paired in shared memory; bf16 mma.sync (m16n8k16); weights %s; "
                             "epilogue %s", s.TR, s.TW, s.co_blocks, s.wres ? "resident (every chunk's)" : "per chunk",
                             epilogue_name(s.epi)));
      if (!plan.launch)
        return plan.set(strf("ct2d_mmh<2, 8, %d, %d, %s, %s, float>", (int)KH, (int)KW, xmap ? "true" : "false",
                             y.scalar_type() == at::kBFloat16 ? "__nv_bfloat16" : "float"),
                        "mma.cuh",
                        strf("tile %d rows x %d columns x 32 channels, %d channel block(s); x staged as fp32 by %s "
                             "into 3 slots and converted to fp16 in shared memory; weights %s; epilogue %s",
                             s.TR, s.TW, s.co_blocks, xmap ? "TMA" : "cp.async",
                             s.wres ? "resident (every chunk's)" : "per chunk", epilogue_name(s.epi)));
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
  if (!plan.launch)
    return plan.set(strf("ct2d_mma<%d, %d, %d, %d, %d>", mt, nt, (int)split, (int)KH, (int)KW), "mma.cuh",
                    strf("tile %d rows x %d columns x %d channels, %d channel block(s); %d cp.async stages of 8 "
                         "input channels; %s; epilogue %s",
                         s.TR, s.TW, 16 * mt, s.co_blocks, s.stages, split == 3 ? "3xTF32" : "TF32",
                         epilogue_name(s.epi)));
  if (split == 3) {
    if (mt == 4) return dispatch_taps<4, 4, 3>(KH, KW, x, wm, b, y, s, N, smem, stream);
    return dispatch_taps<2, 8, 3>(KH, KW, x, wm, b, y, s, N, smem, stream);
  }
  if (mt == 4 && nt == 8) return dispatch_taps<4, 8, 1>(KH, KW, x, wm, b, y, s, N, smem, stream);
  if (mt == 4) return dispatch_taps<4, 4, 1>(KH, KW, x, wm, b, y, s, N, smem, stream);
  return dispatch_taps<2, 8, 1>(KH, KW, x, wm, b, y, s, N, smem, stream);
}


}  // namespace
