// fused_mlp for narrow layers (every width a multiple of 16, at most 128; half or bfloat16): the
// forward as ONE kernel, the backward as one too where every layer's fp32 weight-gradient sums fit
// in shared memory beside the weights (else the layers that do not fit go to a second kernel; the
// two run over the rows in chunks where the gradients handed between them would outgrow one layer's
// output).
// Every forward and backward CTA copies all layers' weights into shared memory once; each warp then
// walks tiles of 16 * kMT rows and keeps a tile's activations in registers from layer to layer: the
// fp32 accumulator fragment of mma.m16n8k16, rounded to the storage dtype as eager rounds each
// layer's output, is exactly the A fragment of the next layer's mma. So the forward reads the input
// once and writes the output once (and, in training, each hidden output, which the backward needs);
// the backward reads grad_out, the input and the saved outputs (for the ReLU masks) once, writes
// grad_input, and sums the weight and bias gradients on chip.
#include "ops/fused_ops.h"
#include "ops/cuda/kernel_launch.h"
#include "ops/cuda/mma_primitives.cuh"

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace hypatia::ops {
namespace {

constexpr int kMaxLayers = 16;
constexpr int kMaxWidth = 128;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
// Elements added to each shared-memory row: rows then start 16 bytes apart modulo 128, so the 8
// rows that one ldmatrix reads, and the 8 rows a warp's fragment stores touch, hit different banks.
constexpr int kPad = 8;

// What both kernels read of the layers: widths and weights ([width[l+1], width[l]] row-major), and
// where each weight sits in shared memory ([width[l+1], width[l] + kPad]).
struct Layers {
  int count;
  int width[kMaxLayers + 1];
  const void* weight[kMaxLayers];
  int weight_offset[kMaxLayers];  // bytes
};

struct ForwardParams {
  Layers layers;
  const void* x;                // [rows, width[0]]
  void* out[kMaxLayers];        // layer l's output [rows, width[l+1]], or nullptr where not kept
  const void* bias[kMaxLayers]; // [width[l+1]] or nullptr
  int bias_offset[kMaxLayers];  // bytes: the biases as floats (zeros for None) in shared memory
  int warp_offset;              // bytes: the per-warp tile buffer of 16 * kMT rows starts here
  int warp_bytes;
  int act_stride;               // elements per tile-buffer row: widest layer + kPad
  unsigned relu_mask;           // bit l: ReLU after layer l
  int64_t rows;
  int64_t tiles;                // ceil(rows / (16 * kMT))
};

struct BackwardParams {
  Layers layers;
  const void* grad_out;           // [rows, width[count]]
  const void* x;                  // [rows, width[0]]: read where layer 0's weight gradient is summed here
  const void* out[kMaxLayers];    // saved output of layer l (after its ReLU) where bit l of relu_mask is set
  void* grad_pre[kMaxLayers];     // written for the wgrad kernel: the gradient w.r.t. layer l's output before its ReLU, or nullptr
  void* grad_input;               // written: [rows, width[0]], or nullptr
  float* bias_grad;               // the CTAs' sums (fp32, bias_grad_floats of them, then a done-counter; zeroed by the host)
  void* bias_grad_out[kMaxLayers];   // layer l's bias gradient in the storage dtype (written by the last CTA), or nullptr
  int bias_grad_offset[kMaxLayers];  // floats into bias_grad (and the CTA's shared sums) for layer l, or -1
  int bias_grad_floats;
  int bias_sum_offset;            // bytes: the CTA's fp32 bias sums in shared memory
  // Weight gradients summed here: layer l's CTA sums (fp32, [tile][lane][4], N * K floats) start
  // wgrad_smem_offset[l] floats into the shared ones at wgrad_sum_offset (bytes), or -1 where the
  // wgrad kernel computes it; the CTAs add them into wgrad_sums + wgrad_global_offset[l] ([N, K],
  // zeroed by the host), and the last CTA rounds them into wgrad_out[l].
  int wgrad_smem_offset[kMaxLayers];
  int wgrad_floats;
  int wgrad_sum_offset;
  float* wgrad_sums;
  int wgrad_global_offset[kMaxLayers];
  void* wgrad_out[kMaxLayers];
  int warp_offset;                // bytes: each warp's two tile buffers (loads, then stores) start here
  int warp_bytes;
  int act_stride;                 // elements per tile-buffer row: widest layer + kPad
  unsigned relu_mask;
  int64_t rows;
  int64_t tiles;
  bool finalize;                  // the last launch over the rows: its last CTA rounds the sums
};

// The weight gradients that the backward kernel does not sum, dW_l = G_l.T @ H_l over all rows, in
// one launch: CTA (layer[i], chunk) sums its chunk of rows, the CTAs of a layer add their sums
// (fp32) up, and the last of them rounds the total into the storage dtype.
struct WgradParams {
  int width[kMaxLayers + 1];
  int layer[kMaxLayers];         // the layers of this launch: blockIdx.x = i * chunks + chunk
  const void* g[kMaxLayers];     // [rows, width[l+1]]: the gradient w.r.t. layer l's output before its ReLU
  const void* h[kMaxLayers];     // [rows, width[l]]: layer l's input
  float* sums;                   // fp32 [total], then one done-counter per layer; zeroed by the host
  int offset[kMaxLayers];        // floats: layer l's [width[l+1], width[l]] block of sums
  int total;
  void* out[kMaxLayers];         // layer l's weight gradient [width[l+1], width[l]] in the storage dtype
  int chunks;                    // CTAs per layer
  int64_t rows;
  int64_t rows_per_chunk;        // a multiple of kWgradRows
  bool finalize;                 // the last launch over the rows: each layer's last CTA rounds its sums
  int stage_bytes;               // one pipeline stage in shared memory: the G rows, then the H rows
};

// ----------------------------------------------------------------------------------------- device

// One 16x8 tile (mb, nt) of a weight gradient dW = G.T @ H [N, K] over 16 rows: this lane's
// ldmatrix row addresses, as byte offsets from the first of the 16 G rows (stride g_stride
// elements) and the first of the 16 H rows (h_stride). A = G.T: transposed 8x8 blocks (rows 0-7,
// 8-15) x (columns 16 mb.., 16 mb + 8..) of G; B = H: transposed blocks (rows 0-7, 8-15) x
// (columns 8 nt..) of H.
struct WgradLane {
  unsigned a, b;
};
template <typename T>
__device__ __forceinline__ WgradLane wgrad_lane(int mb, int nt, int g_stride, int h_stride, int lane) {
  return {static_cast<unsigned>((((lane % 8) + (lane / 16) * 8) * g_stride + mb * 16 + ((lane / 8) % 2) * 8) * sizeof(T)),
          static_cast<unsigned>(((lane % 16) * h_stride + nt * 8) * sizeof(T))};
}

// acc += G.T @ H over 16 rows for one tile; g_rows and h_rows are shared-memory addresses.
template <typename T>
__device__ __forceinline__ void wgrad_mma(float (&acc)[4], unsigned g_rows, unsigned h_rows, WgradLane at) {
  uint32_t a[4], b[2];
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(g_rows + at.a));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(b[0]), "=r"(b[1])
               : "r"(h_rows + at.b));
  mma(acc, a, b[0], b[1], acc, T());
}

// Adds a tile (mb, nt) in accumulator layout (rows g and g + 8, columns 2t, 2t + 1) into the fp32
// sums [*, K] in global memory.
__device__ __forceinline__ void add_tile_to_sums(float* sums, int K, int mb, int nt, const float (&acc)[4], int lane) {
  const int g = lane / 4, t = lane % 4;
#if __CUDA_ARCH__ >= 900
  // One 16-byte atomic per lane instead of four: lanes t and t ^ 1 swap halves, so that even t
  // holds row g and odd t row g + 8, each at columns 4 (t / 2) .. + 3.
  const bool even = t % 2 == 0;
  const float got0 = __shfl_xor_sync(0xffffffffu, even ? acc[2] : acc[0], 1);
  const float got1 = __shfl_xor_sync(0xffffffffu, even ? acc[3] : acc[1], 1);
  const float4 v = even ? make_float4(acc[0], acc[1], got0, got1) : make_float4(got0, got1, acc[2], acc[3]);
  atomicAdd(reinterpret_cast<float4*>(sums + (mb * 16 + g + (even ? 0 : 8)) * K + nt * 8 + 4 * (t / 2)), v);
#else
  float* at = sums + (mb * 16 + g) * K + nt * 8 + 2 * t;
  atomicAdd(at, acc[0]);
  atomicAdd(at + 1, acc[1]);
  atomicAdd(at + 8 * K, acc[2]);
  atomicAdd(at + 8 * K + 1, acc[3]);
#endif
}

// A warp's tile: kMT blocks of 16 rows, up to kW columns, as mma A fragments: a[mt][kb] holds
// rows 16 mt + {g, g + 8}, columns 16 kb + {2t, 2t + 1, 2t + 8, 2t + 9}.
template <int kW, int kMT>
using Frags = uint32_t[kMT][kW / 16][4];

// Every layer's weight into shared memory, [N, K + kPad] rows; by the whole CTA.
__device__ __forceinline__ void load_weights(unsigned char* smem, const Layers& layers, int element_size) {
  for (int l = 0; l < layers.count; ++l) {
    const int K = layers.width[l], N = layers.width[l + 1];
    const int chunks_per_row = K * element_size / 16;
    unsigned char* w = smem + layers.weight_offset[l];
    const uint4* gw = static_cast<const uint4*>(layers.weight[l]);
    for (int c = threadIdx.x; c < N * chunks_per_row; c += kThreads) {
      const int n = c / chunks_per_row, chunk = c % chunks_per_row;
      *reinterpret_cast<uint4*>(w + (n * (K + kPad)) * element_size + chunk * 16) = __ldg(gw + c);
    }
  }
}

// Rows [row0, row0 + rows_per_tile) of x [rows, k0] into dst [rows_per_tile, stride] in shared
// memory with cp.async, 16 bytes per copy, one commit group per call; rows past the end are zero.
template <typename T>
__device__ __forceinline__ void issue_tile_load(
    T* dst, int stride, const T* __restrict__ x, int64_t rows, int k0, int64_t row0, int rows_per_tile, int lane) {
  const int chunks_per_row = k0 / 8;
  for (int c = lane; c < rows_per_tile * chunks_per_row; c += 32) {
    const int r = c / chunks_per_row, col = (c % chunks_per_row) * 8;
    const int64_t row = row0 + r;
    const bool in_range = row < rows;
    cp_async16(dst + r * stride + col, in_range ? x + row * k0 + col : x, in_range);
  }
}

// The A fragments of columns [0, K) of a tile in shared memory ([16 kMT, stride] row-major).
template <typename T, int kW, int kMT>
__device__ __forceinline__ void tile_to_frags(Frags<kW, kMT>& a, const T* tile, int stride, int K, int lane) {
  // Lanes 0-15 address rows 0-15 at column 0 of the 16-column block, lanes 16-31 the same rows at
  // column 8: matrices (rows 0-7, 8-15) x (columns 0-7, 8-15) in the order of a's registers.
  const T* base = tile + (lane % 16) * stride + (lane / 16) * 8;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int kb = 0; kb < kW / 16; ++kb) {
      if (kb < K / 16) {
        ldmatrix_x4(a[mt][kb], base + mt * 16 * stride + kb * 16);
      }
    }
  }
}

// a <- act(a @ w.T + bias) over N output columns, rounded to T: one layer of the forward. The
// bias is the accumulators' initial value (the fp32 sum is rounded once, as in eager's epilogue).
// w is [N, ldw] in shared memory (non-transposed ldmatrix of its rows gives B = w.T's fragments).
template <typename T, int kW, int kMT>
__device__ __forceinline__ void forward_layer(
    Frags<kW, kMT>& a, const T* w, int ldw, const float* bias, int K, int N, bool apply_relu, int lane) {
  constexpr int kNT = kW / 8, kKB = kW / 16;
  float acc[kMT][kNT][4];
  // Matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) of a 16x16 block
  // of w: the b registers of n-tiles 2np and 2np + 1.
  const T* b_base = w + ((lane % 8) + (lane / 16) * 8) * ldw + ((lane / 8) % 2) * 8;
#pragma unroll
  for (int kb = 0; kb < kKB; ++kb) {
    if (kb < K / 16) {
#pragma unroll
      for (int np = 0; np < kKB; ++np) {
        if (np < N / 16) {
          uint32_t b[4];
          ldmatrix_x4(b, b_base + np * 16 * ldw + kb * 16);
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int nt = 2 * np + half;
            float init[4];
            if (kb == 0) {
              const float2 bv = *reinterpret_cast<const float2*>(bias + nt * 8 + 2 * (lane % 4));
              init[0] = init[2] = bv.x;
              init[1] = init[3] = bv.y;
            }
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
              mma(acc[mt][nt], a[mt][kb], b[2 * half], b[2 * half + 1], kb == 0 ? init : acc[mt][nt], T());
            }
          }
        }
      }
    }
  }
  // Accumulator n-tiles 2j and 2j + 1 are the A fragment of column block j of the next layer.
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    if (nt < N / 8) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        uint32_t lo = pack2(acc[mt][nt][0], acc[mt][nt][1], T()), hi = pack2(acc[mt][nt][2], acc[mt][nt][3], T());
        if (apply_relu) {
          lo = relu2(lo, T());
          hi = relu2(hi, T());
        }
        a[mt][nt / 2][(nt % 2) * 2] = lo;
        a[mt][nt / 2][(nt % 2) * 2 + 1] = hi;
      }
    }
  }
}

// Columns [0, N) of the tile in `a` to the warp's shared-memory tile `stage` ([16 kMT, stride]).
template <typename T, int kW, int kMT>
__device__ __forceinline__ void frags_to_tile(const Frags<kW, kMT>& a, T* stage, int stride, int N, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int kb = 0; kb < kW / 16; ++kb) {
      if (kb < N / 16) {
        T* p = stage + (mt * 16 + g) * stride + kb * 16 + 2 * t;
        *reinterpret_cast<uint32_t*>(p) = a[mt][kb][0];
        *reinterpret_cast<uint32_t*>(p + 8 * stride) = a[mt][kb][1];
        *reinterpret_cast<uint32_t*>(p + 8) = a[mt][kb][2];
        *reinterpret_cast<uint32_t*>(p + 8 * stride + 8) = a[mt][kb][3];
      }
    }
  }
}

// Columns [0, N) of the tile in `a` to rows [row0, row0 + 16 kMT) of dst [rows, N], through the
// warp's shared-memory tile `stage` so that global stores are 16 bytes wide and coalesced.
template <typename T, int kW, int kMT>
__device__ __forceinline__ void store_tile(
    const Frags<kW, kMT>& a, T* stage, int stride, T* __restrict__ dst, int N, int64_t row0, int64_t rows,
    bool streaming, int lane) {
  __syncwarp();  // every lane is done reading `stage` (the tile's input) before it is overwritten
  frags_to_tile<T, kW, kMT>(a, stage, stride, N, lane);
  __syncwarp();
  const int chunks_per_row = N / 8;
  for (int c = lane; c < 16 * kMT * chunks_per_row; c += 32) {
    const int r = c / chunks_per_row, col = (c % chunks_per_row) * 8;
    const int64_t row = row0 + r;
    if (row < rows) {
      const uint4 v = *reinterpret_cast<const uint4*>(stage + r * stride + col);
      uint4* to = reinterpret_cast<uint4*>(dst + row * N + col);
      if (streaming) {
        __stcs(to, v);
      } else {
        *to = v;
      }
    }
  }
  __syncwarp();  // `stage` is free again
}

// kUniform: every layer is kW wide. The widths are then compile-time constants: the fragment loops
// run unpredicated, and the compiler interleaves their shared-memory loads with the mmas (the
// H100's kernel times: docs/perf/experiments.md#narrow-kernels-with-compile-time-widths).
template <typename T, int kW, int kMT, bool kUniform>
__global__ void __launch_bounds__(kThreads) narrow_mlp_forward_kernel(const __grid_constant__ ForwardParams p) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // bf16 mma and cp.async need sm_80; the host never launches below
  constexpr int kRows = 16 * kMT;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // The warp's tile buffer: the input tile lands here, then it stages each output for the stores.
  // One per warp (not two, prefetching) leaves room for twice the warps, which hide the loads better.
  T* const act = reinterpret_cast<T*>(smem + p.warp_offset + warp * p.warp_bytes);
  const T* x = static_cast<const T*>(p.x);
  const int L = p.layers.count;
  auto wid = [&](int l) { return kUniform ? kW : p.layers.width[l]; };
  const int k0 = wid(0);
  const int64_t tile_step = int64_t(gridDim.x) * kWarps;
  int64_t tile = int64_t(blockIdx.x) * kWarps + warp;

  // The first tile's copies overlap the weight copy.
  if (tile < p.tiles) {
    issue_tile_load(act, p.act_stride, x, p.rows, k0, tile * kRows, kRows, lane);
  }
  cp_async_commit();
  load_weights(smem, p.layers, sizeof(T));
  for (int l = 0; l < L; ++l) {
    float* b = reinterpret_cast<float*>(smem + p.bias_offset[l]);
    const T* gb = static_cast<const T*>(p.bias[l]);
    for (int n = threadIdx.x; n < p.layers.width[l + 1]; n += kThreads) {
      b[n] = gb ? to_float(gb[n]) : 0.f;
    }
  }
  __syncthreads();  // the only block-wide barrier: from here on each warp works on its own rows

  for (; tile < p.tiles; tile += tile_step) {
    cp_async_wait();
    __syncwarp();  // every lane's copies of this tile are visible to the whole warp
    Frags<kW, kMT> a;
    tile_to_frags<T, kW, kMT>(a, act, p.act_stride, k0, lane);
    for (int l = 0; l < L; ++l) {
      const int K = wid(l), N = wid(l + 1);
      forward_layer<T, kW, kMT>(
          a, reinterpret_cast<const T*>(smem + p.layers.weight_offset[l]), K + kPad,
          reinterpret_cast<const float*>(smem + p.bias_offset[l]), K, N, (p.relu_mask >> l) & 1u, lane);
      if (p.out[l] != nullptr) {  // always for the last layer, which ends with `act` free again
        store_tile<T, kW, kMT>(a, act, p.act_stride, static_cast<T*>(p.out[l]), N, tile * kRows, p.rows, l + 1 == L, lane);
      }
    }
    if (tile + tile_step < p.tiles) {
      issue_tile_load(act, p.act_stride, x, p.rows, k0, (tile + tile_step) * kRows, kRows, lane);
    }
    cp_async_commit();
  }
#endif
}

// Eager's ReLU backward (threshold_backward at 0): each gradient in `a` is kept where the saved
// output `h` (the same tile's fragments) is not <= 0, NaN included, and zeroed elsewhere.
template <typename T, int kW, int kMT>
__device__ __forceinline__ void apply_relu_mask(Frags<kW, kMT>& a, const Frags<kW, kMT>& h, int N) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int kb = 0; kb < kW / 16; ++kb) {
      if (kb < N / 16) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 v = unpack2(h[mt][kb][i], T());
          a[mt][kb][i] &= (v.x <= 0.f ? 0u : 0x0000ffffu) | (v.y <= 0.f ? 0u : 0xffff0000u);
        }
      }
    }
  }
}

// Column sums of the tile's N columns (rows past the end are 0), added into sums[0, N) in shared memory.
template <typename T, int kW, int kMT>
__device__ __forceinline__ void accumulate_bias(const Frags<kW, kMT>& a, float* sums, int N, int lane) {
#pragma unroll
  for (int kb = 0; kb < kW / 16; ++kb) {
    if (kb < N / 16) {
      float s[4] = {0.f, 0.f, 0.f, 0.f};  // columns 2t, 2t + 1, 2t + 8, 2t + 9 of the block
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        const float2 r0 = unpack2(a[mt][kb][0], T()), r1 = unpack2(a[mt][kb][1], T());
        const float2 r0h = unpack2(a[mt][kb][2], T()), r1h = unpack2(a[mt][kb][3], T());
        s[0] += r0.x + r1.x;
        s[1] += r0.y + r1.y;
        s[2] += r0h.x + r1h.x;
        s[3] += r0h.y + r1h.y;
      }
#pragma unroll
      for (int offset = 4; offset < 32; offset *= 2) {  // over the 8 row groups g
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          s[i] += __shfl_xor_sync(0xffffffffu, s[i], offset);
        }
      }
      if (lane < 4) {
        float* col = sums + kb * 16 + 2 * lane;
        atomicAdd(col, s[0]);
        atomicAdd(col + 1, s[1]);
        atomicAdd(col + 8, s[2]);
        atomicAdd(col + 9, s[3]);
      }
    }
  }
}

// a <- a @ w over K output columns, rounded to T: the input gradient of one layer (a: [rows, N]
// gradients of its output, w: [N, ldw] in shared memory; transposed ldmatrix gives B = w's fragments).
template <typename T, int kW, int kMT>
__device__ __forceinline__ void dgrad_layer(Frags<kW, kMT>& a, const T* w, int ldw, int K, int N, int lane) {
  constexpr int kNT = kW / 8, kKB = kW / 16;
  float acc[kMT][kNT][4];
  float zero[4] = {0.f, 0.f, 0.f, 0.f};  // not const: the ?: below picks between it and an accumulator
  // Matrices (rows 0-7, columns 0-7), (rows 8-15, columns 0-7), (rows 0-7, columns 8-15),
  // (rows 8-15, columns 8-15) of a 16x16 block of w, transposed: b registers of n-tiles 2np, 2np + 1.
  const T* b_base = w + ((lane % 8) + ((lane / 8) % 2) * 8) * ldw + (lane / 16) * 8;
#pragma unroll
  for (int kb = 0; kb < kKB; ++kb) {
    if (kb < N / 16) {
#pragma unroll
      for (int np = 0; np < kKB; ++np) {
        if (np < K / 16) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, b_base + kb * 16 * ldw + np * 16);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            mma(acc[mt][2 * np], a[mt][kb], b[0], b[1], kb == 0 ? zero : acc[mt][2 * np], T());
            mma(acc[mt][2 * np + 1], a[mt][kb], b[2], b[3], kb == 0 ? zero : acc[mt][2 * np + 1], T());
          }
        }
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    if (nt < K / 8) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        a[mt][nt / 2][(nt % 2) * 2] = pack2(acc[mt][nt][0], acc[mt][nt][1], T());
        a[mt][nt / 2][(nt % 2) * 2 + 1] = pack2(acc[mt][nt][2], acc[mt][nt][3], T());
      }
    }
  }
}

// The backward: per tile, grad_out's rows go back through every layer (mask, dgrad) in registers.
// The gradient that reaches each layer's GEMM is rounded to T and masked exactly where eager's mm
// and threshold_backward round and mask it. Global memory is read and written in 16-byte pieces
// through the warp's two tile buffers: `in` (tiles that cp.async brings, each streaming in during
// the mmas before its use) and `stage` (fragments on their way out). A second load buffer, to load
// further ahead, measured slower on the H100: it costs the 8-layer kernel its second CTA per SM
// (docs/perf/experiments.md#narrow-mlp-weight-gradients-on-chip). The warps of a CTA take kWarps consecutive
// tiles (a chunk) together: a layer's weight gradient is summed over all of them at once, from
// every warp's `stage` (G, the layer's masked output gradient) and `in` (H, its input).
// kUniform as in the forward. Two CTAs per SM where kW is 64: the interleaved loads and mmas of the
// uniform instance would otherwise take more registers than two CTAs can have.
template <typename T, int kW, int kMT, bool kUniform>
__global__ void __launch_bounds__(kThreads, kW == 64 ? 2 : 1) narrow_mlp_backward_kernel(const __grid_constant__ BackwardParams p) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr int kRows = 16 * kMT;
  constexpr int kTilesPerWarp = (kW / 16) * (kW / 8) / kWarps;  // of the widest dW's 16x8 tiles
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T* const in = reinterpret_cast<T*>(smem + p.warp_offset + warp * p.warp_bytes);
  T* const stage = in + kRows * p.act_stride;
  float* bias_sums = reinterpret_cast<float*>(smem + p.bias_sum_offset);
  float* wgrad_sums = reinterpret_cast<float*>(smem + p.wgrad_sum_offset);
  load_weights(smem, p.layers, sizeof(T));
  for (int i = threadIdx.x; i < p.bias_grad_floats; i += kThreads) {
    bias_sums[i] = 0.f;
  }
  for (int i = threadIdx.x; i < p.wgrad_floats; i += kThreads) {
    wgrad_sums[i] = 0.f;
  }
  __syncthreads();

  const int L = p.layers.count;
  const int* width = p.layers.width;
  auto wid = [&](int l) { return kUniform ? kW : width[l]; };
  auto weight = [&](int l) { return reinterpret_cast<const T*>(smem + p.layers.weight_offset[l]); };
  // Rows [row0, row0 + kRows) of src [rows, N] into `in`, once every lane is done with it.
  auto fetch = [&](const void* src, int N, int64_t row0) {
    __syncwarp();
    issue_tile_load(in, p.act_stride, static_cast<const T*>(src), p.rows, N, row0, kRows, lane);
    cp_async_commit();
  };
  auto arrive = [&] {
    cp_async_wait();
    __syncwarp();
  };
  // Layer l's output gradient in `a`, masked already: sum it for the bias gradient, and keep it for
  // the weight gradient (in `stage` where it is summed here, else in grad_pre).
  auto finish_layer = [&](const Frags<kW, kMT>& a, int l, int64_t row0) {
    const int N = wid(l + 1);
    if (p.wgrad_smem_offset[l] >= 0) {
      frags_to_tile<T, kW, kMT>(a, stage, p.act_stride, N, lane);
    } else if (p.grad_pre[l] != nullptr) {
      store_tile<T, kW, kMT>(a, stage, p.act_stride, static_cast<T*>(p.grad_pre[l]), N, row0, p.rows, false, lane);
    }
    if (p.bias_grad_offset[l] >= 0) {
      accumulate_bias<T, kW, kMT>(a, bias_sums + p.bias_grad_offset[l], N, lane);
    }
  };
  // This warp's tiles of dW_l += G.T @ H over the chunk, into the CTA's sums.
  const unsigned buffers = static_cast<unsigned>(__cvta_generic_to_shared(smem + p.warp_offset));
  const unsigned stage_bytes = kRows * p.act_stride * sizeof(T);
  auto sum_weight_grad = [&](int l) {
    const int N = wid(l + 1), K = wid(l), tiles = (N / 16) * (K / 8);
    float4* sums = reinterpret_cast<float4*>(wgrad_sums + p.wgrad_smem_offset[l]);
#pragma unroll
    for (int i = 0; i < kTilesPerWarp; ++i) {
      const int tile = i * kWarps + warp;
      if (tile < tiles) {
        const WgradLane at = wgrad_lane<T>(tile / (K / 8), tile % (K / 8), p.act_stride, p.act_stride, lane);
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            const unsigned rows = buffers + w * p.warp_bytes + mt * 16 * p.act_stride * sizeof(T);
            wgrad_mma<T>(acc, rows + stage_bytes, rows, at);
          }
        }
        float4 v = sums[tile * 32 + lane];  // each tile's sums belong to one warp: no atomics
        sums[tile * 32 + lane] = make_float4(v.x + acc[0], v.y + acc[1], v.z + acc[2], v.w + acc[3]);
      }
    }
  };

  for (int64_t first = int64_t(blockIdx.x) * kWarps; first < p.tiles; first += int64_t(gridDim.x) * kWarps) {
    const int64_t row0 = (first + warp) * kRows;  // past the end for some warps of the last CTA: all zeros
    Frags<kW, kMT> a, h;
    fetch(p.grad_out, wid(L), row0);
    arrive();
    tile_to_frags<T, kW, kMT>(a, in, p.act_stride, wid(L), lane);
    if ((p.relu_mask >> (L - 1)) & 1u) {
      fetch(p.out[L - 1], wid(L), row0);
      arrive();
      tile_to_frags<T, kW, kMT>(h, in, p.act_stride, wid(L), lane);
      apply_relu_mask<T, kW, kMT>(a, h, wid(L));
    }
    for (int l = L - 1;; --l) {
      // `a` holds layer l's output gradient, masked.
      const bool here = p.wgrad_smem_offset[l] >= 0;
      finish_layer(a, l, row0);
      const bool input = l > 0 || here;  // layer l's input tile: the next mask, and H
      if (input) {
        fetch(l > 0 ? p.out[l - 1] : p.x, wid(l), row0);
      }
      if (l > 0 || p.grad_input != nullptr) {
        dgrad_layer<T, kW, kMT>(a, weight(l), wid(l) + kPad, wid(l), wid(l + 1), lane);
      }
      if (input) {
        arrive();
        if (l > 0) {
          tile_to_frags<T, kW, kMT>(h, in, p.act_stride, wid(l), lane);
        }
      }
      if (here) {
        __syncthreads();  // every warp's G and H are in place
        sum_weight_grad(l);
        __syncthreads();  // ... and read: `in` and `stage` may be refilled
      }
      if (l == 0) {
        break;
      }
      apply_relu_mask<T, kW, kMT>(a, h, wid(l));  // a ReLU follows every layer but the last
    }
    if (p.grad_input != nullptr) {
      store_tile<T, kW, kMT>(a, stage, p.act_stride, static_cast<T*>(p.grad_input), wid(0), row0, p.rows, true, lane);
    }
  }

  if (p.bias_grad_floats == 0 && p.wgrad_floats == 0) {
    return;
  }
  // Every CTA adds its sums; in the last launch over the rows, the last CTA to finish rounds the
  // totals into the outputs (so that no further kernel, or op per layer, is needed for them).
  __shared__ bool last;
  __syncthreads();
  for (int i = threadIdx.x; i < p.bias_grad_floats; i += kThreads) {
    atomicAdd(p.bias_grad + i, bias_sums[i]);
  }
  for (int l = 0; l < L; ++l) {
    if (p.wgrad_smem_offset[l] >= 0) {
      const int N = width[l + 1], K = width[l], tiles = (N / 16) * (K / 8);
      const float4* sums = reinterpret_cast<const float4*>(wgrad_sums + p.wgrad_smem_offset[l]);
      for (int tile = warp; tile < tiles; tile += kWarps) {
        const float4 v = sums[tile * 32 + lane];
        const float acc[4] = {v.x, v.y, v.z, v.w};
        add_tile_to_sums(p.wgrad_sums + p.wgrad_global_offset[l], K, tile / (K / 8), tile % (K / 8), acc, lane);
      }
    }
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* done = reinterpret_cast<unsigned*>(p.bias_grad + p.bias_grad_floats);
    last = p.finalize && atomicAdd(done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last) {
    __threadfence();
    for (int l = 0; l < L; ++l) {
      if (p.bias_grad_offset[l] >= 0) {
        for (int i = threadIdx.x; i < width[l + 1]; i += kThreads) {
          store_rounded(static_cast<T*>(p.bias_grad_out[l]) + i, __ldcg(p.bias_grad + p.bias_grad_offset[l] + i));
        }
      }
      if (p.wgrad_smem_offset[l] >= 0) {
        const float* sums = p.wgrad_sums + p.wgrad_global_offset[l];
        for (int i = threadIdx.x; i < width[l + 1] * width[l]; i += kThreads) {
          store_rounded(static_cast<T*>(p.wgrad_out[l]) + i, __ldcg(sums + i));
        }
      }
    }
  }
#endif
}

constexpr int kWgradRows = 128;  // rows per pipeline stage of the wgrad kernel
constexpr int kWgradStages = 3;

// Rows [row0, row0 + kWgradRows) of src [*, cols] (rows >= end read as 0) into dst [kWgradRows, cols + kPad].
template <typename T>
__device__ __forceinline__ void issue_rows_load(T* dst, const T* __restrict__ src, int cols, int64_t row0, int64_t end) {
  const int chunks_per_row = cols / 8;
  for (int c = threadIdx.x; c < kWgradRows * chunks_per_row; c += kThreads) {
    const int r = c / chunks_per_row, col = (c % chunks_per_row) * 8;
    const int64_t row = row0 + r;
    const bool in_range = row < end;
    cp_async16(dst + r * (cols + kPad) + col, in_range ? src + row * cols + col : src, in_range);
  }
}

// kW: the widest layer; each warp holds its share of that dW's 16x8 tiles in registers.
template <typename T, int kW>
__global__ void __launch_bounds__(kThreads) narrow_mlp_wgrad_kernel(const __grid_constant__ WgradParams p) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr int kWgradTilesPerWarp = (kW / 16) * (kW / 8) / kWarps;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int l = p.layer[blockIdx.x / p.chunks], chunk = blockIdx.x % p.chunks;
  const int N = p.width[l + 1], K = p.width[l];
  const int64_t begin = chunk * p.rows_per_chunk, end = min(p.rows, begin + p.rows_per_chunk);
  const T* g = static_cast<const T*>(p.g[l]);
  const T* h = static_cast<const T*>(p.h[l]);
  // A stage: G rows [kWgradRows, N + kPad], then H rows [kWgradRows, K + kPad].
  auto g_rows = [&](int s) { return reinterpret_cast<T*>(smem + s * p.stage_bytes); };
  auto h_rows = [&](int s) { return g_rows(s) + kWgradRows * (N + kPad); };

  // dW's 16x8 tiles, (N / 16) x (K / 8) of them: warp w owns tiles w, w + kWarps, ...
  const int tiles = (N / 16) * (K / 8);
  WgradLane at[kWgradTilesPerWarp];
  float acc[kWgradTilesPerWarp][4];
#pragma unroll
  for (int i = 0; i < kWgradTilesPerWarp; ++i) {
    const int tile = i * kWarps + warp;
    at[i] = wgrad_lane<T>(tile / (K / 8), tile % (K / 8), N + kPad, K + kPad, lane);
    acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  }

  // A ring of kWgradStages stages: stage s + kWgradStages - 1 streams in while stage s is multiplied.
  for (int s = 0; s + 1 < kWgradStages; ++s) {
    const int64_t row0 = begin + s * int64_t(kWgradRows);
    if (row0 < end) {
      issue_rows_load(g_rows(s), g, N, row0, end);
      issue_rows_load(h_rows(s), h, K, row0, end);
    }
    cp_async_commit();
  }
  int s = 0;
  for (int64_t row0 = begin; row0 < end; row0 += kWgradRows, s = (s + 1) % kWgradStages) {
    const int64_t ahead = row0 + (kWgradStages - 1) * int64_t(kWgradRows);
    const int ahead_stage = (s + kWgradStages - 1) % kWgradStages;
    if (ahead < end) {
      issue_rows_load(g_rows(ahead_stage), g, N, ahead, end);
      issue_rows_load(h_rows(ahead_stage), h, K, ahead, end);
    }
    cp_async_commit();
    cp_async_wait<kWgradStages - 1>();
    __syncthreads();
    const unsigned g_base = static_cast<unsigned>(__cvta_generic_to_shared(g_rows(s)));
    const unsigned h_base = static_cast<unsigned>(__cvta_generic_to_shared(h_rows(s)));
#pragma unroll
    for (int kk = 0; kk < kWgradRows; kk += 16) {
#pragma unroll
      for (int i = 0; i < kWgradTilesPerWarp; ++i) {
        if (i * kWarps + warp < tiles) {
          wgrad_mma<T>(acc[i], g_base + kk * (N + kPad) * sizeof(T), h_base + kk * (K + kPad) * sizeof(T), at[i]);
        }
      }
    }
    __syncthreads();  // everyone is done with stage s before it is refilled
  }

  float* sums = p.sums + p.offset[l];
#pragma unroll
  for (int i = 0; i < kWgradTilesPerWarp; ++i) {
    const int tile = i * kWarps + warp;
    if (tile < tiles) {
      add_tile_to_sums(sums, K, tile / (K / 8), tile % (K / 8), acc[i], lane);
    }
  }
  // In the last launch over the rows, the layer's last CTA to finish rounds its total.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* done = reinterpret_cast<unsigned*>(p.sums + p.total) + l;
    last = p.finalize && atomicAdd(done, 1u) == unsigned(p.chunks) - 1;
  }
  __syncthreads();
  if (last) {
    __threadfence();
    for (int i = threadIdx.x; i < N * K; i += kThreads) {
      store_rounded(static_cast<T*>(p.out[l]) + i, __ldcg(sums + i));
    }
  }
#endif
}

// ------------------------------------------------------------------------------------------- host

// Launches `ctas` CTAs, or, when `persistent`, no more than fit on the device at once (each copies
// the weights once); false when the kernel cannot run on this device.
template <typename Params>
bool launch(void (*kernel)(Params), const Params& p, int64_t ctas, bool persistent, size_t smem_bytes, int device,
            cudaStream_t stream) {
  const int fit = blocks_per_sm(reinterpret_cast<const void*>(kernel), kThreads, device, smem_bytes);
  if (fit == 0) {
    return false;
  }
  if (persistent) {
    ctas = std::min<int64_t>(ctas, int64_t(fit) * at::cuda::getDeviceProperties(device)->multiProcessorCount);
  }
  kernel<<<static_cast<unsigned>(ctas), kThreads, smem_bytes, stream>>>(p);
  check_cuda(cudaGetLastError(), "narrow_mlp", "kernel launch");
  return true;
}

// The instances of the forward and backward kernels: kW is the widest layer they hold in
// registers, kMT the 16-row blocks of a warp's tile. The forward takes two where it can (each
// weight fragment read feeds two mmas); the memory-bound backward takes one, for the registers
// that two CTAs per SM need. by_uniform[u]: the instance for layers all kW wide (u) or not.
enum class Width { k64, k128 };
constexpr int forward_mt(Width width) { return width == Width::k64 ? 2 : 1; }

template <typename T, int kW>
struct ForwardKernel {
  static constexpr int kMT = forward_mt(kW == 64 ? Width::k64 : Width::k128);
  static constexpr void (*by_uniform[2])(ForwardParams) = {
      narrow_mlp_forward_kernel<T, kW, kMT, false>, narrow_mlp_forward_kernel<T, kW, kMT, true>};
};
template <typename T, int kW>
struct BackwardKernel {
  static constexpr int kMT = 1;
  static constexpr void (*by_uniform[2])(BackwardParams) = {
      narrow_mlp_backward_kernel<T, kW, kMT, false>, narrow_mlp_backward_kernel<T, kW, kMT, true>};
};

// Whether every width of the layers is the instance's (the widest).
bool uniform_widths(const Layers& layers, Width width) {
  const int kw = width == Width::k64 ? 64 : 128;
  return std::all_of(layers.width, layers.width + layers.count + 1, [kw](int w) { return w == kw; });
}

// Sets p.tiles for the instance's tile height and launches a persistent grid of it.
template <typename Instance, typename Params>
bool launch_tiles(Params p, bool uniform, size_t smem_bytes, int device, cudaStream_t stream) {
  constexpr int rows_per_tile = 16 * Instance::kMT;
  p.tiles = (p.rows + rows_per_tile - 1) / rows_per_tile;
  return launch(
      Instance::by_uniform[uniform], p, (p.tiles + kWarps - 1) / kWarps, /*persistent=*/true, smem_bytes, device,
      stream);
}

template <typename T, int kW>
struct WgradKernel {
  static constexpr void (*fn)(WgradParams) = narrow_mlp_wgrad_kernel<T, kW>;
};

// f(Kernel<T, kW>{}) for the instance of this dtype and width.
template <template <typename, int> class Kernel, typename F>
auto with_instance(at::ScalarType dtype, Width width, const F& f) {
  if (dtype == at::kHalf) {
    return width == Width::k64 ? f(Kernel<__half, 64>{}) : f(Kernel<__half, 128>{});
  }
  return width == Width::k64 ? f(Kernel<__nv_bfloat16, 64>{}) : f(Kernel<__nv_bfloat16, 128>{});
}

template <template <typename, int> class Kernel, typename Params>
bool launch_instance(
    at::ScalarType dtype, Width width, bool uniform, const Params& p, size_t smem_bytes, int device,
    cudaStream_t stream) {
  return with_instance<Kernel>(dtype, width, [&](auto instance) {
    return launch_tiles<decltype(instance)>(p, uniform, smem_bytes, device, stream);
  });
}

// The layers' shapes if the narrow kernels cover them (half/bfloat16 on sm_80+, 1..16 layers,
// every width a multiple of 16 and <= 128, dense 16-byte-aligned weights), with the weights laid
// out from shared-memory offset 0; `end` receives the first byte after them, `widest` the widest
// layer and `width` the instance that holds it.
std::optional<Layers> narrow_layers(
    const at::Tensor& x2d, at::TensorList weights, size_t& end, int& widest, Width& width) {
  const at::ScalarType dtype = x2d.scalar_type();
  const int count = static_cast<int>(weights.size());
  if (count == 0 || count > kMaxLayers || (dtype != at::kHalf && dtype != at::kBFloat16) ||
      at::cuda::getDeviceProperties(x2d.get_device())->major < 8) {
    return std::nullopt;
  }
  Layers layers{};
  layers.count = count;
  widest = 0;
  for (int l = 0; l <= count; ++l) {
    const int64_t w = l == 0 ? x2d.size(1) : weights[l - 1].size(0);
    if (w == 0 || w % 16 != 0 || w > kMaxWidth) {
      return std::nullopt;
    }
    layers.width[l] = static_cast<int>(w);
    widest = std::max(widest, layers.width[l]);
  }
  const size_t elem = x2d.element_size();
  end = 0;
  for (int l = 0; l < count; ++l) {
    const at::Tensor& w = weights[l];
    if (w.scalar_type() != dtype || !dense(w)) {
      return std::nullopt;
    }
    layers.weight[l] = w.data_ptr();
    layers.weight_offset[l] = static_cast<int>(end);
    end += size_t(layers.width[l + 1]) * (layers.width[l] + kPad) * elem;
  }
  width = widest <= 64 ? Width::k64 : Width::k128;
  return layers;
}

// Rows per launch of the backward (and wgrad) kernel. The masked output gradients that the backward
// kernel hands to the wgrad kernel take grad_pre_width elements a row: where that is more than the
// widest layer, the rows go in chunks that keep them near one output of that layer, as eager's
// backward holds a layer's gradients at a time. Chunks are whole grids of the persistent backward
// kernel (wave_rows, a whole number of the wgrad kernel's stages): a chunk a little over one grid
// would leave most SMs idle for its last tiles (262144 x 8 layers of 64 ran 1.5x slower so).
int64_t backward_chunk_rows(int64_t rows, int64_t grad_pre_width, int widest, int64_t wave_rows) {
  if (grad_pre_width <= widest) {
    return rows;
  }
  const int64_t budget_rows = (rows * widest + grad_pre_width - 1) / grad_pre_width;
  const int64_t unit = std::max<int64_t>(wave_rows, kWgradRows);
  return std::min((budget_rows + unit - 1) / unit * unit, rows);
}

// The address of row `row` of a dense 2-D tensor.
void* row_address(const at::Tensor& t, int64_t row) {
  return static_cast<char*>(t.data_ptr()) + row * t.size(1) * t.element_size();
}

}  // namespace

std::optional<std::vector<at::Tensor>> narrow_mlp_forward_cuda(
    const at::Tensor& x2d, at::TensorList weights, const OptionalTensorList& biases, bool relu_last,
    const std::vector<bool>& keep) {
  size_t offset = 0;
  int widest = 0;
  Width width;
  const std::optional<Layers> layers = narrow_layers(x2d, weights, offset, widest, width);
  if (!layers || !dense(x2d)) {
    return std::nullopt;
  }
  ForwardParams p{};
  p.layers = *layers;
  const int count = layers->count;
  for (int l = 0; l < count; ++l) {
    const std::optional<at::Tensor> b = biases.get(l);
    if (b.has_value() && b->defined()) {
      if (b->scalar_type() != x2d.scalar_type() || !b->is_contiguous()) {
        return std::nullopt;
      }
      p.bias[l] = b->data_ptr();
    }
    if (l + 1 < count || relu_last) {
      p.relu_mask |= 1u << l;
    }
  }
  for (int l = 0; l < count; ++l) {
    p.bias_offset[l] = static_cast<int>(offset);
    offset += size_t(layers->width[l + 1]) * sizeof(float);
  }
  const size_t elem = x2d.element_size();
  offset = (offset + 127) / 128 * 128;
  p.act_stride = widest + kPad;
  p.warp_offset = static_cast<int>(offset);
  p.warp_bytes = static_cast<int>(16 * forward_mt(width) * p.act_stride * elem);
  const size_t smem_bytes = offset + size_t(kWarps) * p.warp_bytes;

  const int device = x2d.get_device();
  if (smem_bytes > at::cuda::getDeviceProperties(device)->sharedMemPerBlockOptin) {
    return std::nullopt;
  }
  // Covered: the outputs now (the caching allocator's blocks are 16-byte aligned, as the stores need).
  p.rows = x2d.size(0);
  std::vector<at::Tensor> outputs(count);
  for (int l = 0; l < count; ++l) {
    if (keep[l]) {
      outputs[l] = at::empty({p.rows, layers->width[l + 1]}, x2d.options());
      p.out[l] = outputs[l].data_ptr();
    }
  }
  if (p.rows == 0) {
    return outputs;
  }
  p.x = x2d.data_ptr();
  const c10::cuda::CUDAGuard device_guard(x2d.device());
  if (!launch_instance<ForwardKernel>(
          x2d.scalar_type(), width, uniform_widths(*layers, width), p, smem_bytes, device,
          at::cuda::getCurrentCUDAStream(device))) {
    return std::nullopt;
  }
  return outputs;
}

std::optional<std::vector<at::Tensor>> narrow_mlp_backward_cuda(
    const at::Tensor& grad_out2d, const at::Tensor& input2d, at::TensorList weights, at::TensorList saved_outputs,
    const c10::List<bool>& has_bias, bool relu_last, bool input_grad, bool params_grad) {
  size_t offset = 0;
  int widest = 0;
  Width width;
  const std::optional<Layers> layers = narrow_layers(input2d, weights, offset, widest, width);
  if (!layers || !dense(grad_out2d) || grad_out2d.scalar_type() != input2d.scalar_type() ||
      (params_grad && !dense(input2d))) {
    return std::nullopt;
  }
  const int count = layers->count;
  const int64_t rows = input2d.size(0);
  std::vector<at::Tensor> outputs2d;
  for (const at::Tensor& out : saved_outputs) {
    outputs2d.push_back(as_rows(out));
    if (!dense(outputs2d.back())) {
      return std::nullopt;
    }
  }
  const int device = input2d.get_device();
  const cudaDeviceProp& prop = *at::cuda::getDeviceProperties(device);
  const size_t elem = input2d.element_size();
  const at::TensorOptions options = input2d.options();

  BackwardParams p{};
  p.layers = *layers;
  for (int l = 0; l < count; ++l) {
    p.bias_grad_offset[l] = -1;
    p.wgrad_smem_offset[l] = -1;
    if (l + 1 < count || relu_last) {
      p.relu_mask |= 1u << l;
      p.out[l] = outputs2d[l].data_ptr();
    }
    if (params_grad && has_bias.get(l)) {
      p.bias_grad_offset[l] = p.bias_grad_floats;
      p.bias_grad_floats += layers->width[l + 1];
    }
  }
  // Shared memory of the backward kernel: weights, bias sums, weight-gradient sums, then two tile
  // buffers per warp. It sums the weight gradients of as many layers as fit (those it cannot go to
  // the wgrad kernel, which reads them back from global memory).
  p.bias_sum_offset = static_cast<int>(offset);
  offset = (offset + size_t(p.bias_grad_floats) * sizeof(float) + 15) / 16 * 16;
  p.wgrad_sum_offset = static_cast<int>(offset);
  p.act_stride = widest + kPad;
  p.warp_bytes = static_cast<int>(2 * 16 * BackwardKernel<__half, 64>::kMT * p.act_stride * elem);
  const int64_t buffer_bytes = int64_t(kWarps) * p.warp_bytes;
  const bool uniform = uniform_widths(*layers, width);
  const void* backward_kernel = reinterpret_cast<const void*>(with_instance<BackwardKernel>(
      input2d.scalar_type(), width, [uniform](auto instance) { return decltype(instance)::by_uniform[uniform]; }));
  if (params_grad) {
    // Summing a layer's weight gradient here costs two CTA-wide barriers per chunk, which only a
    // second CTA on the SM hides: with one, the wgrad kernel is faster (8 layers of 64, 128 wide;
    // docs/perf/experiments.md#narrow-mlp-weight-gradients-on-chip). So layers are summed here while
    // two CTAs still fit.
    constexpr int64_t kStaticSmem = 128;  // the kernel's own __shared__ flag, with room to spare
    const int64_t base = int64_t(offset + 127) / 128 * 128 + buffer_bytes + kStaticSmem;
    if (blocks_per_sm(backward_kernel, kThreads, device, size_t(base)) >= 2) {
      int64_t room = std::min<int64_t>(
          int64_t(prop.sharedMemPerMultiprocessor) / 2 - int64_t(prop.reservedSharedMemPerBlock),
          int64_t(prop.sharedMemPerBlockOptin)) - base;
      for (int l = 0; l < count; ++l) {
        const int64_t bytes = int64_t(layers->width[l + 1]) * layers->width[l] * int64_t(sizeof(float));
        if (bytes <= room) {
          p.wgrad_smem_offset[l] = p.wgrad_floats;
          p.wgrad_floats += static_cast<int>(bytes / sizeof(float));
          room -= bytes;
        }
      }
    }
  }
  offset = (offset + size_t(p.wgrad_floats) * sizeof(float) + 127) / 128 * 128;
  p.warp_offset = static_cast<int>(offset);
  const size_t smem_bytes = offset + size_t(buffer_bytes);

  WgradParams w{};
  for (int l = 0; l <= count; ++l) {
    w.width[l] = layers->width[l];
  }
  w.stage_bytes = static_cast<int>(kWgradRows * 2 * (widest + kPad) * elem);
  const size_t wgrad_smem_bytes = kWgradStages * size_t(w.stage_bytes);
  if (smem_bytes > prop.sharedMemPerBlockOptin || wgrad_smem_bytes > prop.sharedMemPerBlockOptin) {
    return std::nullopt;
  }

  const int sms = prop.multiProcessorCount;

  // [grad_weights..., grad_biases (present ones)..., grad_input]: what fused_mlp_backward returns,
  // each its own tensor. With no rows no kernel runs, and the parameter gradients are zeros.
  auto new_grad = [&](at::IntArrayRef shape) { return rows > 0 ? at::empty(shape, options) : at::zeros(shape, options); };
  std::vector<at::Tensor> grads;
  at::Tensor grad_pre, sums;  // live until the kernels are queued
  int wgrad_layers = 0;       // summed by the wgrad kernel
  int64_t chunk_rows = rows;
  if (params_grad) {
    // The masked output gradients that the wgrad kernel reads go to one buffer, a chunk of rows
    // tall (the last layer's, without ReLU, is grad_out itself).
    std::vector<int64_t> grad_pre_column(count, -1);
    int64_t grad_pre_width = 0;
    for (int l = 0; l < count; ++l) {
      grads.push_back(new_grad({layers->width[l + 1], layers->width[l]}));
      w.out[l] = p.wgrad_out[l] = grads.back().data_ptr();
      w.offset[l] = p.wgrad_global_offset[l] = w.total;
      w.total += layers->width[l + 1] * layers->width[l];
      if (p.wgrad_smem_offset[l] < 0) {
        w.layer[wgrad_layers++] = l;
        if ((p.relu_mask >> l) & 1u) {
          grad_pre_column[l] = grad_pre_width;
          grad_pre_width += layers->width[l + 1];
        }
      }
    }
    for (int l = 0; l < count; ++l) {
      if (p.bias_grad_offset[l] >= 0) {
        grads.push_back(new_grad({layers->width[l + 1]}));
        p.bias_grad_out[l] = grads.back().data_ptr();
      }
    }
    const int64_t wave_rows = int64_t(blocks_per_sm(backward_kernel, kThreads, device, smem_bytes)) * sms * kWarps *
        16 * BackwardKernel<__half, 64>::kMT;
    chunk_rows = backward_chunk_rows(rows, grad_pre_width, widest, wave_rows);
    grad_pre = at::empty({chunk_rows * grad_pre_width}, options);
    for (int l = 0; l < count; ++l) {
      if (grad_pre_column[l] >= 0) {
        p.grad_pre[l] = static_cast<char*>(grad_pre.data_ptr()) + chunk_rows * grad_pre_column[l] * elem;
      }
    }
    // The CTAs' fp32 sums of both kernels with their done-counters, zeroed.
    sums = at::zeros({w.total + count + p.bias_grad_floats + 1}, options.dtype(at::kFloat));
    w.sums = p.wgrad_sums = sums.data_ptr<float>();
    p.bias_grad = w.sums + w.total + count;
  }
  at::Tensor grad_input;
  if (input_grad) {
    grad_input = at::empty({rows, layers->width[0]}, options);
  }

  const c10::cuda::CUDAGuard device_guard(input2d.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(device);
  for (int64_t row0 = 0; row0 < rows; row0 += chunk_rows) {
    BackwardParams chunk = p;
    chunk.rows = std::min(chunk_rows, rows - row0);
    chunk.finalize = row0 + chunk.rows == rows;
    chunk.grad_out = row_address(grad_out2d, row0);
    chunk.x = params_grad ? row_address(input2d, row0) : nullptr;  // read only for layer 0's weight gradient
    for (int l = 0; l < count; ++l) {
      if (chunk.out[l] != nullptr) {
        chunk.out[l] = row_address(outputs2d[l], row0);
      }
    }
    chunk.grad_input = input_grad ? row_address(grad_input, row0) : nullptr;
    if (!launch_instance<BackwardKernel>(input2d.scalar_type(), width, uniform, chunk, smem_bytes, device, stream)) {
      TORCH_CHECK(
          row0 == 0, "hypatia: narrow_mlp_backward_cuda: the backward kernel cannot run on this device, but its "
          "launch over the first rows did");
      return std::nullopt;  // the per-layer path instead
    }
    if (wgrad_layers > 0) {
      WgradParams wchunk = w;
      wchunk.rows = chunk.rows;
      wchunk.finalize = chunk.finalize;
      for (int i = 0; i < wgrad_layers; ++i) {
        const int l = w.layer[i];
        wchunk.g[l] = p.grad_pre[l] != nullptr ? p.grad_pre[l] : row_address(grad_out2d, row0);
        wchunk.h[l] = row_address(l == 0 ? input2d : outputs2d[l - 1], row0);
      }
      // Enough CTAs per layer to fill the device about twice, each a whole number of stages.
      const int64_t stages = (wchunk.rows + kWgradRows - 1) / kWgradRows;
      wchunk.chunks = static_cast<int>(std::clamp<int64_t>(2 * sms / wgrad_layers, 1, stages));
      wchunk.rows_per_chunk = (stages + wchunk.chunks - 1) / wchunk.chunks * kWgradRows;
      const auto kernel =
          with_instance<WgradKernel>(input2d.scalar_type(), width, [](auto instance) { return decltype(instance)::fn; });
      TORCH_CHECK(
          launch(kernel, wchunk, int64_t(wgrad_layers) * wchunk.chunks, /*persistent=*/false, wgrad_smem_bytes, device,
                 stream),
          "hypatia: narrow_mlp_backward_cuda: the weight-gradient kernel cannot run on this device, but the "
          "backward kernel just did");
    }
  }
  if (input_grad) {
    grads.push_back(grad_input);
  }
  return grads;
}

}  // namespace hypatia::ops
