// Shared by the fast ConvTranspose2d kernels (mma.cuh, convert.cuh, wgmma.cuh, phase.cuh) and their
// dispatch (dispatch.cu). No kernels: device helpers (TF32 rounding and splitting, the TF32 mma.sync,
// cp.async, fp16 scaling of x, output stores by element type; on sm_90a builds mbarriers, the bulk
// copy engine and TMA) and host helpers (the per-kernel shared-memory opt-in, the SM count, x's TMA
// tensor map, the Plan a call records). Everything is in an anonymous namespace: one translation
// unit, built by ct2d_fast.py.
#pragma once

#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda.h>  // CUtensorMap (the tensor map of ct2d_mmh's and ct2d_wgf's TMA staging; no driver call here)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <string>
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

// bf16 products, fp32 accumulation: a 16 x 16 A fragment (four words a lane, each two bf16, the
// lower-indexed k in the low half) times a 16 x 8 B fragment (two words), into the same C fragment
// as mma_tf32's (ct2d_phase's TC = 2, ct2d_mmh on a bf16 x).
__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void st_shared_v4(uint32_t a, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
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

// columns staged to cover n where the staging starts at a multiple of 4 columns (16 bytes, as
// 16-byte cp.async copies and TMA boxes need), up to 3 before the first needed one
constexpr int64_t cols16(int64_t n) { return (n + 3 + 3) / 4 * 4; }

// Output stores, by the output's element type: float (fp32 runs), __nv_bfloat16 (bf16 runs: the
// fp32 result rounded once, to nearest) or __half (an fp16 output asked for by the caller, ct2d_wgf
// only: the fp32 result rounded once, to nearest; beyond fp16's range it becomes +-inf). The
// epilogues below are written once for all; with float they are the plain fp32 stores. st_out2
// and st_out4 need the pair's and the quad's alignment.
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
__device__ __forceinline__ void st_out1(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void st_out2(__half* p, float a, float b) {
  const __half2 v = __floats2half2_rn(a, b);
  __stcs(reinterpret_cast<unsigned*>(p), *reinterpret_cast<const unsigned*>(&v));
}
__device__ __forceinline__ void st_out4(__half* p, float4 v) {
  const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
  __stcs(reinterpret_cast<uint2*>(p),
         make_uint2(*reinterpret_cast<const unsigned*>(&lo), *reinterpret_cast<const unsigned*>(&hi)));
}
// Input loads, by the input's element type: float, or __nv_bfloat16 widened (exactly) to fp32.
__device__ __forceinline__ float in_float(float v) { return v; }
__device__ __forceinline__ float in_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class OutT>
__device__ __forceinline__ bool pair_aligned(const OutT* p) { return (reinterpret_cast<uintptr_t>(p) & (2 * sizeof(OutT) - 1)) == 0; }

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


// What a call runs, as conv_transpose2d_plan reports it: the run and launch functions fill it just
// before they launch; with launch false (a plan only) they return there instead. Filled only then,
// so a real call formats no strings.
struct Plan {
  bool launch = true;
  std::string kernel, file, config, io;
  bool set(std::string k, std::string f, std::string cfg) {
    kernel = std::move(k);
    file = std::move(f);
    config = std::move(cfg);
    return true;
  }
};

// printf into a std::string (plan descriptions)
std::string strf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
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

#if defined(CT2D_WGMMA)
// TMA staging of x (sm_90a builds; ct2d_mmh's slots and ct2d_wgf's raw ring): x as a 4-D tensor
// (W, H, C, N; fp32, or bf16 for ct2d_mmh's bf16 MMAs) whose box is [8 channels][rows][rowlen];
// out-of-range rows, columns and channels are zero-filled. Needs rows (of x and of the box) of a
// multiple of 16 bytes and x 16-byte aligned. The
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
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  const int64_t e = bf16 ? 2 : 4, per16 = 16 / e;  // bytes per element, elements per 16 bytes
  if (!encode || Win % per16 || reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 || rowlen % per16 || rowlen > 256 ||
      rows > 256)
    return false;
  const cuuint64_t dims[4] = {(cuuint64_t)Win, (cuuint64_t)Hin, (cuuint64_t)Cin, (cuuint64_t)N};
  const cuuint64_t strides[3] = {(cuuint64_t)(Win * e), (cuuint64_t)(Hin * Win * e), (cuuint64_t)(Cin * Hin * Win * e)};
  const cuuint32_t box[4] = {(cuuint32_t)rowlen, (cuuint32_t)rows, 8, 1};
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  return encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, x.data_ptr(), dims,
                strides, box, estr,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
#endif

}  // namespace
