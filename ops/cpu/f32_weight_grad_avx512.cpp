// The float32 weight gradient of ops/cpu/f32_weight_grad.h: out = g.T @ h, a tile of 6 output rows x
// 64 columns in 24 AVX-512 registers, over the rows r of g and h one at a time (one FMA adds
// g[r][i] h[r][j] to each lane). Compiled with -mavx512f; called only where
// f32_weight_grad_supported(). No templates or inline functions from headers: their instances here
// would be AVX-512 code that the linker may pick for every caller.
#include "ops/cpu/f32_weight_grad.h"

#include <immintrin.h>

namespace hypatia::ops {
namespace {

constexpr int kTileRows = kF32GradTileRows;
constexpr int kTileVectors = kF32GradTileCols / 16;
constexpr int64_t kTileCols = kF32GradTileCols;
// Rows of g and h packed at a time; each output tile is loaded and stored once a chunk. Output rows
// packed at a time: their g (96 x 512 floats) and one tile's h (512 x 64) stay in L2 together.
constexpr int64_t kChunkRows = 512;
constexpr int64_t kBlockOutRows = 16 * kTileRows;

int64_t min(int64_t a, int64_t b) {
  return a < b ? a : b;
}

int64_t tiles(int64_t k) {
  return (k + kTileCols - 1) / kTileCols;
}

// Lanes [0, count) of 16.
__mmask16 first_lanes(int64_t count) {
  return count <= 0 ? 0 : count >= 16 ? 0xffff : static_cast<__mmask16>((1u << count) - 1);
}

// out rows [0, R), columns [0, cols) (+)= a (chunk x 6, packed) times b (chunk x 64, packed);
// `next`: the output tile that follows, prefetched while this one computes (its lines would
// otherwise stall the next tile's first loads).
template <int R>
void tile(const float* a, const float* b, int64_t chunk, float* out, int64_t ldo, int64_t cols, bool first,
          const float* next) {
  if (next != nullptr) {
#pragma GCC unroll 6
    for (int r = 0; r < kTileRows; ++r) {
#pragma GCC unroll 4
      for (int q = 0; q < kTileVectors; ++q) {
        _mm_prefetch(reinterpret_cast<const char*>(next + r * ldo + 16 * q), _MM_HINT_T0);
      }
    }
  }
  __m512 acc[R][kTileVectors];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < kTileVectors; ++q) {
      acc[r][q] = _mm512_setzero_ps();
    }
  }
  for (int64_t p = 0; p < chunk; ++p) {
    __m512 h[kTileVectors];
#pragma GCC unroll 4
    for (int q = 0; q < kTileVectors; ++q) {
      h[q] = _mm512_loadu_ps(b + p * kTileCols + 16 * q);
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m512 g = _mm512_set1_ps(a[p * kTileRows + r]);
#pragma GCC unroll 4
      for (int q = 0; q < kTileVectors; ++q) {
        acc[r][q] = _mm512_fmadd_ps(g, h[q], acc[r][q]);
      }
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < kTileVectors; ++q) {
      const __mmask16 lanes = first_lanes(cols - 16 * q);
      float* dst = out + r * ldo + 16 * q;
      const __m512 sum = first ? acc[r][q] : _mm512_add_ps(acc[r][q], _mm512_maskz_loadu_ps(lanes, dst));
      _mm512_mask_storeu_ps(dst, lanes, sum);
    }
  }
}

void tile_of(int64_t rows, const float* a, const float* b, int64_t chunk, float* out, int64_t ldo, int64_t cols,
             bool first, const float* next) {
  using Tile = void (*)(const float*, const float*, int64_t, float*, int64_t, int64_t, bool, const float*);
  static constexpr Tile kTiles[kTileRows] = {tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};
  kTiles[rows - 1](a, b, chunk, out, ldo, cols, first, next);
}

}  // namespace

int64_t weight_grad_f32_scratch_elements(int64_t n, int64_t k) {
  return kChunkRows * (tiles(k) * kTileCols + min(n, kBlockOutRows));
}

void weight_grad_f32(const float* g, int64_t ldg, const float* h, int64_t ldh, int64_t rows, int64_t n, int64_t k,
                     float* out, int64_t ldo, bool accumulate, float* scratch) {
  const int64_t k_tiles = tiles(k);
  float* packed_h = scratch;                                 // [tile][row][64], zeros past k
  float* packed_g = scratch + kChunkRows * k_tiles * kTileCols;  // [strip][row][6]
  for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
    const int64_t chunk = min(kChunkRows, rows - r0);
    const bool first = r0 == 0 && !accumulate;
    for (int64_t t = 0; t < k_tiles; ++t) {
      for (int64_t p = 0; p < chunk; ++p) {
        const float* src = h + (r0 + p) * ldh + t * kTileCols;
        float* dst = packed_h + (t * kChunkRows + p) * kTileCols;
#pragma GCC unroll 4
        for (int q = 0; q < kTileVectors; ++q) {
          _mm512_storeu_ps(dst + 16 * q, _mm512_maskz_loadu_ps(first_lanes(k - t * kTileCols - 16 * q), src + 16 * q));
        }
      }
    }
    for (int64_t i0 = 0; i0 < n; i0 += kBlockOutRows) {
      const int64_t block = min(kBlockOutRows, n - i0);
      const int64_t strips = (block + kTileRows - 1) / kTileRows;
      for (int64_t s = 0; s < strips; ++s) {
        const __mmask16 lanes = first_lanes(min(kTileRows, block - s * kTileRows));  // zeros past the block
        for (int64_t p = 0; p < chunk; ++p) {
          _mm512_mask_storeu_ps(packed_g + (s * kChunkRows + p) * kTileRows, first_lanes(kTileRows),
                                _mm512_maskz_loadu_ps(lanes, g + (r0 + p) * ldg + i0 + s * kTileRows));
        }
      }
      // Tiles of 64 columns outside, strips of 6 rows inside: a tile's packed h stays in L2 while
      // every strip of the block passes it.
      for (int64_t t = 0; t < k_tiles; ++t) {
        for (int64_t s = 0; s < strips; ++s) {
          float* dst = out + (i0 + s * kTileRows) * ldo + t * kTileCols;
          const float* next = first ? nullptr
              : s + 1 < strips      ? dst + kTileRows * ldo
              : t + 1 < k_tiles     ? out + i0 * ldo + (t + 1) * kTileCols
                                    : nullptr;
          tile_of(min(kTileRows, block - s * kTileRows), packed_g + s * kChunkRows * kTileRows,
                  packed_h + t * kChunkRows * kTileCols, chunk, dst, ldo, min(kTileCols, k - t * kTileCols), first,
                  next);
        }
      }
    }
  }
}

}  // namespace hypatia::ops
