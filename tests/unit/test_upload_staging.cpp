// UploadStaging (core/upload_staging.hpp): uploads arrive, staged bytes are never handed out
// again before a drain, a training step's pattern stops growing after its first step at the
// figure the memory plan predicts, and the size cap drains (counted) instead of growing.
//
// On CPU builds the copies are immediate, so a premature reuse would not corrupt data here; the
// bookkeeping that prevents it on a GPU is what these tests check.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/host_sync.hpp"
#include "core/upload_staging.hpp"

namespace kktrain {
namespace {

std::vector<int32_t> iota_from(int32_t first, std::size_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> download(const DView<int32_t>& d) {
  auto m = Kokkos::create_mirror_view(d);
  Kokkos::deep_copy(m, d);
  return std::vector<int32_t>(m.data(), m.data() + m.extent(0));
}

std::size_t aligned64(std::size_t bytes) {
  return (bytes + 63) / 64 * 64;
}

TEST(UploadStaging, UploadsArriveAndTheSourceMayBeReusedAtOnce) {
  UploadStaging st;
  std::vector<DView<int32_t>> dst;
  std::vector<int32_t> src;
  for (int k = 0; k < 5; ++k) {
    src = iota_from(1000 * k, 37 + 1000 * k);
    dst.emplace_back("dst", src.size());
    st.upload(dst.back(), src);
    std::fill(src.begin(), src.end(), -1);  // the caller's buffer, rewritten right away
  }
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(download(dst[k]), iota_from(1000 * k, 37 + 1000 * k)) << "upload " << k;
  }
}

TEST(UploadStaging, StagedBytesAreNotReusedBeforeADrain) {
  UploadStaging st;
  DView<int32_t> d("dst", 5000);
  std::size_t expected = 0;
  for (std::size_t n : {1u, 100u, 5000u, 17u, 5000u, 4999u}) {
    st.upload(d, iota_from(0, n));
    expected += aligned64(n * 4);
    EXPECT_EQ(st.stats().bytes_in_flight, expected) << "after an upload of " << n << " ints";
  }
  const UploadStaging::Stats before = st.stats();
  EXPECT_GE(before.bytes_reserved, expected);
  host_sync();  // the device drains: every staged byte is free again
  EXPECT_EQ(st.stats().bytes_in_flight, 0u);
  st.upload(d, iota_from(0, 5000));
  EXPECT_EQ(st.stats().bytes_in_flight, aligned64(5000 * 4));
  EXPECT_EQ(st.stats().buffers, before.buffers) << "reused, not grown";
  EXPECT_EQ(st.stats().bytes_reserved, before.bytes_reserved);
  EXPECT_EQ(st.stats().forced_drains, 0);
}

TEST(UploadStaging, AStepPatternStopsGrowingAtThePlannedSize) {
  // A micro-batch of 2 x 2048 tokens with a 32000-token vocabulary (ids, targets, row_start,
  // positions), 8 micro-batches a step, one drain a step (the step's scalar readback).
  const std::size_t N = 4096, V = 32000;
  const std::vector<std::size_t> plan = {N * 4, N * 4, (V + 1) * 4, N * 4};
  const int64_t M = 8;
  UploadStaging st;
  DView<int32_t> d("dst", V + 1);
  std::size_t reserved_after_first = 0;
  for (int step = 0; step < 4; ++step) {
    for (int64_t m = 0; m < M; ++m) {
      for (std::size_t bytes : plan) st.upload(d, iota_from(0, bytes / 4));
    }
    if (step == 0) reserved_after_first = st.stats().bytes_reserved;
    EXPECT_EQ(st.stats().bytes_reserved, reserved_after_first) << "step " << step;
    host_sync();
  }
  EXPECT_EQ(reserved_after_first, UploadStaging::reserved_bytes_for(plan, M));
  // At most twice what one step stages (the doubling), never less.
  std::size_t staged = 0;
  for (std::size_t bytes : plan) staged += aligned64(bytes);
  EXPECT_GE(reserved_after_first, staged * M);
  EXPECT_LE(reserved_after_first, 2 * staged * M + (64u << 10));
  EXPECT_EQ(st.stats().forced_drains, 0);
}

TEST(UploadStaging, TheCapDrainsTheDeviceAndCountsTheWait) {
  UploadStaging st(/*max_staged_bytes=*/std::size_t(256) << 10);
  DView<int32_t> d("dst", 20000);
  const int64_t syncs_before = host_sync_counts().global();
  for (int k = 0; k < 8; ++k) st.upload(d, iota_from(k, 20000));  // 8 x 80 KB past 256 KiB
  const UploadStaging::Stats s = st.stats();
  EXPECT_GE(s.forced_drains, 1);
  EXPECT_EQ(host_sync_counts().global() - syncs_before, s.forced_drains);
  EXPECT_LE(s.bytes_in_flight, std::size_t(256) << 10);
  EXPECT_EQ(download(d), iota_from(7, 20000));
}

TEST(UploadStaging, RefusesAnUploadLargerThanItsDestination) {
  UploadStaging st;
  DView<int32_t> d("small", 3);
  EXPECT_THROW(st.upload(d, iota_from(0, 4)), InternalError);
}

}  // namespace
}  // namespace kktrain
