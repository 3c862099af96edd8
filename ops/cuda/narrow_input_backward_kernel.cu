// The backward of a ReLU layer whose input is narrow (1-16 features: DLRM's 13 dense ones) and
// output at most 512 wide, in one pass over its gradient: eager's ReLU backward on the saved output
// (threshold_backward at 0), the bias gradient (the masked gradient's sums over rows), the weight
// gradient (its transpose times the input) and the input gradient (it times the weight). The
// per-layer path ran these as a ReLU-backward pass and two GEMMs, each reading the whole [M, N]
// gradient and padding the 13 columns to 16 by copies (docs/perf/experiments.md, "The narrow-input
// layer's backward in one pass").
#include "ops/fused_ops.h"
#include "ops/cuda/kernel_launch.h"
#include "ops/cuda/mma_primitives.cuh"
#include "ops/cuda/partial_sums.cuh"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <array>
#include <cstdint>

namespace hypatia::ops {
namespace {

constexpr int kThreads = 256;  // 8 warps
constexpr int kRows = 32;      // rows of a block, staged in shared memory
constexpr int kInputs = 16;    // the input width, zero-padded: two n8 tiles of the MMAs
// Shared-memory rows of x and w: 48 bytes apart, so that ldmatrix's 8 rows fall in distinct banks
// (as the gradient's rows, kN + 8 elements apart).
constexpr int kPitch = kInputs + 8;

struct Params {
  const void* grad;      // [rows, n] dense: the gradient w.r.t. the ReLU's output
  const void* relu_out;  // [rows, n] dense
  const void* x;         // [rows, k], strides x_row, x_col
  const void* w;         // [n, k], strides w_row, w_col
  void* grad_input;      // [rows, k] dense, or null
  float* partials;       // [gridDim.x][stride]: each CTA's weight-gradient sums [n, k], then its bias sums [n]
  int64_t rows, x_row, x_col, w_row, w_col, stride;
  int n, k;
  bool weight_grad, bias_grad;
};

// kMTiles * 128: n padded. Each CTA walks row blocks gridDim.x apart through two slots of shared
// memory, each a block's gradient and saved output: a block's copies (cp.async) are issued when the
// block two before it is done with its slot, so they land while the previous block is worked on, and
// each thread masks the chunks it copied. Then the 8 warps each add a 16 kMTiles-row slice of
// grad.T @ [x, 1] to their registers (the column of ones gives the bias gradient; summed over all of
// the CTA's rows, written to `partials` at the end), and warps 0-3 compute a 16 x 8 tile of grad @ w.
template <typename T, int kMTiles>
__global__ void __launch_bounds__(kThreads, 1) narrow_input_backward_kernel(const __grid_constant__ Params p) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // bf16 mma and cp.async need sm_80; the host never launches below
  constexpr int kN = kMTiles * 128, kRowPitch = kN + 8;
  constexpr int kChunks = kN / 8;              // 16-byte chunks of a gradient row
  constexpr int kGroups = kThreads / kChunks;  // gradient rows a pass of the CTA copies
  constexpr int kPasses = kRows / kGroups;
  constexpr int kXPerThread = kRows * kInputs / kThreads;
  constexpr int kSlot = 2 * kRows * kRowPitch;
  extern __shared__ __align__(16) unsigned char smem[];
  // Two slots, each [kRows][kRowPitch] of the gradient (masked in place), then as much of the saved output.
  T* const slots = reinterpret_cast<T*>(smem);
  T* xs = slots + 2 * kSlot;   // [kRows][kPitch]
  T* ws = xs + kRows * kPitch;  // [kN][kPitch]
  const T* grad = static_cast<const T*>(p.grad);
  const T* relu_out = static_cast<const T*>(p.relu_out);
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int li = lane / 8, lj = lane % 8;  // ldmatrix: the matrix whose row address this lane gives, and the row
  const int chunk = tid % kChunks, group = tid / kChunks;
  const bool chunk_in = chunk * 8 < p.n;
  const int64_t blocks = (p.rows + kRows - 1) / kRows;

  // This thread's chunks of block b's gradient and saved output into `slot`, as one commit group (an
  // empty one past the last block, so that every block is the same number of groups back); zeros
  // past the rows and columns.
  auto copy_block = [&](T* slot, int64_t b) {
    if (b < blocks) {
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const int r = pass * kGroups + group;
        const int64_t row = b * kRows + r;
        const bool in = chunk_in && row < p.rows;
        const int64_t at = in ? row * p.n + chunk * 8 : 0;
        cp_async16(slot + r * kRowPitch + chunk * 8, grad + at, in);
        cp_async16(slot + (kRows + r) * kRowPitch + chunk * 8, relu_out + at, in);
      }
    }
    cp_async_commit();
  };
  // Block b's inputs, this thread's share: element tid + i kThreads of the [kRows][kInputs] tile.
  auto load_x = [&](T (&regs)[kXPerThread], int64_t b) {
#pragma unroll
    for (int i = 0; i < kXPerThread; ++i) {
      const int e = tid + i * kThreads, r = e / kInputs, c = e % kInputs;
      const int64_t row = b * kRows + r;
      regs[i] = row < p.rows && c < p.k ? x[row * p.x_row + c * p.x_col] : T(0.f);
    }
  };

  T x_regs[kXPerThread];
  copy_block(slots, blockIdx.x);
  copy_block(slots + kSlot, blockIdx.x + int64_t(gridDim.x));
  load_x(x_regs, blockIdx.x);
  for (int e = tid; e < kN * kInputs; e += kThreads) {  // zeros past n rows and k columns
    const int r = e / kInputs, c = e % kInputs;
    ws[r * kPitch + c] = r < p.n && c < p.k ? w[r * p.w_row + c * p.w_col] : T(0.f);
  }
  float wsums[kMTiles][2][4] = {};
  float bsums[kMTiles][4] = {};  // every column of a tile holds its rows' sums
  const uint32_t ones = pack2(1.f, 1.f, T());
  for (int64_t b = blockIdx.x, visit = 0; b < blocks; b += gridDim.x, ++visit) {
    const int64_t next = b + gridDim.x;
    T* const gm = slots + (visit % 2) * kSlot;  // this block's gradient
    const T* const hs = gm + kRows * kRowPitch;  // and saved output
    cp_async_wait<1>();  // this block's group; the next block's may still land
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int r = pass * kGroups + group;
      uint4* gp = reinterpret_cast<uint4*>(gm + r * kRowPitch + chunk * 8);
      const uint4 hv = *reinterpret_cast<const uint4*>(hs + r * kRowPitch + chunk * 8);
      uint4 gv = *gp;
      uint32_t* gw = reinterpret_cast<uint32_t*>(&gv);
      const uint32_t* hw = reinterpret_cast<const uint32_t*>(&hv);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        gw[q] &= above_zero_or_nan2(hw[q], T());  // 0 where eager's ReLU backward writes 0, else grad's own bits
      }
      *gp = gv;
    }
#pragma unroll
    for (int i = 0; i < kXPerThread; ++i) {
      const int e = tid + i * kThreads;
      xs[(e / kInputs) * kPitch + e % kInputs] = x_regs[i];
    }
    __syncthreads();  // gm (masked) and xs hold block b
    if (next < blocks) {
      load_x(x_regs, next);
    }

    if (p.grad_input != nullptr && warp < 4) {  // rows 16 (warp % 2).., columns 8 (warp / 2).. of grad @ w
      const int mt = warp % 2, nt = warp / 2;
      float acc[2][4] = {};  // even and odd k16 steps: two chains of dependent MMAs, not one
#pragma unroll 4
      for (int kb = 0; kb < kN; kb += 32) {
        uint32_t a0[4], a1[4], bw[4];
        const T* a_row = gm + (mt * 16 + lj + (li & 1) * 8) * kRowPitch + kb + (li >> 1) * 8;
        ldmatrix_x4(a0, a_row);
        ldmatrix_x4(a1, a_row + 16);
        ldmatrix_x4_trans(bw, ws + (kb + li * 8 + lj) * kPitch + nt * 8);
        mma(acc[0], a0, bw[0], bw[1], acc[0], T());
        mma(acc[1], a1, bw[2], bw[3], acc[1], T());
      }
      T* out = static_cast<T*>(p.grad_input);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t row = b * kRows + mt * 16 + g + (q >= 2 ? 8 : 0);
        const int col = nt * 8 + 2 * t + (q & 1);
        if (row < p.rows && col < p.k) {
          store_rounded(out + row * p.k + col, acc[0][q] + acc[1][q]);
        }
      }
    }
    if (p.weight_grad || p.bias_grad) {  // grad.T @ [x, 1]: rows (outputs) 16 kMTiles warp.., over this block's rows
#pragma unroll
      for (int kb = 0; kb < kRows; kb += 16) {
        uint32_t bx[4];
        ldmatrix_x4_trans(bx, xs + (kb + lj + (li & 1) * 8) * kPitch + (li >> 1) * 8);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          uint32_t a[4];  // grad.T's 16 x 16 tile: gm read transposed
          ldmatrix_x4_trans(a, gm + (kb + lj + (li >> 1) * 8) * kRowPitch + (warp * kMTiles + mt) * 16 + (li & 1) * 8);
          mma(wsums[mt][0], a, bx[0], bx[1], wsums[mt][0], T());
          mma(wsums[mt][1], a, bx[2], bx[3], wsums[mt][1], T());
          if (p.bias_grad) {
            mma(bsums[mt], a, ones, ones, bsums[mt], T());
          }
        }
      }
    }
    __syncthreads();  // the MMAs are done with gm's slot and xs
    copy_block(gm, next + gridDim.x);
  }

  float* partials = p.partials + int64_t(blockIdx.x) * p.stride;
  if (p.weight_grad) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int row = (warp * kMTiles + mt) * 16 + g + (q >= 2 ? 8 : 0), col = nt * 8 + 2 * t + (q & 1);
          if (row < p.n && col < p.k) {
            partials[row * p.k + col] = wsums[mt][nt][q];
          }
        }
      }
    }
  }
  if (p.bias_grad && t == 0) {
    float* bias_partials = partials + (p.weight_grad ? p.n * p.k : 0);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      const int row = (warp * kMTiles + mt) * 16 + g;
      if (row < p.n) {
        bias_partials[row] = bsums[mt][0];
      }
      if (row + 8 < p.n) {
        bias_partials[row + 8] = bsums[mt][2];
      }
    }
  }
#endif
}

int m_tiles_for(int64_t n) {
  return n <= 128 ? 1 : n <= 256 ? 2 : 4;
}

size_t smem_bytes(int m_tiles) {  // 16-bit elements: two slots of a gradient and a saved output block, x, w
  const int n = m_tiles * 128;
  return 2 * size_t(4 * kRows * (n + 8) + kRows * kPitch + n * kPitch);
}

using Kernel = void (*)(Params);

template <typename T>
Kernel kernel_for(int m_tiles) {
  return m_tiles == 1 ? narrow_input_backward_kernel<T, 1>
      : m_tiles == 2  ? narrow_input_backward_kernel<T, 2>
                      : narrow_input_backward_kernel<T, 4>;
}

Kernel kernel_for(at::ScalarType dtype, int m_tiles) {
  return dtype == at::kHalf ? kernel_for<__half>(m_tiles) : kernel_for<__nv_bfloat16>(m_tiles);
}

// HYPATIA_NARROW_INPUT_BACKWARD: "0" never; otherwise wherever the kernel applies. Read once.
EnvSwitch narrow_input_policy() {
  static const EnvSwitch policy = env_switch("HYPATIA_NARROW_INPUT_BACKWARD");
  return policy;
}

}  // namespace

bool narrow_input_backward_applies(const at::Tensor& relu_out2d, const at::Tensor& input2d, const at::Tensor& w) {
  const auto dtype = relu_out2d.scalar_type();
  const int64_t n = w.size(0), k = w.size(1);
  if (narrow_input_policy() == EnvSwitch::kOff || !relu_out2d.is_cuda() || (dtype != at::kHalf && dtype != at::kBFloat16) ||
      input2d.scalar_type() != dtype || w.scalar_type() != dtype || k < 1 || k > kInputs || n < 1 || n > 4 * 128 ||
      n % 8 != 0 || relu_out2d.size(0) == 0 || !dense(relu_out2d)) {
    return false;
  }
  const int device = relu_out2d.get_device();
  const int m_tiles = m_tiles_for(n);
  return at::cuda::getDeviceProperties(device)->major >= 8 &&
      blocks_per_sm(reinterpret_cast<const void*>(kernel_for(dtype, m_tiles)), kThreads, device, smem_bytes(m_tiles)) > 0;
}

std::array<at::Tensor, 3> narrow_input_backward_cuda(
    const at::Tensor& grad2d, const at::Tensor& relu_out2d, const at::Tensor& input2d, const at::Tensor& w,
    bool weight_grad, bool bias_grad, bool input_grad) {
  TORCH_INTERNAL_ASSERT(dense(grad2d) && grad2d.sizes() == relu_out2d.sizes());
  const c10::cuda::CUDAGuard device_guard(grad2d.device());
  const int64_t rows = grad2d.size(0);
  const int n = static_cast<int>(w.size(0)), k = static_cast<int>(w.size(1));
  const at::TensorOptions options = grad2d.options();
  at::Tensor grad_input = input_grad ? at::empty({rows, k}, options) : at::Tensor();
  at::Tensor grad_weight = weight_grad ? at::empty({n, k}, options) : at::Tensor();
  at::Tensor grad_bias = bias_grad ? at::empty({n}, options) : at::Tensor();
  Params p{};
  p.grad = grad2d.const_data_ptr();
  p.relu_out = relu_out2d.const_data_ptr();
  p.x = input2d.const_data_ptr();
  p.w = w.const_data_ptr();
  p.grad_input = input_grad ? grad_input.mutable_data_ptr() : nullptr;
  p.rows = rows;
  p.x_row = input2d.stride(0);
  p.x_col = input2d.stride(1);
  p.w_row = w.stride(0);
  p.w_col = w.stride(1);
  p.n = n;
  p.k = k;
  p.weight_grad = weight_grad;
  p.bias_grad = bias_grad;
  const int64_t weight_sums = weight_grad ? int64_t(n) * k : 0;
  p.stride = weight_sums + (bias_grad ? n : 0);
  const int device = grad2d.get_device();
  const int m_tiles = m_tiles_for(n);
  const size_t smem = smem_bytes(m_tiles);
  const Kernel kernel = kernel_for(grad2d.scalar_type(), m_tiles);
  const int per_sm = blocks_per_sm(reinterpret_cast<const void*>(kernel), kThreads, device, smem);
  const int64_t ctas = std::min<int64_t>(
      (rows + kRows - 1) / kRows, int64_t(per_sm) * at::cuda::getDeviceProperties(device)->multiProcessorCount);
  at::Tensor partials;  // each CTA's sums, added up in a fixed order by add_partials
  if (p.stride > 0) {
    partials = at::empty({ctas, p.stride}, options.dtype(at::kFloat));
    p.partials = partials.mutable_data_ptr<float>();
  }
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(device);
  kernel<<<static_cast<unsigned>(ctas), kThreads, smem, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  auto add_partials = [&](auto tag) {
    using T = decltype(tag);
    if (weight_grad) {
      partial_sums::add_partials(p.partials, p.stride, static_cast<T*>(grad_weight.mutable_data_ptr()), ctas,
                                 weight_sums, stream);
    }
    if (bias_grad) {
      partial_sums::add_partials(p.partials + weight_sums, p.stride, static_cast<T*>(grad_bias.mutable_data_ptr()),
                                 ctas, int64_t(n), stream);
    }
  };
  if (grad2d.scalar_type() == at::kHalf) {
    add_partials(__half());
  } else {
    add_partials(__nv_bfloat16());
  }
  return {grad_weight, grad_bias, grad_input};
}

}  // namespace hypatia::ops
