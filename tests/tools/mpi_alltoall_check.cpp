// The collectives expert parallelism adds to the communicator (part of mpi_collectives_check):
//
//   allgather_u64     every rank's host values, rank-major, exact.
//   alltoallv_bytes   blocks of sizes that differ per pair (0, odd sizes, and one block past
//                     W x the count limit, so that under --max-count every rank
//                     runs several rounds), each byte the sender's seeded value; no byte written
//                     past the received blocks; the send buffer untouched; the bytes counted are
//                     those sent to other ranks (bytes_sent and alltoall_bytes_sent).
//   split             color = rank % 2 (and, nested, a split of the split): sizes and ranks as
//                     MPI_Comm_split orders them (by key, here the reverse of the parent rank),
//                     the two collectives above on the sub-communicator, and its counters apart
//                     from the parent's.
#include <algorithm>
#include <string>
#include <vector>

#include "parallel/communicator.hpp"
#include "tests/tools/mpi_check_common.hpp"

namespace kktrain::check {

namespace {

constexpr int kCanary = 64;
constexpr char kFill = '\x5a';

// Bytes rank i sends rank j: 0 for some pairs, odd sizes, and rank 0's block for the last rank
// (rank 0's own block on one rank) larger than `big`.
uint64_t block_bytes(int i, int j, int w, uint64_t big) {
  if (i == 0 && j == w - 1) return big + 3;
  return static_cast<uint64_t>((i * 7 + j * 3 + 1) % 5) * 13;
}

char byte_of(int from, int to, uint64_t k) {
  return static_cast<char>(draw(40 + to, from, k) & 0xff);
}

void check_allgather_u64(Communicator& comm, Checker& ck, const std::string& where) {
  const int w = comm.size(), r = comm.rank();
  std::vector<uint64_t> mine(3);
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = draw(7, r, i);
  const std::vector<uint64_t> all = comm.allgather_u64(mine);
  bool ok = all.size() == mine.size() * static_cast<std::size_t>(w);
  for (int k = 0; ok && k < w; ++k) {
    for (std::size_t i = 0; i < mine.size(); ++i)
      ok = ok && all[k * mine.size() + i] == draw(7, k, i);
  }
  ck.expect(ok, where + "allgather_u64", "a value differs");
}

void check_alltoallv(Communicator& comm, Checker& ck, const std::string& where) {
  const int w = comm.size(), r = comm.rank();
  const uint64_t l = lowered_max_count();
  const uint64_t big = l > 0 ? l * w + 1 : 4099;
  std::vector<uint64_t> matrix(static_cast<std::size_t>(w) * w);
  for (int i = 0; i < w; ++i) {
    for (int j = 0; j < w; ++j) matrix[i * w + j] = block_bytes(i, j, w, big);
  }
  std::vector<char> send;
  uint64_t to_others = 0, in = 0;
  for (int j = 0; j < w; ++j) {
    for (uint64_t k = 0; k < matrix[r * w + j]; ++k) send.push_back(byte_of(r, j, k));
    if (j != r) to_others += matrix[r * w + j];
    in += matrix[j * w + r];
  }
  Kokkos::View<char*, MemSpace> dsend("send", send.size() + 1), drecv("recv", in + kCanary);
  to_device(dsend.data(), send);
  to_device(drecv.data(), std::vector<char>(drecv.extent(0), kFill));
  const CommStats before = fresh_stats(comm);
  comm.alltoallv_bytes(DBytesU(dsend.data(), send.size()), DBytesU(drecv.data(), in), matrix);
  const CommStats& s = comm.stats();
  ck.expect(s.bytes_sent - before.bytes_sent == static_cast<double>(to_others),
            where + "alltoallv stats bytes", std::to_string(s.bytes_sent) + " counted");
  ck.expect(s.alltoall_bytes_sent == static_cast<double>(to_others),
            where + "alltoallv stats alltoall bytes");
  const auto recv = to_host(drecv.data(), drecv.extent(0));
  std::size_t at = 0;
  for (int i = 0; i < w; ++i) {
    for (uint64_t k = 0; k < matrix[i * w + r]; ++k, ++at) {
      if (recv[at] != byte_of(i, r, k)) {
        ck.fail(where + "alltoallv",
                "byte " + std::to_string(k) + " from rank " + std::to_string(i));
      }
    }
  }
  for (std::size_t i = at; i < recv.size(); ++i) {
    if (recv[i] != kFill) ck.fail(where + "alltoallv overrun", "byte " + std::to_string(i));
  }
  ck.expect(to_host(dsend.data(), send.size()) == send, where + "alltoallv send buffer modified");
}

}  // namespace

void check_alltoall(Communicator& comm, Checker& ck) {
  check_allgather_u64(comm, ck, "");
  check_alltoallv(comm, ck, "");
  const int w = comm.size(), r = comm.rank();
  // Ranks of one color, ordered by key = -rank: the highest parent rank is rank 0 of its split.
  auto sub = comm.split(r % 2, -r);
  const int color_size = (w - r % 2 + 1) / 2;
  int below = 0;  // ranks of my color with a higher parent rank
  for (int k = r + 2; k < w; k += 2) ++below;
  ck.expect(sub->size() == color_size, "split size",
            std::to_string(sub->size()) + ", want " + std::to_string(color_size));
  ck.expect(sub->rank() == below, "split rank",
            std::to_string(sub->rank()) + ", want " + std::to_string(below));
  const CommStats parent = fresh_stats(comm);
  check_allgather_u64(*sub, ck, "split ");
  check_alltoallv(*sub, ck, "split ");
  ck.expect(comm.stats().bytes_sent == parent.bytes_sent && comm.stats().calls == parent.calls,
            "split stats", "the sub-communicator's traffic was counted on the parent");
  // A split of the split: every rank alone.
  auto alone = sub->split(sub->rank(), 0);
  ck.expect(alone->size() == 1 && alone->rank() == 0, "nested split");
  check_alltoallv(*alone, ck, "nested split ");
  const std::vector<uint64_t> sums = sub->allgather_u64({static_cast<uint64_t>(r)});
  uint64_t want = 0, got = 0;
  for (int k = r % 2; k < w; k += 2) want += static_cast<uint64_t>(k);
  for (uint64_t v : sums) got += v;
  ck.expect(got == want, "split membership", "the split holds other ranks");
}

}  // namespace kktrain::check
