#include "core/launch.hpp"

#include "core/errors.hpp"

namespace kktrain {

TensorBlocks::TensorBlocks(const std::vector<int64_t>& sizes, int64_t block_len)
    : block_len_(block_len > 0 ? block_len : default_block_len()) {
  if (block_len_ % 2 != 0) throw InternalError("TensorBlocks: block length must be even");
  std::vector<TensorBlock> host;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    for (int64_t b = 0; b < sizes[t]; b += block_len_) {
      host.push_back(TensorBlock{static_cast<int64_t>(t), b,
                                 b + block_len_ < sizes[t] ? b + block_len_ : sizes[t]});
    }
  }
  count_ = static_cast<int64_t>(host.size());
  table_ = DView<TensorBlock>("tensor_blocks", host.size());
  Kokkos::deep_copy(table_, HViewU<const TensorBlock>(host.data(), host.size()));
}

}  // namespace kktrain
