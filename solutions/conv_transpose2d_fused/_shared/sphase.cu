// ct2d_sp: a strided ConvTranspose2d (groups 1, dilation 1, fp32) as one implicit GEMM per output
// phase on TF32 mma.sync, with the bias and the library's epilogue in its store. Built by
// ct2d_sphase.py; ct2d_fused.StridedConv packs the weights and calls it.
//
// Output phase (rh, rw) (ct2d_phases.py): y[n, co, rh + sh i, rw + sw j] = bias[co] +
//   sum over taps (a, b) < (th, tw) and ci of w[ci, co, kh0 + sh a, kw0 + sw b] x[n, ci, i + ch - a, j + cw - b],
// a GEMM of M = output channels, N = the phase's pixels, K = ci x taps, with no zero of the
// strided convolution multiplied.
// A block owns one phase, one image, 64 output channels and BI x BJ of the phase's pixels (the
// phase is blockIdx.x's fastest index, so the blocks of the sh * sw phases of one tile run
// together and share x's tile in L2). Per chunk of 32 input channels it stages, with cp.async,
//   - the chunk's weights of its phase, packed on the host in mma.sync's A-fragment order and
//     rounded to TF32: ws[tap][k-step][m-tile][lane][4];
//   - x's tile, channel by channel, rows and columns as in x (zero outside): xs[ci][row][col] with
//     a channel stride CS = 8 (mod 32), so the B fragments' loads (lanes: 4 channels x 8 columns)
//     hit 32 different banks;
// then each warp computes 64 channels x 32 pixels (one row i, 32 columns j) of its tile: per tap
// and 8 channels, 4 A fragments (one 16-byte load each), 4 B fragments (x rounded to nearest TF32,
// as the library's fused kernels do: epilogue.cuh, kRoundX) and 16 MMAs.
// The accumulators go through shared memory (ys[co][pixel]) and are written once, row by row of
// the phase, with the bias and the epilogue, as streaming stores (the phase's columns are sw
// apart; the other column phases' blocks, running at the same time, fill the rest of each line
// in L2).
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <type_traits>
#include <vector>

#include "epilogue.cuh"  // the library's epilogues and helpers (solutions/conv_transpose2d/_shared/fast/)

// SP_ABLATE (tools/ablate_sp.py only; 0 in every solution's build): bits that leave one stage out,
// to place the kernel's time without hardware counters: 1 x's staging, 2 the MMAs, 4 the output's
// global stores (the values still go through shared memory; one impossible value is stored, so the
// products stay live), 8 the weights' staging.
#ifndef SP_ABLATE
#define SP_ABLATE 0
#endif

namespace {

constexpr int kSpThreads = 256;  // 8 warps
constexpr int kBI = 4;           // phase rows per block (one per pair of warps)
constexpr int kBJ = 64;          // phase columns per block (32 per warp)
constexpr int kCoB = 64;         // output channels per block (4 m-tiles of 16)
constexpr int kKC = 32;          // input channels per staged chunk
constexpr int kYS = kBI * kBJ + 8;  // ys's channel stride (8 mod 32: conflict-free float2 stores)
constexpr int kSpMaxPhases = 16;
constexpr int kSpMaxTaps = 4;    // taps per phase (th * tw): the weights' shared memory
static_assert(kSpThreads == kBI * kBJ, "sp_store's channel minimum: one pixel of the tile per thread");

struct SpPhase {
  int rh, rw, th, tw, ch, cw, rows, cols;
  long long woff;  // its packed weights in wp (floats)
};

struct SpArgs {
  int N, Cin, Cin8, Hin, Win, Cout, Hout, Wout, sh, sw;
  int P, tiles_i, tiles_j, nkc, RW, CS, wfloats;
  int co_blocks, stage_floats;  // ct2d_spp: output-channel blocks; floats per stage of its ring
  SpPhase ph[kSpMaxPhases];
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// The three stages of a block's work on one item (a phase, 4 x 64 of its pixels, 64 output
// channels, an image), shared by ct2d_sp (one item per block) and ct2d_spp (persistent blocks).
struct SpTile {
  SpPhase ph;
  int i0, j0, cb, n;
  int xr0, xc0, xs0;  // x's row and column at staged (0, 0); XV 4: column xc0 sits xs0 floats into a staged row
};

template <int XV>
__device__ __forceinline__ SpTile sp_tile(const SpArgs& s, int p, int tile, int cb, int n) {
  SpTile u;
  u.ph = s.ph[p];
  u.i0 = (tile / s.tiles_j) * kBI;
  u.j0 = (tile % s.tiles_j) * kBJ;
  u.cb = cb;
  u.n = n;
  u.xr0 = u.i0 + u.ph.ch - (u.ph.th - 1);
  u.xc0 = u.j0 + u.ph.cw - (u.ph.tw - 1);
  u.xs0 = XV == 4 ? u.xc0 - (u.xc0 & ~3) : 0;
  return u;
}

// Stage chunk kc (32 input channels) of tile u into ws (its weights) and xs (x's tile), with
// cp.async; the caller commits and waits.
// XV: x's staging, 1: 4-byte cp.async per element (any width; measured on the H200), 4: 16-byte
// cp.async from the multiple of 4 at or before the tile's first column (needs Win % 4 == 0 and x
// 16-byte aligned, so each group of four is all inside x's row or all outside; 10-12% faster on
// the H200, the solutions' way).
template <int XV>
__device__ __forceinline__ void sp_stage(float* ws, float* xs, const float* __restrict__ x, const float* __restrict__ wp,
                                         const SpArgs& s, const SpTile& u, int kc, int tid) {
  const int warp = tid >> 5, lane = tid & 31;
  const int th = u.ph.th, tw = u.ph.tw, T = th * tw;
  const int R = kBI + th - 1, RWc = kBJ + tw - 1;  // staged rows and columns
  const int kcs = min(kKC, s.Cin8 - kc * kKC);
  // the chunk's weights (contiguous: T taps x kcs channels x 64 output channels)
  const float* wsrc = wp + u.ph.woff + (long long)T * kCoB * ((long long)u.cb * s.Cin8 + kc * kKC);
  const int nf4 = T * kcs * (kCoB / 4);
#if !(SP_ABLATE & 8)
  for (int e = tid; e < nf4; e += kSpThreads) cp_async16(smem_addr(ws + 4 * e), wsrc + 4 * e);
#endif
  // x's tile: one (channel, row) per warp at a time, lanes along the columns
#if SP_ABLATE & 1
  for (int row = warp; row < 0; row += kSpThreads / 32) {
#else
  for (int row = warp; row < kcs * R; row += kSpThreads / 32) {
#endif
    const int cl = row / R, r = row - cl * R;
    const int ci = kc * kKC + cl, ih = u.xr0 + r;
    const bool rowok = ci < s.Cin && ih >= 0 && ih < s.Hin;
    const float* src = rowok ? x + (((long long)u.n * s.Cin + ci) * s.Hin + ih) * s.Win : x;
    float* dst = xs + cl * s.CS + r * s.RW;
    if (XV == 4) {
      for (int v = lane; 4 * v < u.xs0 + RWc; v += 32) {
        const int iw = u.xc0 - u.xs0 + 4 * v;
        const bool ok = rowok && iw >= 0 && iw < s.Win;
        cp_async16z(smem_addr(dst + 4 * v), ok ? src + iw : x, ok ? 16u : 0u);
      }
    } else {
      for (int c = lane; c < RWc; c += 32) {
        const int iw = u.xc0 + c;
        const bool ok = rowok && iw >= 0 && iw < s.Win;
        cp_async4(smem_addr(dst + c), ok ? src + iw : x, ok ? 4u : 0u);
      }
    }
  }
}

// The MMAs of one staged chunk: the warp's 64 channels x 32 pixels (row wr of the tile, columns
// wc..wc+31) accumulate every tap's products over the chunk's channels.
__device__ __forceinline__ void sp_mma(float (&acc)[4][4][4], const float* ws, const float* xs, const SpArgs& s,
                                       const SpTile& u, int kc, int tid) {
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wr = warp >> 1, wc = (warp & 1) * 32;
  const int th = u.ph.th, tw = u.ph.tw;
  const int nks = min(kKC, s.Cin8 - kc * kKC) / 8;
  for (int a = 0; a < th; ++a) {
    for (int b = 0; b < tw; ++b) {
      const float* xb = xs + t * s.CS + (wr + th - 1 - a) * s.RW + wc + (tw - 1 - b) + g + u.xs0;
      const float4* wa = reinterpret_cast<const float4*>(ws) + (a * tw + b) * nks * 4 * 32 + lane;
#pragma unroll 2
      for (int ks = 0; ks < nks; ++ks) {
        uint32_t A[4][4], B[4][2];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const float4 v = wa[(ks * 4 + m) * 32];
          A[m][0] = __float_as_uint(v.x);
          A[m][1] = __float_as_uint(v.y);
          A[m][2] = __float_as_uint(v.z);
          A[m][3] = __float_as_uint(v.w);
        }
        const float* xk = xb + ks * 8 * s.CS;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          B[q][0] = to_tf32(xk[q * 8]);
          B[q][1] = to_tf32(xk[4 * s.CS + q * 8]);
        }
#if SP_ABLATE & 2  // the operands' loads kept, the products left out
        acc[ks & 3][0][0] += __uint_as_float(A[0][0] ^ A[1][1] ^ A[2][2] ^ A[3][3] ^ B[0][0] ^ B[1][1] ^ B[2][0] ^ B[3][1]);
#else
#pragma unroll
        for (int m = 0; m < 4; ++m)
#pragma unroll
          for (int q = 0; q < 4; ++q) mma_tf32(acc[m][q], A[m], B[q]);
#endif
      }
    }
  }
}

// The tile through shared memory (ys[co][il * kBJ + jl], which the caller has made free) and out,
// with the bias and the epilogue: RED 0, row by row of the phase into y[n][co][oh][ow]; RED 1,
// the minimum over the block's channels, one pixel per thread, into y[n][cb][oh][ow] (a partial
// minimum per 64-channel block: the caller's tail takes the minimum over cb). Ends with ys still
// being read by other warps: the caller syncs before reusing it.
template <int RED>
__device__ __forceinline__ void sp_store(const float (&acc)[4][4][4], float* ys, const float* __restrict__ bias,
                                         float* __restrict__ y, const SpArgs& s, const SpTile& u, const Epilogue& epi,
                                         int tid) {
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wr = warp >> 1, wc = (warp & 1) * 32;
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int px = wr * kBJ + wc + q * 8 + 2 * t, co = m * 16 + g;
      *reinterpret_cast<float2*>(ys + co * kYS + px) = make_float2(acc[m][q][0], acc[m][q][1]);
      *reinterpret_cast<float2*>(ys + (co + 8) * kYS + px) = make_float2(acc[m][q][2], acc[m][q][3]);
    }
  __syncthreads();
  if constexpr (RED == 1) {
    const int il = tid / kBJ, jl = tid - il * kBJ, i = u.i0 + il, j = u.j0 + jl;  // kSpThreads == kBI * kBJ
    if (i >= u.ph.rows || j >= u.ph.cols) return;
    const int nco = min(kCoB, s.Cout - u.cb * kCoB);
    float m = INFINITY;
    bool nan = false;
    for (int cl = 0; cl < nco; ++cl) {
      const float v = epi(ys[cl * kYS + tid] + (bias ? __ldg(bias + u.cb * kCoB + cl) : 0.f));
      nan |= v != v;
      m = fminf(m, v);
    }
    __stcs(y + (((long long)u.n * s.co_blocks + u.cb) * s.Hout + u.ph.rh + (long long)s.sh * i) * s.Wout + u.ph.rw +
               (long long)s.sw * j,
           nan ? NAN : m);  // torch.min's NaN, which fminf would drop
  } else {
    for (int row = warp; row < kCoB * kBI; row += kSpThreads / 32) {
      const int cl = row / kBI, il = row - cl * kBI;
      const int co = u.cb * kCoB + cl, i = u.i0 + il;
      if (co >= s.Cout || i >= u.ph.rows) continue;
      const float bv = bias ? __ldg(bias + co) : 0.f;
      float* yrow = y + (((long long)u.n * s.Cout + co) * s.Hout + u.ph.rh + (long long)s.sh * i) * s.Wout + u.ph.rw;
      for (int jl = lane; jl < kBJ; jl += 32) {
        const int j = u.j0 + jl;
#if SP_ABLATE & 4  // one impossible value stored, so the products stay live
        if (j < u.ph.cols && epi(ys[cl * kYS + il * kBJ + jl] + bv) == 1234.5f) __stcs(yrow + (long long)s.sw * j, 0.f);
#else
        if (j < u.ph.cols) __stcs(yrow + (long long)s.sw * j, epi(ys[cl * kYS + il * kBJ + jl] + bv));
#endif
      }
    }
  }
}

__device__ __forceinline__ void sp_zero(float (&acc)[4][4][4]) {
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][q][e] = 0.f;
}

// ct2d_sp: one item per block (grid: phase fastest, then tile; co block; image), two blocks per
// SM; each chunk staged, waited for, then computed. The solutions' kernel (docs/perf-notes.md).
template <int XV, int RED>
__global__ void __launch_bounds__(kSpThreads, 2)
    ct2d_sp(const float* __restrict__ x, const float* __restrict__ wp, const float* __restrict__ bias,
            float* __restrict__ y, const SpArgs s, const Epilogue epi) {
  extern __shared__ __align__(16) float smem[];
  const SpTile u = sp_tile<XV>(s, blockIdx.x % s.P, blockIdx.x / s.P, blockIdx.y, blockIdx.z);
  if (u.i0 >= u.ph.rows || u.j0 >= u.ph.cols) return;  // this phase has fewer rows or columns than the largest
  const int tid = threadIdx.x;
  float* ws = smem;
  float* xs = smem + s.wfloats;
  float acc[4][4][4];
  sp_zero(acc);
  for (int kc = 0; kc < s.nkc; ++kc) {
    if (kc > 0) __syncthreads();  // every warp is done with the previous chunk
    sp_stage<XV>(ws, xs, x, wp, s, u, kc, tid);
    cp_async_commit();
    cp_async_wait_0();
    __syncthreads();
    sp_mma(acc, ws, xs, s, u, kc, tid);
  }
  __syncthreads();
  sp_store<RED>(acc, smem, bias, y, s, u, epi, tid);
}

// ct2d_spp: the same items on persistent blocks, one per SM, each taking items blockIdx.x,
// blockIdx.x + gridDim.x, ... (consecutive blocks: a tile's phases at the same time, as above),
// its chunks through a ring of two stages (each the weights and x's tile of a chunk, or the
// tile's trip out through ys): chunk L + 2 is staged while chunks L + 1 and L are computed and
// stored, so staging overlaps the MMAs. Correct, but 2x slower than ct2d_sp on the H200 (one block
// of 8 warps per SM hides less than two; docs/perf-notes.md): StridedConv takes it only when asked
// (persistent = True).
template <int XV, int RED>
__global__ void __launch_bounds__(kSpThreads, 1)
    ct2d_spp(const float* __restrict__ x, const float* __restrict__ wp, const float* __restrict__ bias,
             float* __restrict__ y, const SpArgs s, const Epilogue epi) {
  extern __shared__ __align__(16) float smem[];
  const int tid = threadIdx.x;
  const long long tiles = (long long)s.tiles_i * s.tiles_j;
  const long long items = (long long)s.N * s.co_blocks * tiles * s.P;
  const long long mine = items > blockIdx.x ? (items - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const long long chunks = mine * s.nkc;
  auto tile_of = [&](long long k) {  // this block's k-th item
    long long it = blockIdx.x + k * gridDim.x;
    const int p = (int)(it % s.P);
    it /= s.P;
    const int tile = (int)(it % tiles);
    it /= tiles;
    return sp_tile<XV>(s, p, tile, (int)(it % s.co_blocks), (int)(it / s.co_blocks));
  };
  auto valid = [](const SpTile& u) { return u.i0 < u.ph.rows && u.j0 < u.ph.cols; };
  auto stage_base = [&](long long L) { return smem + (L & 1) * s.stage_floats; };
  auto issue = [&](long long L) {  // stage chunk L into its slot of the ring; one commit group either way
    if (L < chunks) {
      const SpTile u = tile_of(L / s.nkc);
      if (valid(u)) sp_stage<XV>(stage_base(L), stage_base(L) + s.wfloats, x, wp, s, u, (int)(L % s.nkc), tid);
    }
    cp_async_commit();
  };
  float acc[4][4][4];
  sp_zero(acc);
  issue(0);
  issue(1);
  for (long long L = 0; L < chunks; ++L) {
    const int kc = (int)(L % s.nkc);
    const SpTile u = tile_of(L / s.nkc);
    float* st = stage_base(L);
    cp_async_wait_1();  // chunk L's group is complete (L + 1's may not be)
    __syncthreads();
    if (valid(u)) {
      sp_mma(acc, st, st + s.wfloats, s, u, kc, tid);
      if (kc == s.nkc - 1) {
        __syncthreads();  // every warp is done reading the stage: ys takes its place
        sp_store<RED>(acc, st, bias, y, s, u, epi, tid);
        sp_zero(acc);
      }
    }
    __syncthreads();  // the stage is free
    issue(L + 2);
  }
  cp_async_wait_0();
}

// A kernel's dynamic shared-memory opt-in, per device, raised when a call needs more.
template <auto K>
void sp_allow_smem(int dev, int bytes) {
  static int allowed[64] = {0};
  if (dev >= 64 || bytes > allowed[dev]) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    if (dev < 64) allowed[dev] = bytes;
  }
}

template <auto K>
void sp_launch(dim3 grid, int smem, const float* x, const float* wp, const float* bias, float* y, const SpArgs& s,
               const Epilogue& e, int dev) {
  sp_allow_smem<K>(dev, smem);
  K<<<grid, kSpThreads, smem, c10::cuda::getCurrentCUDAStream()>>>(x, wp, bias, y, s, e);
}

}  // namespace

// x: [N, Cin, Hin, Win] fp32 contiguous; wp: the packed weights (ct2d_fused.StridedConv); bias: per
// output channel or undefined; phases: per phase rh, rw, th, tw, ch, cw, rows, cols, woff; the
// epilogue as the library's (kind, a, b); staging: x's copies, 4 or 16 bytes (16 where x allows);
// persistent: ct2d_spp (persistent blocks, a two-stage ring) rather than ct2d_sp; channel_min: the
// output is [N, ceil(Cout / 64), Hout, Wout], each the minimum over its 64 channels (after the bias
// and the epilogue), rather than [N, Cout, Hout, Wout].
torch::Tensor sp_conv(torch::Tensor x, torch::Tensor wp, c10::optional<torch::Tensor> bias, std::vector<int64_t> phases,
                      int64_t Cout, int64_t Hout, int64_t Wout, int64_t sh, int64_t sw, int64_t epilogue, double epi_a,
                      double epi_b, int64_t staging, bool persistent, bool channel_min) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.dim() == 4 && x.is_contiguous(),
              "sp_conv: x must be a contiguous 4-D fp32 CUDA tensor");
  TORCH_CHECK(wp.is_cuda() && wp.scalar_type() == at::kFloat && wp.is_contiguous(), "sp_conv: packed weights");
  TORCH_CHECK(epilogue >= 0 && epilogue < kEpiCount, "sp_conv: unknown epilogue ", epilogue);
  const int64_t P = sh * sw;
  TORCH_CHECK(P >= 1 && P <= kSpMaxPhases && (int64_t)phases.size() == 9 * P, "sp_conv: nine values per phase");
  const c10::cuda::CUDAGuard guard(x.device());
  SpArgs s{};
  s.N = (int)x.size(0);
  s.Cin = (int)x.size(1);
  s.Cin8 = (s.Cin + 7) / 8 * 8;
  s.Hin = (int)x.size(2);
  s.Win = (int)x.size(3);
  s.Cout = (int)Cout;
  s.Hout = (int)Hout;
  s.Wout = (int)Wout;
  s.sh = (int)sh;
  s.sw = (int)sw;
  s.P = (int)P;
  int rows_max = 0, cols_max = 0, th_max = 1, tw_max = 1, t_max = 1;
  for (int p = 0; p < P; ++p) {
    const int64_t* v = phases.data() + 9 * p;
    SpPhase& q = s.ph[p];
    q.rh = (int)v[0], q.rw = (int)v[1], q.th = (int)v[2], q.tw = (int)v[3], q.ch = (int)v[4], q.cw = (int)v[5];
    q.rows = (int)v[6], q.cols = (int)v[7], q.woff = v[8];
    TORCH_CHECK(q.th * q.tw <= kSpMaxTaps, "sp_conv: at most ", kSpMaxTaps, " taps per phase");
    rows_max = std::max(rows_max, q.rows);
    cols_max = std::max(cols_max, q.cols);
    th_max = std::max(th_max, q.th);
    tw_max = std::max(tw_max, q.tw);
    t_max = std::max(t_max, q.th * q.tw);
  }
  const int64_t out_c = channel_min ? (Cout + kCoB - 1) / kCoB : Cout;  // channel_min: a partial minimum per block of 64
  auto y = torch::empty({s.N, out_c, Hout, Wout}, x.options());
  if (y.numel() == 0) return y;
  s.tiles_i = (rows_max + kBI - 1) / kBI;
  s.tiles_j = (cols_max + kBJ - 1) / kBJ;
  s.nkc = (s.Cin8 + kKC - 1) / kKC;
  // staging 16 (ct2d_sp<4>) where x allows it, else 4 (ct2d_sp<1>)
  TORCH_CHECK(staging == 4 || staging == 16, "sp_conv: staging is 4 or 16 bytes, not ", staging);
  const bool vec = staging == 16 && s.Win % 4 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
  s.RW = vec ? (kBJ + tw_max - 1 + 3 + 3) / 4 * 4 : kBJ + tw_max - 1;  // XV 4: up to 3 columns before the tile
  s.CS = (kBI + th_max - 1) * s.RW;
  s.CS += ((8 - s.CS) % 32 + 32) % 32;  // 8 mod 32
  s.wfloats = t_max * kKC * kCoB;
  const int co_blocks = (int)((Cout + kCoB - 1) / kCoB);
  s.co_blocks = co_blocks;
  s.stage_floats = std::max(s.wfloats + kKC * s.CS, kCoB * kYS);  // a multiple of 4: stages stay 16-byte aligned
  TORCH_CHECK(wp.numel() >= s.ph[P - 1].woff + (int64_t)s.ph[P - 1].th * s.ph[P - 1].tw * kCoB * s.Cin8 * co_blocks,
              "sp_conv: the packed weights are too short");
  const int smem = (int)sizeof(float) * s.stage_floats * (persistent ? 2 : 1);
  const int64_t gx = (int64_t)P * s.tiles_i * s.tiles_j;
  TORCH_CHECK(gx < (1ll << 31) && s.N <= 65535 && co_blocks <= 65535, "sp_conv: the grid is too large");
  const float* bp = nullptr;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->is_cuda() && bias->scalar_type() == at::kFloat && bias->numel() == Cout && bias->is_contiguous(),
                "sp_conv: bias must be Cout contiguous fp32 values");
    bp = bias->data_ptr<float>();
  }
  const Epilogue e{(int)epilogue, (float)epi_a, (float)epi_b};
  const float* xp = x.data_ptr<float>();
  const float* wpp = wp.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int dev = x.get_device();
  const int64_t items = gx * co_blocks * s.N;
  const dim3 grid = persistent ? dim3((unsigned)std::min<int64_t>(items, sm_count())) : dim3((unsigned)gx, co_blocks, s.N);
  auto run = [&](auto xv, auto red) {
    constexpr int XV = decltype(xv)::value, RED = decltype(red)::value;
    if (persistent)
      sp_launch<ct2d_spp<XV, RED>>(grid, smem, xp, wpp, bp, yp, s, e, dev);
    else
      sp_launch<ct2d_sp<XV, RED>>(grid, smem, xp, wpp, bp, yp, s, e, dev);
  };
  using One = std::integral_constant<int, 1>;
  using Zero = std::integral_constant<int, 0>;
  using Four = std::integral_constant<int, 4>;
  if (vec)
    channel_min ? run(Four{}, One{}) : run(Four{}, Zero{});
  else
    channel_min ? run(One{}, One{}) : run(One{}, Zero{});
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
