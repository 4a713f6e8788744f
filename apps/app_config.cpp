#include "apps/app_model.hpp"
#include "apps/commands.hpp"

namespace kktrain {

Config load_app_config(const ParsedArgs& args, const AppContext& ctx) {
  LoadOptions opts;
  opts.world_size = ctx.mpi->size();
  opts.checkpoint_dtype = model_file_dtype;
  return load_config(args.positionals.at(0), args.overrides, opts);
}

}  // namespace kktrain
