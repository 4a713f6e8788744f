// Preference pairs as training data (data.format preference, train.objective dpo): the third
// source behind apps/train/data_source.hpp's interface.
//
// The pairs are examples of the example cache (apps/dataprep/example_cache.hpp), each holding its
// chosen side then its rejected side (io/example_data.hpp), drawn in epochs like SFT examples:
// one pair a row, or packed (data.packing) with every pair whole in one row, its two sides
// attending only to themselves. A micro-batch's loss is its pairs' share of the mean over the
// global batch's pairs (model/preference_loss.hpp).
//
// The reference log-probabilities (dpo.loss sigmoid and ipo): before the first step, one forward
// pass of the starting weights over every pair of both splits, the rows split over the ranks in
// turn, gives each pair's sums, which rank 0 stores in <output_dir>/examples/reference/ with its
// manifest (the example cache's manifest, the model's settings and files, the precision, the
// row layout). A later start (a resume) whose manifest matches reads them back; otherwise they are
// computed again, with a warning when there were some, from the starting weights (a resumed run
// loads them into its model first, before its checkpoint's values). No reference model is held.
#pragma once

#include <memory>

#include "apps/train/data_source.hpp"
#include "io/example_data.hpp"

namespace kktrain {

std::unique_ptr<TrainingData> open_preference_data(const Config& cfg, const ModelText& text,
                                                   Communicator& comm);

// data_source.cpp's: the steps train.epochs epochs of `e` take (see there).
int64_t example_steps(const Config& cfg, const ExampleData& e, std::string* steps);

}  // namespace kktrain
