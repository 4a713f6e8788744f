// A Hugging Face model directory as a WeightSource (io/model_weights.hpp): config.json plus
// model.safetensors, or shards listed by model.safetensors.index.json (weight_map).
//
// Rank 0 reads config.json, the index and every shard's header, validates all of it (the
// safetensors checks of io/safetensors.hpp; every weight_map entry present in the shard it names,
// every tensor of a shard mapped to it, no tensor in two shards) and broadcasts the text, so the
// other ranks read no metadata. Every rank then reads the rows of its own shard of each tensor
// with pread: loading a model on W ranks reads each byte of the weights once in total.
// Tensor names are Hugging Face's, which are kktrain's canonical names; the rotary inv_freq
// buffers some older files carry are skipped (the model computes them).
#pragma once

#include <memory>
#include <string>

#include "io/model_weights.hpp"

namespace kktrain {

// Collective over comm; errors agreed on (InputError naming the directory's file and tensor).
std::unique_ptr<WeightSource> open_hf_weights(const std::string& dir, Communicator& comm);

}  // namespace kktrain
