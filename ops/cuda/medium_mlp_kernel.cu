// fused_mlp's forward for medium widths (every width at most 512, the hidden and output ones
// multiples of 32, and a layer wider than 256 reading at most 256; half or bfloat16) as ONE kernel on
// the H100's warpgroup MMA (wgmma) and tensor memory accelerator (TMA), sm_90a. Each CTA takes 128
// rows at a time and keeps their activations in shared memory from layer to layer, each layer's
// output over its input (a layer wider than 256 in two halves, the upper one first, which lands past
// the input's columns). A producer warpgroup streams every layer's weights by TMA, in 64-column
// k-slices of 256 output rows, into a ring of stages guarded by mbarriers (full: the slice landed;
// empty: both consumers are done with it), running ahead across layers and row blocks; another
// producer thread loads each consumer's rows of a row block's input by TMA straight into act, a
// 64-column panel as soon as the block before's last layer has read it, so that the load runs under
// that layer's MMAs and epilogue (an input not a whole number of 16 bytes a row is read by the
// consumers themselves). Two consumer warpgroups, 64 rows each, run m64n256k16 with both operands
// 128-byte swizzled in shared memory (the layout TMA writes), add the bias in float32 and round each
// output once, as eager's epilogue does; kept hidden outputs go to global memory by TMA from shared
// memory, and so do the last layer's, but from registers where the next input comes by TMA. A
// consumer reads and writes only its own rows. Where the ring holds a layer's slices and one more
// (activations at most 256 wide), the two take turns at the tensor cores (ping-pong): one issues a
// layer's MMAs while the other runs its epilogue, so the epilogues overlap the MMAs, and the second
// consumer finds the slices the first has used; else they run in step. An input of at most 16
// columns into a last layer of at most 64 outputs takes an instance of its own (kNarrowEnds).
// Taken where measured faster than the per-layer path (medium_policy below; docs/perf/experiments.md).
#include "ops/fused_ops.h"
#include "ops/cuda/hopper.h"
#include "ops/cuda/kernel_launch.h"
#include "ops/cuda/hopper_primitives.cuh"
#include "ops/cuda/mma_primitives.cuh"

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

namespace hypatia::ops {
namespace {

constexpr int kMaxLayers = 16;
constexpr int kMaxWidth = 512;  // a layer's outputs in at most two tiles
constexpr int kTile = 256;      // the outputs of one m64n256 tile
constexpr int kRows = 128;      // a row block: two consumer warpgroups of 64
constexpr int kConsumerThreads = 256;
constexpr int kThreads = kConsumerThreads + 128;  // and the producer warpgroup
constexpr int kSliceK = 64;                      // weight columns a stage holds: 128-byte swizzled rows
// Stages of the ring: with turns, a 256-wide layer's 4 slices, read by both consumers in turn, and
// the next; fewer where wider activations leave less shared memory.
constexpr int kMaxStages = 5;
constexpr int kStageBytes = kTile * kSliceK * 2;
constexpr int kAtom = 1024;  // 8 rows of 128 bytes: the unit of the 128-byte swizzle
constexpr int kMaxPanels = kMaxWidth / kSliceK;  // 64-column panels of act

struct Params {
  // [width[l+1], width[l]] row-major; boxes of kTile x kSliceK (64 x kSliceK for the last layer of the
  // narrow-ends instance), zeros outside
  CUtensorMap weight_map[kMaxLayers];
  int box_bytes[kMaxLayers];  // of one box of weight_map[l]: what each of its loads brings (expect_tx)
  int count;
  int width[kMaxLayers + 1];
  int slices[kMaxLayers];        // k-slices of layer l: width[l] / kSliceK, rounded up
  const void* bias[kMaxLayers];  // [width[l+1]] or nullptr
  CUtensorMap out_map[kMaxLayers];  // layer l's output [rows, width[l+1]] where kept: boxes of 64 x 64, swizzled
  unsigned kept_mask;               // bit l: layer l's output kept (always the last)
  unsigned bias_aligned_mask;       // bit l: layer l's bias 4-byte aligned
  unsigned relu_mask;            // bit l: ReLU after layer l
  const void* x;                 // [rows, width[0]]
  CUtensorMap x_map;             // of x, boxes of 64 x kSliceK (a group's rows), where input_by_tma
  bool input_by_tma;             // x's rows 16-byte aligned: TMA loads them into act (else the consumers read them)
  void* out;                     // the last layer's output [rows, width[count]], for stores from registers
  int64_t rows;
  int64_t blocks;  // ceil(rows / kRows)
  int act_width;   // columns of the activation buffer: the widest, rounded up to kSliceK
  int stages;      // of the ring
  int turns;       // whether the consumers take turns: the ring holds every layer's slices and one more
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using namespace hopper;

constexpr int kPanelBytes = 64 * kSliceK * 2;  // a panel of a consumer group's rows of act

// A slice's place in the ring, stepped by counting: the stage count is a launch parameter, and a
// 64-bit division by it per slice (a called subroutine) cost the 256-wide shapes 17-22%.
struct RingPosition {
  int stage, parity;  // parity: of the stage's phase this pass round the ring
  __device__ __forceinline__ void advance(int stages) {
    if (++stage == stages) {
      stage = 0;
      parity ^= 1;
    }
  }
};

// The m64n256 tiles of a layer of `width` outputs: its halves, the upper one run first.
__device__ __forceinline__ int tiles(int width) {
  return (width + kTile - 1) / kTile;
}

// Registers a thread, set by setmaxnreg: the producer gives up what the consumers' 128 accumulators
// need (128 x 40 + 256 x 232 <= 65536; the launch gets 65536 / 384, 168).
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;

// Byte offset of element (r, k) in the 128-byte-swizzled K-major layout of wgmma and TMA: 64-column
// panels of `rows` rows, each row 128 bytes whose 16-byte chunks are permuted by the row's index in
// its 8-row atom (chunk c at c ^ (r % 8)); atoms 1024 bytes apart (the descriptor's stride offset).
__device__ __forceinline__ int swizzled_offset(int rows, int r, int k) {
  return (k >> 6) * (rows * 128) + r * 128 + ((((k >> 3) & 7) ^ (r & 7)) << 4) + (k & 7) * 2;
}

// A 128-byte-swizzled K-major operand's descriptor; a k16 step moves the start 32 bytes.
__device__ __forceinline__ uint64_t descriptor(const void* smem) {
  return desc_sw128(smem, 16, kAtom);
}
// The 128 threads of consumer warpgroup `group` (named barriers 1 and 2; 0 is __syncthreads).
__device__ __forceinline__ void group_barrier(int group) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(group + 1) : "memory");
}
// The consumers' turns at the tensor cores (named barriers 3 and 4, one a group: its 128 threads
// wait there for the other group's 128 arrivals).
__device__ __forceinline__ void wait_turn(int group) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(group + 3) : "memory");
}
__device__ __forceinline__ void pass_turn(int group) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"((group ^ 1) + 3) : "memory");
}

#endif

// kNarrowEnds: the first layer reads at most 16 columns and the last writes at most 64 (DLRM's bottom
// MLP, 13-512-256-64). Its instance runs one k16 step for the first layer (not a whole k-slice, three
// quarters zeros) and m64n64 for the last (not m64n256, three quarters zeros), each in a copy of the
// layer's code of its own: a branch between the two inside the slice loop stopped ptxas peeling the
// 256-wide loop, which cost more than the MMAs saved (experiments.md, "Medium forward up to 512 wide").
template <typename T, bool kNarrowEnds>
__global__ void __launch_bounds__(kThreads, 1) medium_mlp_forward_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // TMA's 128-byte swizzle needs 1024-byte aligned stages: the launch asks for kAtom bytes more.
  unsigned char* const smem = smem_raw + ((kAtom - static_cast<int>(smem_address(smem_raw) % kAtom)) % kAtom);
  unsigned char* const act = smem;  // the row block's activations: a layer's input, then its output
  unsigned char* const ring = smem + kRows * p.act_width * 2;
  const int stages = p.stages;
  uint64_t* const full = reinterpret_cast<uint64_t*>(ring + stages * kStageBytes);
  uint64_t* const empty = full + stages;
  // A group's rows of act: the next block's input landed (input_full); a 64-column panel of them is
  // no longer read, by the last layer's MMAs or the stores to global memory (act_free, a panel each).
  uint64_t* const input_full = empty + stages;
  uint64_t* const act_free = input_full + 2;
  const int tid = threadIdx.x;
  const int64_t my_blocks = p.blocks > blockIdx.x ? (p.blocks - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  if (tid == 0) {
    for (int i = 0; i < stages; ++i) {
      mbarrier_init(&full[i], 1);                          // the producer's arrival, with the bytes
      mbarrier_init(&empty[i], kConsumerThreads / 32);  // each consumer warp's
    }
    for (int g = 0; g < 2; ++g) {
      mbarrier_init(&input_full[g], 1);  // the loader's arrival, with the bytes
      for (int j = 0; j < kMaxPanels; ++j) {
        mbarrier_init(&act_free[g * kMaxPanels + j], kConsumerThreads / 2 / 32);  // each warp of the group
      }
    }
    fence_mbarrier_init();
  }
  __syncthreads();
  if (my_blocks == 0) {
    return;
  }

  if (tid >= kConsumerThreads) {  // the producer warpgroup: one thread streams the weights, one the inputs
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters));
    if (tid == kConsumerThreads + 32 && p.input_by_tma) {
      // Each group's rows of a block's input straight into act, a panel as soon as the group's last
      // layer of the block before is done reading it: under that layer's MMAs and its epilogue, which
      // writes to global memory.
      for (int64_t b = 0; b < my_blocks; ++b) {
        const int row0 = static_cast<int>((int64_t(blockIdx.x) + b * gridDim.x) * kRows);
        for (int g = 0; g < 2; ++g) {
          for (int j = 0; j < p.slices[0]; ++j) {
            if (b > 0) {
              mbarrier_wait(&act_free[g * kMaxPanels + j], (b - 1) & 1);
            }
            if (j == 0) {
              mbarrier_arrive_expect_tx(&input_full[g], p.slices[0] * kPanelBytes);
            }
            tma_load(act + j * (kRows * 128) + g * kPanelBytes, &p.x_map, j * kSliceK, row0 + 64 * g, &input_full[g]);
          }
        }
      }
    }
    if (tid == kConsumerThreads) {
      RingPosition at{};
      for (int64_t b = 0; b < my_blocks; ++b) {
        for (int l = 0; l < p.count; ++l) {
          const int halves = tiles(p.width[l + 1]);
          for (int h = halves - 1; h >= 0; --h) {  // the consumers' order: the upper half first
            for (int s = 0; s < p.slices[l]; ++s, at.advance(stages)) {
              mbarrier_wait(&empty[at.stage], at.parity ^ 1);  // the consumers are done with its last slice
              mbarrier_arrive_expect_tx(&full[at.stage], p.box_bytes[l]);
              tma_load(ring + at.stage * kStageBytes, &p.weight_map[l], s * kSliceK, h * kTile, &full[at.stage]);
            }
          }
        }
      }
    }
    return;
  }

  // A consumer warpgroup: rows [64 group, 64 group + 64) of every row block.
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters));
  const int group = tid / 128, gtid = tid % 128, warp = gtid / 32, lane = tid % 32;
  const T* const x = static_cast<const T*>(p.x);
  RingPosition at{};
  // A ragged input's rows of block `row0` (zeros past the last row, and up to the next multiple of
  // kSliceK columns), read element by element: the zero chunks first, then the data, each thread
  // with all its loads in flight at once (a thread per data chunk in DLRM's 13 features).
  auto load_ragged_input = [&](int64_t row0) {
    const int k0 = p.width[0], chunks = p.slices[0] * (kSliceK / 8), data = (k0 + 7) / 8, zeros = chunks - data;
    for (int c = gtid; c < 64 * zeros; c += 128) {
      const int r = group * 64 + c / zeros, col = (data + c % zeros) * 8;
      *reinterpret_cast<uint4*>(act + swizzled_offset(kRows, r, col)) = make_uint4(0u, 0u, 0u, 0u);
    }
    for (int c = gtid; c < 64 * data; c += 128) {
      const int r = group * 64 + c / data, col = (c % data) * 8;
      const bool row_in = row0 + r < p.rows;
      const uint16_t* const from = reinterpret_cast<const uint16_t*>(x) + (row0 + r) * k0;
      uint32_t words[4];
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        const uint32_t lo = row_in && col + e < k0 ? from[col + e] : 0u;
        const uint32_t hi = row_in && col + e + 1 < k0 ? from[col + e + 1] : 0u;
        words[e / 2] = lo | hi << 16;
      }
      *reinterpret_cast<uint4*>(act + swizzled_offset(kRows, r, col)) = make_uint4(words[0], words[1], words[2], words[3]);
    }
  };
  // The epilogue stores 16 columns of the warp's 16 rows at a time by stmatrix (four 8 x 8 tiles:
  // rows 0-7 and 8-15 of chunk j, then of chunk j + 1), lane L giving row L % 8 + 8 ((L / 8) % 2) of
  // tile L / 8: swizzled_offset's row part, and its 16-byte chunk j + L / 16 XORed with L % 8.
  const int stsm_row = (group * 64 + warp * 16 + lane % 8 + 8 * ((lane / 8) % 2)) * 128;
  const int stsm_chunk = lane / 16, stsm_swizzle = lane % 8;
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) {
    acc[i] = 0.f;
  }
  int used = 0;  // the stage of the slice before `at`
  // With turns, a turn a half of a layer of a block: group 0 takes the first; group 1 passes every
  // turn on but its last, whose arrival nobody would wait for.
  int64_t turns = 0;
  for (int l = 0; l < p.count; ++l) {
    turns += tiles(p.width[l + 1]);
  }
  turns *= my_blocks;
  int64_t turn = 0;
  for (int64_t b = 0; b < my_blocks; ++b) {
    const int64_t row0 = (int64_t(blockIdx.x) + b * gridDim.x) * kRows;
    // Layer l in m64n{tile_n}k16 tiles, k16_steps of each k-slice (the rest of a slice holds zeros).
    auto run_layer = [&](const int l, auto tile_n, auto k16_steps) {
      constexpr int kN = decltype(tile_n)::value;
      const int N = p.width[l + 1], slices = p.slices[l], halves = tiles(N);
      const bool last = l + 1 == p.count, kept = (p.kept_mask >> l) & 1u;
      // The last layer's outputs go from registers to global memory where the next input comes by
      // TMA, so that act is free for it; else by TMA from act, as before the input came by TMA (the
      // consumers' loads of a ragged input then do not queue behind stores; not measured apart). That
      // layer frees act's panels for the next block's input as its MMAs finish them, unless a store
      // to global memory may still read them (the layer before kept), then after that store.
      const bool to_global = last && p.input_by_tma;
      const bool frees = to_global && b + 1 < my_blocks;
      const bool frees_early = frees && !(l > 0 && ((p.kept_mask >> (l - 1)) & 1u));
      auto free_panels = [&](int from, int to) {
        if (lane == 0) {
          for (int j = from; j < min(to, p.slices[0]); ++j) {
            mbarrier_arrive(&act_free[group * kMaxPanels + j]);
          }
        }
      };
      // This group's input rows are in, for the async proxy too: loaded by TMA, or written by its
      // threads (a ragged input, or an epilogue whose outputs no TMA store fenced already).
      if (l == 0 && p.input_by_tma) {
        mbarrier_wait(&input_full[group], b & 1);
      } else if (l == 0 || !((p.kept_mask >> (l - 1)) & 1u)) {
        if (l == 0) {  // the previous block's stores have read `act`
          load_ragged_input(row0);
        }
        fence_proxy_async();
        group_barrier(group);
      }
      // The upper half first: its outputs land past the input's (at most kTile) columns, which the
      // lower half still reads.
      for (int h = halves - 1; h >= 0; --h) {
        const int n = min(N - h * kTile, kTile);  // this half's outputs, columns h kTile on
        // The bias, read while the MMAs run: lane L holds columns 64 m + 2 L and the next, so the pair
        // a thread adds after chunk j is word j / 8 of lane 4 (j % 8) + L % 4 (one shuffle, no waits).
        uint32_t bias_pairs[kN / 64];
#pragma unroll
        for (int m = 0; m < kN / 64; ++m) {
          const int col = h * kTile + 64 * m + 2 * lane;
          const uint16_t* const bias = static_cast<const uint16_t*>(p.bias[l]);
          if (bias == nullptr || col >= N) {
            bias_pairs[m] = 0u;
          } else if ((p.bias_aligned_mask >> l) & 1u) {
            bias_pairs[m] = __ldg(reinterpret_cast<const uint32_t*>(bias + col));
          } else {
            bias_pairs[m] = uint32_t(__ldg(bias + col)) | uint32_t(__ldg(bias + col + 1)) << 16;
          }
        }
        if (p.turns && (group == 1 || turn > 0)) {
          wait_turn(group);
        }
        for (int s = 0; s < slices; ++s) {
          mbarrier_wait(&full[at.stage], at.parity);
          const unsigned char* const a_rows = act + s * (kRows * 128) + group * 64 * 128;  // panel s, the group's rows
          const unsigned char* const b_rows = ring + at.stage * kStageBytes;
          wgmma_fence();
          // Past the input's width both operands hold zeros. No branch around a k16 step: ptxas
          // serializes every wgmma of a kernel that has one (C7520), 1.8x slower.
#pragma unroll
          for (int kk = 0; kk < 16 * decltype(k16_steps)::value; kk += 16) {
            if constexpr (kN == kTile) {
              wgmma_m64n256k16<T, 0, 0>(acc, descriptor(a_rows + kk * 2), descriptor(b_rows + kk * 2), s > 0 || kk > 0);
            } else {
              wgmma_m64n64k16<T, 0, 0>(acc, descriptor(a_rows + kk * 2), descriptor(b_rows + kk * 2), s > 0 || kk > 0);
            }
          }
          wgmma_commit();
          // The previous slice's MMAs are done (this one's may run on): its stage is free.
          wgmma_wait<1>();
          __syncwarp();
          if (lane == 0 && s > 0) {
            mbarrier_arrive(&empty[used]);
          }
          if (frees_early && h == 0 && s > 0) {
            free_panels(s - 1, s);
          }
          used = at.stage;
          at.advance(stages);
        }
        // Issued: the other group's MMAs may queue behind these.
        if (p.turns && (group == 0 || turn + 1 < turns)) {
          pass_turn(group);
        }
        ++turn;
        wgmma_wait<0>();
        __syncwarp();
        if (lane == 0) {
          mbarrier_arrive(&empty[used]);
        }
        if (frees_early && h == 0) {
          free_panels(slices - 1, kMaxPanels);
        }
        // The output replaces the input (this group's rows only, which only its own MMAs, all done,
        // read). Whatever this epilogue overwrites, the stores to global memory have finished reading.
        if (gtid == 0) {
          bulk_wait_read<0>();
        }
        group_barrier(group);
        if (frees && !frees_early && h == 0) {
          free_panels(0, kMaxPanels);
        }
        // Rounded once after the bias, then the ReLU (NaN kept, as torch.relu keeps it), into `act`'s
        // swizzled rows, panels 4 h on; zeros up to the last k-slice's end where the next layer reads
        // them. To global memory instead (to_global): lanes 2 i and 2 i + 1 swap a word so that
        // each holds 4 columns of a row, and a row's 4 lanes store 32 bytes (one sector). One
        // instance per (ReLU, full tile, to_global), so that the loop has no branch.
        const int padded = last ? n : min((N + kSliceK - 1) / kSliceK * kSliceK - h * kTile, kTile);
        unsigned char* const to = act + h * (kTile / kSliceK) * (kRows * 128);
        const int64_t out_row = row0 + group * 64 + warp * 16 + lane / 4;
        const bool odd = lane & 1;
        uint16_t* const out = static_cast<uint16_t*>(p.out) + out_row * N + h * kTile + 8 * odd + 2 * (lane & 2);
        const bool row_in = out_row < p.rows, row8_in = out_row + 8 < p.rows;
        auto store_outputs = [&](auto relu, auto full_tile, auto global) {
#pragma unroll
          for (int j = 0; j < kN / 8; j += 2) {
            // n is a multiple of 32: a pair of chunks is all in or all out.
            if (!decltype(full_tile)::value && 8 * j >= padded) {
              break;
            }
            uint32_t tiles[4];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              const int c = j + i;
              const float2 bias = unpack2(__shfl_sync(~0u, bias_pairs[c / 8], 4 * (c % 8) + lane % 4), T());
              const float x0 = acc[4 * c] + bias.x, x1 = acc[4 * c + 1] + bias.y;
              const float y0 = acc[4 * c + 2] + bias.x, y1 = acc[4 * c + 3] + bias.y;
              if constexpr (decltype(relu)::value) {
                tiles[2 * i] = pack2_relu(x0, x1, T());
                tiles[2 * i + 1] = pack2_relu(y0, y1, T());
              } else {
                tiles[2 * i] = pack2(x0, x1, T());
                tiles[2 * i + 1] = pack2(y0, y1, T());
              }
            }
            if constexpr (decltype(global)::value) {
              const uint32_t got0 = __shfl_xor_sync(~0u, odd ? tiles[0] : tiles[2], 1);
              const uint32_t got1 = __shfl_xor_sync(~0u, odd ? tiles[1] : tiles[3], 1);
              if (row_in) {
                *reinterpret_cast<uint2*>(out + 8 * j) = odd ? make_uint2(got0, tiles[2]) : make_uint2(tiles[0], got0);
              }
              if (row8_in) {
                *reinterpret_cast<uint2*>(out + 8 * N + 8 * j) =
                    odd ? make_uint2(got1, tiles[3]) : make_uint2(tiles[1], got1);
              }
            } else {
              if (!decltype(full_tile)::value && 8 * j >= n) {
                tiles[0] = tiles[1] = tiles[2] = tiles[3] = 0u;
              }
              stmatrix_x4(to + stsm_row + (j / 8) * (kRows * 128) + ((((j % 8) + stsm_chunk) ^ stsm_swizzle) << 4), tiles);
            }
          }
        };
        using yes = std::true_type;
        using no = std::false_type;
        const bool relu = (p.relu_mask >> l) & 1u;
        auto store_all = [&](auto global) {
          if (relu) {
            n == kN ? store_outputs(yes(), yes(), global) : store_outputs(yes(), no(), global);
          } else {
            n == kN ? store_outputs(no(), yes(), global) : store_outputs(no(), no(), global);
          }
        };
        to_global ? store_all(yes()) : store_all(no());
      }
      if (kept && !to_global) {  // to global memory by TMA, one 64-column box at a time (rows past the end dropped)
        fence_proxy_async();
        group_barrier(group);
        if (gtid == 0) {
          for (int s = 0; s * kSliceK < N; ++s) {
            tma_store(&p.out_map[l], act + s * (kRows * 128) + group * 64 * 128, s * kSliceK,
                      int(row0) + group * 64);
          }
          bulk_commit();
        }
      }
      if (last && !to_global && b + 1 < my_blocks) {  // the next input may be written once the stores have read act
        if (gtid == 0) {
          bulk_wait_read<0>();
        }
        group_barrier(group);
      }
    };
    using Wide = std::integral_constant<int, kTile>;
    using WholeSlice = std::integral_constant<int, kSliceK / 16>;
    if constexpr (kNarrowEnds) {
      run_layer(0, Wide(), std::integral_constant<int, 1>());
      for (int l = 1; l + 1 < p.count; ++l) {
        run_layer(l, Wide(), WholeSlice());
      }
      run_layer(p.count - 1, std::integral_constant<int, 64>(), WholeSlice());
    } else {
      for (int l = 0; l < p.count; ++l) {
        run_layer(l, Wide(), WholeSlice());
      }
    }
  }
  if (gtid == 0) {
    bulk_wait<0>();  // shared memory lives until the stores have read it
  }
#endif
}

// HYPATIA_MEDIUM_MLP: "0" never, any other value wherever the kernel applies, unset (or empty) where
// it measured faster than the per-layer path on the H100 and H200 (docs/perf/experiments.md, "The
// medium forward on TMA", "Medium forward up to 512 wide"): three layers or more at any row count,
// unless the input is wider than one tile; two layers, or an input that wide, up to three row blocks
// an SM (past that cuBLASLt's GEMMs are as fast or faster); never one layer. Read once.
EnvSwitch medium_policy() {
  static const EnvSwitch policy = env_switch("HYPATIA_MEDIUM_MLP");
  return policy;
}

template <typename T, bool kNarrowEnds>
bool launch(const Params& p, size_t smem_bytes, int device, cudaStream_t stream) {
  const void* kernel = reinterpret_cast<const void*>(&medium_mlp_forward_kernel<T, kNarrowEnds>);
  if (blocks_per_sm(kernel, kThreads, device, smem_bytes) == 0) {
    return false;
  }
  const int64_t sms = at::cuda::getDeviceProperties(device)->multiProcessorCount;
  const unsigned grid = static_cast<unsigned>(std::min(p.blocks, sms));
  medium_mlp_forward_kernel<T, kNarrowEnds><<<grid, kThreads, smem_bytes, stream>>>(p);
  check_cuda(cudaGetLastError(), "medium MLP", "kernel launch");
  return true;
}

}  // namespace

std::optional<std::vector<at::Tensor>> medium_mlp_forward_cuda(
    const at::Tensor& x2d, at::TensorList weights, const OptionalTensorList& biases, bool relu_last,
    const std::vector<bool>& keep) {
  const at::ScalarType dtype = x2d.scalar_type();
  const int count = static_cast<int>(weights.size());
  const int device = x2d.get_device();
  const cudaDeviceProp& props = *at::cuda::getDeviceProperties(device);
  const EnvSwitch policy = medium_policy();
  const bool few_blocks = (x2d.size(0) + kRows - 1) / kRows <= 3 * props.multiProcessorCount;
  const bool measured_faster = count >= 2 && (few_blocks || (count >= 3 && x2d.size(1) <= kTile));
  if (policy == EnvSwitch::kOff || (policy == EnvSwitch::kChosen && !measured_faster) || count > kMaxLayers ||
      (dtype != at::kHalf && dtype != at::kBFloat16) || !dense(x2d) || props.major != 9) {
    return std::nullopt;
  }
  Params p{};
  p.count = count;
  int widest = 0, most_slices = 0;
  for (int l = 0; l <= count; ++l) {
    const int64_t w = l == 0 ? x2d.size(1) : weights[l - 1].size(0);
    // A layer wider than one tile reads at most one tile's columns: its upper half's outputs go past them.
    if (w == 0 || w > kMaxWidth || (l > 0 && (w % 32 != 0 || (w > kTile && p.width[l - 1] > kTile)))) {
      return std::nullopt;
    }
    p.width[l] = static_cast<int>(w);
    widest = std::max(widest, p.width[l]);
  }
  for (int l = 0; l < count; ++l) {
    if (weights[l].scalar_type() != dtype || !dense(weights[l]) || weights[l].size(1) != p.width[l]) {
      return std::nullopt;
    }
    p.slices[l] = (p.width[l] + kSliceK - 1) / kSliceK;
    most_slices = std::max(most_slices, p.slices[l]);
    const std::optional<at::Tensor> b = biases.get(l);
    if (b.has_value() && b->defined()) {
      if (b->scalar_type() != dtype || !b->is_contiguous()) {
        return std::nullopt;
      }
      p.bias[l] = b->data_ptr();
      if (reinterpret_cast<uintptr_t>(p.bias[l]) % 4 == 0) {
        p.bias_aligned_mask |= 1u << l;
      }
    }
    if (l + 1 < count || relu_last) {
      p.relu_mask |= 1u << l;
    }
  }
  p.act_width = (widest + kSliceK - 1) / kSliceK * kSliceK;
  // act and its barriers (input_full and act_free, a group's and a group's panel's), the ring and its stages'
  const size_t act_bytes = size_t(kRows) * p.act_width * 2 + (2 + 2 * kMaxPanels) * sizeof(uint64_t),
               stage_bytes = kStageBytes + 2 * sizeof(uint64_t);
  const size_t room = props.sharedMemPerBlockOptin > act_bytes + kAtom ? props.sharedMemPerBlockOptin - act_bytes - kAtom : 0;
  p.stages = static_cast<int>(std::min<size_t>(kMaxStages, room / stage_bytes));
  p.turns = p.stages >= most_slices + 1;
  const size_t smem_bytes = act_bytes + size_t(p.stages) * stage_bytes + kAtom;
  const c10::cuda::CUDAGuard device_guard(x2d.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(device);
  // TMA coordinates are 32-bit: a row block's first row must fit.
  if (x2d.size(0) > std::numeric_limits<int32_t>::max() - kRows || p.stages < 2 ||
      smem_bytes > props.sharedMemPerBlockOptin || !has_wgmma(device, stream)) {
    return std::nullopt;
  }
  // Covered: the outputs now (the caching allocator's blocks are 16-byte aligned).
  p.rows = x2d.size(0);
  std::vector<at::Tensor> outputs(count);
  for (int l = 0; l < count; ++l) {
    if (keep[l]) {
      outputs[l] = at::empty({p.rows, p.width[l + 1]}, x2d.options());
    }
  }
  if (p.rows == 0) {
    return outputs;
  }
  // TMA reads rows that start 16 bytes apart: a ragged input width's weight gets zero columns up to
  // the next multiple of 8, which multiply the zeros the kernel puts past the input's columns.
  const at::Tensor first_weight =
      p.width[0] % 8 == 0 ? weights[0] : resize_columns_cuda(weights[0], (p.width[0] + 7) / 8 * 8);
  const bool narrow_ends = count >= 2 && p.width[0] <= 16 && p.width[count] <= 64;
  for (int l = 0; l < count; ++l) {
    // The narrow last layer's boxes are its 64 output rows (m64n64 reads no more).
    const int box_rows = narrow_ends && l + 1 == count ? 64 : kTile;
    if (!swizzled_tensor_map(p.weight_map[l], l == 0 ? first_weight : weights[l], box_rows)) {
      return std::nullopt;
    }
    p.box_bytes[l] = box_rows * kSliceK * 2;
  }
  for (int l = 0; l < count; ++l) {
    if (keep[l]) {
      if (!swizzled_tensor_map(p.out_map[l], outputs[l], 64)) {
        return std::nullopt;
      }
      p.kept_mask |= 1u << l;
    }
  }
  p.out = outputs[count - 1].data_ptr();
  p.blocks = (p.rows + kRows - 1) / kRows;
  p.x = x2d.data_ptr();
  if (p.width[0] % 8 == 0) {  // rows 16-byte aligned: TMA reads them
    if (!swizzled_tensor_map(p.x_map, x2d, 64)) {
      return std::nullopt;
    }
    p.input_by_tma = true;
  }
  bool launched = false;
  if (dtype == at::kHalf) {
    launched = narrow_ends ? launch<__half, true>(p, smem_bytes, device, stream)
                           : launch<__half, false>(p, smem_bytes, device, stream);
  } else {
    launched = narrow_ends ? launch<__nv_bfloat16, true>(p, smem_bytes, device, stream)
                           : launch<__nv_bfloat16, false>(p, smem_bytes, device, stream);
  }
  if (!launched) {
    return std::nullopt;
  }
  return outputs;
}

}  // namespace hypatia::ops
