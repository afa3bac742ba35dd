// The interleaving passes of a strided ConvTranspose2d computed as its phases' stride-1
// convolutions (ct2d_phases.py): the phases' outputs put in place, with the bias and the library's
// epilogue. phase_interleave takes one output per phase (ct2d_fused.SplitConv); subpixel_interleave
// takes one stride-1 convolution's output whose channels hold every phase side by side
// (ct2d_fused.SubpixelConv). Built by ct2d_split.py.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <torch/extension.h>

#include <type_traits>
#include <vector>

#include "epilogue.cuh"  // the library's epilogues (solutions/conv_transpose2d/_shared/fast/, on the include path)

namespace {

constexpr int kThreads = 256;

// ---- A strided convolution's phases interleaved (ct2d_phases.py): y[n, c, rh + sh i, rw + sw j] =
// epi(sub_p[n, c, i + ch_p, j + cw_p] + bias[c]), the sub term 0 outside sub_p or where phase p has
// no taps (a null pointer). Each thread writes one element; consecutive threads read two phases'
// rows (stride 2) in turn, each coalesced.
constexpr int kMaxPhases = 16;
struct Phases {
  const float* y[kMaxPhases];
  int rows[kMaxPhases], cols[kMaxPhases], ch[kMaxPhases], cw[kMaxPhases];
};

__global__ void phase_interleave_kernel(float* __restrict__ out, const Phases ph, const float* __restrict__ bias,
                                        const Epilogue epi, int C, int H, int W, int sh, int sw, int64_t total) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int ow = (int)(e % W), oh = (int)(e / W % H);
    const int64_t nc = e / ((int64_t)H * W);
    const int p = (oh % sh) * sw + ow % sw;
    const int t = oh / sh + ph.ch[p], u = ow / sw + ph.cw[p];
    float v = 0.f;
    if (ph.y[p] && t < ph.rows[p] && u < ph.cols[p]) v = __ldg(ph.y[p] + (nc * ph.rows[p] + t) * ph.cols[p] + u);
    out[e] = epi(v + (bias ? __ldg(bias + nc % C) : 0.f));
  }
}


// ---- One output z [N, P * C, Hz, Wz] holding the phases side by side along the channels (phase p's
// channel c at p * C + c): y[n, c, oh, ow] = epi(z[n, p * C + c, oh / sh + ch_p, ow / sw + cw_p] + bias[c]),
// p = (oh % sh) * sw + ow % sw, the z term 0 outside z. A warp writes one output row (n, c, oh) at a
// time: the row's divisions, bias and phase rows are worked out once per row, then each lane writes
// KV consecutive outputs per step (one 16-byte streaming store where KV is 4), kU steps' loads
// issued before their stores (a row of up to 512 or 256 outputs in one pass). KV 4 takes any
// width: the row's outputs before its first 16-byte boundary (its head, up to 3) and after its last
// whole vector (its tail, up to 3) one float each, by as many lanes, the rest as vectors. For SW 2
// a warp's loads are runs of consecutive elements of the row's two column phases; z is read once
// (streaming loads). EPI: the epilogue's kind, fixed at compile time so its switch folds away. SW:
// the column stride if 2, else 0 (any: a division per output). ZT: z's element type, float,
// __half (SubpixelConv's z_fp16: only where the epilogue saturates, so that an fp16 overflow to
// +-inf gives what the fp32 value would) or __nv_bfloat16 (a bf16 x as it is: the library's bf16
// rows write z; fp32's range, any epilogue). OT: y's element type, float or __nv_bfloat16 (st_y1, st_y4).
// Measured on the H200 (93's shapes, 2.2 GB moved): one thread per output group with the offsets in
// an array of the kernel's parameters ran at 0.5 TB/s; Nsight Compute put it at 98% "compute",
// the memory pipes 98% busy and DRAM 7%: a dynamic index into a parameter's array is a
// constant-bank load whose divergent addresses (lanes of a warp in different phases) serialize.
// With the offsets packed into registers (below) it ran at 1.0 TB/s, still issue-bound on three
// integer divisions per output group, which the row per warp removes.
struct SubPhases {
  unsigned long long ch[2], cw[2];  // phase p's offset: bits 8 (p % 8) of word p / 8
  __device__ __forceinline__ static int get(const unsigned long long (&w)[2], int p) {
    return (int)(((p < 8 ? w[0] : w[1]) >> (8 * (p & 7))) & 255u);
  }
};

template <class T>
struct TypeTag {
  using type = T;
};
__device__ __forceinline__ float ld_z(const float* p) { return __ldcs(p); }
__device__ __forceinline__ float ld_z(const __half* p) {
  return __half2float(__ushort_as_half(__ldcs(reinterpret_cast<const unsigned short*>(p))));
}
__device__ __forceinline__ float ld_z(const __nv_bfloat16* p) {
  return __bfloat162float(__ushort_as_bfloat16(__ldcs(reinterpret_cast<const unsigned short*>(p))));
}
__device__ __forceinline__ float z_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float z_float(__nv_bfloat16 v) { return __bfloat162float(v); }
// y's stores by its element type OT (streaming): float, or __nv_bfloat16 (each value rounded once to
// nearest from the fp32 result: a bf16 run's output, half the bytes). st_y4: outputs 4g..4g+3 of y
// (a 16-byte vector of fp32, 8 bytes of bf16; y aligned to that)
__device__ __forceinline__ void st_y1(float* p, float v) { __stcs(p, v); }
__device__ __forceinline__ void st_y1(__nv_bfloat16* p, float v) {
  __stcs(reinterpret_cast<unsigned short*>(p), __bfloat16_as_ushort(__float2bfloat16_rn(v)));
}
__device__ __forceinline__ void st_y4(float* y, int g, float4 v) { __stcs(reinterpret_cast<float4*>(y) + g, v); }
__device__ __forceinline__ void st_y4(__nv_bfloat16* y, int g, float4 v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  __stcs(reinterpret_cast<uint2*>(y) + g,
         make_uint2(*reinterpret_cast<const unsigned*>(&lo), *reinterpret_cast<const unsigned*>(&hi)));
}

// The staged 16-bit path's copy of 8 z columns (16 bytes) from col into shared memory: zeros where the
// row is outside z (zr null) or col at or past Wz (Wz and col multiples of 8: whole pieces). A
// chunk reads the pieces its outputs need (a row of 256 outputs: 17 of the 33).
constexpr int kWin = 264;  // z columns staged per phase row and chunk of 512 outputs: 256, up to 7 before, 1 spare
template <class ZT>
__device__ __forceinline__ void stage8(ZT* dst, const ZT* zr, int col, int Wz) {
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (zr && col < Wz) v = __ldcs(reinterpret_cast<const uint4*>(zr + col));
  *reinterpret_cast<uint4*>(dst) = v;
}

template <int EPI, int SW, int KV, class ZT, class OT>
__global__ void __launch_bounds__(kThreads)
    subpixel_interleave_kernel(OT* __restrict__ out, const ZT* __restrict__ z, const SubPhases ph,
                               const float* __restrict__ bias, float epi_a, float epi_b, int C, int H, int W,
                               int sh, int sw_rt, int Hz, int Wz, int rows, bool staged) {
  constexpr int kU = KV == 4 ? 4 : 8;  // steps per pass over a row: 512 or 256 outputs
  // SW 2, KV 4, a 16-bit z (fp16, bf16) with rows of whole 16-byte pieces (staged, the host's check): each chunk of
  // 512 outputs reads its two z rows' 256 columns (and up to 8 more) as 16-byte pieces into the
  // warp's shared memory, then takes each output's value from there
  constexpr bool kStaged = SW == 2 && KV == 4 && sizeof(ZT) == 2;
  const Epilogue epi{EPI, epi_a, epi_b};
  const int sw = SW ? SW : sw_rt, P = sh * sw;
  const int lane = threadIdx.x & 31, warps = gridDim.x * (kThreads / 32);
  for (int row = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5); row < rows; row += warps) {
    const int nc = row / H, oh = row - nc * H;
    const int n = nc / C, c = nc - n * C;
    const int rh = oh % sh, i = oh / sh;
    const float bv = bias ? __ldg(bias + c) : 0.f;
    // phase (rh, 0)'s z plane for this image and channel; phase (rh, rw) is rw planes of C further
    const ZT* zp = z + (((int64_t)n * P + rh * sw) * C + c) * (int64_t)Hz * Wz;
    const int64_t phase_step = (int64_t)C * Hz * Wz;
    // SW 2: the two column phases' rows (null where the row is outside z) and column offsets
    const ZT* zr0 = nullptr;
    const ZT* zr1 = nullptr;
    int cw0 = 0, cw1 = 0;
    if constexpr (SW == 2) {
      const int p0 = rh * 2, t0 = i + SubPhases::get(ph.ch, p0), t1 = i + SubPhases::get(ph.ch, p0 + 1);
      cw0 = SubPhases::get(ph.cw, p0);
      cw1 = SubPhases::get(ph.cw, p0 + 1);
      if (t0 < Hz) zr0 = zp + (int64_t)t0 * Wz;
      if (t1 < Hz) zr1 = zp + phase_step + (int64_t)t1 * Wz;
    }
    // z's term for output column ow of this row
    auto value = [&](int ow) -> float {
      if constexpr (SW == 2) {
        const ZT* zr = (ow & 1) ? zr1 : zr0;
        const int u = (ow >> 1) + ((ow & 1) ? cw1 : cw0);
        return zr && u < Wz ? ld_z(zr + u) : 0.f;
      } else {
        const int rw = ow % sw, p = rh * sw + rw;
        const int t = i + SubPhases::get(ph.ch, p), u = ow / sw + SubPhases::get(ph.cw, p);
        return t < Hz && u < Wz ? ld_z(zp + rw * phase_step + (int64_t)t * Wz + u) : 0.f;
      }
    };
    OT* yrow = out + (int64_t)row * W;
    // outputs before the row's first 4-output boundary (16 bytes of fp32, 8 of bf16)
    const unsigned at = (unsigned)(reinterpret_cast<uintptr_t>(yrow) >> (sizeof(OT) == 4 ? 2 : 1));
    const int head = KV == 4 ? min(W, (int)((0u - at) & 3u)) : 0;
    const int groups = (W - head) / KV, rest = W - head - groups * KV;  // KV 1: rest 0
    if (KV == 4 && lane < head + rest) {
      const int ow = lane < head ? lane : head + groups * KV + (lane - head);
      st_y1(yrow + ow, epi(value(ow) + bv));
    }
    OT* yv = yrow + head;  // aligned to 4 outputs where KV is 4
    if constexpr (kStaged) {
      if (staged) {
        __shared__ __align__(16) ZT zs[kThreads / 32][2][kWin];
        ZT* s0 = zs[threadIdx.x >> 5][0];
        ZT* s1 = zs[threadIdx.x >> 5][1];
        // vector g's phase-0 outputs (its columns 0 and 2, or 1 and 3 for an odd head) are z0's
        // columns A0 + 2g and the next, its phase-1 outputs z1's from A1 + 2g
        const int A0 = ((head + 1) >> 1) + cw0, A1 = (head >> 1) + cw1;
        const bool odd = head & 1;
        for (int g0 = 0; g0 < groups; g0 += 128) {
          const int c0 = A0 + 2 * g0, c1 = A1 + 2 * g0, b0 = c0 & ~7, b1 = c1 & ~7;
          const int d0 = c0 - b0, d1 = c1 - b1, cnt = min(128, groups - g0);  // the chunk's vectors
          const int n0 = (d0 + 2 * cnt + 7) >> 3, n1 = (d1 + 2 * cnt + 7) >> 3;  // pieces it reads
          __syncwarp();  // the previous chunk's reads are done
          for (int j = lane; j < max(n0, n1); j += 32) {
            if (j < n0) stage8(s0 + 8 * j, zr0, b0 + 8 * j, Wz);
            if (j < n1) stage8(s1 + 8 * j, zr1, b1 + 8 * j, Wz);
          }
          __syncwarp();
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const int gl = 32 * k + lane;
            if (g0 + gl >= groups) break;
            const float e0 = z_float(s0[d0 + 2 * gl]), e1 = z_float(s0[d0 + 2 * gl + 1]);
            const float o0 = z_float(s1[d1 + 2 * gl]), o1 = z_float(s1[d1 + 2 * gl + 1]);
            const float4 q = odd ? make_float4(o0, e0, o1, e1) : make_float4(e0, o0, e1, o1);
            st_y4(yv, g0 + gl, make_float4(epi(q.x + bv), epi(q.y + bv), epi(q.z + bv), epi(q.w + bv)));
          }
        }
        continue;
      }
    }
    for (int g0 = 0; g0 < groups; g0 += 32 * kU) {
      float v[kU][KV];
#pragma unroll
      for (int k = 0; k < kU; ++k) {
        const int g = g0 + 32 * k + lane;
#pragma unroll
        for (int q = 0; q < KV; ++q) v[k][q] = g < groups ? value(head + g * KV + q) : 0.f;
      }
#pragma unroll
      for (int k = 0; k < kU; ++k) {
        const int g = g0 + 32 * k + lane;
        if (g >= groups) break;
        if constexpr (KV == 4) {
          st_y4(yv, g, make_float4(epi(v[k][0] + bv), epi(v[k][1] + bv), epi(v[k][2] + bv), epi(v[k][3] + bv)));
        } else {
#pragma unroll
          for (int q = 0; q < KV; ++q) st_y1(yv + g * KV + q, epi(v[k][q] + bv));
        }
      }
    }
  }
}

}  // namespace

// subs: the phases' stride-1 outputs (row-major in (rh, rw); an undefined tensor for a phase without
// taps), offsets: (ch, cw) per phase; bias: per channel or undefined; the epilogue as the library's.
torch::Tensor phase_interleave(std::vector<torch::Tensor> subs, std::vector<int64_t> offsets, int64_t stride_h,
                               int64_t stride_w, int64_t N, int64_t C, int64_t H, int64_t W,
                               c10::optional<torch::Tensor> bias, int64_t epilogue, double epi_a, double epi_b) {
  const int64_t np = stride_h * stride_w;
  TORCH_CHECK(np >= 1 && np <= kMaxPhases && (int64_t)subs.size() == np && (int64_t)offsets.size() == 2 * np,
              "phase_interleave: one output and two offsets per phase, at most ", kMaxPhases, " phases");
  TORCH_CHECK(epilogue >= 0 && epilogue < kEpiCount, "phase_interleave: unknown epilogue ", epilogue);
  Phases ph{};
  torch::Tensor like;
  for (int64_t p = 0; p < np; ++p) {
    const torch::Tensor& s = subs[p];
    if (s.defined() && s.numel() > 0) {
      TORCH_CHECK(s.is_cuda() && s.scalar_type() == at::kFloat && s.dim() == 4 && s.is_contiguous(),
                  "phase_interleave: a phase's output must be a contiguous fp32 CUDA tensor of four dimensions");
      TORCH_CHECK(s.size(0) == N && s.size(1) == C, "phase_interleave: a phase's output is not N x C");
      ph.y[p] = s.data_ptr<float>();
      ph.rows[p] = (int)s.size(2);
      ph.cols[p] = (int)s.size(3);
      like = s;
    }
    ph.ch[p] = (int)offsets[2 * p];
    ph.cw[p] = (int)offsets[2 * p + 1];
  }
  TORCH_CHECK(like.defined(), "phase_interleave: no phase has taps (nothing names the device)");
  const at::cuda::CUDAGuard guard(like.device());
  const float* b = nullptr;
  torch::Tensor bias_c;
  if (bias.has_value() && bias->defined()) {
    bias_c = bias->contiguous();
    TORCH_CHECK(bias_c.is_cuda() && bias_c.scalar_type() == at::kFloat && bias_c.numel() == C,
                "phase_interleave: the bias must be fp32 on the GPU, one value per channel");
    b = bias_c.data_ptr<float>();
  }
  auto out = torch::empty({N, C, H, W}, like.options());
  const int64_t total = out.numel();
  if (total == 0) return out;
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int blocks = (int)std::min<int64_t>((total + kThreads - 1) / kThreads, (int64_t)sms * 16);
  phase_interleave_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      out.data_ptr<float>(), ph, b, Epilogue{(int)epilogue, (float)epi_a, (float)epi_b}, (int)C, (int)H, (int)W,
      (int)stride_h, (int)stride_w, total);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

// z: [N, P * C, Hz, Wz] fp32, bf16, or fp16 with a saturating epilogue (tanh, clamp_scale), contiguous,
// phase p = rh * stride_w + rw in channels p * C..; offsets:
// (ch, cw) per phase; bias: per channel or undefined; the epilogue as the library's; out_bf16: y in
// bf16 (each value the fp32 one rounded once to nearest), else fp32.
torch::Tensor subpixel_interleave(torch::Tensor z, std::vector<int64_t> offsets, int64_t stride_h, int64_t stride_w,
                                  int64_t C, int64_t H, int64_t W, c10::optional<torch::Tensor> bias, int64_t epilogue,
                                  double epi_a, double epi_b, bool out_bf16) {
  const int64_t np = stride_h * stride_w;
  TORCH_CHECK(np >= 1 && np <= kMaxPhases && (int64_t)offsets.size() == 2 * np,
              "subpixel_interleave: two offsets per phase, at most ", kMaxPhases, " phases");
  const bool z16 = z.scalar_type() == at::kHalf, zbf = z.scalar_type() == at::kBFloat16;
  TORCH_CHECK(z.is_cuda() && (z.scalar_type() == at::kFloat || z16 || zbf) && z.dim() == 4 && z.is_contiguous() &&
                  z.size(1) == np * C,
              "subpixel_interleave: z must be a contiguous fp32, fp16 or bf16 CUDA tensor [N, phases x C, Hz, Wz]");
  TORCH_CHECK(epilogue >= 0 && epilogue < kEpiCount, "subpixel_interleave: unknown epilogue ", epilogue);
  TORCH_CHECK(!z16 || epilogue == kEpiTanh || epilogue == kEpiClampScale,
              "subpixel_interleave: an fp16 z only with a saturating epilogue (tanh, clamp_scale)");
  SubPhases ph{};
  for (int64_t p = 0; p < np; ++p) {
    const int64_t ch = offsets[2 * p], cw = offsets[2 * p + 1];
    TORCH_CHECK(ch >= 0 && cw >= 0 && ch < 256 && cw < 256, "subpixel_interleave: an offset outside [0, 256)");
    ph.ch[p / 8] |= (unsigned long long)ch << (8 * (p % 8));
    ph.cw[p / 8] |= (unsigned long long)cw << (8 * (p % 8));
  }
  const at::cuda::CUDAGuard guard(z.device());
  const float* b = nullptr;
  torch::Tensor bias_c;
  if (bias.has_value() && bias->defined()) {
    bias_c = bias->contiguous();
    TORCH_CHECK(bias_c.is_cuda() && bias_c.scalar_type() == at::kFloat && bias_c.numel() == C,
                "subpixel_interleave: the bias must be fp32 on the GPU, one value per channel");
    b = bias_c.data_ptr<float>();
  }
  const int64_t N = z.size(0), Hz = z.size(2), Wz = z.size(3);
  auto out = torch::empty({N, C, H, W}, z.options().dtype(out_bf16 ? at::kBFloat16 : at::kFloat));
  if (out.numel() == 0) return out;
  const bool vec = W >= 8;  // KV 4: a row's head and tail one output each, the rest 4-output vectors
  // a 16-bit z staged through shared memory in 16-byte pieces: rows of whole pieces, 16-byte aligned
  const bool staged = (z16 || zbf) && Wz % 8 == 0 && reinterpret_cast<uintptr_t>(z.data_ptr()) % 16 == 0;
  const int64_t rows = N * C * H;
  TORCH_CHECK(rows < (int64_t(1) << 31), "subpixel_interleave: 2^31 output rows or more");
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int warps_per_block = kThreads / 32;
  const int blocks = (int)std::min<int64_t>((rows + warps_per_block - 1) / warps_per_block, (int64_t)sms * 16);
  const float a = (float)epi_a, bb = (float)epi_b;
  auto launch = [&](auto epi, auto sw2, auto kv, auto zt) {
    constexpr int EPI = decltype(epi)::value, SW = decltype(sw2)::value, K = decltype(kv)::value;
    using ZT = typename decltype(zt)::type;
    auto run = [&](auto* y) {
      using OT = std::remove_pointer_t<decltype(y)>;
      subpixel_interleave_kernel<EPI, SW, K, ZT, OT><<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
          y, reinterpret_cast<const ZT*>(z.data_ptr()), ph, b, a, bb, (int)C, (int)H, (int)W, (int)stride_h,
          (int)stride_w, (int)Hz, (int)Wz, (int)rows, staged);
    };
    if (out_bf16)
      run(reinterpret_cast<__nv_bfloat16*>(out.data_ptr()));
    else
      run(out.data_ptr<float>());
  };
  auto by_type = [&](auto epi, auto sw2, auto kv) {
    constexpr int EPI = decltype(epi)::value;
    if constexpr (EPI == kEpiTanh || EPI == kEpiClampScale) {
      if (z16) return launch(epi, sw2, kv, TypeTag<__half>{});
    }
    if (zbf) return launch(epi, sw2, kv, TypeTag<__nv_bfloat16>{});  // fp32's range: any epilogue
    launch(epi, sw2, kv, TypeTag<float>{});
  };
  auto by_shape = [&](auto epi) {
    using Two = std::integral_constant<int, 2>;
    using Any = std::integral_constant<int, 0>;
    using Four = std::integral_constant<int, 4>;
    using One = std::integral_constant<int, 1>;
    if (stride_w == 2)
      vec ? by_type(epi, Two{}, Four{}) : by_type(epi, Two{}, One{});
    else
      vec ? by_type(epi, Any{}, Four{}) : by_type(epi, Any{}, One{});
  };
  static_assert(kEpiCount == 6, "subpixel_interleave: a case per epilogue kind");
  switch (epilogue) {
    case kEpiNone: by_shape(std::integral_constant<int, kEpiNone>{}); break;
    case kEpiClampScale: by_shape(std::integral_constant<int, kEpiClampScale>{}); break;
    case kEpiTanh: by_shape(std::integral_constant<int, kEpiTanh>{}); break;
    case kEpiMishAddHardtanhScale: by_shape(std::integral_constant<int, kEpiMishAddHardtanhScale>{}); break;
    case kEpiAddMinGeluScale: by_shape(std::integral_constant<int, kEpiAddMinGeluScale>{}); break;
    default: by_shape(std::integral_constant<int, kEpiGelu>{}); break;
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
