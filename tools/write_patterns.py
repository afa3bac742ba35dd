"""How fast can the output of a strided problem be written, by layout of the writes? Zeros are
written into tensors of the 81 and 75 output shapes (75's height rounded to 256 so that rows pair
up for 16-byte stores) by: torch's fill_, a grid-stride float4 fill, and persistent blocks taking
work items (image, 32 channels, band of R consecutive rows: float4 or float2 stores, streaming or
plain) or (image, 32 channels, row residue mod stride, R rows stride apart: float2), as the phase
kernel's blocks write. CUDA events, L2 flushed, median ms.

    PYTHONPATH=. python tools/write_patterns.py
"""
import torch
from torch.utils.cpp_extension import load_inline

from tools.bench_fast import timed

SRC = r"""
#include <torch/extension.h>
template <bool RESID, int VEC, bool CS>
__global__ void pattern_k(float* y, int N, int C, int H, int W, int R, int sh) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int per = (H + sh - 1) / sh;
  const int bands = RESID ? sh * ((per + R - 1) / R) : (H + R - 1) / R;
  const int items = N * (C / 32) * bands;
  for (int it = blockIdx.x; it < items; it += gridDim.x) {
    const int band = it % bands, nct = it / bands, n = nct / (C / 32), ct = nct % (C / 32);
    for (int i = 0; i < (RESID ? R : 1); ++i) {
      const int oh = RESID ? band % sh + sh * ((band / sh) * R + i) : band * R;
      if (oh >= H) break;
      for (int c = warp; c < 32; c += nw) {
        float* base = y + (((long)n * C + ct * 32 + c) * H + oh) * W;
        const int len = (RESID ? 1 : min(R, H - oh)) * W / VEC;
        if (VEC == 4) {
          float4* b = reinterpret_cast<float4*>(base);
#pragma unroll 4
          for (int k = lane; k < len; k += 32) {
            if (CS) __stcs(b + k, make_float4(0.f, 0.f, 0.f, 0.f));
            else __stwb(b + k, make_float4(0.f, 0.f, 0.f, 0.f));
          }
        } else {
          float2* b = reinterpret_cast<float2*>(base);
#pragma unroll 4
          for (int k = lane; k < len; k += 32) __stcs(b + k, make_float2(0.f, 0.f));
        }
      }
    }
  }
}
template <bool CS>
__global__ void fill_k(float4* y, long n4) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n4; i += (long)gridDim.x * blockDim.x) {
    if (CS) __stcs(y + i, make_float4(0.f, 0.f, 0.f, 0.f));
    else __stwb(y + i, make_float4(0.f, 0.f, 0.f, 0.f));
  }
}
void pattern(torch::Tensor y, int64_t mode, int64_t R, int64_t sh, int64_t blocks, int64_t threads) {
  const int N = y.size(0), C = y.size(1), H = y.size(2), W = y.size(3);
  float* p = y.data_ptr<float>();
  switch (mode) {
    case 0: fill_k<true><<<blocks, threads>>>(reinterpret_cast<float4*>(p), y.numel() / 4); break;
    case 1: fill_k<false><<<blocks, threads>>>(reinterpret_cast<float4*>(p), y.numel() / 4); break;
    case 2: pattern_k<false, 4, true><<<blocks, threads>>>(p, N, C, H, W, R, sh); break;
    case 3: pattern_k<false, 4, false><<<blocks, threads>>>(p, N, C, H, W, R, sh); break;
    case 4: pattern_k<false, 2, true><<<blocks, threads>>>(p, N, C, H, W, R, sh); break;
    case 5: pattern_k<true, 2, true><<<blocks, threads>>>(p, N, C, H, W, R, sh); break;
  }
}
"""
MODES = {0: "fill4.cs", 1: "fill4", 2: "band4.cs", 3: "band4", 4: "band2.cs", 5: "resid2.cs"}


def main():
    ext = load_inline(name="ct2d_write_patterns", cpp_sources="void pattern(torch::Tensor y, int64_t mode, int64_t R, int64_t sh, int64_t blocks, int64_t threads);",
                      cuda_sources=SRC, functions=["pattern"], extra_cuda_cflags=["-O3"])
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for shape, sh in (((16, 64, 318, 638), 5), ((16, 64, 256, 766), 2)):
        y = torch.empty(shape, device="cuda")
        print(shape, f"stride_h {sh}: torch fill_ {timed(lambda: y.fill_(0.5)):.4f}", flush=True)
        for blocks, threads in ((sms, 384), (2 * sms, 256), (4 * sms, 256), (8 * sms, 256)):
            row = [f"{blocks}x{threads}"]
            row += [f"{MODES[m]} {timed(lambda: ext.pattern(y, m, 1, sh, blocks, threads)):.4f}" for m in (0, 1)]
            for R in (2, 4, 8):
                for m in (2, 3, 4, 5):
                    if m in (2, 3) and (shape[2] * shape[3] % 4 or R * shape[3] % 4):
                        continue  # float4 rows need 16-byte aligned bands
                    row.append(f"{MODES[m]}/R{R} {timed(lambda: ext.pattern(y, m, R, sh, blocks, threads)):.4f}")
            print("  " + " ".join(row), flush=True)


if __name__ == "__main__":
    main()
