// A vLLM-shaped SiluAndMul, compiled into a shared library that gpuobs patches
// without its source: one block of 1,024 threads per token, bf16, 16-byte vectors.
// out[t, i] = silu(x[t, i]) * x[t, d + i]
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

__device__ __forceinline__ float silu(float v) { return v / (1.0f + __expf(-v)); }

__global__ void silu_and_mul_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ in, int d) {
    const int64_t token = blockIdx.x;
    const int vectors = d / 8;  // 8 bf16 = 16 bytes
    const uint4* x = reinterpret_cast<const uint4*>(in + token * 2 * d);
    const uint4* y = reinterpret_cast<const uint4*>(in + token * 2 * d + d);
    uint4* o = reinterpret_cast<uint4*>(out + token * d);
    for (int i = threadIdx.x; i < vectors; i += blockDim.x) {
        uint4 xv = x[i], yv = y[i], ov;
        const __nv_bfloat16* xs = reinterpret_cast<const __nv_bfloat16*>(&xv);
        const __nv_bfloat16* ys = reinterpret_cast<const __nv_bfloat16*>(&yv);
        __nv_bfloat16* os = reinterpret_cast<__nv_bfloat16*>(&ov);
#pragma unroll
        for (int k = 0; k < 8; ++k) os[k] = __float2bfloat16(silu(__bfloat162float(xs[k])) * __bfloat162float(ys[k]));
        o[i] = ov;
    }
}

}  // namespace

extern "C" int silu_and_mul(void* out, const void* in, int tokens, int d, void* stream) {
    if (d % 8 != 0) return -1;
    silu_and_mul_kernel<<<tokens, 1024, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(in), d);
    return (int)cudaGetLastError();
}

__global__ void empty_kernel() {}

// n back-to-back launches of an empty kernel: the host cost of one launch.
extern "C" int launch_empty(int n, void* stream) {
    for (int i = 0; i < n; ++i) empty_kernel<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>();
    return (int)cudaGetLastError();
}
