#include "apps/app_model.hpp"
#include "apps/commands.hpp"

namespace kktrain {

Config load_app_config(const ParsedArgs& args, const AppContext& ctx, int world_size) {
  LoadOptions opts;
  opts.world_size = world_size > 0 ? world_size : ctx.mpi->size();
  opts.checkpoint_dtype = model_file_dtype;
  return load_config(args.positionals.at(0), args.overrides, opts);
}

}  // namespace kktrain
