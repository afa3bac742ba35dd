// ct2d_wg and ct2d_wgs: the implicit GEMM of a stride-1, one-group ConvTranspose2d on the Hopper
// warpgroup MMA (sm_90a builds only; dispatch.cu rows 1-3 and 5), with its operand policies: TF32
// (WgsTf32Ops), 3xFP16 for the fp32 class (WghFp16Ops, ct2d_wgh), one fp16 product for the TF32
// class (WgfFp16Ops on fp16_convert's copy of x, WgdFp16Ops converting x in its producer: ct2d_wgf);
// plan_wg (the tiles and the pipeline for the shared memory), and run_wg, run_wgh, run_wgf, which
// launch them. Needs common.cuh and convert.cuh.
#pragma once

#include "common.cuh"
#include "convert.cuh"

namespace {
#if defined(CT2D_WGMMA)
// 3. ct2d_wg / ct2d_wgs (stride 1, groups 1, TF32 class; built only for sm_90a, see ct2d_fast.py): the same
//    implicit GEMM as ct2d_mma, on the Hopper warpgroup MMA (wgmma), both operands read by the
//    tensor cores straight from shared memory. Warp-specialized, persistent block (one per SM,
//    looping over the (tile, image) items) of three warpgroups: one producer stages the input
//    with cp.async and the weights with the bulk copy engine, both signalling an mbarrier per
//    stage; two consumers issue the MMAs, each for 64 output channels (the wgmma M; A = weights)
//    x 256 pixels (the wgmma N; B = input).
//    The pixels are a "flattened" tile: output rows oh0 + r, columns ow0 + c for flat index
//    p = r * rowlen + c, rowlen = TW + (KW - 1) * dil_w (or more: plan_wg pads an odd one), with c >= TW
//    computed but never stored.
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
// the same on bf16 operands (ct2d_wgf on a bf16 x, config 9)
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[128], uint64_t da, uint64_t db) {
  asm volatile("{\nwgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " WG_ACC_REGS " %128, %129, 1, 1, 1, 0, 0;\n}\n"
               : WG_ACC_OPERANDS(d)
               : "l"(da), "l"(db));
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
// a_lo*b_hi + a_hi*b_lo + a_hi*b_hi per tap (3xFP16), P = 1: a_hi*b_hi (BF: bf16 operands).
template <int P, bool BF = false>
__device__ __forceinline__ void wgh_mma_chunk(const WgShape& s, float (&acc)[128], uint32_t sb, int p0) {
  static_assert(!BF || P == 1, "bf16: one product");
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
      if constexpr (BF) wgmma_m64n256k16_bf16(acc, da, db);
      else wgmma_m64n256k16_f16(acc, da, db);
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
__device__ __forceinline__ uint32_t ld_shared_u16(uint32_t a) {
  unsigned short v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(a));
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
// (E: x's element bytes, 4 or 2 for a bf16 x, whose box starts at a multiple of 8 columns)
template <int E = 4>
__device__ __forceinline__ void wgr_issue_tma(const WgShape& s, const WgBlock& b, const CUtensorMap* map,
                                              const WgProducer& p, int u) {
  const int i = u % WGR_SLOTS;
  const uint32_t bytes = 8u * E * s.raw_rows * s.raw_rl;
  fence_proxy_async();  // the slot's earlier generic reads (its conversion) before the copy
  mbar_arrive_expect_tx(p.rbar + 8 * i, bytes);
  tma_load_4d(p.raw + i * bytes, map, b.iw_base - (b.iw_base & (16 / E - 1)), b.ih_base, 8 * u, b.n, p.rbar + 8 * i);
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

// ct2d_wgf on a bf16 x (config 9, issue 77): bf16 products, x staged as it is. WgdFp16Ops's TMA
// ring with bf16 boxes (16 bytes a position, columns from a multiple of 8), each half gathered by
// the producer into its stage's plane of [q][8 ci] as it is (no conversion, no amax: bf16 has fp32's
// range, so one launch and no pre-pass); the weights: ct2d_pack's bf16 parts, unscaled.
__device__ __forceinline__ void wgr_gather_bf16(const WgShape& s, const WgBlock& b, uint32_t raw, uint32_t dst, int u,
                                                int tid) {
  const int plane = s.raw_rows * s.raw_rl;  // elements per channel
  const uint32_t src = raw + (u % WGR_SLOTS) * plane * 16 + (b.iw_base & 7) * 2;
  int r = tid / s.rowlen, c = tid - r * s.rowlen;
  const int dr = WG_THREADS / s.rowlen, dc = WG_THREADS - dr * s.rowlen;
  for (int q = tid; q < s.S; q += WG_THREADS) {
    const uint32_t a = src + (r * s.raw_rl + c) * 2;
    r += dr;
    c += dc;
    if (c >= s.rowlen) c -= s.rowlen, ++r;
    uint32_t h[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)  // channels 2k (low half) and 2k + 1
      h[k] = ld_shared_u16(a + 2 * k * plane * 2) | (ld_shared_u16(a + (2 * k + 1) * plane * 2) << 16);
    st_shared_v4(dst + q * 16, h[0], h[1], h[2], h[3]);
  }
}
struct WgdBf16Ops : WgOpsDefaults {
  const __nv_bfloat16* __restrict__ wb;
  CUtensorMap xmap;
  __device__ __forceinline__ void begin(const WgShape& s, const WgBlock& b, const int*, int tid, WgProducer& p) const {
    for (int u = 0; u < WGR_SLOTS - 1; ++u)
      if (tid == 0 && u < 2 * s.chunks) wgr_issue_tma<2>(s, b, &xmap, p, u);
  }
  __device__ __forceinline__ void stage(const WgShape& s, const WgBlock& b, const int*, uint32_t sb, int c, int tid,
                                        uint32_t full, WgProducer& p) const {
    if (tid == 0) wgh_bulk_weights(s, b, reinterpret_cast<const __half*>(wb), sb, c, full);  // 2-byte elements too
#pragma unroll 1
    for (int h = 0; h < 2; ++h) {
      const int u = 2 * c + h, i = u % WGR_SLOTS;
      mbar_wait(p.rbar + 8 * i, (p.rphase >> i) & 1);  // half u has landed
      p.rphase ^= 1u << i;
      producer_sync();  // half u - 1's slot is gathered
      if (tid == 0 && u + WGR_SLOTS - 1 < 2 * s.chunks) wgr_issue_tma<2>(s, b, &xmap, p, u + WGR_SLOTS - 1);
      wgr_gather_bf16(s, b, p.raw, sb + s.wbytes + h * s.S * 16, u, tid);
    }
  }
  __device__ __forceinline__ void mma(const WgShape& s, const WgBlock&, float (&acc)[128], uint32_t sb, int,
                                      int p0) const {
    wgh_mma_chunk<1, true>(s, acc, sb, p0);
  }
  __device__ __forceinline__ float scale() const { return 1.f; }
  static constexpr bool kStagger = true;
  static constexpr bool kDirect = true;
  static constexpr bool kTable = false;
};


// Shapes of one wgmma launch. spec: ct2d_wgs, else ct2d_wg; blocks_min: the fewest blocks per SM
// acceptable (ct2d_wgs runs one). f16: the fp16 parts per operand, 0 for TF32 (ct2d_wgh: 2, ct2d_wgf:
// 1; both spec and pix_halves, chunks of 16 channels, at least two stages). y_addr: the output's address (the
// epilogue's vector stores need it aligned to them). raw_slots: ct2d_wgf's raw ring of that many
// slots (0: none), raw_tma: filled by TMA (s.raw_rl, s.raw_rows), raw_e: x's element bytes (4, or 2
// for a bf16 x: 8 columns to 16 bytes). Returns the dynamic shared memory size, 0 where it does not
// fit or 32-bit offsets within a channel plane would overflow.
size_t plan_wg(WgShape& s, bool spec, bool pix_halves, int blocks_min, int64_t Cin, int64_t Hin, int64_t Win, int64_t Cout,
               int64_t Hout, int64_t Wout, int64_t KH, int64_t KW, int64_t pad_h, int64_t pad_w, int64_t dil_h,
               int64_t dil_w, uintptr_t y_addr, int f16 = 0, int raw_slots = 0, bool raw_tma = false, int raw_e = 4) {
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
  // staged rows, each starting up to 3 (bf16: 7) columns early at a multiple of 16 bytes, as TMA needs
  const int64_t per16 = 16 / raw_e;
  auto raw_cols = [&](int64_t rowlen) { return (rowlen + 2 * per16 - 2) / per16 * per16; };  // cols16 for fp32
  auto raw_bytes = [&](int64_t S, int64_t rowlen) {
    return (size_t)raw_slots * (raw_tma ? ((S - 1) / rowlen + 1) * raw_cols(rowlen) : S) * 8 * raw_e;
  };
  // a consumer whose 64 rows reach past the block's channels reads past the last tap's weights
  // (results discarded): up to 2 KB in ct2d_wg, 4 KB in ct2d_wgs, which stay allocated
  const size_t slack = spec ? 4096 : 2048;
  const int64_t halo_w = (KW - 1) * dil_w, halo_h = (KH - 1) * dil_h;
  // tile: TW columns (even, or the whole row, so pixel pairs stay 8-byte aligned) and TR rows with
  // (TR - 1) * rowlen + TW <= pxb: the most stored pixels per computed one, then the fewest staged
  // ct2d_wgs where Wout is a multiple of 4 and the halo is too, or odd (its row padded, below): a
  // width that is one too, if it scores within 0.02 of the best, for its 16-byte epilogue stores
  // (wg_epilogue_smem)
  // An odd halo (an even kernel width at dilation 1, e.g. SubpixelConv's 2x2 sub-kernels) would
  // make every even tile width's row odd, and the epilogue the direct one with single-float
  // stores; there the flat row is padded to a multiple of 4 (tw and Wout multiples of 4) or 2:
  // columns computed and never stored. Odd widths only as the whole row, for either halo.
  auto row_len = [&](int64_t tw) {
    const int64_t rl = tw + halo_w;
    if (halo_w % 2 == 0 || tw % 2) return rl;
    const int64_t m = tw % 4 == 0 && Wout % 4 == 0 ? 4 : 2;
    return (rl + m - 1) / m * m;
  };
  const bool vec4 = spec && Wout % 4 == 0 && (halo_w % 4 == 0 || halo_w % 2 == 1);
  int64_t TW = 0, TR = 0, TW4 = 0, TR4 = 0;
  double best = -1e9, best4 = -1e9;
  for (int64_t tw = 1; tw <= std::min<int64_t>(Wout, pxb); ++tw) {
    if (tw % 2 && tw != Wout) continue;
    const int64_t rowlen = row_len(tw), S = pxb + halo_h * rowlen + halo_w;
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
  s.TW = TW; s.TR = TR; s.rowlen = row_len(TW);
  const int64_t S = pxb + halo_h * s.rowlen + halo_w;  // the last tap window of the last pixel ends at S - 1
  if (S >= 16384) return 0;                            // descriptor offsets are 14 bits of 16 bytes
  s.S = S;
  if (raw_slots && raw_tma) {  // box dimensions of at most 256 elements
    s.raw_rl = (int)raw_cols(s.rowlen);
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
  // the epilogue through shared memory where the tile allows vectors: 4-float stores (TW, rowlen
  // and Wout multiples of 4 and y 16-byte aligned), 2-float (even, 8); its buffers in the item's
  // last stage where the consumer warps' fit there
  int vec = 0;
  if (TW % 4 == 0 && s.rowlen % 4 == 0 && Wout % 4 == 0 && y_addr % 16 == 0) vec = 4;
  else if (TW % 2 == 0 && s.rowlen % 2 == 0 && Wout % 2 == 0 && y_addr % 8 == 0) vec = 2;
  if (s.stage_bytes >= (spec ? 8 : 4) * WGE_WARP_BYTES) s.epi_vec = vec;
  auto need = [&](int st) { return (size_t)s.tab_bytes + (size_t)st * s.stage_bytes + slack; };
  // ct2d_wgf: staggered consumers (ct2d_wgs) where at least 3 stages fit beside the consumer warps'
  // own epilogue buffers, half an item's chunks apart (fewer than the stages: the leading
  // consumer needs a stage the trailing one has released)
  // (the raw ring, where there is one, after the stages and those buffers). With their own
  // buffers the vector epilogue runs also where a stage is too small to hold them (few taps:
  // SubpixelConv's 2x2 sub-kernels).
  const size_t raw = raw_bytes(S, s.rowlen);
  if (spec && f16 == 1 && chunks >= 2) {
    const size_t epi_own = vec ? 8 * WGE_WARP_BYTES : 0;
    for (int st = WGS_MAX_STAGES; st >= 3; --st)
      if (need(st) + epi_own + raw <= kWgSmemMax) {
        s.epi_vec = vec;
        s.stages = st;
        s.stagger = (int)std::min<int64_t>(chunks / 2, st - 1);
        s.raw = st * s.stage_bytes + epi_own;
        return need(st) + epi_own + raw;
      }
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

// A wgmma launch's tiles and pipeline in words (plans).
std::string wg_config(const WgShape& s, const char* more) {
  return strf("tile %d rows x %d columns (%d staged positions) x %d channels, %d channel block(s); %d stages%s%s; "
              "epilogue %s%s",
              s.TR, s.TW, s.S, 64 * s.cwn, s.co_blocks, s.stages,
              s.stagger ? strf(", consumers %d chunk(s) apart", s.stagger).c_str() : "",
              s.cwn == 2 ? ", consumers on the two 64-channel halves" : "",
              s.epi_vec ? (s.epi_vec == 4 ? "via shared memory, 16-byte stores" : "via shared memory, 8-byte stores")
                        : "fragments stored directly",
              more);
}

// Tensor-core path on the warpgroup MMA (sm_90a): stride 1, groups 1, TF32 class. config 5 forces
// ct2d_wg, 6 ct2d_wgs, 8 ct2d_wgs with its consumers on two pixel halves of 64 channels (a tuning
// hook: 69 2.52 against 2.26 ms); 0 runs ct2d_wg where three of its blocks fit on an SM (measured
// faster there, e.g. 57: 3.66 against 3.91 ms), else ct2d_wgs (65: 1.43 ms; 69: 2.26 against
// 3.44-3.69 ms for ct2d_wg). Returns false where the path does not apply.
bool run_wg(const torch::Tensor& x, const torch::Tensor& wg, const float* b, torch::Tensor& y, int64_t KH,
            int64_t KW, int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t config,
            cudaStream_t stream, Plan& plan) {
  const int64_t N = x.size(0), Cin = x.size(1), Hin = x.size(2), Win = x.size(3);
  const int64_t Cout = y.size(1), Hout = y.size(2), Wout = y.size(3);
  TORCH_CHECK(wg.is_cuda() && wg.is_contiguous() && wg.numel() == (Cin + 7) / 8 * KH * KW * ((Cout + 7) / 8) * 64,
              "wgmma weight copy: expected (ceil(Cin/8), KH*KW, ceil(Cout/8), 2, 8, 4)");
  if (N > 65535) return false;
  WgShape s;
  auto tiles = [&](bool spec, int blocks_min) {
    return plan_wg(s, spec, config == 8, blocks_min, Cin, Hin, Win, Cout, Hout, Wout, KH, KW, pad_h, pad_w, dil_h, dil_w,
                   reinterpret_cast<uintptr_t>(y.data_ptr()));
  };
  bool spec = config == 6 || config == 8;
  size_t smem = 0;
  if (config == 0) {
    smem = tiles(false, 3);
    if (!smem) {
      spec = true;
      smem = tiles(true, 1);
    }
  } else {
    smem = tiles(spec, 1);
  }
  if (!smem) return false;
  const int64_t gx = s.tiles_w * ((Hout + s.TR - 1) / s.TR) * s.co_blocks;
  if (gx >= (int64_t(1) << 31)) return false;
  if (spec) {  // persistent: one block per SM, each taking every SM-count-th work item
    const int64_t items = gx * N;
    if (items >= (int64_t(1) << 31)) return false;
    if (!plan.launch)
      return plan.set("ct2d_wgs<WgsTf32Ops, float>", "wgmma.cuh", wg_config(s, "; TF32, persistent blocks"));
    allow_smem<ct2d_wgs<WgsTf32Ops>>(kWgSmemMax);
    ct2d_wgs<<<(int)std::min<int64_t>(items, sm_count()), WGS_THREADS, smem, stream>>>(
        WgsTf32Ops{{}, x.data_ptr<float>(), wg.data_ptr<float>()}, b, y.data_ptr<float>(), s, (int)gx, (int)items);
  } else {
    if (!plan.launch) return plan.set("ct2d_wg", "wgmma.cuh", wg_config(s, "; TF32, up to three blocks per SM"));
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
  TORCH_CHECK(wh.is_cuda() && wh.is_contiguous() &&
                  (wh.scalar_type() == at::kHalf || (P == 1 && wh.scalar_type() == at::kBFloat16)) &&
                  wh.numel() == (Cout + 63) / 64 * ((Cin + 15) / 16) * P * KH * KW * 64 * 16,
              "fp16 (or bf16) weight parts: expected (ceil(Cout/64), ceil(Cin/16), ", P, ", KH*KW, 8, 2, 8, 8)");
  if (N > 65535) return 0;
  const size_t smem = plan_wg(s, true, true, 1, Cin, Hin, Win, Cout, Hout, Wout, KH, KW, pad_h, pad_w, dil_h, dil_w,
                              reinterpret_cast<uintptr_t>(y.data_ptr()), P, raw_slots, raw_tma, (int)x.element_size());
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
             int64_t KH, int64_t KW, int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w, cudaStream_t stream,
             Plan& plan) {
  const int64_t N = x.size(0), Cin = x.size(1), chunks = (Cin + 15) / 16;
  WgShape s;
  int64_t gx = 0, items = 0;
  const size_t smem = plan_f16(s, 2, x, wh, y, KH, KW, pad_h, pad_w, dil_h, dil_w, gx, items);
  if (!smem || chunks * KH * KW * 3 > kWghMaxChain) return false;
  if (!plan.launch)
    return plan.set("ct2d_wgs<WghFp16Ops, float>", "wgmma.cuh",
                    wg_config(s, "; 3xFP16 (fp32 class); pre-passes wgh_amax, fp16_convert<2, float> (convert.cuh)"));
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
// the epilogue rounds the fp32 sums once to bf16. An fp16 y (fp32 x: the caller asked for fp16
// output, dispatch.cu's out_fp16) takes the pre-pass too; the epilogue rounds the sums once to fp16.
// With bf16 weight parts (config 9 on a bf16 x, issue 77): bf16 products, x staged as it is by the
// producer's TMA ring (WgdBf16Ops), one launch; false where that path does not apply.
bool run_wgf(const torch::Tensor& x, const torch::Tensor& wh, int64_t ew, const float* b, torch::Tensor& y,
             int64_t KH, int64_t KW, int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w, cudaStream_t stream,
             Plan& plan) {
  const int64_t N = x.size(0), Cin = x.size(1), HW = x.size(2) * x.size(3), C8 = 2 * ((Cin + 15) / 16);
  const bool bf16 = x.scalar_type() == at::kBFloat16, half_y = y.scalar_type() == at::kHalf;
  WgShape s;
  int64_t gx = 0, items = 0;
  // the producer's raw ring filled by TMA, else by cp.async, else the pre-pass
  CUtensorMap xmap;
  auto producer_path = [&](size_t bytes) { return bytes && s.co_blocks == 1 && s.stagger > 0; };
  if (wh.scalar_type() == at::kBFloat16) {
    TORCH_CHECK(bf16 && !half_y, "bf16 weight parts take a bf16 x");
    const size_t smem = plan_f16(s, 1, x, wh, y, KH, KW, pad_h, pad_w, dil_h, dil_w, gx, items, WGR_SLOTS, true);
    // any tiles that fit: unlike the fp32 producer's (a heuristic there), here the alternative is x
    // widened, so several channel blocks (x staged once per block) and unstaggered consumers run too
    if (!smem || !x_tensor_map(&xmap, x, s.raw_rl, s.raw_rows)) return false;
    if (!plan.launch)
      return plan.set("ct2d_wgs<WgdBf16Ops, __nv_bfloat16>", "wgmma.cuh",
                      wg_config(s, "; one bf16 product; x staged as it is by the producer from a TMA ring"));
    using B = __nv_bfloat16;
    allow_smem<ct2d_wgs<WgdBf16Ops, B>>(kWgSmemMax);
    ct2d_wgs<<<(int)std::min<int64_t>(items, sm_count()), WGS_THREADS, smem, stream>>>(
        WgdBf16Ops{{}, reinterpret_cast<const B*>(wh.data_ptr()), xmap}, b, reinterpret_cast<B*>(y.data_ptr()), s,
        (int)gx, (int)items);
    return true;
  }
  size_t smem = 0;
  bool tma = false, direct = false;
  if (!bf16 && !half_y) {
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
  if (!plan.launch) {
    const char* t = bf16 ? "__nv_bfloat16" : "float";  // x's type
    const char* yt = bf16 ? "__nv_bfloat16" : half_y ? "__half" : "float";
    const std::string rescale = strf("; then fp16_convert<1, %s> and ct2d_wgs<WgfFp16Ops, %s> on x rescaled, which exit "
                                     "at once unless x's largest magnitude is outside [2^-2, 2^15)", t, yt);
    if (direct)
      return plan.set(strf("ct2d_wgs<WgdFp16Ops<%s>, float>", tma ? "true" : "false"), "wgmma.cuh",
                      wg_config(s, strf("; one fp16 product; x converted by the producer from a %s ring%s",
                                        tma ? "TMA" : "cp.async", rescale.c_str()).c_str()));
    return plan.set(strf("ct2d_wgs<WgfFp16Ops, %s>", yt), "wgmma.cuh",
                    wg_config(s, strf("; one fp16 product; pre-pass fp16_convert<1, %s> (convert.cuh)%s", t,
                                      rescale.c_str()).c_str()));
  }
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
    if (half_y) {
      allow_smem<ct2d_wgs<WgfFp16Ops, __half>>(kWgSmemMax);
      ct2d_wgs<<<blocks, WGS_THREADS, smem, stream>>>(ops, b, reinterpret_cast<__half*>(y.data_ptr()), s, (int)gx,
                                                      (int)items);
      continue;
    }
    ct2d_wgs<<<blocks, WGS_THREADS, smem, stream>>>(ops, b, y.data_ptr<float>(), s, (int)gx, (int)items);
  }
  return true;
}
#else
// Builds without sm_90a have no wgmma kernels: dispatch.cu's wgmma rows never apply there
// (Call::sm90a), and these keep its table one table.
bool run_wg(const torch::Tensor&, const torch::Tensor&, const float*, torch::Tensor&, int64_t, int64_t, int64_t,
            int64_t, int64_t, int64_t, int64_t, cudaStream_t, Plan&) {
  return false;
}
bool run_wgh(const torch::Tensor&, const torch::Tensor&, int64_t, const float*, torch::Tensor&, int64_t, int64_t,
             int64_t, int64_t, int64_t, int64_t, cudaStream_t, Plan&) {
  return false;
}
bool run_wgf(const torch::Tensor&, const torch::Tensor&, int64_t, const float*, torch::Tensor&, int64_t, int64_t,
             int64_t, int64_t, int64_t, int64_t, cudaStream_t, Plan&) {
  return false;
}
#endif  // CT2D_WGMMA
}  // namespace
